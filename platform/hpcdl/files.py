"""Reading and writing the project's files the careful way, in one place.

Reads name the file in the one-line error; writes are all or nothing (a temporary file in
the same folder, renamed over the target), so an error never leaves a partial file.
"""

from __future__ import annotations

import os
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
    if data is None and empty_ok:
        return {}
    if not isinstance(data, dict):
        raise HpcdlError(f"{path}: {what} must be a YAML mapping")
    return data


def write_atomically(path: Path, content: str | bytes, mode: int | None = None, durable: bool = False) -> None:
    """Write `content` to `path` whole or not at all; `durable` also fsyncs before the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
