"""The one exception type hpcdl raises for anything a user can fix."""

from __future__ import annotations


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
        problems.append(f"{field}: {msg}")
    return f"{where}: " + "; ".join(problems)
