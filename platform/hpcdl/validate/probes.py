"""What each rank of a validation job runs: `hpcdl probe KIND recipe.json --results results.jsonl`.

The job script writes the probe's settings to recipe.json (the job stays a complete
record of what it did) and the launcher starts one copy per rank. Rank 0 writes JSON-lines
records; every record carries the node count and the node list, measured by gathering
each rank's host name (ReFrame issue #3360: scaling studies need both in every record).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

from hpcdl.train.ranks import RankInfo, gpu_index, process_group_backend, rank_info

# the module that proves a framework is importable, as named in `expect.frameworks`
FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet", "horovod": "horovod"}
MPI_LAUNCHERS = ("mpirun", "mpiexec", "srun", "jsrun", "ibrun", "aprun")


class _Writer:
    def __init__(self, path: str | None, me: RankInfo):
        self.path = Path(path) if path and me.rank == 0 else None

    def record(self, event: str, **fields) -> None:
        if self.path is None:
            return
        rec = {"event": event, "time": round(time.time(), 3), **fields}
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)


def _init_torch_distributed(me: RankInfo, backend: str):
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if backend == "nccl":  # each rank on its own GPU before NCCL's communicator is made: the trainer's
        import torch

        torch.cuda.set_device(gpu_index(me, torch.cuda.device_count()))
    dist.init_process_group(process_group_backend(backend), rank=me.rank, world_size=me.world_size,
                            timeout=_dt.timedelta(seconds=180))
    return dist


def node_name() -> str:
    """The scheduler's name for the node this rank runs on, else the host name.

    Slurm gives every task SLURMD_NODENAME (sbatch/srun man pages); it is what `scontrol`
    and `NodeList` show, and it tells apart nodes that share a host (the test cluster's
    pretend nodes n1, n2 all run on localhost, and on some clusters host names differ from
    node names).
    """
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _hosts(dist, me: RankInfo) -> list[str]:
    if me.world_size == 1:
        return [node_name()]
    gathered = [None] * me.world_size
    dist.all_gather_object(gathered, node_name())
    return list(gathered)


def _where(hosts: list[str]) -> dict:
    nodelist = sorted(set(hosts))
    return {"nodes": len(nodelist), "nodelist": nodelist, "ranks": len(hosts)}


def probe_environment(params: dict, results: str | None) -> None:
    """Frameworks at their versions, the CPU/GPU math libraries, and MPI agreeing with the launcher."""
    me = rank_info()
    mine: dict = {"rank": me.rank, "world_size": me.world_size, "launcher_env": me.launcher, "host": node_name()}
    use_mpi = params.get("launcher") in MPI_LAUNCHERS
    if use_mpi:
        try:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
            mine["mpi"] = {
                "rank": comm.Get_rank(), "size": comm.Get_size(),
                "allreduce": comm.allreduce(comm.Get_rank() + 1),
                "library": MPI.Get_library_version().replace("\0", "").splitlines()[0].strip(),
            }
        except Exception as exc:  # reported as the check's failure, not a crash of the job
            mine["mpi"] = {"error": f"{type(exc).__name__}: {exc}"}
    frameworks = {}
    for name in params.get("frameworks", ["pytorch"]):
        module = FRAMEWORK_MODULES.get(name, name)
        try:
            mod = importlib.import_module(module)
            frameworks[name] = {"version": str(getattr(mod, "__version__", "unknown"))}
        except Exception as exc:
            frameworks[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    mine["frameworks"] = frameworks
    mine["math"] = _math_libraries(frameworks)
    mine["system"] = system_facts()

    try:
        import torch
    except ImportError as exc:
        # no torch.distributed to gather the ranks' facts over: each rank keeps its own, rank 0
        # writes its record, and the check names the framework that did not import
        torch, mine["torch_allreduce"] = None, f"torch.distributed not available ({type(exc).__name__}: {exc})"
    dist = _init_torch_distributed(me, "gloo") if torch is not None and me.world_size > 1 else None
    if torch is not None:
        t = torch.tensor([float(me.rank + 1)])
        if dist:
            dist.all_reduce(t)
        mine["torch_allreduce"] = float(t.item())
    everyone = [mine]
    if dist:
        everyone = [None] * me.world_size
        dist.all_gather_object(everyone, mine)
    out = _Writer(results, me)
    out.record("environment", ranks_info=everyone, **_where([r["host"] for r in everyone]), python=sys.version.split()[0])
    _finish(dist, me)


def system_facts() -> dict:
    """What this node is: CPU model, kernel, GPU models and driver, the container image it runs in."""
    import platform

    facts: dict = {"cpu_model": None, "kernel": platform.release(), "gpus": [], "gpu_driver": None,
                   "image": os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("model name", "cpu"):  # x86 / POWER
                facts["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:  # the NVIDIA kernel module says its version here (NVIDIA driver README, "procfs")
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        facts["gpu_driver"] = " ".join(w for w in first.split() if w[:1].isdigit() and "." in w)[:40] or first[:80]
    except (OSError, IndexError):
        pass
    try:
        import torch

        if torch.cuda.is_available():
            facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:
        pass
    return facts


def _math_libraries(frameworks: dict) -> dict:
    """oneDNN/MKL-DNN on the CPU; CUDA, cuDNN and NCCL where there is a GPU (else: not applicable)."""
    info: dict = {}
    if "version" in frameworks.get("pytorch", {}):
        import torch

        info["pytorch_onednn"] = bool(torch.backends.mkldnn.is_available())
        if torch.cuda.is_available():
            info["cuda"] = torch.version.cuda
            info["cudnn"] = torch.backends.cudnn.version()
            try:
                info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            except Exception as exc:
                info["nccl"] = f"error: {exc}"
            info["gpus"] = torch.cuda.device_count()
        else:
            info["gpus"] = 0
    if "version" in frameworks.get("tensorflow", {}):
        try:
            from tensorflow.python.util import _pywrap_util_port  # oneDNN build flag, as TF's own tests read it

            info["tensorflow_onednn"] = bool(_pywrap_util_port.IsMklEnabled())
        except Exception:
            info["tensorflow_onednn"] = None
    return info


# Each size is timed in this many windows of `iters` allreduces, and the median window's mean
# is kept. nccl-tests reports one window's mean; on a host where the ranks have every core
# (2 ranks on a 2-core node), one other process running for a few ms stalls a rank that the
# other busy-waits for, and a 16 ms window of 4 MiB allreduces came out 10 x slow in CI.
# The median of 5 windows drops such a stall and still shows a fabric that is slow throughout.
COLLECTIVE_WINDOWS = 5


def probe_collectives(params: dict, results: str | None) -> None:
    """Allreduce time over a message-size sweep, as nccl-tests reports it (algbw, busbw), each
    size's time the median of COLLECTIVE_WINDOWS windows' means."""
    me = rank_info()
    out = _Writer(results, me)
    use_gpu = params.get("gpu", False)
    dist = _init_torch_distributed(me, "nccl" if use_gpu else "gloo")
    where = _where(_hosts(dist, me))
    sizes, iters, warmup = params["sizes"], params.get("iters", 10), params.get("warmup", 2)
    windows = params.get("windows", COLLECTIVE_WINDOWS)
    scope = params.get("scope", "intra-node" if where["nodes"] == 1 else "inter-node")
    for backend in params.get("backends", ["torch"]):
        if backend == "mpi" and params.get("launcher") not in MPI_LAUNCHERS:
            continue
        timer = _torch_allreduce(dist, me, use_gpu) if backend == "torch" else _mpi_allreduce()
        name = ("nccl" if use_gpu else "gloo") if backend == "torch" else "mpi"
        for size in sizes:
            means = [timer(size, iters, warmup if w == 0 else 0) for w in range(windows)]
            t = _slowest(dist, statistics.median(means))
            # the mean over every window too: a job pays each of its allreduces, stalls included, where
            # the median (bandwidth, as nccl-tests reports it) leaves a window a descheduled rank slowed out
            mean = _slowest(dist, statistics.mean(means))
            n = me.world_size
            algbw = size / t / 1e9
            # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for AllReduce
            out.record(
                "collective", op="allreduce", backend=name, scope=scope, bytes=size, iters=iters, windows=windows,
                time_us=t * 1e6, time_us_mean=mean * 1e6, algbw_GBps=algbw, busbw_GBps=algbw * 2 * (n - 1) / n,
                **where,
            )
    _finish(dist, me)


def _slowest(dist, seconds: float) -> float:
    """A collective is done when its last rank is: take the slowest rank's mean time."""
    import torch

    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _torch_allreduce(dist, me: RankInfo, use_gpu: bool):
    import torch

    device = torch.device("cuda", gpu_index(me, torch.cuda.device_count())) if use_gpu else torch.device("cpu")

    def sync():
        if use_gpu:
            torch.cuda.synchronize(device)

    def run(size: int, iters: int, warmup: int) -> float:
        buf = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        return (time.perf_counter() - start) / iters

    return run


def _mpi_allreduce():
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD

    def run(size: int, iters: int, warmup: int) -> float:
        send = np.ones(max(1, size // 4), dtype=np.float32)
        recv = np.empty_like(send)
        for _ in range(warmup):
            comm.Allreduce(send, recv, op=MPI.SUM)
        comm.Barrier()
        start = MPI.Wtime()
        for _ in range(iters):
            comm.Allreduce(send, recv, op=MPI.SUM)
        return (MPI.Wtime() - start) / iters

    return run


def probe_train(recipe_path: str, plan_path: str | None, results: str | None) -> None:
    """The trainer, after each node's first rank has left its node's name in nodes/ (the node list)."""
    me = rank_info()
    if me.local_rank == 0:
        Path("nodes").mkdir(exist_ok=True)
        Path("nodes", node_name()).write_text(f"{me.rank}\n")
    from hpcdl.train.main import exit_rank, run_training

    summary = run_training(recipe_path, plan_path, results, exit_ranks=False)
    if me.local_rank == 0:
        # each node's own throughput (its first rank's images/s): the report's per-node breakdown
        Path("nodes", node_name()).write_text(json.dumps({
            "rank": me.rank, "images_per_sec_rank": summary.get("images_per_sec_rank")}) + "\n")
    if me.world_size > 1:
        exit_rank(int(summary.get("exit_status", 0)))


def _finish(dist, me: RankInfo) -> None:
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()  # mpirun counts a rank that leaves without it as failed
    if me.world_size > 1:
        from hpcdl.train.main import exit_rank

        exit_rank(0)  # gloo's threads may abort a clean exit (see hpcdl.train.main.exit_rank)


PROBES = {"environment": probe_environment, "collectives": probe_collectives}


def run_probe(kind: str, params_path: str, results: str | None) -> None:
    params = json.loads(Path(params_path).read_text())
    PROBES[kind](params.get("probe", params), results)
