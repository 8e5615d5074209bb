"""launch.mpirun_layout: count, an Open MPI line that names the rank count alone under a Slurm header of tasks.

JHU ARCH's Rockfish starts its multi-rank jobs so
(https://github.com/jhu-arch/rockfish-docs/blob/2c6b4cb2924fddbe7aa7df9bb05c3c18255e9a72/4_Slurm/Example_Sbatch.rst):
"#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=8", "#SBATCH --cpus-per-task=6", "ml gcc openmpi", "mpirun -np 8
bin/gmx_mpi mdrun -deffnm options": no --map-by and no --bind-to. Open MPI takes a Slurm node's slots from the header's
tasks (SLURM_TASKS_PER_NODE) and fills them node by node, so local rank i of each node is the plan's; each rank binds
itself to its cores from plan.json. hpcdl wrote its own --map-by ppr:R:node:PE=C --bind-to core beside the count.
"""

from __future__ import annotations


import pytest

from conftest import require_tool
from real_launchers import mapped_nodes, open_mpi_map, posed_slurm_allocation, rank_nodes
from hpcdl.plan import JobRequest, make_plan
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site


def _site(launch: dict | None = None, defaults: dict | None = None, **top) -> Site:
    data = load_site("rockfish-gpu").model_dump(exclude_unset=True)
    data["launch"] = {**data.get("launch", {}), "mpirun_layout": "count", **(launch or {})}
    data["defaults"] = {**data.get("defaults", {}), **(defaults or {})}
    data.update(top)
    return Site.model_validate(data)


def _argv(site: Site, nodes: int = 2) -> list[str]:
    return list(make_plan(site, JobRequest(nodes=nodes)).launcher_argv)


def test_the_line_names_the_count_alone():
    argv = _argv(_site())
    assert argv[:3] == ["mpirun", "-np", "8"], argv
    for option in ("--map-by", "--bind-to", "-N", "--hostfile"):
        assert option not in argv, (option, argv)
    # the variables still travel to the other node's ranks
    assert "MASTER_ADDR" in argv and argv[argv.index("MASTER_ADDR") - 1] == "-x"


def test_the_default_layout_still_restates_the_mapping():
    data = load_site("rockfish-gpu").model_dump(exclude_unset=True)
    data["launch"] = {**data.get("launch", {}), "mpirun_layout": "restate", "rank_cpus": "plan"}
    argv = _argv(Site.model_validate(data))
    assert argv[:7] == ["mpirun", "-np", "8", "--map-by", "ppr:4:node:PE=6", "--bind-to", "core"], argv


def test_open_mpi_fills_each_nodes_slots_in_rank_order():
    """The installed Open MPI under a posed Slurm allocation of two nodes with the header's four tasks each
    (SLURM_TASKS_PER_NODE 4(x2)): the count alone maps ranks 0-3 on the first node and 4-7 on the second, the plan's
    nodes and local ranks."""
    plan = make_plan(_site(), JobRequest(nodes=2))
    done = open_mpi_map(require_tool("mpirun"), list(plan.launcher_argv), posed_slurm_allocation(4, cpus_per_task=6))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert mapped_nodes(out) == [("n1", "4", "4"), ("n2", "4", "4")], out
    assert rank_nodes(out) == {r.rank: f"n{r.node + 1}" for r in plan.ranks}, out


@pytest.mark.parametrize("change,match", [
    ({"launcher": "srun"}, "launch.mpirun_layout: count"),
    ({"defaults": {"batch_request": "nodes"}}, "launch.mpirun_layout: count"),
    ({"launch": {"args": ["--bind-to", "none"]}}, "launch.mpirun_layout: count names no mapping or binding"),
    ({"launch": {"args": ["--map-by", "slot"]}}, "launch.mpirun_layout: count names no mapping or binding"),
])
def test_count_is_refused_where_no_header_gives_the_slots(change, match):
    with pytest.raises(ValueError, match=match):
        _site(**change)


def _display_map(argv: list[str], allocation: dict) -> str:
    """The installed Open MPI's map of the line's ranks under a posed allocation, with --bind-to none: the posed nodes
    have this host's two CPUs, on which Open MPI's default binding refuses four ranks."""
    done = open_mpi_map(require_tool("mpirun"), argv, allocation, bind_none=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_the_count_with_each_nodes_ranks_in_open_mpis_own_option():
    """CSD3's Wilkes-3 template (slurm_submit.wilkes3): 'CMD="mpirun -npernode $mpi_tasks_per_node -np $np
    $application $options"', the count and each node's ranks in Open MPI's -npernode ("On each node, launch this many
    processes", mpirun(1) 4.1), no mapping or binding: launch.ranks_per_node_option beside mpirun_layout: count writes
    the plan's ranks per node there, a one-GPU job's 1, and the installed Open MPI maps four on each posed node."""
    site = _site(launch={"ranks_per_node_option": "-npernode"})
    argv = _argv(site)
    assert argv[:5] == ["mpirun", "-np", "8", "-npernode", "4"], argv
    assert "--map-by" not in argv and "--bind-to" not in argv
    assert _argv(site, nodes=1)[:5] == ["mpirun", "-np", "4", "-npernode", "4"]
    one = list(make_plan(site, JobRequest(nodes=1, ranks_per_node=1)).launcher_argv)
    assert one[:5] == ["mpirun", "-np", "1", "-npernode", "1"], one
    out = _display_map(argv, posed_slurm_allocation(4))
    assert [(n, procs) for n, _, procs in mapped_nodes(out)] == [("n1", "4"), ("n2", "4")]
    # Open MPI takes its variables by -x: a comma-separated list stays an option of a centre's own command
    with pytest.raises(ValueError, match=r"launch\.env_list_option: .*mpirun_layout: command\), but mpirun_layout is count"):
        _site(launch={"env_list_option": "--variablesprefix"})


def test_under_a_header_of_cores_the_count_names_each_nodes_ranks_only_on_several_nodes():
    """CU Boulder Alpine's GPU header asks the job's cores as one-CPU tasks ('#SBATCH --nodes=1 #SBATCH --ntasks=50
    ... #SBATCH --gres=gpu:2') and its line is 'mpirun -np 4': on one node the count alone starts every rank there; on
    two, -np alone would fill the first node's slots (the installed Open MPI, 32(x2) one-CPU slots), so the line names
    each node's ranks, --map-by ppr:R:node, and still no binding: two on each node."""
    site = Site.model_validate({**load_site("alpine-gpu").model_dump(exclude_unset=True),
                                "launch": {"mpirun_layout": "count", "rank_cpus": "gpu-local"}})
    one = list(make_plan(site, JobRequest(nodes=1, ranks_per_node=2)).launcher_argv)
    assert one[:3] == ["mpirun", "-np", "2"] and "--map-by" not in one and "--bind-to" not in one, one
    two = list(make_plan(site, JobRequest(nodes=2, ranks_per_node=2)).launcher_argv)
    assert two[:5] == ["mpirun", "-np", "4", "--map-by", "ppr:2:node"] and "--bind-to" not in two, two
    out = _display_map(two, posed_slurm_allocation(32))
    assert [(n, procs) for n, _, procs in mapped_nodes(out)] == [("n1", "2"), ("n2", "2")]


def _pbs_site(**defaults) -> Site:
    """Imperial's CX3 under PBS Pro, its line Open MPI's count ('mpirun -n 4 python node_name.py', no host file), each
    rank finding its cores near the GPU PBS names by UUID."""
    data = load_site("imperial-cx3").model_dump(exclude_unset=True)
    data["launch"] = {**data.get("launch", {}), "mpirun_layout": "count", "rank_cpus": "gpu-local"}
    data["defaults"] = {**data.get("defaults", {}), "gpu_ids": "uuid", **defaults}
    return Site.model_validate(data)


def test_under_pbs_the_count_takes_each_nodes_slots_from_its_chunks_mpiprocs(tmp_path):
    """PBS lists each node of a chunk `mpiprocs` times in PBS_NODEFILE, and Open MPI's tm allocation makes each
    listing a slot ("TM may list the same node more than once ... bumped slots", orte/mca/ras/tm/ras_tm_module.c), so
    under chunks of the plan's ranks (select=N:...:mpiprocs=R) the count alone fills each node's R slots in rank
    order, as under a Slurm header of tasks. Debian's Open MPI has no tm component; the same node file given as its
    host file, where a host listed R times is R slots, stands for it: ranks 0-3 on the first node. A PBS request of
    the job's totals (NCI Gadi's -l ncpus=, pbs_request: job-wide) names no chunk's processes and is refused."""
    site = _pbs_site(max_nodes=2)
    one = list(make_plan(site, JobRequest(nodes=1)).launcher_argv)
    assert one[:3] == ["mpirun", "-np", "8"] and "--map-by" not in one and "--bind-to" not in one, one
    plan = make_plan(site, JobRequest(nodes=2, ranks_per_node=4))
    two = list(plan.launcher_argv)
    assert two[:3] == ["mpirun", "-np", "8"] and "--map-by" not in two and "--hostfile" not in two, two
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(f"n{n}\n" for n in (1, 2) for _ in range(plan.ranks_per_node)))
    out = _display_map([*two[:3], "--hostfile", str(nodefile), *two[3:]], {})
    assert mapped_nodes(out) == [
        ("n1", "4", "4"), ("n2", "4", "4")], out
    assert rank_nodes(out) == {r.rank: f"n{r.node + 1}" for r in plan.ranks}, out
    with pytest.raises(ValueError, match=r"launch\.mpirun_layout: count .* defaults\.pbs_request job-wide"):
        _pbs_site(pbs_request="job-wide")
