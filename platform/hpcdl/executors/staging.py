"""Data staging, as the job script runs it on every node: copy, then check the copy.

The seed runs staged their data on node-local storage before training (Summit's NVMe at
/mnt/bb/$USER, Cori's burst buffer), because thousands of ranks reading one parallel
filesystem was slower than the copy. `hpcdl stage SRC DEST` copies SRC (a file or a folder)
into DEST once, checks that every file arrived whole (same count, same sizes), and is a
no-op when a complete copy is already there (a requeued job reuses it).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from hpcdl.cli.output import write_atomically
from hpcdl.errors import HpcdlError


def _inventory(root: Path) -> dict[str, int]:
    """Relative path -> size of every file under root (root itself when it is a file)."""
    if root.is_file():
        return {root.name: root.stat().st_size}
    sizes = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            sizes[str(path.relative_to(root))] = path.stat().st_size
    return sizes


def staged_path(source: str | Path, dest: str | Path) -> Path:
    return Path(dest) / Path(source).name


def check_copy(source: Path, copy: Path) -> tuple[int, int]:
    """(files, bytes) when the copy holds every file of source with its size; else HpcdlError."""
    want = _inventory(source)
    have = _inventory(copy) if copy.exists() else {}
    if source.is_file() and copy.is_file():
        have = {source.name: copy.stat().st_size}
    missing = sorted(set(want) - set(have))
    short = sorted(p for p in want if p in have and have[p] != want[p])
    if missing or short:
        detail = f"{len(missing)} missing" + (f" (first {missing[0]})" if missing else "")
        detail += f", {len(short)} of the wrong size" + (f" (first {short[0]})" if short else "")
        raise HpcdlError(f"stage: the copy of {source} in {copy} is incomplete: {detail}")
    return len(want), sum(want.values())


def stage(source: str | Path, dest: str | Path) -> Path:
    source, dest = Path(source), Path(dest)
    if not source.exists():
        raise HpcdlError(f"data.path: {source} does not exist on {os.uname().nodename}")
    target = staged_path(source, dest)
    started = time.monotonic()
    if target.exists():
        try:
            files, size = check_copy(source, target)
            print(f"hpcdl stage: {target} already holds {files} file(s), {size / 1e6:.1f} MB", flush=True)
            return target
        except HpcdlError:
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    partial = dest / f".{source.name}.partial-{os.getpid()}"
    if source.is_dir():
        shutil.copytree(source, partial)
    else:
        shutil.copy2(source, partial)
    os.replace(partial, target)  # a half-written copy never carries the final name
    files, size = check_copy(source, target)
    print(f"hpcdl stage: copied {files} file(s), {size / 1e6:.1f} MB to {target} on {os.uname().nodename} "
          f"in {time.monotonic() - started:.1f} s", flush=True)
    return target


def point_recipe_at(recipe_file: str | Path, source: str | Path, dest: str | Path) -> None:
    """Rewrite the job's recipe.json so the ranks read the staged copy."""
    recipe_file = Path(recipe_file)
    data = json.loads(recipe_file.read_text())
    data.setdefault("data", {})["path"] = str(staged_path(source, dest))
    write_atomically(recipe_file, json.dumps(data, sort_keys=True) + "\n")
