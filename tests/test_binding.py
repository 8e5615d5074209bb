"""A rank pins itself to the CPUs its plan gives it, except where the plan's nodes are pretend nodes on one
host: their CPU ids name the same host CPUs, so pinning would stack every node's rank 0 on CPU 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpcdl.plan import make_plan
from hpcdl.plan.request import JobRequest
from hpcdl.sites import load_site


def _apply_in_child(plan: dict, rank: int) -> tuple[dict, list[int]]:
    """apply_plan in a fresh process (it changes the process's affinity and environment)."""
    import json

    # the first framework call after the plan is applied starts OpenMP, which binds by OMP_PROC_BIND
    code = ("import json, os, sys; from hpcdl.train.binding import apply_plan; from hpcdl.train.ranks import RankInfo; "
            "plan = json.loads(sys.stdin.read()); "
            f"applied = apply_plan(plan, RankInfo({rank}, plan['world_size'], {rank} % plan['ranks_per_node'], 'srun')); "
            "import torch; torch.ones(64, 64) @ torch.ones(64, 64); "
            "print(json.dumps([applied, sorted(os.sched_getaffinity(0))]))")
    # as the job script exports them: the plan's shared settings (OMP_PLACES, OMP_PROC_BIND ...)
    env = {**os.environ, **plan["env"]}
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(plan), capture_output=True, text=True,
                          check=True, env=env)
    applied, affinity = json.loads(proc.stdout)
    return applied, affinity


@pytest.fixture
def ci_slurm(fixture_sites):
    return load_site("ci-slurm")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_a_one_node_job_pins_each_rank_to_its_planned_cpus(ci_slurm):
    plan = make_plan(ci_slurm, JobRequest(nodes=1, ranks_per_node=2)).to_dict()
    assert plan["nodes_per_host"] == 2  # the fixture's pretend nodes share this host
    applied, affinity = _apply_in_child(plan, 1)
    assert applied["bound"] is True and affinity == list(plan["ranks"][1]["cpus"])


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_pretend_nodes_of_one_host_are_not_pinned_by_their_shared_cpu_ids(ci_slurm):
    plan = make_plan(ci_slurm, JobRequest(nodes=2, ranks_per_node=1)).to_dict()
    # both nodes' rank 0 would pin to CPU 0 of the one host
    assert plan["ranks"][0]["cpus"] == plan["ranks"][1]["cpus"]
    before = sorted(os.sched_getaffinity(0))
    for rank in (0, 1):
        applied, affinity = _apply_in_child(plan, rank)
        assert applied["bound"] is False and affinity == before


def test_a_real_machines_plan_says_nothing_of_hosts(fixture_sites):
    plan = make_plan(load_site("frontier"), JobRequest(nodes=2)).to_dict()
    assert "nodes_per_host" not in plan


def _cpuset_of(cpus: str):
    """A real cpuset cgroup (v1) holding only `cpus`, as Slurm's task/cgroup confines a job on a shared node;
    missing (no root, no cpuset controller): a failure in CI, a skip elsewhere."""
    root = "/sys/fs/cgroup/cpuset"
    if os.geteuid() != 0 or not os.path.exists(os.path.join(root, "cpuset.cpus")):
        message = "a cpuset cgroup needs root and the cgroup v1 cpuset controller"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    path = os.path.join(root, f"hpcdl-test-{os.getpid()}")
    os.mkdir(path)
    with open(os.path.join(root, "cpuset.mems")) as mems, open(os.path.join(path, "cpuset.mems"), "w") as out:
        out.write(mems.read())
    with open(os.path.join(path, "cpuset.cpus"), "w") as out:
        out.write(cpus)
    return path


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_a_rank_whose_planned_cpus_its_job_was_not_given_keeps_the_launchers(ci_slurm):
    # on a node shared with other jobs (defaults.exclusive: false) Slurm may give a job other cores than the
    # plan's first ones, and its cgroup holds only those: the kernel refuses an affinity outside them
    # (sched_setaffinity(2), EINVAL), which must not stop the rank
    plan = make_plan(ci_slurm, JobRequest(nodes=1, ranks_per_node=2)).to_dict()
    assert list(plan["ranks"][0]["cpus"]) == [0]
    cpuset = _cpuset_of("1")
    try:
        code = ("import json, os, sys; from hpcdl.train.binding import apply_plan; from hpcdl.train.ranks import RankInfo; "
                "plan = json.loads(sys.stdin.read()); applied = apply_plan(plan, RankInfo(0, 2, 0, 'srun')); "
                "print(json.dumps([applied, sorted(os.sched_getaffinity(0))]))")
        proc = subprocess.run(["sh", "-c", f'echo $$ > {cpuset}/tasks && exec "$0" -c "$1"', sys.executable, code],
                              input=json.dumps(plan), capture_output=True, text=True, env={**os.environ, **plan["env"]})
    finally:
        os.rmdir(cpuset)
    assert proc.returncode == 0, proc.stderr
    applied, affinity = json.loads(proc.stdout)
    assert applied["bound"] is False and affinity == [1]
