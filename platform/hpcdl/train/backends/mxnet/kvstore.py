"""Start an MXNet parameter-server job on this node: scheduler, servers, then the workers.

    python -m hpcdl.train.backends.mxnet.kvstore --workers 2 --servers 1 -- PROGRAM ARGS...

MXNet's dist kvstore (ps-lite) has three roles, told apart by DMLC_ROLE: one scheduler
(the rendezvous at DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT), DMLC_NUM_SERVER servers (which
hold and sum the gradients) and DMLC_NUM_WORKER workers (the trainer's ranks). Importing
mxnet with DMLC_ROLE=scheduler or server runs that role until the workers finish (MXNet's
kvstore_server module), so those two roles are just `python -c "import mxnet"`. The
workers are started by hpcdl launch, so they also get RANK/WORLD_SIZE and a dead worker
stops the job. A multi-node job script starts the roles the same way on its first node.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from hpcdl.launch import free_port, launch


def role_env(role: str, root_uri: str, root_port: int, num_workers: int, num_servers: int) -> dict[str, str]:
    return {
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": root_uri,
        "DMLC_PS_ROOT_PORT": str(root_port),
        "DMLC_NUM_WORKER": str(num_workers),
        "DMLC_NUM_SERVER": str(num_servers),
    }


def run_job(num_workers: int, num_servers: int, argv: list[str], python: str = sys.executable,
            root_uri: str = "127.0.0.1") -> int:
    port = free_port()
    roles = []
    for role in ["scheduler"] + ["server"] * num_servers:
        env = {**os.environ, **role_env(role, root_uri, port, num_workers, num_servers)}
        roles.append(subprocess.Popen([python, "-c", "import mxnet"], env=env))
    os.environ.update(role_env("worker", root_uri, port, num_workers, num_servers))
    try:
        return launch(num_workers, argv)
    finally:
        # the roles hold no state once the workers are gone, and ranks leave through
        # os._exit without ps-lite's goodbye, so the roles would wait a minute for it
        for proc in roles:
            proc.terminate()
        for proc in roles:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.train.backends.mxnet.kvstore", description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("give the worker program after --")
    return run_job(args.workers, args.servers, program)


if __name__ == "__main__":
    sys.exit(main())
