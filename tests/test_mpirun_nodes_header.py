"""defaults.batch_request: nodes under Open MPI's mpirun: a Slurm header of the nodes and their GPUs alone.

EPCC's Cirrus GPU nodes refuse a GPU job whose header asks tasks: "the submission script should not specify options
such as --ntasks and --cpus-per-task. Such a job submission will be rejected"
(https://github.com/EPCCed/cirrus-docs/blob/10798fc425c56754d66999dea3a707acffd4ccf4/docs/user-guide/gpu.md), and
EPCC's deep-learning jobs start Open MPI's mpirun under such a header
(https://github.com/hpc-uk/build-instructions/blob/b802d50f5b5f694525f09e84fe9b5bec224a917a/pyenvs/ml/run_imagenet_cirrus_gpu.md):
"#SBATCH --nodes=4 #SBATCH --exclusive ... #SBATCH --gres=gpu:4", then "export SLURM_NTASKS=16", "export
SLURM_NTASKS_PER_NODE=`expr ${SLURM_NTASKS} \\/ ${SLURM_NNODES}`", "export
SLURM_TASKS_PER_NODE="${SLURM_NTASKS_PER_NODE}(x${SLURM_NNODES})"" and "mpirun -n ${SLURM_NTASKS} -N
${SLURM_NTASKS_PER_NODE} ... -bind-to none -map-by slot". Open MPI takes a Slurm node's slots from
SLURM_TASKS_PER_NODE: without that export a header of no tasks gives each node one slot, and the installed mpirun
refuses the job's ranks (below).
"""

from __future__ import annotations

import re

import pytest

from conftest import RECIPES, require_tool
from real_launchers import mapped_nodes, open_mpi_map, posed_slurm_allocation
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site
from hpcdl.train.recipe import load_recipe


def _site(**defaults) -> Site:
    # PSC's Bridges-2 line (Slurm, Open MPI's mpirun, -bind-to none -map-by slot), its header asking nodes alone
    data = load_site("bridges2-gpu").model_dump(exclude_unset=True)
    data["defaults"] = {**data.get("defaults", {}), "gpu_request": "gres", "exclusive": True,
                        "batch_request": "nodes", **defaults}
    return Site.model_validate(data)


def _script(site: Site, nodes: int = 2) -> str:
    plan = make_plan(site, JobRequest(nodes=nodes))
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    return render_job_script(site, plan, recipe, JobOptions(name="r", account="p1"))


def _header(text: str) -> list[str]:
    return [line[len("#SBATCH "):] for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_the_header_asks_nodes_and_gpus_and_no_tasks():
    header = _header(_script(_site()))
    assert {"--nodes=2", "--exclusive", "--gres=gpu:v100-32:8"} <= set(header), header
    for option in ("--ntasks", "--cpus-per-task", "--threads-per-core", "--hint", "--gpus"):
        assert not any(d.startswith(option) for d in header), (option, header)


def test_the_job_gives_open_mpi_its_slots_and_the_line_its_ranks_per_node():
    site = _site()
    text = _script(site)
    assert "export SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE=8 SLURM_TASKS_PER_NODE='8(x2)'" in text
    argv = make_plan(site, JobRequest(nodes=2)).launcher_argv
    assert list(argv[:5]) == ["mpirun", "-np", "16", "-N", "8"], argv


def test_a_header_that_asks_tasks_exports_no_slots():
    text = _script(load_site("bridges2-gpu"))
    assert "SLURM_TASKS_PER_NODE" not in text
    assert "-N" not in make_plan(load_site("bridges2-gpu"), JobRequest(nodes=2)).launcher_argv


def test_open_mpi_maps_the_ranks_only_with_the_slots_the_job_exports():
    """The installed Open MPI under a posed Slurm allocation of two nodes and no tasks (SLURM_TASKS_PER_NODE 1(x2),
    what sbatch sets for a header that asks none): the job's own line is refused without the export and maps eight
    ranks on each node with it."""
    mpirun = require_tool("mpirun")
    site = _site()
    text = _script(site)
    exported = re.search(r"^export SLURM_NTASKS=.*$", text, re.M).group(0)
    slots = dict(word.split("=", 1) for word in exported.split()[1:])
    slots = {k: v.strip("'") for k, v in slots.items()}
    line = list(make_plan(site, JobRequest(nodes=2)).launcher_argv)
    allocation = posed_slurm_allocation("1(x2)")
    refused = open_mpi_map(mpirun, line, allocation)
    assert "not enough slots" in refused.stdout + refused.stderr
    mapped = open_mpi_map(mpirun, line, {**allocation, **slots})
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert mapped_nodes(mapped.stdout + mapped.stderr) == [("n1", "8", "8"), ("n2", "8", "8")]


def test_nodes_under_mpirun_needs_slurm_and_open_mpi():
    data = load_site("polaris").model_dump(exclude_unset=True)
    data["defaults"] = {**data.get("defaults", {}), "batch_request": "nodes"}
    with pytest.raises(ValueError, match="defaults.batch_request: nodes"):
        Site.model_validate(data)
