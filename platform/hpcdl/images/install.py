"""Put a built image where the modules look: PREFIX/images/NAME.sif (or .sqfs for Charliecloud).

`hpcdl modulefiles render --prefix PREFIX` points each framework module at
PREFIX/images/NAME.sif. A build lands in the cache as NAME-KEY.sif or NAME-KEY.sqfs. Installing
copies it to an immutable, versioned file, NAME-VERSION-DIGEST.sif (the hpcdl version inside
and the first 12 hex digits of its sha256), writes a record beside it (name, version, digest,
cache key), and then points NAME.sif at it with one atomic rename of a symbolic link. A job
already running keeps the file it opened; the next job gets the new one; the previous versions
stay until removed, so a module can pin one by its versioned name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from hpcdl import __version__
from hpcdl.errors import HpcdlError
from hpcdl.images.spec import ImageSpec


@dataclass
class Installed:
    image: str
    path: Path
    link: Path
    digest: str
    version: str
    unchanged: bool


def newest_build(spec: ImageSpec, cache: Path) -> dict:
    """The record of the newest build of `spec` in the cache (the one `hpcdl images build` made last)."""
    import re

    pattern = re.compile(rf"^{re.escape(spec.name)}-[0-9a-f]{{16}}\.json$")
    records = sorted((p for p in cache.glob(f"{spec.name}-*.json") if pattern.match(p.name)),
                     key=lambda p: p.stat().st_mtime)
    for record in reversed(records):
        doc = json.loads(record.read_text())
        if Path(doc.get("path", "")).is_file():
            return doc
    raise HpcdlError(f"image {spec.name}: no build in {cache}; run hpcdl images build {spec.name} first")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install_file(spec: ImageSpec, built: Path, prefix: Path, key: str = "", version: str = __version__) -> Installed:
    """Copy one built image file (.sif or .sqfs) into PREFIX/images, versioned, and point NAME.EXT at it."""
    suffix = built.suffix
    if suffix == ".sif":
        from hpcdl.images.sif import read_sif, sif_problems

        problems = sif_problems(read_sif(built), spec.arch)
        if problems:
            raise HpcdlError(f"{built}: not installed, not a SIF as apptainer build writes one: {'; '.join(problems)}")
    images = prefix / "images"
    images.mkdir(parents=True, exist_ok=True)
    digest = sha256(built)
    target = images / f"{spec.name}-{version}-{digest[:12]}{suffix}"
    link = images / f"{spec.name}{suffix}"
    unchanged = target.is_file() and sha256(target) == digest
    if not unchanged:
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(built, partial)
        os.chmod(partial, 0o644 if suffix == ".sqfs" else 0o755)
        os.replace(partial, target)
    record = {"image": spec.name, "version": version, "digest": f"sha256:{digest}", "key": key,
              "arch": spec.arch, "file": target.name}
    record_path = target.with_name(target.name + ".json")
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if link.exists() and not link.is_symlink():
        raise HpcdlError(f"{link} is a file, not a link hpcdl made; move it away first (hpcdl never overwrites "
                         "an image a running job may use)")
    fresh = link.with_name(f".{link.name}.new")
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(target.name)
    os.replace(fresh, link)  # atomic: a job starting now sees the old image or the new, never neither
    return Installed(spec.name, target, link, f"sha256:{digest}", version, unchanged)


def install(spec: ImageSpec, prefix: Path, cache: Path) -> list[Installed]:
    """Install the newest cached build of `spec` (its SIF and its SquashFS image, whichever exist)."""
    doc = newest_build(spec, cache)
    built = Path(doc["path"])
    files = [built]
    sif_beside = built.with_suffix(".sif")
    if built.suffix == ".sqfs" and sif_beside.is_file():
        files.append(sif_beside)
    return [install_file(spec, f, prefix, key=doc.get("key", "")) for f in files]
