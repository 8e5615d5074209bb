"""Quoting at the one edge where values meet the shell."""

from __future__ import annotations

import shlex

from hpcdl.errors import HpcdlError


def quote(value) -> str:
    return shlex.quote(str(value))


def join(argv) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def env_name(name: str) -> str:
    if not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise HpcdlError(f"environment variable name {name!r} is not a valid shell name")
    return name


def one_line(field: str, value: str | None) -> str | None:
    """Refuse values a scheduler directive cannot carry at all (a newline ends the directive)."""
    if value is not None and any(c in str(value) for c in "\n\r\0"):
        raise HpcdlError(f"{field}: contains a newline or NUL, which no batch directive can carry")
    return value
