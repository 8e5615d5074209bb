"""Who am I? Rank, world size and local rank from whichever launcher started this process."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    launcher: str


# (launcher, rank var, size var, local-rank var), in the order they are trusted: explicit
# torchrun/hpcdl variables first, then MPI libraries (which are set per process), then the
# resource manager (srun sets SLURM_* also around an mpirun it did not start itself).
_SOURCES = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("horovodrun", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),  # horovodrun --gloo
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK"),
    ("mvapich2", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("aprun", "ALPS_APP_PE", "HPCDL_WORLD_SIZE", "HPCDL_LOCAL_RANK"),
    ("pmix", "PMIX_RANK", "HPCDL_WORLD_SIZE", "HPCDL_LOCAL_RANK"),
)


def rank_info(environ: dict[str, str] | None = None) -> RankInfo:
    env = os.environ if environ is None else environ
    for launcher, rank_var, size_var, local_var in _SOURCES:
        if rank_var in env and size_var in env:
            rank, size = int(env[rank_var]), int(env[size_var])
            local = int(env.get(local_var, env.get("HPCDL_LOCAL_RANK", rank)))
            return RankInfo(rank, size, local, launcher)
    return RankInfo(0, 1, 0, "none")


def gpu_index(me: RankInfo, count: int, environ: dict[str, str] | None = None) -> int:
    """The GPU this rank drives among the `count` it sees: the plan's (HPCDL_GPU, set where every
    rank sees the whole node's GPUs: profile launch.gpu_visibility: node), else its local rank's
    (the launcher left one GPU per rank visible, or none was planned)."""
    env = os.environ if environ is None else environ
    chosen = env.get("HPCDL_GPU", "").split(",")[0]
    index = int(chosen) if chosen.isdigit() else me.local_rank
    return index % max(1, count)


def process_group_backend(backend: str) -> str:
    """What `torch.distributed.init_process_group` is given for the run's backend.

    NCCL carries CUDA tensors only, and a rank's bookkeeping is CPU tensors (the display
    sums, the stop flag, the slowest rank's time, the host names a validation gathers):
    under NCCL alone those collectives fail ("No backend type associated with device type
    cpu"). So NCCL runs with Gloo beside it for CPU tensors, the device-to-backend form
    PyTorch documents for `init_process_group` ("cpu:gloo,cuda:nccl"); object collectives
    and barriers then go over Gloo, the gradients over NCCL.
    """
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend
