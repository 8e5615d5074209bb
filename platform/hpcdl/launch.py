"""hpcdl's own launcher for one node: `hpcdl launch --nproc N -- PROGRAM...`.

Starts N copies of PROGRAM with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set
(the torchrun convention), forwards SIGTERM/SIGUSR1/SIGINT to them, and when one rank
exits non-zero it stops the others: a dead rank ends the job within `grace` seconds
instead of leaving the survivors hanging in a collective.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

# Exit status of a rank that stopped on SIGUSR1/SIGTERM after writing its snapshot: EX_TEMPFAIL
# from sysexits.h, "try again later", which is what a requeue does. Every backend exits with it.
PREEMPTED_EXIT = 75


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usable_cores() -> int:
    """The cores this process may run on: its affinity (a Slurm or cgroup allocation's), else the node's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def node_rank(nnodes: int, environ=None) -> int:
    """This node's place among `nnodes` nodes that each run one `hpcdl launch`: srun's SLURM_NODEID ("The relative
    node ID of the current node", srun(1)), where srun started it once per node (a profile's launch.spawner: hpcdl);
    0 for one node."""
    from hpcdl.errors import HpcdlError

    env = os.environ if environ is None else environ
    if nnodes == 1:
        return 0
    given = env.get("SLURM_NODEID", "")
    if not given.isdigit() or int(given) >= nnodes:
        raise HpcdlError(f"--nnodes: {nnodes} nodes, but this node's SLURM_NODEID is {given or 'unset'}: start one "
                         "hpcdl launch per node under srun (--ntasks-per-node=1)")
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        raise HpcdlError(f"--nnodes: {nnodes} nodes rendezvous at MASTER_ADDR:MASTER_PORT, which the job sets; "
                         "one or both are unset")
    return int(given)


def launch(nproc: int, argv: list[str], grace: float = 10.0, nnodes: int = 1) -> int:
    base = dict(os.environ)
    first = node_rank(nnodes, base) * nproc
    base.setdefault("MASTER_ADDR", "127.0.0.1")
    base.setdefault("MASTER_PORT", str(free_port()))
    import shutil

    from hpcdl.errors import HpcdlError

    if shutil.which(argv[0]) is None:
        raise HpcdlError(f"launch: {argv[0]}: no such program (or it is not executable)")
    procs = []
    for rank in range(nproc):
        env = {**base, "RANK": str(first + rank), "WORLD_SIZE": str(nproc * nnodes), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(first // nproc)}
        procs.append(subprocess.Popen(argv, env=env))

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, forward)

    failed_at = None
    status = 0
    while any(p.poll() is None for p in procs):
        for rank, p in enumerate(procs):
            rc = p.poll()
            if rc not in (None, 0) and failed_at is None:
                why = " (pre-empted: snapshot written, requeue to resume)" if rc == PREEMPTED_EXIT else ""
                print(f"hpcdl launch: rank {first + rank} exited with status {rc}{why}; stopping the other ranks", file=sys.stderr)
                failed_at, status = time.monotonic(), rc
                forward(signal.SIGTERM, None)
        if failed_at is not None and time.monotonic() - failed_at > grace:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    if status == 0:
        status = next((p.returncode for p in procs if p.returncode), 0)
    return 128 - status if status < 0 else status
