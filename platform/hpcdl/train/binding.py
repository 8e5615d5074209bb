"""Apply this rank's slice of the plan before any framework starts its thread pools."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hpcdl.train.ranks import RankInfo


def load_plan(path: str | None) -> dict | None:
    if not path:
        return None
    from hpcdl.errors import HpcdlError

    try:
        plan = json.loads(Path(path).read_text())
    except OSError as exc:
        raise HpcdlError(f"--plan {path}: cannot read: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HpcdlError(f"--plan {path}: not a plan written by hpcdl render (not JSON: {exc})") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("ranks"), list) or not plan["ranks"]:
        raise HpcdlError(f"--plan {path}: not a plan written by hpcdl render (no ranks)")
    return plan


def apply_plan(plan: dict | None, me: RankInfo, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> dict:
    """Set this rank's environment and CPU affinity from the plan; return what was applied. A plan whose ranks find
    their CPUs near their GPU (rank_cpus: gpu-local) has this rank's found in `sys_root` (sysfs), its job's GPUs named
    by UUID found in `proc_root` (the NVIDIA driver's procfs)."""
    if plan is None:
        return {}
    placement = next((r for r in plan["ranks"] if r["rank"] == me.rank), None)
    if placement is None:
        placement = next(r for r in plan["ranks"] if r["local_rank"] == me.local_rank % plan["ranks_per_node"])
    for name, value in {**plan["env"], **placement["env"]}.items():
        os.environ.setdefault(name, value)
    os.environ["OMP_NUM_THREADS"] = str(placement["omp_num_threads"])
    cpus = set(placement["cpus"])
    applied = {"cpus": sorted(cpus), "omp_num_threads": placement["omp_num_threads"]}
    if plan.get("nodes_per_host", 1) > 1 and plan["nodes"] > 1:
        # pretend nodes on one host number their CPUs alike: pinning by the plan would stack every
        # node's rank 0 on the host's CPU 0 while other CPUs idle, so the host's scheduler places them.
        # OpenMP too: with OMP_PROC_BIND set, libgomp binds the first thread to the first place of the
        # process's CPUs, which is CPU 0 for every rank on the host
        os.environ["OMP_PROC_BIND"] = "false"
        os.environ.pop("OMP_PLACES", None)
        applied["bound"] = False
    elif hasattr(os, "sched_setaffinity"):
        available = os.sched_getaffinity(0)
        held = job_cpuset()
        if plan.get("rank_cpus") == "gpu-local" and placement["gpus"]:
            # within the CPUs the job holds on the node (its cgroup's cpuset), not only the task's own: a launcher that
            # bound each task to a block (--threads-per-core implies --cpu-bind=threads, srun(1)) may have put it on the
            # far socket, and a rank may move anywhere its job may run, as it does to its planned CPUs
            named = job_gpus(os.environ, sys_root, proc_root, by_uuid=plan.get("gpu_ids") == "uuid")
            cpus, found = gpu_local_cpus(plan, placement, held if held else available, sys_root, named,
                                         top_up=bool(held))
            applied.update(cpus=sorted(cpus), near_gpu=found)
        if cpus and cpus <= set(range(os.cpu_count() or 0)) and (held is None or cpus <= held):
            try:
                if available != cpus:
                    os.sched_setaffinity(0, cpus)
                applied["bound"] = True
            except OSError:
                # the kernel refused the plan's CPUs (sched_setaffinity(2): EINVAL, none of them is allowed here)
                # where the job's cpuset could not be read: keep the launcher's mask rather than stop
                applied["bound"] = False
        else:
            # the plan is for another machine, or for other cores than the batch system gave the job on a node it
            # shares (its cgroup's cpuset, which the kernel would cut the plan's CPUs down to, or refuse): leave the
            # launcher's mask, which it drew from the CPUs the job holds
            applied["bound"] = False
    return applied


# the PCI vendors of the GPUs hpcdl drives (NVIDIA, AMD), as sysfs writes them
GPU_VENDORS = ("0x10de", "0x1002")


def node_gpus(sys_root: Path = Path("/sys")) -> list[Path]:
    """The node's GPUs as sysfs PCI devices (display controllers, class 0x03xxxx, of NVIDIA or AMD), in PCI address
    order: the order nvidia-smi numbers them in ("the PCI bus ID order", CUDA_DEVICE_ORDER=PCI_BUS_ID), which the
    profile's gpus list and Slurm's GPU ids follow."""
    found = []
    try:
        devices = sorted((sys_root / "bus" / "pci" / "devices").iterdir(), key=lambda d: d.name)
    except OSError:
        return []
    for device in devices:
        try:
            if ((device / "class").read_text().strip().startswith("0x03")
                    and (device / "vendor").read_text().strip() in GPU_VENDORS):
                found.append(device)
        except OSError:
            continue
    return found


def job_gpus(environ=os.environ, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
             by_uuid: bool = False) -> list[int] | None:
    """The node's GPUs this job holds, by their node-wide ids (their places in node_gpus), where the batch system says:
    Slurm's SLURM_STEP_GPUS, SLURM_JOB_GPUS ("The global GPU IDs of the GPUs allocated to this job. The GPU IDs are not
    relative to any device cgroup, even if devices are constrained with task/cgroup", sbatch(1)); else a
    CUDA_VISIBLE_DEVICES of GPU UUIDs (PBS Pro's cgroup hook at Imperial: "CUDA_VISIBLE_DEVICES will be set
    automatically with the UUID of the allocated GPUs"), each found by its PCI address in the NVIDIA driver's
    /proc/driver/nvidia/gpus/<address>/information ("GPU UUID: GPU-..."), [] where one is not found; [] too where the
    plan says the batch system names them by UUID (defaults.gpu_ids) and none is named, rather than guess; None
    (every GPU of the node) elsewhere."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        words = environ.get(name, "").split(",")
        if words and all(w.isdigit() for w in words):
            return [int(w) for w in words]
    uuids = [w.strip() for w in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if w.strip()]
    if uuids and all(u.startswith("GPU-") for u in uuids):
        places = {device.name: i for i, device in enumerate(node_gpus(sys_root))}
        at = _uuid_addresses(proc_root)
        return [places[at[u]] for u in uuids] if all(at.get(u) in places for u in uuids) else []
    return [] if by_uuid else None


def _uuid_addresses(proc_root: Path) -> dict[str, str]:
    """Each NVIDIA GPU's UUID and its PCI address, from the driver's /proc/driver/nvidia/gpus/<address>/information."""
    found = {}
    try:
        folders = list((proc_root / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return found
    for folder in folders:
        try:
            lines = (folder / "information").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key.strip() == "GPU UUID":
                found[value.strip()] = folder.name.lower()
    return found


def cores_of(cpus: set[int], sys_root: Path = Path("/sys")) -> list[tuple[int, ...]]:
    """`cpus` grouped by the physical core they are threads of (sysfs thread_siblings_list), by first CPU."""
    cores: dict[int, list[int]] = {}
    for cpu in sorted(cpus):
        try:
            siblings = _cpu_list((sys_root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
                                  / "thread_siblings_list").read_text().strip())
        except (OSError, ValueError):
            siblings = {cpu}
        cores.setdefault(min(siblings | {cpu}), []).append(cpu)
    return [tuple(threads) for _, threads in sorted(cores.items())]


def gpu_local_cpus(plan: dict, placement: dict, allowed: set[int], sys_root: Path = Path("/sys"),
                   held_gpus: list[int] | None = None, top_up: bool = False) -> tuple[set[int], str]:
    """This rank's CPUs near its GPU (the plan's rank_cpus: gpu-local), and how they were found: of the CPUs its GPU's
    PCI device reports as local (local_cpulist, nvidia-smi topo -m's CPU Affinity) that the rank may use (`allowed`),
    its share among the node's ranks whose GPUs report the same CPUs, in local-rank order: the plan's count of cores
    each where they are enough, else an even split, else all of them. With `top_up` (`allowed` being the job's CPUs on
    the node, the same for every rank), a rank of an even split short of the plan's count also takes its even share of
    the job's cores near none of the node's ranks' GPUs, in local-rank order among the ranks short of theirs: CINECA's
    Leonardo Booster reports every A100 near cores 0-15 of 32, and four ranks of 8 cores each take 4 of those and 4
    of 16-31, no core of the job left idle. An empty set (the launcher's mask kept) where the node's GPUs cannot be
    read."""
    gpus = node_gpus(sys_root)
    if held_gpus == []:
        return set(), ("the job's GPUs are not named on this node (CUDA_VISIBLE_DEVICES holds no UUID the NVIDIA "
                       "driver lists, defaults.gpu_ids: uuid): the launcher's CPUs kept")
    held = held_gpus if held_gpus is not None else list(range(len(gpus)))

    def near(index: int) -> frozenset[int] | None:
        """The CPUs local to the job's GPU `index`, None where it is not among the node's or cannot be read."""
        if index >= len(held) or held[index] >= len(gpus):
            return None
        try:
            return frozenset(_cpu_list((gpus[held[index]] / "local_cpulist").read_text().strip()))
        except (OSError, ValueError):
            return None

    # each GPU of the node's ranks read once: the ranks whose GPUs report this rank's CPUs share them
    ranks = {r["local_rank"]: r for r in plan["ranks"] if r["node"] == placement["node"] and r["gpus"]}
    local = {rank: near(r["gpus"][0]) for rank, r in ranks.items()}
    if not local[placement["local_rank"]]:
        return set(), (f"GPU {placement['gpus'][0]}: not among the node's {len(gpus)} GPUs in sysfs, or its "
                       "local_cpulist unreadable: the launcher's CPUs kept")

    near_cores: dict[frozenset[int], list] = {}  # the whole cores near each GPU's CPUs, read from sysfs once

    def near_share(rank: int) -> tuple[list, list, int, int]:
        """The rank's share of the cores near its GPU, those cores, its place among the ranks sharing them, and
        their count."""
        group = sorted(other for other, cpus in local.items() if cpus == local[rank])
        k, n, want = group.index(rank), len(group), max(1, len(ranks[rank]["cores"]))
        if local[rank] not in near_cores:
            near_cores[local[rank]] = cores_of(set(local[rank]) & allowed, sys_root)
        cores = near_cores[local[rank]]
        if len(cores) >= n * want:
            return cores[k * want:(k + 1) * want], cores, k, n
        if len(cores) >= n:
            each = len(cores) // n
            return cores[k * each:(k + 1) * each], cores, k, n
        return cores, cores, k, n

    me = placement["local_rank"]
    # every rank's share where the ranks short of theirs are topped up, this rank's alone otherwise
    shares = {rank: near_share(rank) for rank in (sorted(r for r in local if local[r]) if top_up else [me])}
    share, cores, k, n = shares[me]
    extra: list = []
    if top_up:
        # the ranks of an even split, short of their count, share the job's cores near none of the ranks' GPUs
        short = [rank for rank, (got, around, _, count) in shares.items()
                 if len(around) >= count and len(got) < max(1, len(ranks[rank]["cores"]))]
        if me in short:
            pool = cores_of(allowed - set().union(*(cpus for cpus in local.values() if cpus)), sys_root)
            per, p = len(pool) // len(short), short.index(me)
            extra = pool[p * per:(p + 1) * per][:max(1, len(placement["cores"])) - len(share)]
    physical = held[placement["gpus"][0]]
    return ({cpu for core in share + extra for cpu in core},
            f"GPU {physical} ({gpus[physical].name}): {len(share)} of the {len(cores)} cores near it, share {k + 1} of {n}"
            + (f", and {len(extra)} of the job's cores near no GPU of its ranks" if extra else ""))


def job_cpuset(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> set[int] | None:
    """The CPUs this process's cgroup holds: the cpuset a batch system confines a job to (PBS's cgroup hook, Slurm's
    task/cgroup; Imperial CX3: "Our systems utilises Cgroups, meaning you will only be able to see the resource that
    is allocated to your job"), from cgroup v2's unified tree or v1's cpuset hierarchy; None where none is readable."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        here = path.lstrip("/")
        if controllers == "":
            files = [root / here / "cpuset.cpus.effective"]
        elif "cpuset" in controllers.split(","):
            files = [root / "cpuset" / here / "cpuset.effective_cpus", root / "cpuset" / here / "cpuset.cpus"]
        else:
            continue
        for file in files:
            try:
                text = file.read_text().strip()
            except OSError:
                continue
            if text:
                return _cpu_list(text)
    return None


def _cpu_list(text: str) -> set[int]:
    """A kernel CPU list ("0-3,8,10-11") as a set."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus
