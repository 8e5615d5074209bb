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
        if cpus and cpus <= set(range(os.cpu_count() or 0)):
            try:
                if available != cpus:
                    os.sched_setaffinity(0, cpus)
                applied["bound"] = True
            except OSError:
                # none of the plan's CPUs is in the job's cgroup (sched_setaffinity(2): EINVAL): on a node
                # shared with other jobs Slurm gave this job other cores than the plan's first ones, so the
                # rank keeps the mask its launcher gave it rather than stopping
                applied["bound"] = False
        else:
            applied["bound"] = False  # the plan is for another machine: leave the launcher's mask
    return applied
