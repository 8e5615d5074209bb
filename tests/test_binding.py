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


def test_the_cpuset_a_batch_system_confines_a_job_to_is_read_from_its_cgroup(tmp_path):
    # cgroup v1 (a cpuset hierarchy of its own) and v2 (one unified tree), as PBS's cgroup hook and Slurm's
    # task/cgroup leave them; None where no cpuset can be read
    from hpcdl.train.binding import job_cpuset

    (tmp_path / "v1" / "cpuset" / "pbs_jobs.service" / "jobid" / "42").mkdir(parents=True)
    (tmp_path / "v1" / "cpuset" / "pbs_jobs.service" / "jobid" / "42" / "cpuset.effective_cpus").write_text("8-15,40\n")
    (tmp_path / "v1.cgroup").write_text("4:memory:/pbs_jobs.service/jobid/42\n3:cpuset:/pbs_jobs.service/jobid/42\n0::/\n")
    assert job_cpuset(tmp_path / "v1.cgroup", tmp_path / "v1") == {*range(8, 16), 40}
    (tmp_path / "v2" / "system.slice" / "slurmstepd.scope" / "job_7").mkdir(parents=True)
    (tmp_path / "v2" / "system.slice" / "slurmstepd.scope" / "job_7" / "cpuset.cpus.effective").write_text("0-3\n")
    (tmp_path / "v2.cgroup").write_text("0::/system.slice/slurmstepd.scope/job_7\n")
    assert job_cpuset(tmp_path / "v2.cgroup", tmp_path / "v2") == {0, 1, 2, 3}
    assert job_cpuset(tmp_path / "none.cgroup", tmp_path / "v2") is None
    # this host's own: it holds at least the CPUs this process may run on
    held = job_cpuset()
    assert held is None or set(os.sched_getaffinity(0)) <= held


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_a_rank_whose_planned_cpus_its_job_was_not_given_keeps_the_launchers(ci_slurm):
    # on a node shared with other jobs (defaults.exclusive: false) Slurm may give a job other cores than the
    # plan's first ones, and its cgroup holds only those: the kernel refuses an affinity outside them
    # (sched_setaffinity(2), EINVAL), which must not stop the rank
    plan = make_plan(ci_slurm, JobRequest(nodes=1, ranks_per_node=2)).to_dict()
    assert list(plan["ranks"][0]["cpus"]) == [0]
    applied, affinity = _bind_in_cpuset(plan, (0, 2, 0, "srun"), "1")
    assert applied["bound"] is False and affinity == [1]


def _bind_in_cpuset(plan: dict, rank, cpus: str) -> tuple[dict, list[int]]:
    """What apply_plan does for `rank` (a RankInfo's arguments) in a process a real cpuset cgroup holding `cpus`
    confines: what it applied, and the CPUs it then runs on."""
    cpuset = _cpuset_of(cpus)
    try:
        code = ("import json, os, sys; from hpcdl.train.binding import apply_plan; from hpcdl.train.ranks import RankInfo; "
                f"plan = json.loads(sys.stdin.read()); applied = apply_plan(plan, RankInfo{tuple(rank)!r}); "
                "print(json.dumps([applied, sorted(os.sched_getaffinity(0))]))")
        proc = subprocess.run(["sh", "-c", f'echo $$ > {cpuset}/tasks && exec "$0" -c "$1"', sys.executable, code],
                              input=json.dumps(plan), capture_output=True, text=True, env={**os.environ, **plan["env"]})
    finally:
        os.rmdir(cpuset)
    assert proc.returncode == 0, proc.stderr
    return tuple(json.loads(proc.stdout))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_a_rank_whose_planned_cpus_its_job_holds_only_in_part_keeps_the_launchers_mask(ci_slurm):
    # Imperial CX3: "Our systems utilises Cgroups, meaning you will only be able to see the resource that is
    # allocated to your job"; the kernel cuts an affinity down to the cpuset's CPUs without a word, so a rank
    # planned on CPUs 0-1 whose job holds CPU 1 alone would run on one of its two CPUs, bound where the batch
    # system did not place it: it keeps the mask the launcher drew from the CPUs the job holds
    plan = make_plan(ci_slurm, JobRequest(nodes=1, ranks_per_node=1)).to_dict()
    assert len(plan["ranks"][0]["cpus"]) > 1 and 1 in plan["ranks"][0]["cpus"]
    applied, affinity = _bind_in_cpuset(plan, (0, 1, 0, "srun"), "1")
    assert applied["bound"] is False and affinity == [1], (applied, affinity)
