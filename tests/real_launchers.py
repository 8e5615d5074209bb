"""What the installed launchers themselves say of a launch line, with no cluster behind them.

srun parses and checks every option of its line in the client before it asks the controller for
anything: an option it does not know ("srun: unrecognized option"), a --cpu-bind, --distribution,
--gpu-bind or --mpi value it cannot take ("Failed to parse --cpu-bind= values", "Invalid --distribution
specification", "Invalid MPI type") ends it there. Given a slurm.conf whose controller cannot be reached
(port 1, one-second timeouts), a line srun accepts ends instead at "Unable to contact slurm controller",
in milliseconds: that is the real Slurm 22.05's own verdict on the line, from the same code that runs it
on a cluster, with no daemon, no munge and no allocation. An option a centre's Slurm takes from a SPANK
plugin (LLNL's `--mpibind`) is unknown to a Slurm without that plugin: where the centre's own line names
it, it is set aside and the rest is judged.

Open MPI's mpirun parses its options before it maps a rank ("mpirun: Error: unknown option"); given
Open MPI's simulated allocation (the `ras simulator` component, two nodes) and `--do-not-launch`, it
starts nothing and reaches no host. Only its verdict on the options' names is read: its mapper and
binder need the node's real topology, which the simulator does not give.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path

# the controller srun would contact next: a line that reaches it was accepted whole
ACCEPTED = ("Unable to contact slurm controller", "Unable to allocate resources")

UNRECOGNIZED = re.compile(r"unrecognized option '([^']+)'")

# What the client needs to know of the cluster to judge options: task/affinity (binding options are
# refused without it: "cluster configuration lacks support for cpu binding"), the gpu GRES type
# (--gpus-per-node, --gres=gpu:N), and an unreachable controller that refuses at once.
MINIMAL_SLURM_CONF = """\
ClusterName=hpcdl-parse-only
SlurmctldHost=localhost
SlurmctldPort=1
MessageTimeout=1
TCPTimeout=1
TaskPlugin=task/affinity
GresTypes=gpu
MpiDefault=none
SelectType=select/cons_tres
"""


@functools.lru_cache(maxsize=1)
def _slurm_conf() -> str:
    path = Path(tempfile.mkdtemp(prefix="hpcdl-srun-parse-")) / "slurm.conf"
    path.write_text(MINIMAL_SLURM_CONF)
    return str(path)


@functools.lru_cache(maxsize=None)
def srun_refuses(srun: str, options: tuple[str, ...], plugin_options: frozenset[str] = frozenset()) -> str | None:
    """srun's own words refusing a launch line's options (the words after `srun`), None where it
    accepts them. `srun` is the path of the installed srun (conftest.require_tool); `plugin_options`:
    the options the centre's own line names, which srun may know only from the centre's SPANK plugins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}
    env["SLURM_CONF"] = _slurm_conf()
    done = subprocess.run([srun, *options, "true"], env=env, capture_output=True, text=True, timeout=60)
    said = (done.stdout + done.stderr).strip()
    if any(words in said for words in ACCEPTED):
        return None
    unknown = UNRECOGNIZED.search(said)
    if unknown and unknown.group(1).split("=")[0] in plugin_options:
        # a plugin's option the centre's line names: judge the rest of the line without it
        return srun_refuses(srun, tuple(o for o in options if o != unknown.group(1)), plugin_options)
    return said.splitlines()[-1] if said else f"srun exited {done.returncode} saying nothing"


@functools.lru_cache(maxsize=None)
def mpirun_refuses(mpirun: str, options: tuple[str, ...]) -> str | None:
    """Open MPI's mpirun's own words refusing an option of a launch line (the words after `mpirun`),
    None where it knows them all. Starts nothing (a simulated allocation, --do-not-launch)."""
    simulated = ["--mca", "ras", "simulator", "--mca", "ras_simulator_num_nodes", "2",
                 "--mca", "ras_simulator_topologies", "package:2 core:64 pu:1", "--mca", "ras_simulator_slots", "128"]
    done = subprocess.run([mpirun, "--allow-run-as-root", *simulated, "--do-not-launch", *options, "true"],
                          capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    refused = next((line for line in said.splitlines() if "unknown option" in line or "unrecognized" in line), None)
    return refused.strip() if refused else None


def posed_slurm_allocation(slots: int | str, nodes: int = 2, cpus_per_task: int | None = None) -> dict[str, str]:
    """A Slurm allocation of `nodes` nodes (n1, n2, ...) of `slots` tasks each, as a job's environment says it to Open
    MPI's slurm allocator (SLURM_TASKS_PER_NODE `slots(xnodes)`); `slots` may be the environment's own form."""
    per_node = slots if isinstance(slots, str) else f"{slots}(x{nodes})"
    out = {"SLURM_JOBID": "7", "SLURM_JOB_ID": "7", "SLURM_NODELIST": f"n[1-{nodes}]",
           "SLURM_JOB_NODELIST": f"n[1-{nodes}]", "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
           "SLURM_TASKS_PER_NODE": per_node}
    if isinstance(slots, int):
        out.update(SLURM_NTASKS=str(slots * nodes), SLURM_NTASKS_PER_NODE=str(slots))
    if cpus_per_task is not None:
        out["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    return out


def open_mpi_map(mpirun: str, argv: list[str], env: dict[str, str], bind_none: bool = False) -> subprocess.CompletedProcess:
    """The installed Open MPI's map of a launch line's ranks (`--do-not-launch --display-map`: nothing starts), its -x
    words left out (variables the test does not set), under the allocation `env` poses. bind_none: the map is asked
    with --bind-to none, where the posed nodes' ranks outnumber this host's CPUs ("binding more processes than
    cpus"), which moves no rank to another node."""
    words = [w for i, w in enumerate(argv) if w != "-x" and not (i and argv[i - 1] == "-x")]
    extra = ["--bind-to", "none"] if bind_none else []
    return subprocess.run([words[0], "--allow-run-as-root", "--do-not-launch", "--display-map", *extra, *words[1:],
                           "true"], env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
                          executable=mpirun)


def mapped_nodes(out: str) -> list[tuple[str, str, str]]:
    """Each node of Open MPI's --display-map: its name, slots and processes."""
    return re.findall(r"Data for node: (n\d)\s+Num slots: (\d+).*?Num procs: (\d+)", out, re.S)


def rank_nodes(out: str) -> dict[int, str]:
    """Each rank's node in Open MPI's --display-map."""
    return {int(rank): node for node, block in re.findall(r"Data for node: (n\d)(.*?)(?=Data for node:|\Z)", out, re.S)
            for rank in re.findall(r"Process OMPI jobid: \[\d+,\d+\] App: \d+ Process rank: (\d+)", block)}
