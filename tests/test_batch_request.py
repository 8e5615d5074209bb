"""defaults.batch_request: nodes, a batch header that asks nodes only and leaves tasks, CPUs and GPUs to srun.

Pawsey's Setonix GPU nodes are asked in "allocation-packs" (one 8-core chiplet and its GCD) by a CLI filter:
"the request of resources only needs the number of nodes (-N) and the number of allocation-packs per node
(--gres=gpu:number)", "users should not use --ntasks, --cpus-per-task, --mem, etc. in the request headers",
with --exclusive "there is no need for the use of --gres=gpu:number during allocation and, indeed, its use is
not recommended", and srun names every resource itself: `srun -N 1 -n 8 -c 8 --gres=gpu:8 --gpus-per-task=1
--gpu-bind=closest`.
"""

from __future__ import annotations

import pytest

from conftest import RECIPES
from hpcdl.launchers import launcher_for
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site
from hpcdl.train.recipe import load_recipe


# Alpine's own line is Open MPI's count alone (launch.mpirun_layout: count, rank_cpus: gpu-local); these tests judge
# hpcdl's restated line under a header of cores
RESTATED = {"mpirun_layout": "restate", "rank_cpus": "plan"}


def _site(base: str, launch: dict | None = None, **defaults) -> Site:
    data = load_site(base).model_dump(exclude_unset=True)
    data["defaults"] = {**data.get("defaults", {}), **defaults}
    data["launch"] = {**data.get("launch", {}), **(launch or {})}
    if defaults.get("batch_request", "tasks") != "tasks":
        # a header that does not ask the ranks' tasks: srun says them (a bare srun, srun_layout: header, is refused)
        data["launch"] = {**data.get("launch", {}), "srun_layout": "restate"}
    return Site.model_validate(data)


def _sbatch(site: Site, **options) -> list[str]:
    plan = make_plan(site, JobRequest(nodes=2))
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    text = render_job_script(site, plan, recipe, JobOptions(name="r", account="p1", **options))
    return [line[len("#SBATCH "):] for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_a_whole_node_job_asks_its_nodes_only_and_srun_says_the_rest():
    site = _site("alps-gh200", batch_request="nodes", exclusive=True)
    header = _sbatch(site)
    assert "--nodes=2" in header and "--exclusive" in header
    for option in ("--ntasks-per-node", "--cpus-per-task", "--threads-per-core", "--gres", "--gpus-per-task",
                   "--gpus-per-node"):
        assert not any(d.startswith(option) for d in header), (option, header)
    argv = launcher_for("srun").command(make_plan(site, JobRequest(nodes=2)), site)
    assert argv[1:5] == ["--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=72"]
    # the step's GPUs per node, then each task's: the header named none
    assert argv.index("--gres=gpu:4") == argv.index("--gpus-per-task=1") - 1


def test_a_shared_job_asks_its_gpus_per_node_in_the_header():
    header = _sbatch(_site("alps-gh200", batch_request="nodes", exclusive=False))
    assert "--gres=gpu:4" in header and not any(d.startswith("--ntasks-per-node") for d in header)
    # with the GRES type the centre names, as the srun line asks it (Slurm's [type:]number)
    typed = load_site("alps-gh200").model_dump(exclude_unset=True)
    typed["defaults"] = {**typed.get("defaults", {}), "batch_request": "nodes", "exclusive": False}
    typed["node_kinds"]["gh200"].setdefault("defaults", {})["gpu_type"] = "gh200"
    site = Site.model_validate(typed)
    assert "--gres=gpu:gh200:4" in _sbatch(site)
    assert "--gres=gpu:gh200:4" in make_plan(site, JobRequest(nodes=2)).launcher_argv


def test_the_header_asks_tasks_cpus_and_gpus_by_default():
    header = _sbatch(load_site("alps-gh200"))
    assert {"--ntasks-per-node=4", "--cpus-per-task=72", "--gpus-per-task=1"} <= set(header)


def test_nodes_only_needs_slurm_and_srun():
    data = load_site("polaris").model_dump(exclude_unset=True)
    data["defaults"] = {**data.get("defaults", {}), "batch_request": "nodes"}
    with pytest.raises(ValueError, match="defaults.batch_request: nodes leaves tasks, CPUs and GPUs to srun"):
        Site.model_validate(data)


# defaults.batch_request: cores. EPCC's Tursa guide: "You should always ask for the full node resources in your sbatch
# options with tasks-per-node equal to the number of CPU cores on the node and cpus-per-task equal to 1 and then specify
# the process and thread pinning using srun options. You cannot specify process/thread pinning options in sbatch options
# - if you try to do so you will run into problems when launching the parallel executable using srun"; its GPU job:
# "#SBATCH --ntasks-per-node=32", "#SBATCH --cpus-per-task=1", "#SBATCH --gres=gpu:4", then "srun --nodes=4
# --ntasks-per-node=4 --cpus-per-task=8 --hint=nomultithread --distribution=block:block gpu_launch.sh ..."
# (https://github.com/EPCCed/dirac-docs/blob/00273247bee0ec5a2fbc5c24b179b6d63b9c46f0/docs/tursa-user-guide/scheduler.md)


def test_a_header_of_every_core_asks_one_cpu_tasks_and_no_pinning_and_srun_says_the_ranks():
    # IDRIS's V100 node: 2 x 20 cores with two threads each, one thread per core asked as --hint=nomultithread
    site = _site("jean-zay", batch_request="cores", gpu_request="gres")
    header = _sbatch(site)
    assert "--ntasks-per-node=40" in header and "--cpus-per-task=1" in header and "--gres=gpu:4" in header
    assert "--exclusive" in header
    for option in ("--hint", "--threads-per-core", "--distribution", "--cpu-bind", "--ntasks-per-socket"):
        assert not any(d.startswith(option) for d in header), (option, header)
    argv = make_plan(site, JobRequest(nodes=2)).launcher_argv
    assert list(argv[1:6]) == ["--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=10",
                               "--hint=nomultithread"]
    # the job's total, where the profile names it, is every core of every node
    assert "--ntasks=80" in _sbatch(_site("jean-zay", batch_request="cores", total_tasks=True))


def test_a_header_of_every_core_leaves_out_the_reserved_ones():
    # Frontier keeps 8 of 64 cores for the system (low-noise mode): the header asks the 56 a job can have
    assert "--ntasks-per-node=56" in _sbatch(_site("frontier", batch_request="cores"))


@pytest.mark.parametrize("defaults,message", [
    ({"batch_request": "cores", "gpu_request": "gpus-per-task"}, "defaults.batch_request: cores asks a task of one CPU"),
])
def test_a_header_of_every_core_beside_a_setting_that_contradicts_it_is_refused(defaults, message):
    with pytest.raises(ValueError, match=message):
        _site("jean-zay", **defaults)


def test_a_job_that_shares_its_nodes_asks_its_own_cores_as_one_cpu_tasks():
    # CU Boulder Alpine ("Examples", https://github.com/ResearchComputing/Documentation/blob/
    # b29ae18dc9ae5338a946ff29d3b5074f43befb7f/docs/clusters/alpine/examples.md): "To run a 50-core job for 2 hours on
    # a single Alpine NVIDIA GPU node ..., using 2 GPUs: #SBATCH --nodes=1 #SBATCH --ntasks=50 #SBATCH --gres=gpu:2":
    # on a shared node the header asks the ranks' cores, not the node's, each a task of one CPU
    site = _site("jean-zay", batch_request="cores", gpu_request="gres", exclusive=False)
    header = _sbatch(site)
    assert "--ntasks-per-node=40" in header and "--cpus-per-task=1" in header and "--exclusive" not in header
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=2))
    text = render_job_script(site, plan, {}, JobOptions(name="r", account="p1"))
    assert "#SBATCH --ntasks-per-node=20" in text.splitlines() and "#SBATCH --gres=gpu:2" in text.splitlines()
    # the same for a job told to share the nodes of a whole-node profile
    assert "--ntasks-per-node=40" in _sbatch(_site("jean-zay", batch_request="cores"), exclusive=False)


def test_a_header_of_cores_under_open_mpis_mpirun_gives_it_the_ranks_cores_as_slots():
    # Alpine's MPI jobs start "mpirun -np 4" under a header of one-CPU tasks: Open MPI takes each node's slots from
    # them, and hpcdl's line names the ranks per node and their cores (--map-by ppr:R:node:PE=C), which they fill
    site = _site("alpine-gpu", RESTATED, batch_request="cores", total_tasks=True)
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=2))
    lines = render_job_script(site, plan, {}, JobOptions(name="r")).splitlines()
    assert "#SBATCH --ntasks=32" in lines and "#SBATCH --ntasks-per-node=32" in lines
    assert not any(line.startswith("#SBATCH --cpus-per-task=16") for line in lines)
    assert "ppr:2:node:PE=16" in plan.launcher_argv
    data = load_site("alpine-gpu").model_dump(exclude_unset=True)
    data["mpi"] = "mpich"
    data["mpi_version"] = None
    data["launch"] = {**data.get("launch", {}), **RESTATED}
    with pytest.raises(ValueError, match=r"defaults.batch_request: cores leaves the ranks' tasks and CPUs to srun or "
                                         r"to Open MPI's mpirun"):
        Site.model_validate({**data, "defaults": {**data["defaults"], "batch_request": "cores"}})


def test_under_a_header_of_cores_a_bare_np_would_fill_the_first_node_and_the_ranks_per_node_spread_them():
    """The installed Open MPI under a posed Slurm allocation of two nodes of 32 one-CPU tasks each (Alpine's header
    of cores, SLURM_TASKS_PER_NODE 32(x2)): CURC's bare `mpirun -np 4` maps all four ranks on the first node, which
    has the slots; hpcdl's --map-by ppr:2:node puts two on each (the posed hosts have no topology to bind on, so the
    line's PE= and --bind-to are left out here)."""
    from conftest import require_tool
    from real_launchers import mapped_nodes, open_mpi_map, posed_slurm_allocation
    mpirun = require_tool("mpirun")
    site = _site("alpine-gpu", RESTATED, batch_request="cores")
    argv = list(make_plan(site, JobRequest(nodes=2, ranks_per_node=2)).launcher_argv)
    mapping = argv[argv.index("--map-by") + 1]
    assert argv[1:3] == ["-np", "4"] and mapping == "ppr:2:node:PE=16"
    allocation = posed_slurm_allocation("32(x2)")

    def mapped(*words: str) -> list[tuple[str, str]]:
        done = open_mpi_map(mpirun, ["mpirun", "-np", "4", *words], allocation)
        return [(node, procs) for node, _, procs in mapped_nodes(done.stdout + done.stderr)]

    assert mapped() == [("n1", "4")]
    assert mapped("--map-by", mapping.split(":PE=")[0]) == [("n1", "2"), ("n2", "2")]
