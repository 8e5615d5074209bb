"""Writing files the way a careful tool does: all or nothing (see hpcdl.files)."""

from hpcdl.files import write_atomically

__all__ = ["checked_output", "console", "write_atomically"]


def console():
    """A console for the verbs' tables and lines.

    Tables fit the terminal, or $COLUMNS where set; in a pipe without $COLUMNS they are 200
    wide, so grep sees whole names. Plain lines are never wrapped by rich, so a launch line
    or a path stays one line a user can copy into a script.
    """
    import os
    import sys

    from rich.console import Console

    piped = not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty())
    width = 200 if piped and not os.environ.get("COLUMNS") else None
    return Console(soft_wrap=True, width=width)


def checked_output(path, option: str):
    """A file or folder a user named with -o (or --picture): its parent folder must exist.

    hpcdl creates the file, or the one folder named, but never a chain of parent folders a
    typo made up (`-o /nonexistent/job.sh` would otherwise create /nonexistent).
    """
    import os
    from pathlib import Path

    from hpcdl.errors import HpcdlError

    if path is None:
        return None
    path = Path(path)
    parent = path.absolute().parent
    try:
        parent_is_folder = parent.is_dir()
    except OSError as exc:  # a name longer than the system takes (ENAMETOOLONG), a loop of links
        raise HpcdlError(f"{option}: {str(path)[:80]}...: {exc.strerror}") from None
    if len(str(path.absolute())) >= os.pathconf("/", "PC_PATH_MAX"):
        raise HpcdlError(f"{option}: {str(path)[:80]}...: File name too long")
    if not parent_is_folder:
        raise HpcdlError(f"{option}: folder {parent} does not exist; create it first (hpcdl makes no parent folders)")
    return path


def checked_submit_folder(site, folder, option: str, default_parent="runs") -> None:
    """The folder a job is submitted from must not be one the centre's scheduler refuses (filesystems.submit_refused).

    The Alliance's Cedar refused every job submitted from /home ("Submitting jobs from directories residing in /home
    is not permitted"); hpcdl submits from the job's own folder (`-o`, else `runs/...` under the current folder), so it
    says so here, in one line naming the field, rather than after sbatch has refused the job. Both sides are compared
    as the host resolves them (a link from the home folder into /project is the /project folder it points to, as the
    scheduler sees the job's working folder).
    """
    from pathlib import Path

    from hpcdl.errors import HpcdlError

    refused = site.filesystems.submit_refused
    if not refused:
        return
    where = Path(folder if folder is not None else default_parent).resolve()
    for path in refused:
        top = Path(path).resolve()
        if where == top or top in where.parents:
            raise HpcdlError(
                f"filesystems.submit_refused: site {site.name}'s scheduler refuses jobs submitted from {path}, and the "
                f"job's folder {where} lies there; submit from a folder elsewhere (a scratch or project folder), or "
                f"name one with {option}")
