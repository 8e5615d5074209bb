"""Environment settings the plan gives each rank: threading, placement and communication.

Each setting says where it comes from. Settings shared by every rank go to `Plan.env`; the few
that differ from one local rank to the next (its GPU, its NIC) go to `RankPlacement.env`, and
each rank applies its own from plan.json (hpcdl.train.binding).
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcdl.plan.request import JobRequest
from hpcdl.sites.schema import NodeKind, Site

INTEL_TARGETS = ("knl", "skylake", "cascadelake", "icelake", "sapphirerapids", "broadwell", "haswell")


def threading_env(node: NodeKind, framework: str, threads: int, cores_per_rank: int | None = None) -> dict[str, str]:
    cores_per_rank = cores_per_rank or threads
    env = {
        "OMP_NUM_THREADS": str(threads),
        # OpenMP 4.5 places: one thread per core, packed next to each other inside the rank's
        # cores; hardware-thread places only when the request asked for more threads than cores.
        "OMP_PLACES": "cores" if threads <= cores_per_rank else "threads",
        "OMP_PROC_BIND": "close",
        # intra-op = threads of the rank, inter-op 1 (Intel "Maximize TensorFlow Performance on
        # CPU": inter-op = sockets, and a rank sits on one socket; a TF maintainer in
        # tensorflow#14496: "inter op of 1 and intra op of #cores").
        "HPCDL_INTRA_OP_THREADS": str(threads),
        "HPCDL_INTER_OP_THREADS": "1",
    }
    if any(node.cpu_target.startswith(t) for t in INTEL_TARGETS):
        # Intel OpenMP (MKL-DNN/oneDNN): compact fine-grained affinity and a short spin before
        # sleeping (KMP_BLOCKTIME 0-1 for CNNs: Intel's TF-on-CPU guide; CosmoFlow on Cori uses
        # KMP_AFFINITY=granularity=fine,compact,1,0 and KMP_BLOCKTIME=1). Intel's runtime lets
        # KMP_AFFINITY win over OMP_PROC_BIND; GNU OpenMP ignores KMP_*.
        env["KMP_AFFINITY"] = "granularity=fine,compact,1,0"
        env["KMP_BLOCKTIME"] = "1"
    if framework == "tensorflow":
        env["TF_NUM_INTRAOP_THREADS"] = str(threads)
        env["TF_NUM_INTEROP_THREADS"] = "1"
    elif framework == "mxnet":
        # MXNet's CPU operators use OpenMP (MXNET_OMP_MAX_THREADS caps it); one engine worker
        # thread keeps the operators from competing for the rank's cores.
        env["MXNET_OMP_MAX_THREADS"] = str(threads)
        env["MXNET_CPU_WORKER_NTHREADS"] = "1"
    return env


def rank_env(site: Site, node: NodeKind, gpus: tuple[int, ...], nic: str | None,
             gpu_visibility: str = "per-rank", held: tuple[int, ...] | None = None) -> dict[str, str]:
    """Settings that differ from one local rank to the next: its GPUs and its NIC.

    `held`: the GPUs the node's ranks hold together, where every rank sees them all (gpu_visibility
    node); unset, every GPU of the node."""
    env: dict[str, str] = {}
    if gpus and gpu_visibility == "node":
        # every rank sees every GPU (one resource set per node, no per-task GPU binding) and picks
        # its own: OLCF's DL guidance "each process needs to have access to all GPUs on the node";
        # ranks that see different GPU sets cannot open each other's memory (E3SM issue 4834).
        # The step asks as many GPUs as the ranks hold (--gres=gpu:N, jsrun -g N), which the process
        # sees numbered 0..N-1 in the node's order: a rank's index is its GPU's place among those held
        # (two ranks of a half node on GPUs 0 and 2 drive visible 0 and 1, not 0 and a GPU it cannot see)
        held = tuple(range(len(node.gpus))) if held is None else tuple(sorted(held))
        env["HPCDL_GPU"] = ",".join(str(held.index(g)) for g in gpus)
    elif gpus:
        vendor = node.gpus[gpus[0]].vendor
        # ROCm's own selector for AMD GCDs (LUMI-G/Frontier launch lines set ROCR_VISIBLE_DEVICES)
        env["ROCR_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    port = next((n for n in node.nics if n.name == nic), None) if nic is not None else None
    if port is not None and port.device:
        if port.kind == "infiniband":
            # '=' asks NCCL for an exact device match (NCCL environment docs), so mlx5_1 never
            # also matches mlx5_10; UCX takes device:port.
            env["NCCL_IB_HCA"] = f"={nic}"
            env["UCX_NET_DEVICES"] = nic
            if site.mpi == "spectrum-mpi":
                # the Gordon Bell run gave each rank its own IB device this way (run_deeplab.sh)
                env["PAMI_IBV_DEVICE_NAME"] = nic
        elif port.kind == "omnipath":
            # PSM2 picks its HFI by unit number and port (Intel PSM2 programmer's guide)
            unit = "".join(ch for ch in port.device.rsplit("_", 1)[-1] if ch.isdigit())
            if unit:
                env["HFI_UNIT"] = unit
            env["HFI_PORT"] = str(port.port)
    # the profile's own settings win over the planner's, per rank too: a centre that names the devices
    # every rank uses (OLCF's Summit bandwidth tuning, PAMI_IBV_DEVICE_NAME="mlx5_0:1,mlx5_3:1" for
    # all) gets them, not a per-rank device that each rank would apply over the job's at start-up
    return {k: v for k, v in env.items() if k not in site.env and k not in node.env}


def communication_env(
    site: Site,
    node: NodeKind,
    request: JobRequest,
    distributed: str,
    use_gpus: bool,
    ranks_per_node: int,
    threads: int = 1,
    mode: str = "per-gpu",
    net_plugin: bool = False,
) -> dict[str, str]:
    env: dict[str, str] = {}
    kinds = {n.kind for n in node.nics}
    netdevs = sorted({n.netdev for n in node.nics if n.netdev})
    if netdevs and use_gpus:
        # NCCL's bootstrap and socket transport on the fast network, not the management Ethernet
        env["NCCL_SOCKET_IFNAME"] = ",".join(netdevs)
    if "omnipath" in kinds:
        # PSM2 is the fast path on Omni-Path: 2-10x better than the default Open MPI/MPICH paths,
        # UCX gives nothing there (EasyBuild #4560, Cornelis advice); TACC's images use PSM2.
        # Shared hardware contexts let up to 68 ranks per KNL share the HFI's contexts.
        env["PSM2_SHAREDCONTEXTS"] = "1"
        env["FI_PROVIDER"] = "psm2"
        if site.mpi == "intel-mpi":
            env["I_MPI_FABRICS"] = "shm:ofi"
    if "slingshot" in kinds:
        # HPE Cray MPI: OFI/cxi is the only netmod on Slingshot 11 (HPE CPE docs); NCCL needs the
        # aws-ofi-nccl plugin with these settings (NERSC podman-hpc nccl module). They tune the
        # plugin's libfabric path, so they go with the plugin or not at all (planner._collective_plugin).
        env["FI_PROVIDER"] = "cxi"
        if use_gpus and net_plugin:
            env["NCCL_CROSS_NIC"] = "1"
            env["NCCL_NET_GDR_LEVEL"] = "PHB"
            env["FI_CXI_DISABLE_HOST_REGISTER"] = "1"
            env["FI_MR_CACHE_MONITOR"] = "userfaultfd"
            # a completion queue big enough for NCCL/RCCL's many small messages (OLCF "PyTorch on
            # Frontier", ALCF Polaris NCCL settings, HPE's RCCL-on-Slingshot note)
            env["FI_CXI_DEFAULT_CQ_SIZE"] = "131072"
        if site.mpi == "cray-mpich":
            # Cray MPICH picks each rank's NIC itself: the one nearest its GPU, else its NUMA node
            # (intro_mpi(3): MPICH_OFI_NIC_POLICY)
            env["MPICH_OFI_NIC_POLICY"] = "GPU" if use_gpus else "NUMA"
    if site.mpi == "cray-mpich":
        # MPICH_GPU_SUPPORT_ENABLED goes with the GTL module or not at all (planner._plan_modules)
        if distributed in ("horovod", "mpi"):
            # Cray MPICH grants MPI_THREAD_MULTIPLE (which Horovod's background thread and
            # threaded MPI backends ask for) only when told to (intro_mpi(3))
            env["MPICH_MAX_THREAD_SAFETY"] = "multiple"
    if site.mpi == "intel-mpi" and threads > 1:
        # Intel MPI: one pinning domain of OMP_NUM_THREADS cores per rank (I_MPI_PIN_DOMAIN=omp);
        # make_plan turns it into per-rank masks where the ranks sit elsewhere (intel_mpi_pin_domain)
        env["I_MPI_PIN_DOMAIN"] = "omp"
    if site.mpi == "mvapich2" and threads > 1:
        # MVAPICH2 pins each rank to one core unless told not to; the plan binds the rank's cores
        env["MV2_ENABLE_AFFINITY"] = "0"
    if distributed == "horovod":
        # Tensor Fusion buffer (Horovod's default 128 MiB) and cycle time; hierarchical allreduce
        # (NCCL inside the node, MPI across) when several GPU ranks share a node, which is the
        # Gordon Bell run's hybrid scheme (Kurth et al. 2018).
        env["HOROVOD_FUSION_THRESHOLD"] = str(128 * 1024 * 1024)
        env["HOROVOD_CYCLE_TIME"] = "1"
        env["HOROVOD_CACHE_CAPACITY"] = "1024"
        if use_gpus and ranks_per_node > 1 and (request.nodes > 1 or mode == "per-nic"):
            env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    return env


def intel_mpi_pin_domain(domain: str, cores: Sequence[tuple[int, ...]], cpus: Sequence[tuple[int, ...]]) -> str:
    """I_MPI_PIN_DOMAIN for a node's local ranks, given `domain` (the plan's or the site's setting)
    and each local rank's cores and scheduler CPUs, in local-rank order.

    Intel MPI's `omp` domains are consecutive blocks of OMP_NUM_THREADS CPUs from CPU 0, local
    rank i in block i; where the plan's ranks sit elsewhere (next to their GPU: TACC Lonestar6's
    gpu0 on socket 0, gpu1 and gpu2 on socket 1) each rank's domain is given by its own mask,
    in local-rank order (Intel MPI reference, I_MPI_PIN_DOMAIN=<masklist>: [m1,...,mn], each a
    hexadecimal bit mask of one domain). Any other setting, or `omp` over ranks in consecutive
    blocks, is returned as it is.
    """
    c = len(cores[0])
    if domain != "omp" or all(rank == tuple(range(i * c, (i + 1) * c)) for i, rank in enumerate(cores)):
        return domain
    return "[" + ",".join(format(sum(1 << cpu for cpu in rank), "x") for rank in cpus) + "]"
