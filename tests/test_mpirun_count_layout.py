"""launch.mpirun_layout: count, an Open MPI line that names the rank count alone under a Slurm header of tasks.

JHU ARCH's Rockfish starts its multi-rank jobs so
(https://github.com/jhu-arch/rockfish-docs/blob/2c6b4cb2924fddbe7aa7df9bb05c3c18255e9a72/4_Slurm/Example_Sbatch.rst):
"#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=8", "#SBATCH --cpus-per-task=6", "ml gcc openmpi", "mpirun -np 8
bin/gmx_mpi mdrun -deffnm options": no --map-by and no --bind-to. Open MPI takes a Slurm node's slots from the header's
tasks (SLURM_TASKS_PER_NODE) and fills them node by node, so local rank i of each node is the plan's; each rank binds
itself to its cores from plan.json. hpcdl wrote its own --map-by ppr:R:node:PE=C --bind-to core beside the count.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import require_tool
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
    data["launch"] = {**data.get("launch", {}), "mpirun_layout": "restate"}
    argv = _argv(Site.model_validate(data))
    assert argv[:7] == ["mpirun", "-np", "8", "--map-by", "ppr:4:node:PE=6", "--bind-to", "core"], argv


def test_open_mpi_fills_each_nodes_slots_in_rank_order():
    """The installed Open MPI under a posed Slurm allocation of two nodes with the header's four tasks each
    (SLURM_TASKS_PER_NODE 4(x2)): the count alone maps ranks 0-3 on the first node and 4-7 on the second, the plan's
    nodes and local ranks."""
    mpirun = require_tool("mpirun")
    site = _site()
    plan = make_plan(site, JobRequest(nodes=2))
    line = list(plan.launcher_argv)
    argv = [w for i, w in enumerate(line) if w != "-x" and not (i and line[i - 1] == "-x")]
    allocation = {"SLURM_JOBID": "7", "SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]", "SLURM_JOB_NODELIST": "n[1-2]",
                  "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)",
                  "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "6"}
    done = subprocess.run([argv[0], "--allow-run-as-root", "--do-not-launch", "--display-map", *argv[1:], "true"],
                          env={**os.environ, **allocation}, capture_output=True, text=True, timeout=60,
                          executable=mpirun)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.findall(r"Data for node: (n\d)\s+Num slots: (\d+).*?Num procs: (\d+)", out, re.S) == [
        ("n1", "4", "4"), ("n2", "4", "4")], out
    nodes = {int(rank): node for node, block in re.findall(r"Data for node: (n\d)(.*?)(?=Data for node:|\Z)", out, re.S)
             for rank in re.findall(r"Process OMPI jobid: \[\d+,\d+\] App: \d+ Process rank: (\d+)", block)}
    assert nodes == {r.rank: f"n{r.node + 1}" for r in plan.ranks}, out


@pytest.mark.parametrize("change,match", [
    ({"launcher": "srun"}, "launch.mpirun_layout: count"),
    ({"defaults": {"batch_request": "nodes"}}, "launch.mpirun_layout: count"),
    ({"launch": {"args": ["--bind-to", "none"]}}, "launch.mpirun_layout: count names no mapping or binding"),
    ({"launch": {"args": ["--map-by", "slot"]}}, "launch.mpirun_layout: count names no mapping or binding"),
])
def test_count_is_refused_where_no_header_gives_the_slots(change, match):
    with pytest.raises(ValueError, match=match):
        _site(**change)
