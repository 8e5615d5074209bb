"""Snapshots that survive a kill at any moment, and that are checked before they are trusted.

A snapshot is `<snapshot_prefix>_iter_<N>.ckpt` (Caffe's naming, one file for the
.caffemodel and .solverstate together). The file is a 64-byte header, `HPCDLCK1`, the
payload length and its SHA-256, followed by the payload (torch.save of a dict). It is
written to a temporary file in the same folder, flushed to disk, and renamed over the
final name, so a reader sees the whole old file or the whole new one, never a part.
Loading walks the snapshots from the newest down and takes the first whose length and
checksum agree: a truncated or corrupt newest snapshot costs one snapshot interval, not
the run.

What a snapshot may hold, and whom it is trusted from (docs/security.md): tensors and plain
data (numbers, strings, lists, dicts) only. It is read with torch.load(weights_only=True),
which builds nothing else, so a crafted file cannot run code; the SHA-256 proves the file is
whole, not who wrote it. A snapshot file owned by another user than the one training is not
read at all: anyone who can write the snapshot folder could otherwise choose the weights.
A snapshot that reads back but does not fit the net (another net's weights under the same
prefix) is skipped for the older one; when snapshots exist and none can be used, training
refuses to start unless asked to start over.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import stat
import struct
import sys
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.files import write_atomically

MAGIC = b"HPCDLCK1"
HEADER = struct.Struct("<8sQ32s16x")  # magic, payload length, sha256, padding to 64 bytes


class CorruptCheckpoint(Exception):
    pass


def snapshot_path(prefix: str | Path, iteration: int) -> Path:
    return Path(f"{prefix}_iter_{iteration}.ckpt")


def list_snapshots(prefix: str | Path) -> list[tuple[int, Path]]:
    """(iteration, path) of every snapshot with this prefix, newest first."""
    prefix = Path(prefix)
    pattern = re.compile(re.escape(prefix.name) + r"_iter_(\d+)\.ckpt$")
    if not prefix.parent.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in prefix.parent.iterdir() if (m := pattern.match(p.name))]
    return sorted(found, reverse=True)


def save(state: dict, path: Path) -> Path:
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest())
    path = Path(path)
    write_atomically(path, header + payload, durable=True, follow_links=False)  # a link there is replaced, not written through
    _fsync_dir(path.parent)
    return path


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def this_user() -> int | None:
    """The uid snapshots must belong to: the user training (None where the OS has no uids)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def open_snapshot(path: str | Path, owner: int | None = -1):
    """A snapshot file opened for reading (a binary file object) after the checks of who and what it is.

    The one gate for the PyTorch (.ckpt) and the TensorFlow/MXNet/Horovod (.npz) snapshots: opened
    with O_NOFOLLOW (a symbolic link, whoever made it and wherever it points, is not a snapshot),
    judged by fstat of the open descriptor (a regular file, owned by `owner`: by default the user
    training; None: anyone), so a FIFO or a device is refused before a byte is read.
    """
    from hpcdl.files import NotAPlainFile, open_regular

    owner = this_user() if owner == -1 else owner
    try:
        fd, _ = open_regular(path, owner=owner, follow_links=False, limit=None)
    except NotAPlainFile as exc:
        raise CorruptCheckpoint(str(exc)) from None
    return os.fdopen(fd, "rb")


def iteration_in_name(path: str | Path) -> int | None:
    """The N of `..._iter_N.ckpt` / `..._iter_N.npz`: the file's content must say the same."""
    m = re.search(r"_iter_(\d+)\.(?:ckpt|npz)$", str(path))
    return int(m.group(1)) if m else None


def warn_if_others_can_write(prefix: str | Path, log=None) -> None:
    """Say so when the snapshot folder is group- or world-writable (docs/security.md).

    Whoever can write the folder can replace the snapshots there; hpcdl refuses their files
    and links, but cannot stop them from deleting or renaming ours.
    """
    folder = Path(prefix).parent
    try:
        mode = os.stat(folder).st_mode
    except OSError:
        return
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "everyone" if mode & stat.S_IWOTH else "its group"
        (log or (lambda msg: print(msg, file=sys.stderr)))(
            f"hpcdl train: warning: the snapshot folder {folder} can be written by {who} (mode {stat.S_IMODE(mode):04o}); "
            "keep snapshot_prefix in a folder only you can write")


def load(path: Path, owner: int | None = -1) -> dict:
    """The snapshot's state: tensors and plain data, read without running any code.

    `owner`: the uid the file must belong to (default: the user running this; None: any).
    The header's length must match the file's size before the payload is read: a file
    claiming more than it holds is refused without allocating for it.
    """
    import pickle

    import torch

    with open_snapshot(path, owner) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            raise CorruptCheckpoint(f"{path}: shorter than its header ({len(head)} bytes)")
        magic, length, digest = HEADER.unpack_from(head)
        if magic != MAGIC:
            raise CorruptCheckpoint(f"{path}: not an hpcdl snapshot")
        if length != size - HEADER.size:
            raise CorruptCheckpoint(f"{path}: truncated ({size - HEADER.size} of {length} bytes)")
        payload = f.read(length + 1)
    if len(payload) != length:
        raise CorruptCheckpoint(f"{path}: truncated ({len(payload)} of {length} bytes)")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpoint(f"{path}: checksum mismatch")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, TypeError, AttributeError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptCheckpoint(f"{path}: holds more than tensors and plain data ({first})") from None
    if not isinstance(state, dict):
        raise CorruptCheckpoint(f"{path}: does not hold a snapshot's mapping")
    return state


def load_latest(prefix: str | Path, log=None, owner: int | None = -1) -> tuple[dict, Path] | None:
    """The newest snapshot that verifies; damaged ones are reported and skipped."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    for _, path in list_snapshots(prefix):
        try:
            return load(path, owner), path
        except (CorruptCheckpoint, OSError, EOFError, RuntimeError) as exc:
            log(f"hpcdl train: skipping snapshot {path}: {exc}")
    return None


def resume(prefix: str | Path, fits, start_over: bool = False, log=None, owner: int | None = -1):
    """(state, path) of the newest snapshot that verifies and fits, or None when there is none.

    `fits(state)` returns None when the state suits this run, else why not (state_fits). Each
    snapshot skipped is reported. When snapshots exist and none can be used, this refuses
    (HpcdlError) unless `start_over`: a requeued job must not silently lose its progress.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    found = list_snapshots(prefix)
    if found:
        warn_if_others_can_write(prefix, log)
    last = None
    for number, path in found:
        try:
            state = load(path, owner)
            problem = named_iteration_problem(state.get("iter"), number) or fits(state)
        except (CorruptCheckpoint, OSError, EOFError, RuntimeError) as exc:
            problem = str(exc).removeprefix(f"{path}: ")
        if problem is None:
            return state, path
        last = problem
        log(f"hpcdl train: skipping snapshot {path}: {problem}")
    if found and not start_over:
        raise HpcdlError(
            f"snapshot_prefix: none of the {len(found)} snapshot(s) at {prefix} can be used (the last: {last}); "
            "move them away, or pass --start-over to train from iteration 0"
        )
    if found:
        log(f"hpcdl train: starting over from iteration 0, as asked; {len(found)} unusable snapshot(s) at {prefix}")
    return None


def named_iteration_problem(inside, named: int) -> str | None:
    """Why a snapshot's own iteration disagrees with the N of its name, or None when they agree.

    A file renamed (or linked) to look newer than it is would otherwise be resumed as the newer one.
    """
    if isinstance(inside, int) and not isinstance(inside, bool) and inside != named:
        return f"holds iteration {inside}, not the {named} of its name"
    return None


def refuse_finished(iteration: int, max_iter: int | None, path) -> None:
    """A snapshot at max_iter means the training is done: say so, rather than "train" 0 iterations
    and print a held-out accuracy of nan at 0.0 img/s with exit 0."""
    if max_iter is not None and iteration >= max_iter:
        raise HpcdlError(f"snapshot_prefix: {path} is at iteration {iteration}, this recipe's max_iter: the training "
                         "has finished; raise max_iter to train on, or pass --start-over to train again")


def state_fits(state: dict, net, optimizer=None, max_iter: int | None = None) -> str | None:
    """None when `state` is a snapshot of this net (and optimizer), else what does not fit.

    Impossible content does not fit either: an iteration beyond `max_iter`, or weights that
    are not finite numbers (a NaN snapshot would train on to NaN results and exit 0).
    """
    import torch

    it = state.get("iter")
    if not isinstance(it, int) or isinstance(it, bool) or it < 0:
        return "no iteration number"
    if max_iter is not None and it > max_iter:
        return f"iteration {it} is beyond this recipe's max_iter {max_iter}"
    model = state.get("model")
    if not isinstance(model, dict):
        return "no model weights"
    mine = net.state_dict()
    if set(model) != set(mine):
        other = sorted(set(model) ^ set(mine))
        return f"weights of another net ({len(other)} tensor name(s) differ, e.g. {other[0]})"
    for name, tensor in mine.items():
        theirs = model[name]
        if not torch.is_tensor(theirs) or theirs.shape != tensor.shape:
            shape = tuple(theirs.shape) if torch.is_tensor(theirs) else type(theirs).__name__
            return f"weights of another net ({name}: {shape}, this net's is {tuple(tensor.shape)})"
        if theirs.is_floating_point() and not bool(torch.isfinite(theirs).all()):
            return f"weights that are not finite numbers ({name} holds NaN or infinity)"
    if optimizer is not None:
        saved = (state.get("optimizer") or {}).get("velocity") if isinstance(state.get("optimizer"), dict) else None
        if not isinstance(saved, dict):
            return "no optimizer state"
        theirs = state["optimizer"].get("type", "SGD")
        if theirs != getattr(optimizer, "solver", "SGD"):
            return f"optimizer state of solver type {theirs}, not {getattr(optimizer, 'solver', 'SGD')}"
        for slot, v in zip(optimizer.slots, optimizer.velocity):
            if slot.name in saved and (not torch.is_tensor(saved[slot.name]) or saved[slot.name].shape != v.shape):
                return f"optimizer state of another net ({slot.name})"
    return None


@contextlib.contextmanager
def prefix_locked(prefix: str | Path | None):
    """Hold an exclusive lock on `<prefix>.lock` while one training writes snapshots under `prefix`.

    Two trainings with one snapshot_prefix would interleave their snapshots, and a requeued job
    would resume its twin's weights; the second one is refused in one line, as a second run in
    one run folder is (files.claim_run_folder). The lock file is opened without following a
    link and must be ours and regular. A folder that cannot be created is left to check_folder
    to report.
    """
    import fcntl

    if not prefix:
        yield
        return
    lock = Path(f"{prefix}.lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise HpcdlError(f"snapshot_prefix: {lock} is a symbolic link; not followed") from None
        yield  # an unwritable folder: check_folder says so in its own line
        return
    st, me = os.fstat(fd), this_user()
    if not stat.S_ISREG(st.st_mode) or (me is not None and st.st_uid != me):
        os.close(fd)
        raise HpcdlError(f"snapshot_prefix: {lock} is not a regular file of uid {me}; not used as this training's "
                         "lock (remove it)")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise HpcdlError(f"snapshot_prefix: another training is writing snapshots at {prefix} now ({lock} is "
                         "locked); give this one its own snapshot_prefix") from None
    try:
        yield
    finally:
        os.close(fd)


def check_folder(prefix: str | Path, need_bytes: int = 0) -> None:
    """Refuse, in one line and before any training, a snapshot folder that cannot take a snapshot.

    The folder is created if need be; a file is written to it and removed (a read-only or
    foreign folder fails here), and its free space must hold `need_bytes` (one snapshot).
    Otherwise the first snapshot, an interval of work later, would be the first to fail.
    """
    import shutil
    import tempfile

    refuse_folders_named_like_snapshots(path for _, path in list_snapshots(prefix))
    folder = Path(prefix).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".snap_probe_", dir=folder)
        os.close(fd)
        os.unlink(probe)
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        raise HpcdlError(f"snapshot_prefix: cannot write snapshots into {folder}: {exc.strerror or exc}") from None
    if need_bytes and free < need_bytes:
        raise HpcdlError(f"snapshot_prefix: {folder} has {free / 2**20:.1f} MiB free, "
                         f"less than one snapshot needs ({need_bytes / 2**20:.1f} MiB)")


def refuse_folders_named_like_snapshots(paths) -> None:
    """A folder (or a FIFO, a device, a socket) named like a snapshot cannot be replaced by one:
    training would stop when it reached that iteration, losing the work since the last snapshot.
    Said before training. (A link there is replaced by the snapshot, see save.)"""
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO, a device or a socket"
            raise HpcdlError(f"snapshot_prefix: {path} is {kind} named like a snapshot; a snapshot could not be "
                             "written there: move it away")


def snapshot_bytes(*modules_or_tensors) -> int:
    """About what one snapshot of these takes: their tensors, plus the header and pickle framing."""
    import torch

    total = 0
    for item in modules_or_tensors:
        tensors = item.state_dict().values() if hasattr(item, "state_dict") and not torch.is_tensor(item) else [item]
        total += sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))
    return total + 64 * 1024


def prune(prefix: str | Path, keep: int) -> None:
    for _, path in list_snapshots(prefix)[keep:]:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
