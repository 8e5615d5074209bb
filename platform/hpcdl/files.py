"""Reading and writing the project's files the careful way, in one place.

Reads name the file in the one-line error; writes are all or nothing (a temporary file in
the same folder, renamed over the target), so an error never leaves a partial file.
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import stat
import tempfile
from pathlib import Path

import yaml

from hpcdl.errors import HpcdlError


# The largest file hpcdl reads whole as text (a site profile, a recipe, a plan): the shipped
# profiles are under 10 KiB; a shared site folder's entry that is larger is not a profile.
TEXT_LIMIT = 4 * 2**20


class NotAPlainFile(HpcdlError):
    """A path that is not a regular file of the expected owner and size (one line, the path named)."""


def open_regular(path: str | Path, *, owner: int | None = None, follow_links: bool = True,
                 limit: int | None = None) -> tuple[int, os.stat_result]:
    """(descriptor, its stat) of `path`, opened for reading only if it is a regular file.

    A FIFO, a device (/dev/zero), a socket or a folder is refused before a byte is read: opened
    with O_NONBLOCK, so a FIFO with no writer cannot hang the open, and judged by fstat of the
    descriptor itself, so nothing can be swapped in between the check and the read.
    `follow_links` False adds O_NOFOLLOW (a symbolic link is refused: the file must be the one
    named, not one another user points it at); `owner` is the uid it must belong to; `limit`
    the most bytes it may hold.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise NotAPlainFile(f"{path}: is a symbolic link; not followed") from None
        raise NotAPlainFile(f"{path}: cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, a FIFO or a socket)"
            raise NotAPlainFile(f"{path}: is {kind}; hpcdl reads only regular files")
        if owner is not None and st.st_uid != owner:
            raise NotAPlainFile(f"{path}: belongs to uid {st.st_uid}, not to uid {owner} who is training; not trusted")
        if limit is not None and st.st_size > limit:
            raise NotAPlainFile(f"{path}: holds {st.st_size:,} bytes, more than the {limit:,} such a file may hold")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | Path, *, owner: int | None = None, follow_links: bool = True,
                 limit: int | None = TEXT_LIMIT) -> bytes:
    """The whole of a regular file (open_regular's checks), never more than `limit` bytes."""
    fd, st = open_regular(path, owner=owner, follow_links=follow_links, limit=limit)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(st.st_size + 1 if limit is None else limit + 1)
        except OSError as exc:
            raise NotAPlainFile(f"{path}: cannot read: {exc.strerror}") from None
    if limit is not None and len(data) > limit:  # it grew since fstat
        raise NotAPlainFile(f"{path}: holds more than the {limit:,} bytes such a file may hold")
    return data


def read_text(path: str | Path, what: str = "") -> str:
    """A regular text file of at most TEXT_LIMIT bytes, as UTF-8; errors are one line naming it."""
    data = read_regular(path)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise HpcdlError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """yaml.SafeLoader that refuses a mapping naming one key twice. YAML says keys are unique, but
    PyYAML keeps the last silently: a profile with two `launch:` blocks (one written by hand, one
    merged in) lost the first block's settings without a word. It parses with libyaml where PyYAML
    was built with it (CSafeLoader: the same safe constructor, about six times faster than the pure
    Python parser; every site profile is read this way, many times over in a test session)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:
                continue  # an unhashable key: the constructor below says so
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first on line {first})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml_text(text: str, where: str):
    """yaml.safe_load with its failures as one line: bad YAML, a key given twice in one mapping,
    and nesting too deep for the parser."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise HpcdlError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:
        raise HpcdlError(f"{where}: not valid YAML: nested too deep") from None


def read_yaml_mapping(path: Path, what: str, empty_ok: bool = False) -> dict:
    """A YAML file that must hold a mapping; `what` names it in errors ('a site profile')."""
    data = load_yaml_text(read_text(path), str(path))
    if data is None and empty_ok:
        return {}
    if not isinstance(data, dict):
        raise HpcdlError(f"{path}: {what} must be a YAML mapping")
    return data


def write_atomically(path: Path, content: str | bytes, mode: int | None = None, durable: bool = False,
                     follow_links: bool = True) -> None:
    """Write `content` to `path` whole or not at all; `durable` also fsyncs before the rename.

    A symbolic link is written through (the file it names is replaced, the link stays), unless
    `follow_links` is False (snapshots: a link someone else put there is replaced by the file,
    and what it pointed to is left alone); a path that is not a regular file (a device such as
    /dev/full, a FIFO, a folder) is refused, never replaced. Errors are one line naming the path.
    """
    path = Path(path)
    if not follow_links and os.path.islink(path):
        path = path.absolute()
        _replace_with(path, path, content, mode, durable)
        return
    try:
        st = os.stat(path)  # follows links, /proc/self/fd/1 included
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise HpcdlError(f"{path}: cannot write: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, a FIFO or a socket)"
        raise HpcdlError(f"{path}: is {kind}; hpcdl writes only regular files and will not replace it")
    _replace_with(path, Path(os.path.realpath(path)), content, mode, durable)  # through links, dangling ones too


def _replace_with(path: Path, target: Path, content: str | bytes, mode: int | None, durable: bool) -> None:
    """A temporary file beside `target`, renamed over it; errors name `path`, as the user gave it."""
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
