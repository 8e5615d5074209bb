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


def apply_plan(plan: dict | None, me: RankInfo) -> dict:
    """Set this rank's environment and CPU affinity from the plan; return what was applied."""
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
