"""Writing files the way a careful tool does: all or nothing (see hpcdl.files)."""

from hpcdl.files import write_atomically

__all__ = ["console", "write_atomically"]


def console():
    """A console for the verbs' tables and lines.

    Tables fit the terminal (or $COLUMNS; 80 in a pipe). Plain lines are never wrapped by
    rich, so a launch line or a path stays one line a user can copy into a script.
    """
    from rich.console import Console

    return Console(soft_wrap=True)
