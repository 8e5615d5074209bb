"""Reading and writing the project's files the careful way, in one place.

Reads name the file in the one-line error; writes are all or nothing (a temporary file in
the same folder, renamed over the target), so an error never leaves a partial file.
"""

from __future__ import annotations

import datetime as _dt
import os
import stat
import tempfile
from pathlib import Path

import yaml

from hpcdl.errors import HpcdlError


def read_yaml_mapping(path: Path, what: str, empty_ok: bool = False) -> dict:
    """A YAML file that must hold a mapping; `what` names it in errors ('a site profile')."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise HpcdlError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise HpcdlError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise HpcdlError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    if data is None and empty_ok:
        return {}
    if not isinstance(data, dict):
        raise HpcdlError(f"{path}: {what} must be a YAML mapping")
    return data


def write_atomically(path: Path, content: str | bytes, mode: int | None = None, durable: bool = False) -> None:
    """Write `content` to `path` whole or not at all; `durable` also fsyncs before the rename.

    A symbolic link is written through (the file it names is replaced, the link stays); a path
    that is not a regular file (a device such as /dev/full, a FIFO, a folder) is refused, never
    replaced. Errors are one line naming the path.
    """
    path = Path(path)
    try:
        st = os.stat(path)  # follows links, /proc/self/fd/1 included
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise HpcdlError(f"{path}: cannot write: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, a FIFO or a socket)"
        raise HpcdlError(f"{path}: is {kind}; hpcdl writes only regular files and will not replace it")
    target = Path(os.path.realpath(path))  # through symbolic links, dangling ones too
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", dir=target.parent)
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise HpcdlError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise


_held_locks: list[int] = []  # run-folder locks, held until the process ends


def claim_run_folder(folder: Path | None, name: str, parent: Path = Path("runs")) -> Path:
    # `name` holds "{time}", the start time: "{time}-cifar10" -> runs/20261123-114016-cifar10
    """A run folder this process alone writes into, for `hpcdl run`, `submit` and `validate`.

    Without `folder`: a new folder `<parent>/<name>`, created exclusively; a second run
    started in the same second gets `...-2`, and so on. With `folder` (the user's --out): it is
    created if need be, and reused (a resume), but never by two runs at once. Either way an
    exclusive lock on `<folder>/.hpcdl-lock` is held until the process ends.
    """
    import fcntl

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if folder is None:
        parent = Path(parent).resolve()
        _make_folder(parent, "the runs folder", parents=True)
        for n in range(1, 1000):
            candidate = parent / (name.format(time=stamp) + ("" if n == 1 else f"-{n}"))
            try:
                os.mkdir(candidate)
            except FileExistsError:
                continue
            except OSError as exc:
                raise HpcdlError(f"{candidate}: cannot create the run folder: {exc.strerror}") from None
            folder = candidate
            break
        else:
            raise HpcdlError(f"{parent}: no free run folder name for {name.format(time=stamp)}")
    folder = Path(folder).resolve()
    _make_folder(folder, "the run folder", parents=True)
    try:
        fd = os.open(folder / ".hpcdl-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise HpcdlError(f"{folder}: cannot write into the run folder: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise HpcdlError(f"{folder}: another hpcdl run is using this folder now; give another --out") from None
    _held_locks.append(fd)
    return folder


def _make_folder(path: Path, what: str, parents: bool = False) -> None:
    try:
        path.mkdir(parents=parents, exist_ok=True)
    except FileExistsError:
        raise HpcdlError(f"{path}: {what} is a file, not a folder") from None
    except OSError as exc:
        raise HpcdlError(f"{path}: cannot create {what}: {exc.strerror}") from None


# A PNG hpcdl writes carries no version or date, so the same results give the same pictures.
PNG_METADATA = {"Software": None}
