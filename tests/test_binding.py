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


def _sysfs(root, gpus: dict[str, str], cpus: int, siblings) -> None:
    """A sysfs tree as Linux writes it: PCI devices (class, vendor, local_cpulist) and each CPU's thread siblings."""
    for address, (cls, vendor, local) in gpus.items():
        device = root / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        (device / "class").write_text(cls + "\n")
        (device / "vendor").write_text(vendor + "\n")
        (device / "local_cpulist").write_text(local + "\n")
    for cpu in range(cpus):
        topology = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(siblings(cpu) + "\n")


def _near_plan(gpus_per_rank, cores: int) -> dict:
    ranks = [dict(rank=i, node=0, local_rank=i, socket=0, cores=list(range(cores)), cpus=[], gpus=list(g), nic=None,
                  omp_num_threads=cores, env={}) for i, g in enumerate(gpus_per_rank)]
    return dict(ranks=ranks, env={}, nodes=1, ranks_per_node=len(ranks), world_size=len(ranks), rank_cpus="gpu-local")


def test_a_rank_finds_its_share_of_the_cpus_its_gpus_node_reports_near_it(tmp_path):
    """Two sockets of four cores, two threads each (CPU n and n + 8), whose GPUs 0 and 1 hang off socket 1, against
    the order a profile would assume: each rank takes its plan's count of cores from those near its GPU, in
    local-rank order among the ranks whose GPUs report the same CPUs, whole cores, within the CPUs it may use;
    the BMC's display controller (ASPEED, 0x1a03) and an NVSwitch (a bridge) are no GPUs, and a job holding GPUs 2
    and 3 (SLURM_JOB_GPUS, node-wide ids) finds its first GPU's CPUs on socket 0."""
    from hpcdl.train.binding import gpu_local_cpus, job_gpus, node_gpus

    socket0, socket1 = "0-3,8-11", "4-7,12-15"
    _sysfs(tmp_path, {"0000:02:00.0": ("0x030000", "0x1a03", "0-15"), "0000:07:00.0": ("0x030200", "0x10de", socket1),
                      "0000:0b:00.0": ("0x030200", "0x10de", socket1), "0000:44:00.0": ("0x068000", "0x10de", "0-15"),
                      "0000:48:00.0": ("0x030200", "0x10de", socket0), "0000:4c:00.0": ("0x030200", "0x10de", socket0)},
           16, lambda c: f"{c % 8},{c % 8 + 8}")
    assert [d.name for d in node_gpus(tmp_path)] == ["0000:07:00.0", "0000:0b:00.0", "0000:48:00.0", "0000:4c:00.0"]
    plan = _near_plan([[0], [1], [2], [3]], 2)
    every = set(range(16))
    found = [gpu_local_cpus(plan, r, every, tmp_path)[0] for r in plan["ranks"]]
    assert found == [{4, 5, 12, 13}, {6, 7, 14, 15}, {0, 1, 8, 9}, {2, 3, 10, 11}]
    # tasks that may not use core 4 (both its threads): three cores near GPUs 0 and 1, too few for two each, are
    # split evenly, one each; so are more cores asked than lie near the GPUs
    assert [gpu_local_cpus(plan, r, every - {4, 12}, tmp_path)[0] for r in plan["ranks"][:2]] == [{5, 13}, {6, 14}]
    assert gpu_local_cpus(_near_plan([[0], [1]], 3), _near_plan([[0], [1]], 3)["ranks"][1], every, tmp_path)[0] == \
        {6, 7, 14, 15}
    # a job holding the node's GPUs 2 and 3: its GPU 0 is the node's GPU 2, on socket 0
    held = job_gpus({"SLURM_JOB_GPUS": "2,3"})
    assert held == [2, 3] and job_gpus({}) is None and job_gpus({"SLURM_JOB_GPUS": "GPU-5f3a"}) is None
    two = _near_plan([[0], [1]], 2)
    assert [gpu_local_cpus(two, r, every, tmp_path, held)[0] for r in two["ranks"]] == [{0, 1, 8, 9}, {2, 3, 10, 11}]
    # no GPU in sysfs (this host): nothing found, the launcher's CPUs kept
    cpus, why = gpu_local_cpus(plan, plan["ranks"][0], every, tmp_path / "none")
    assert cpus == set() and "not among the node's 0 GPUs" in why


def test_ranks_short_of_cores_near_their_gpus_share_the_jobs_cores_near_none(tmp_path):
    """CINECA's Leonardo Booster node as CINECA's `nvidia-smi topo -m` gives it: one Xeon 8358 of 32 cores, every
    A100's CPU Affinity 0-15 ("GPU0 ... 0-15 0 ... GPU3 ... 0-15 0"). Four ranks of 8 cores (the plan's count, the
    job holding all 32) find only 16 near their GPUs: each takes its 4 of them and, since the job's CPUs are known
    (its cgroup's cpuset, the same for every rank), its 4 of the 16 cores near no GPU, so no core of the job idles:
    cores 0-3 and 16-19 for rank 0, the masks a production Booster job writes by hand (SeisSol's
    `--cpu-bind=mask_cpu:000f000f,00f000f0,0f000f00,f000f000`). Where two sockets each hold GPUs, no core is near none
    and nothing is added; without the job's CPUs (each rank seeing only its own task's), nothing is added either."""
    from hpcdl.train.binding import gpu_local_cpus

    _sysfs(tmp_path, {f"0000:{bus}:00.0": ("0x030200", "0x10de", "0-15") for bus in ("1d", "56", "8f", "c7")}, 32, str)
    plan, job = _near_plan([[0], [1], [2], [3]], 8), set(range(32))
    found = [gpu_local_cpus(plan, r, job, tmp_path, top_up=True) for r in plan["ranks"]]
    masks = [sum(1 << cpu for cpu in cpus) for cpus, _ in found]
    assert masks == [0x000f000f, 0x00f000f0, 0x0f000f00, 0xf000f000], [hex(m) for m in masks]
    assert "4 of the 16 cores near it, share 1 of 4, and 4 of the job's cores near no GPU" in found[0][1]
    assert [gpu_local_cpus(plan, r, job, tmp_path)[0] for r in plan["ranks"]][0] == {0, 1, 2, 3}
    two = tmp_path / "two"
    _sysfs(two, {"0000:07:00.0": ("0x030200", "0x10de", "0-3"), "0000:48:00.0": ("0x030200", "0x10de", "4-7")}, 8, str)
    pair = _near_plan([[0], [0], [1], [1]], 4)
    assert [gpu_local_cpus(pair, r, set(range(8)), two, top_up=True)[0] for r in pair["ranks"]] == [
        {0, 1}, {2, 3}, {4, 5}, {6, 7}]


def _nvidia_procfs(root, uuids: dict[str, str]) -> None:
    """The NVIDIA driver's /proc/driver/nvidia/gpus/<PCI address>/information under `root`, as the driver writes it
    (its Model, IRQ, GPU UUID, ..., Bus Location lines, a tab after each key's colon)."""
    for address, uuid in uuids.items():
        folder = root / "driver" / "nvidia" / "gpus" / address
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: \t\t NVIDIA L40S\nIRQ:   \t\t 150\nGPU UUID: \t {uuid}\nVideo BIOS: \t 95.02.3c.00.02\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {address}\n"
            "Device Minor: \t 0\nGPU Excluded:\t No\n")


def test_a_rank_finds_the_gpus_its_job_holds_by_the_uuids_pbs_names(tmp_path):
    """A batch system other than Slurm that names a job's GPUs by UUID (Imperial's CX3 under PBS Pro:
    "CUDA_VISIBLE_DEVICES will be set automatically with the UUID of the allocated GPUs", defaults.gpu_ids: uuid):
    each UUID is found by its PCI address in the NVIDIA driver's procfs, so a job holding the node's GPUs 2 and 3
    binds its ranks near those, on socket 0, not near the node's first two; a UUID the driver does not list, or none
    named where the plan says the batch system names them, keeps the launcher's CPUs rather than guess."""
    from hpcdl.train.binding import gpu_local_cpus, job_gpus

    socket0, socket1 = "0-3,8-11", "4-7,12-15"
    sys_root, proc_root = tmp_path / "sys", tmp_path / "proc"
    _sysfs(sys_root, {"0000:07:00.0": ("0x030200", "0x10de", socket1), "0000:0b:00.0": ("0x030200", "0x10de", socket1),
                      "0000:48:00.0": ("0x030200", "0x10de", socket0), "0000:4c:00.0": ("0x030200", "0x10de", socket0)},
           16, lambda c: f"{c % 8},{c % 8 + 8}")
    _nvidia_procfs(proc_root, {"0000:07:00.0": "GPU-0a1b", "0000:0b:00.0": "GPU-1c2d", "0000:48:00.0": "GPU-2e3f",
                               "0000:4c:00.0": "GPU-3a4b"})
    held = job_gpus({"CUDA_VISIBLE_DEVICES": "GPU-2e3f,GPU-3a4b"}, sys_root, proc_root, by_uuid=True)
    assert held == [2, 3]
    two, every = _near_plan([[0], [1]], 2), set(range(16))
    assert [gpu_local_cpus(two, r, every, sys_root, held)[0] for r in two["ranks"]] == [{0, 1, 8, 9}, {2, 3, 10, 11}]
    # Slurm's own ids come first; a UUID the driver does not list, or none named where the plan says PBS names them
    assert job_gpus({"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "GPU-2e3f"}, sys_root, proc_root) == [1]
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "GPU-2e3f,GPU-ffff"}, sys_root, proc_root) == []
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}, sys_root, proc_root, by_uuid=True) == []
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}, sys_root, proc_root) is None
    cpus, why = gpu_local_cpus(two, two["ranks"][0], every, sys_root, [])
    assert cpus == set() and "the launcher's CPUs kept" in why and "gpu_ids" in why


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_a_rank_binds_itself_to_the_cpus_near_its_gpu_not_to_the_plans_order(tmp_path):
    """A real process on this host, its sysfs written with GPU 0 near CPU 1 and GPU 1 near CPU 0: rank 0 runs on
    CPU 1 and rank 1 on CPU 0, which the plan's order of cores would have had the other way; with this host's own
    sysfs, which has no GPU, it keeps its CPUs."""
    _sysfs(tmp_path, {"0000:07:00.0": ("0x030200", "0x10de", "1"), "0000:0b:00.0": ("0x030200", "0x10de", "0")},
           2, str)
    plan = _near_plan([[0], [1]], 1)
    before = sorted(os.sched_getaffinity(0))
    for rank, want, root in ((0, [1], tmp_path), (1, [0], tmp_path), (0, before, "/sys")):
        code = ("import json, os, sys; from pathlib import Path; from hpcdl.train.binding import apply_plan; "
                "from hpcdl.train.ranks import RankInfo; plan = json.loads(sys.stdin.read()); "
                f"applied = apply_plan(plan, RankInfo({rank}, 2, {rank}, 'srun'), Path({str(root)!r})); "
                "print(json.dumps([applied, sorted(os.sched_getaffinity(0))]))")
        proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(plan), capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
        assert proc.returncode == 0, proc.stderr
        applied, affinity = json.loads(proc.stdout)
        assert affinity == want, (rank, applied)
        assert applied["bound"] is (root == tmp_path) and "near_gpu" in applied
