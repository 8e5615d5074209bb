"""Data staging, as the job script runs it on every node: copy, then check the copy.

The seed runs staged their data on node-local storage before training (Summit's NVMe at
/mnt/bb/$USER, Cori's burst buffer), because thousands of ranks reading one parallel
filesystem was slower than the copy. `hpcdl stage SRC DEST` copies SRC (a file or a folder)
into DEST once, checks that every file arrived whole (same count, same sizes), and is a
no-op when a complete copy is already there (a requeued job reuses it).

At scale a node stages only its shard (`--shard NODE/NODES`): the 2018 Summit climate run's
20 TB could not go to every node's 1.6 TB NVMe. A shard is a pure function of the source's
file list, so every node picks its own without talking to the others:

- an image folder (ROOT/train/<class>/..., or ROOT/<class>/...): every NODES-th image of each
  class, starting at NODE, so each node holds every class in its share; ROOT/val/ (the
  held-out set) goes to every node whole, so the test phase still scores the full set;
- a folder of tar shards: every NODES-th .tar file.

The trainer's `data.shuffle: node` then shuffles within the node's copy each epoch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import time
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.files import write_atomically


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


def check_copy(source: Path, copy: Path, files: list[str] | None = None) -> tuple[int, int]:
    """(files, bytes) when the copy holds every file of source (or of `files`, a shard) with its size."""
    want = _inventory(source) if files is None else {rel: (source / rel).stat().st_size for rel in files}
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


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp")  # as hpcdl.train.data reads them


def shard_files(source: Path, node: int, nodes: int) -> list[str]:
    """The files (relative to source) node `node` of `nodes` stages; see the module docstring."""
    if not 0 <= node < nodes:
        raise HpcdlError(f"stage --shard: node {node} is not one of 0..{nodes - 1}")
    if not source.is_dir():
        raise HpcdlError(f"stage --shard: {source} is one file; only a folder of images or of .tar shards splits")
    tars = sorted(p.name for p in source.glob("*.tar"))
    if tars:
        mine = tars[node::nodes]
        if not mine:
            raise HpcdlError(f"stage --shard: {source} has {len(tars)} .tar shards, fewer than the {nodes} nodes")
        return mine
    train = source / "train" if (source / "train").is_dir() else source
    files: list[str] = []
    for cls in sorted(p for p in train.iterdir() if p.is_dir()):
        images = sorted(f for f in cls.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
        files += [str(f.relative_to(source)) for f in images[node::nodes]]
    if (source / "val").is_dir() and train != source:
        files += sorted(str(f.relative_to(source)) for f in (source / "val").rglob("*") if f.is_file())
    if not files:
        raise HpcdlError(f"stage --shard: no images under {train} (expected <class>/<image>.jpg)")
    return files


def node_index(environ=None, hostname: str | None = None) -> int:
    """This node's place in the job, for `--shard auto/N`: read from the launcher that ran
    one task per node (srun, jsrun, mpirun, aprun, pbsdsh), else from the job's host list."""
    env = os.environ if environ is None else environ
    for name in ("SLURM_NODEID", "PBS_VNODENUM", "JSM_NAMESPACE_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                 "ALPS_APP_PE"):
        if env.get(name, "").isdigit():
            return int(env[name])
    host = (hostname or os.uname().nodename).split(".")[0]
    for name in ("LSB_DJOB_HOSTFILE", "PBS_NODEFILE"):
        if env.get(name) and Path(env[name]).is_file():
            hosts = list(dict.fromkeys(h.strip().split(".")[0] for h in Path(env[name]).read_text().split() if h.strip()))
            if host in hosts:
                return hosts.index(host)
    raise HpcdlError("stage --shard auto: cannot tell this node's index from the launcher; give --shard NODE/NODES")


def parse_shard(text: str | None, environ=None) -> tuple[int, int] | None:
    """'3/8' -> (3, 8); 'auto/8' -> (this node's index, 8); None -> None."""
    if not text:
        return None
    node, _, nodes = text.partition("/")
    if not nodes.isdigit() or int(nodes) < 1 or not (node == "auto" or node.isdigit()):
        raise HpcdlError(f"stage --shard: {text!r}; write NODE/NODES (3/8) or auto/NODES")
    return (node_index(environ) if node == "auto" else int(node)), int(nodes)


def _copy_regular(src: str, dst: str) -> str:
    """shutil.copy2 of a regular file only: a FIFO never ends its read, /dev/zero never ends its data."""
    if not stat.S_ISREG(os.stat(src).st_mode):
        raise HpcdlError(f"stage: {src} is not a regular file (a device, a FIFO or a socket); hpcdl copies only "
                         "regular files and folders")
    return shutil.copy2(src, dst)


def _copy_shard(source: Path, partial: Path, files: list[str]) -> None:
    for rel in files:
        (partial / rel).parent.mkdir(parents=True, exist_ok=True)
        _copy_regular(source / rel, partial / rel)
    train = source / "train" if (source / "train").is_dir() else source
    for cls in (p for p in train.iterdir() if p.is_dir()):  # every class, even one this node holds no image of
        (partial / cls.relative_to(source)).mkdir(parents=True, exist_ok=True)


def stage(source: str | Path, dest: str | Path, shard: tuple[int, int] | None = None) -> Path:
    source, dest = Path(source), Path(dest)
    if not source.exists():
        raise HpcdlError(f"data.path: {source} does not exist on {os.uname().nodename}")
    if not (source.is_dir() or stat.S_ISREG(source.stat().st_mode)):
        raise HpcdlError(f"stage: {source} is not a regular file or a folder (a device, a FIFO or a socket); "
                         "it would be copied without end")
    if dest.exists() and not dest.is_dir():
        raise HpcdlError(f"stage: {dest} is a file; the destination must be a folder to copy into")
    target = staged_path(source, dest)
    started = time.monotonic()
    files_wanted = shard_files(source, *shard) if shard and shard[1] > 1 else None
    if target.exists():
        try:
            files, size = check_copy(source, target, files_wanted)
            print(f"hpcdl stage: {target} already holds {files} file(s), {size / 1e6:.1f} MB", flush=True)
            return target
        except HpcdlError:
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HpcdlError(f"stage: cannot create {dest}: {exc.strerror}") from None
    need = sum((source / rel).stat().st_size for rel in files_wanted) if files_wanted is not None \
        else sum(_inventory(source).values())
    free = shutil.disk_usage(dest).free
    if need > free:
        raise HpcdlError(f"stage: {source} needs {need / 1e6:.1f} MB, {dest} has {free / 1e6:.1f} MB free")
    partial = dest / f".{source.name}.partial-{os.getpid()}"
    with _removed_if_stopped(partial):
        try:
            if files_wanted is not None:
                _copy_shard(source, partial, files_wanted)
            elif source.is_dir():
                shutil.copytree(source, partial, copy_function=_copy_regular)
            else:
                _copy_regular(source, partial)
        except shutil.Error as exc:  # copytree gathers each file's error
            first = exc.args[0][0] if exc.args and isinstance(exc.args[0], list) and exc.args[0] else exc
            raise HpcdlError(f"stage: cannot copy {source}: {first[-1] if isinstance(first, tuple) else first}") from None
        except OSError as exc:
            raise HpcdlError(f"stage: cannot copy {source} into {dest}: {exc.strerror or exc}") from None
        os.replace(partial, target)  # a half-written copy never carries the final name
    files, size = check_copy(source, target, files_wanted)
    part = f" (shard {shard[0]} of {shard[1]})" if files_wanted is not None else ""
    print(f"hpcdl stage: copied {files} file(s){part}, {size / 1e6:.1f} MB to {target} on {os.uname().nodename} "
          f"in {time.monotonic() - started:.1f} s", flush=True)
    return target


@contextlib.contextmanager
def _removed_if_stopped(partial: Path):
    """Remove the half-written copy when the copy fails or the job is stopped (SIGTERM, SIGINT, SIGHUP).

    A stopped stage must not leave gigabytes behind on the node's disk; SIGKILL alone cannot be
    caught, and its partial copy keeps the dot-name with the pid, never the final name.
    """
    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    except BaseException:
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial, ignore_errors=True)
        elif partial.exists() or partial.is_symlink():
            partial.unlink()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def point_recipe_at(recipe_file: str | Path, source: str | Path, dest: str | Path) -> None:
    """Rewrite the job's recipe.json so the ranks read the staged copy."""
    recipe_file = Path(recipe_file)
    data = json.loads(recipe_file.read_text())
    data.setdefault("data", {})["path"] = str(staged_path(source, dest))
    write_atomically(recipe_file, json.dumps(data, sort_keys=True) + "\n")
