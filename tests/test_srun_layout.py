"""launch.srun_layout: header: a bare srun that takes its layout from the #SBATCH header, as many centres write it
(NSC Berzelius, Princeton Della, NREL Kestrel, UQ RCC Bunya, Mahidol MAI HPC: `srun python ...`).

The line restates nothing the header asks (tasks, CPUs per task, GPUs), and the job keeps each task's CPUs on
Slurm 22.05 and later: "Beginning with 22.05, srun will not inherit the --cpus-per-task value requested by salloc
or sbatch. It must be requested again with the call to srun or set with the SRUN_CPUS_PER_TASK environment
variable if desired for the task(s)" (sbatch(1), Slurm 22.05), so the script exports
SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK, as EPCC (ARCHER2) and NHR@FAU (Alex) publish it. The real slurmd 22.05
here shows why: a posed 2 x 4-core node, a job of `--ntasks-per-node=4 --cpus-per-task=2` and a bare `srun`
binds each task to its 2 CPUs only with the export; without it the step has one CPU a task and task/affinity's auto
binding leaves the tasks unbound (or, measured with 2 tasks of -c2 on a whole node, binds each to a socket's 4).
"""

from __future__ import annotations


import pytest
import yaml

from hpcdl.plan import JobRequest, make_plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites.registry import load_site
from hpcdl.sites.schema import Site

POSED = """
name: bare-srun
description: a two-socket node of 2 x 4 cores whose centre writes a bare srun under its header
scheduler: slurm
launcher: srun
runtime: none
mpi: openmpi
node_kinds:
  cpu:
    description: 2 x 4 cores
    count: 2
    cpu_model: posed
    sockets: 2
    cores_per_socket: 4
    threads_per_core: 1
    memory_gb: 2
launch:
  srun_layout: header
  srun_mpi: default
  cpu_bind_default: unstated
environment: {kind: venv, activate: /opt/venv, prefer: true}
"""

EXPORT = "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"
# the options a header gives the step
LAYOUT = ("--ntasks", "--cpus-per-task", "--threads-per-core", "--hint", "--gres", "--gpus")


def _site(text: str = POSED, **launch) -> Site:
    data = yaml.safe_load(text)
    data["launch"].update(launch)
    return Site.model_validate(data)


def _job(site: Site, ranks_per_node: int) -> tuple[list[str], list[str], list[str]]:
    """The rendered job's #SBATCH lines, its lines that set SRUN_*, and its launcher argv."""
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=ranks_per_node))
    script = render_job_script(site, plan, {}, JobOptions())
    lines = script.splitlines()
    header = [line for line in lines if line.startswith("#SBATCH ") and not line.startswith("#SBATCH --output")]
    exports = [line for line in lines if line.startswith("export SRUN_")]
    return header, exports, list(plan.launcher_argv)


def test_a_bare_srun_restates_nothing_the_header_asks():
    header, exports, argv = _job(_site(), 4)
    assert "#SBATCH --ntasks-per-node=4" in header and "#SBATCH --cpus-per-task=2" in header
    assert argv == ["srun"], argv
    assert exports == [EXPORT]
    # restate (the default) repeats the header on srun and needs no export
    header, exports, argv = _job(_site(srun_layout="restate"), 4)
    assert {"--ntasks-per-node=4", "--cpus-per-task=2"} <= set(argv) and exports == []


@pytest.mark.parametrize("site", ["berzelius", "della-gpu", "kestrel-gpu", "bunya-gpu", "mai-hpc", "jean-zay"])
def test_the_centres_that_write_a_bare_srun_get_one(site):
    """Each of these centres publishes its line as `srun <program>` (Mahidol's as `srun -N 2 <program>`; the cases in
    tests/published/ cite them): the line names none of the header's tasks, CPUs, threads or GPUs."""
    profile = load_site(site)
    plan = make_plan(profile, JobRequest(nodes=1))
    assert not [w for w in plan.launcher_argv if w.startswith(LAYOUT)], plan.launcher_argv
    script = render_job_script(profile, plan, {}, JobOptions(account="p"))
    assert EXPORT in script.splitlines()
    assert "export CUDA_VISIBLE_DEVICES" not in script and all(len(r.gpus) == 1 for r in plan.ranks)


@pytest.mark.parametrize(("change", "words"), [
    ({"launcher": "mpirun", "launch": {"srun_layout": "header"}}, "the launcher is mpirun"),
    ({"defaults": {"batch_request": "nodes"}}, "defaults.batch_request is nodes"),
    ({"defaults": {"gpu_request": "gpus-per-task"}, "launch": {"srun_layout": "header", "gpu_visibility": "node"}},
     "gpu_request: gpus-per-task gives each task its own GPUs"),
])
def test_contradictions_are_refused_naming_the_field(change, words):
    data = yaml.safe_load(POSED)
    data.update(change)
    with pytest.raises(ValueError) as refused:
        Site.model_validate(data)
    message = str(refused.value)
    assert "launch.srun_layout: header" in message and words in message, message


def test_a_gpu_node_whose_tasks_see_only_their_own_gpus_is_refused():
    data = yaml.safe_load(POSED)
    data["node_kinds"]["cpu"]["gpus"] = [{"model": "posed", "socket": 0}, {"model": "posed", "socket": 1}]
    with pytest.raises(ValueError, match=r"launch\.srun_layout: header .* set gpu_visibility: node"):
        Site.model_validate(data)
    data["launch"]["gpu_visibility"] = "node"
    Site.model_validate(data)
    # or srun binds each task the GPUs beside its cores (NCSA Delta's --gpu-bind=closest)
    data["launch"].update(gpu_visibility="per-rank", gpu_bind="closest", cpu_bind_default=None)
    Site.model_validate(data)


def test_a_header_asking_each_tasks_gpus_reaches_a_bare_srun():
    """WarpX's Great Lakes V100 job: '#SBATCH --ntasks-per-node=2', '--cpus-per-task=20', '--gpus-per-task=v100:1',
    'export SRUN_CPUS_PER_TASK=20', 'srun --cpu-bind=cores ${EXE}': the header asks each task's GPU and the bare srun
    takes it from SLURM_GPUS_PER_TASK, each task bound to its own GPU by the header's '--gpu-bind=single:1' (per-rank,
    no gpu_visibility: node needed); without that header binding the line binds the plan's map itself (a real slurmd
    22.05 binds no GPU to a bare srun's tasks by the inherited --gpus-per-task alone)."""
    data = yaml.safe_load(POSED)
    data["node_kinds"]["cpu"]["gpus"] = [{"model": "posed", "socket": 0}, {"model": "posed", "socket": 1}]
    data["node_kinds"]["cpu"]["defaults"] = {"gpu_type": "v100"}
    data["defaults"] = {"gpu_request": "gpus-per-task", "directives": ["--gpu-bind=single:1"]}
    data["launch"]["cpu_bind_default"] = None
    site = Site.model_validate(data)
    header, exports, argv = _job(site, 2)
    assert {"#SBATCH --ntasks-per-node=2", "#SBATCH --cpus-per-task=4", "#SBATCH --gpus-per-task=v100:1"} <= set(header)
    assert argv == ["srun", "--cpu-bind=cores"], argv
    assert exports == [EXPORT]
    data["defaults"] = {"gpu_request": "gpus-per-task"}
    assert _job(Site.model_validate(data), 2)[2] == ["srun", "--cpu-bind=cores", "--gpu-bind=map_gpu:0,1"]


def _slurmd_masks(cluster, script_lines: list[str], tmp_path) -> list[int] | None:
    """Submit the job, wait for it, and return the CPU masks slurmd bound its step's tasks to (None: unbound)."""
    log = cluster.root / "log" / "slurmd-n1.log"
    marker = "_lllp_generate_cpu_bind jobid"
    seen = log.read_text(errors="replace").count(marker)
    job = tmp_path / "job.sh"
    job.write_text("\n".join(["#!/bin/bash", *script_lines, ""]))
    done = cluster.sbatch("--wait", "--output=/dev/null", job, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    lines = [line for line in log.read_text(errors="replace").splitlines() if marker in line]
    if len(lines) == seen:
        return None
    return [int(m, 16) for m in lines[-1].rsplit(" ", 1)[1].split(",")]


# an SMT node whose Slurm counts threads, asked one thread per core by the header's --hint=nomultithread (IDRIS)
SMT_HINT = POSED.replace("    threads_per_core: 1\n", "    threads_per_core: 2\n    scheduler_cpus_per_core: 1\n").replace(
    "  cpu_bind_default: unstated\n", "  cpu_bind_default: auto\n  threads_request: hint\n")


@pytest.mark.slurm
@pytest.mark.parametrize("profile", [POSED, SMT_HINT], ids=["cores", "smt-hint"])
def test_a_bare_srun_gives_each_task_the_headers_cpus_only_with_the_export(slurm_clusters, tmp_path, profile):
    """On the real slurmd 22.05 posing the node (task/affinity): the rendered header and bare srun bind each of the
    4 tasks to its own 2 cores, the plan's (on the SMT node one thread of each, the header's --hint reaching srun as
    SLURM_HINT); the same job without the export does not (the tasks are left unbound)."""
    from slurm_cluster import NodeShape

    site = _site(profile)
    threads = site.node_kinds["cpu"].threads_per_core
    header, exports, argv = _job(site, 4)
    assert not [w for w in argv if w.startswith(("--hint", "--threads-per-core", "--cpus-per-task"))], argv
    shape = NodeShape(sockets=2, cores_per_socket=4, threads_per_core=threads, cpus_per_core=threads, memory_mb=2048)
    cluster = slurm_clusters.ensure(1, shape, task_layout=True)
    # the tasks on CPUs this host lacks cannot start: the layout slurmd computes is what is judged
    step = " ".join([*argv, "true"])
    masks = _slurmd_masks(cluster, [*header, *exports, step], tmp_path)
    assert masks is not None, "slurmd bound no task"
    # hwloc's synthetic node numbers a core's hardware threads together: CPU t of core c is c * threads + t
    bound = [sorted(cpu // threads for cpu in range(8 * threads) if m >> cpu & 1) for m in masks]
    planned = [list(r.cores) for r in make_plan(site, JobRequest(nodes=1, ranks_per_node=4)).local_ranks()]
    if site.launch.slurm_binds_tasks:
        assert bound == planned, (bound, planned, argv)
    else:  # the ranks bind themselves to their own (unstated): Slurm's layout gives each task 2 cores of its own
        assert sorted(bound) == planned, (bound, planned, argv)
    assert all(cpu % threads == 0 for m in masks for cpu in range(8 * threads) if m >> cpu & 1), masks  # one a core
    without = _slurmd_masks(cluster, [*header, step], tmp_path)
    assert without is None or [bin(m).count("1") for m in without] != [2, 2, 2, 2], without


def test_a_bare_srun_that_names_its_nodes_names_them_alone():
    """launch.srun_restates: the layout options the centre's otherwise bare srun names all the same (Mahidol MAI HPC:
    'srun -N 2 python3 train_ddp_2node.py'); refused where the line restates every one anyway."""
    site = _site(srun_restates=["nodes"])
    assert _job(site, 4)[2] == ["srun", "--nodes=1"]
    assert list(make_plan(load_site("mai-hpc"), JobRequest(nodes=1)).launcher_argv) == ["srun", "--nodes=1"]
    with pytest.raises(ValueError, match=r"launch\.srun_restates: .* set srun_layout: header"):
        _site(srun_restates=["nodes"], srun_layout="restate")


def test_a_bare_srun_that_names_its_tasks_per_node_names_them_alone():
    """launch.srun_restates: ntasks-per-node, where the centre's otherwise bare srun still names the tasks of each node
    (the Kempner Institute's DDP job on Harvard FASRC's Cannon: 'srun --ntasks-per-node=$SLURM_NTASKS_PER_NODE python
    -u mlp_ddp.py'): the line names --ntasks-per-node, the plan's, and nothing else of the layout."""
    site = _site(srun_restates=["ntasks-per-node"])
    assert _job(site, 4)[2] == ["srun", "--ntasks-per-node=4"]
    assert _job(_site(srun_restates=["nodes", "ntasks-per-node"]), 2)[2] == ["srun", "--nodes=1", "--ntasks-per-node=2"]
    argv = list(make_plan(load_site("cannon"), JobRequest(nodes=2, ranks_per_node=1, node_kind="a100")).launcher_argv)
    assert argv == ["srun", "--ntasks-per-node=1"]


def test_a_bare_srun_that_names_its_cpus_per_task_names_them_and_exports_none():
    """launch.srun_restates: cpus-per-task, where the centre's otherwise bare srun still names each task's CPUs (MSU
    ICER's example scripts: 'srun -c $SLURM_CPUS_PER_TASK my_hybrid_program', 'users must specify --cpus-per-task at
    the top of their job file and when calling srun'): the line names the header's --cpus-per-task and nothing else
    of the layout, and the job exports no SRUN_CPUS_PER_TASK, srun being told the CPUs on its own line."""
    header, exports, argv = _job(_site(srun_restates=["cpus-per-task"]), 2)
    assert "#SBATCH --cpus-per-task=4" in header
    assert argv == ["srun", "--cpus-per-task=4"]
    assert exports == []
    assert _job(_site(srun_restates=["nodes", "cpus-per-task"]), 4)[2] == ["srun", "--nodes=1", "--cpus-per-task=2"]
    plan = make_plan(load_site("msu-icer-gpu"), JobRequest(nodes=2))
    assert list(plan.launcher_argv)[:2] == ["srun", "--cpus-per-task=48"]


def test_a_bare_srun_under_gpus_per_task_binds_the_plans_gpus():
    """A bare srun (launch.srun_layout: header) under a header of --gpus-per-task, whose header says no --gpu-bind
    (MSU ICER: '#SBATCH --ntasks-per-node=2 #SBATCH --gpus-per-task=v100:1', then 'srun python ...'): a real slurmd
    22.05 gives such a step's tasks no GPU of their own (tests/test_slurm_shapes.py, msu-icer-gpu: no
    CUDA_VISIBLE_DEVICES), so the line binds the plan's map; a header that says --gpu-bind (WarpX's Great Lakes job,
    '#SBATCH --gpu-bind=single:1') binds them and the line names none, as its centre's does."""
    argv = list(make_plan(load_site("msu-icer-gpu"), JobRequest(nodes=2)).launcher_argv)
    assert argv == ["srun", "--cpus-per-task=48", "--gpu-bind=map_gpu:0,1,2,3"]
    argv = list(make_plan(load_site("greatlakes-gpu"), JobRequest(nodes=2)).launcher_argv)
    assert not any(word.startswith("--gpu-bind") for word in argv), argv
