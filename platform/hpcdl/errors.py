"""The one exception type hpcdl raises for anything a user can fix."""

from __future__ import annotations

import re


class HpcdlError(Exception):
    """Bad input or an impossible request.

    The message is one line a user can act on; it names the field or file at fault.
    The command line prints it on stderr and exits with status 2.
    """

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def validation_message(exc, where: str) -> str:
    """One line from a pydantic ValidationError: the file, each field and its problem."""
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        problems.append((field, msg))
    # the same problem in several items of a list (six GPUs of one vendor hpcdl does not drive) is
    # said once, with how many more items have it
    groups: dict[tuple[str, str], list[str]] = {}
    for field, msg in problems:
        groups.setdefault((re.sub(r"\.\d+(?=\.|$)", ".*", field), msg), []).append(field)
    said = [f"{fields[0]}: {msg}" + (f" (and {len(fields) - 1} more like it)" if len(fields) > 1 else "")
            for (_, msg), fields in groups.items()]
    return f"{where}: " + "; ".join(said)
