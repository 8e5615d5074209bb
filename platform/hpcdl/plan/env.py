"""Environment settings the plan gives each rank: threading, placement and communication."""

from __future__ import annotations

from hpcdl.plan.request import JobRequest
from hpcdl.sites.schema import NodeKind, Site

INTEL_TARGETS = ("knl", "skylake", "cascadelake", "icelake", "sapphirerapids", "broadwell", "haswell")


def threading_env(node: NodeKind, framework: str, threads: int) -> dict[str, str]:
    env = {
        "OMP_NUM_THREADS": str(threads),
        # threads on their own cores, packed next to each other (OpenMP 4.5 places)
        "OMP_PLACES": "cores",
        "OMP_PROC_BIND": "close",
        # intra-op = cores of the rank, inter-op 1-2 (Intel "Maximize TensorFlow Performance
        # on CPU"; TF performance guide: inter-op = sockets, here the rank's one socket)
        "HPCDL_INTRA_OP_THREADS": str(threads),
        "HPCDL_INTER_OP_THREADS": "1",
    }
    if any(node.cpu_target.startswith(t) for t in INTEL_TARGETS):
        # Intel OpenMP runtime (MKL-DNN/oneDNN): compact fine-grained affinity and a short
        # spin before sleeping (KMP_BLOCKTIME 0-1 for CNNs: TF performance guide, CosmoFlow on Cori).
        env["KMP_AFFINITY"] = "granularity=fine,compact,1,0"
        env["KMP_BLOCKTIME"] = "1"
    if framework == "tensorflow":
        env["TF_NUM_INTRAOP_THREADS"] = str(threads)
        env["TF_NUM_INTEROP_THREADS"] = "1"
    return env


def rank_env(site: Site, node: NodeKind, gpus: tuple[int, ...], nic: str | None) -> dict[str, str]:
    """Settings that differ from one local rank to the next."""
    env: dict[str, str] = {}
    if gpus:
        vendor = node.gpus[gpus[0]].vendor
        env["ROCR_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    if nic is not None:
        kind = next(n.kind for n in node.nics if f"{n.device}:{n.port}" == nic)
        if kind == "infiniband":
            # '=' asks NCCL for an exact device match (NCCL env docs), so mlx5_1 never matches mlx5_10
            env["NCCL_IB_HCA"] = f"={nic}"
            env["UCX_NET_DEVICES"] = nic
    return env


def communication_env(
    site: Site, node: NodeKind, request: JobRequest, distributed: str, use_gpus: bool, ranks_per_node: int
) -> dict[str, str]:
    env: dict[str, str] = {}
    kinds = {n.kind for n in node.nics}
    netdevs = sorted({n.netdev for n in node.nics if n.netdev})
    if netdevs and use_gpus:
        env["NCCL_SOCKET_IFNAME"] = ",".join(netdevs)
    if "omnipath" in kinds:
        # PSM2 is the fast path on Omni-Path (EasyBuild #4560; TACC psm2 images)
        env["PSM2_SHAREDCONTEXTS"] = "1"
        env["FI_PROVIDER"] = "psm2"
    if "slingshot" in kinds:
        # HPE Cray MPI and the aws-ofi-nccl plugin on Slingshot 11 (NERSC podman-hpc nccl module)
        env["FI_PROVIDER"] = "cxi"
        if use_gpus:
            env["NCCL_CROSS_NIC"] = "1"
            env["NCCL_NET_GDR_LEVEL"] = "PHB"
            env["FI_CXI_DISABLE_HOST_REGISTER"] = "1"
            env["FI_MR_CACHE_MONITOR"] = "userfaultfd"
    if site.mpi == "cray-mpich" and use_gpus:
        env["MPICH_GPU_SUPPORT_ENABLED"] = "1"
    if distributed == "horovod":
        # Tensor Fusion buffer (Horovod default 128 MiB) and its cycle time; hierarchical
        # allreduce (NCCL in the node, MPI across) when several ranks share a node.
        env["HOROVOD_FUSION_THRESHOLD"] = str(128 * 1024 * 1024)
        env["HOROVOD_CYCLE_TIME"] = "1"
        env["HOROVOD_CACHE_CAPACITY"] = "1024"
        if use_gpus and ranks_per_node > 1 and request.nodes > 1:
            env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    return env
