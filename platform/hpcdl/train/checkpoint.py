"""Snapshots that survive a kill at any moment, and that are checked before they are trusted.

A snapshot is `<snapshot_prefix>_iter_<N>.ckpt` (Caffe's naming, one file for the
.caffemodel and .solverstate together). The file is a 64-byte header, `HPCDLCK1`, the
payload length and its SHA-256, followed by the payload (torch.save of a dict). It is
written to a temporary file in the same folder, flushed to disk, and renamed over the
final name, so a reader sees the whole old file or the whole new one, never a part.
Loading walks the snapshots from the newest down and takes the first whose length and
checksum agree: a truncated or corrupt newest snapshot costs one snapshot interval, not
the run.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import struct
import sys
from pathlib import Path

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
    write_atomically(path, header + payload, durable=True)
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


def load(path: Path) -> dict:
    import torch

    data = Path(path).read_bytes()
    if len(data) < HEADER.size:
        raise CorruptCheckpoint(f"{path}: shorter than its header ({len(data)} bytes)")
    magic, length, digest = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpoint(f"{path}: not an hpcdl snapshot")
    payload = data[HEADER.size:]
    if len(payload) != length:
        raise CorruptCheckpoint(f"{path}: truncated ({len(payload)} of {length} bytes)")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpoint(f"{path}: checksum mismatch")
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)


def load_latest(prefix: str | Path, log=None) -> tuple[dict, Path] | None:
    """The newest snapshot that verifies; damaged ones are reported and skipped."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    for _, path in list_snapshots(prefix):
        try:
            return load(path), path
        except (CorruptCheckpoint, OSError, EOFError, RuntimeError) as exc:
            log(f"hpcdl train: skipping snapshot {path}: {exc}")
    return None


def prune(prefix: str | Path, keep: int) -> None:
    for _, path in list_snapshots(prefix)[keep:]:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
