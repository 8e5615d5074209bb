"""make_plan(site, request) -> Plan. Pure: no I/O, no clock, no environment.

Every rule carries a comment saying where it comes from; the figures are collected in
shared/research/ and cited in docs/sites.md.
"""

from __future__ import annotations

from hpcdl.errors import HpcdlError
from hpcdl.plan.env import communication_env, rank_env, threading_env
from hpcdl.plan.model import Plan, RankPlacement
from hpcdl.plan.request import JobRequest
from hpcdl.sites.schema import NodeKind, Site


def make_plan(site: Site, request: JobRequest) -> Plan:
    kind_name, node = site.node_kind(request.node_kind)
    use_gpus = bool(node.gpus) if request.use_gpus is None else request.use_gpus
    if use_gpus and not node.gpus:
        raise HpcdlError(
            f"GPUs requested but node kind {kind_name!r} of site {site.name!r} has none; "
            "drop --gpus or pick a GPU node kind"
        )
    if site.defaults.max_nodes and request.nodes > site.defaults.max_nodes:
        raise HpcdlError(f"nodes: {request.nodes} is more than site {site.name!r} allows ({site.defaults.max_nodes})")
    mode = _resolve_mode(request.mode, use_gpus)
    notes: list[str] = []
    ranks_per_node = _ranks_per_node(site, node, request, mode, notes)
    sockets_of_ranks = _sockets_of_local_ranks(node, mode, ranks_per_node, use_gpus)
    cores_of_ranks = _cores_of_local_ranks(node, sockets_of_ranks, notes)
    gpus_of_ranks = _gpus_of_local_ranks(node, mode, sockets_of_ranks, use_gpus)
    nics_of_ranks = _nics_of_local_ranks(node, sockets_of_ranks)
    threads = _threads_per_rank(node, request, min(len(c) for c in cores_of_ranks), notes)
    distributed = _resolve_distributed(request, use_gpus)

    local = []
    for lr in range(ranks_per_node):
        local.append(
            dict(
                local_rank=lr,
                socket=sockets_of_ranks[lr],
                cores=cores_of_ranks[lr],
                cpus=tuple(cpu for core in cores_of_ranks[lr] for cpu in node.cpus_of_core(core)),
                gpus=gpus_of_ranks[lr],
                nic=nics_of_ranks[lr],
                omp_num_threads=threads,
            )
        )
    ranks = tuple(
        RankPlacement(
            rank=n * ranks_per_node + p["local_rank"],
            node=n,
            env=rank_env(site, node, p["gpus"], p["nic"]),
            **p,
        )
        for n in range(request.nodes)
        for p in local
    )
    env = {
        **threading_env(node, request.framework, threads),
        **communication_env(site, node, request, distributed, use_gpus, ranks_per_node),
        **site.env,
    }
    plan = Plan(
        site=site.name,
        node_kind=kind_name,
        nodes=request.nodes,
        ranks_per_node=ranks_per_node,
        framework=request.framework,
        mode=mode,
        distributed=distributed,
        precision=request.precision,
        threads_per_rank=threads,
        ranks=ranks,
        env=env,
        launcher=site.launcher,
        launcher_argv=(),
        notes=tuple(notes),
    )
    from hpcdl.launchers import launcher_for

    return _with_launcher_argv(plan, tuple(launcher_for(site.launcher).command(plan, site)))


def _with_launcher_argv(plan: Plan, argv: tuple[str, ...]) -> Plan:
    from dataclasses import replace

    return replace(plan, launcher_argv=argv)


def _resolve_mode(mode: str, use_gpus: bool) -> str:
    if mode == "auto":
        # GPU nodes: one rank per GPU (OLCF Summit guide, NERSC Perlmutter, Horovod docs).
        # CPU nodes: ranks per socket from the profile (TACC KNL, Intel TF-on-CPU guidance).
        return "per-gpu" if use_gpus else "per-socket"
    if mode == "per-gpu" and not use_gpus:
        raise HpcdlError("mode: per-gpu needs a node kind with GPUs")
    return mode


def _ranks_per_node(site: Site, node: NodeKind, request: JobRequest, mode: str, notes: list[str]) -> int:
    usable = node.sockets * node.usable_cores_per_socket
    if request.ranks_per_node is not None:
        rpn = request.ranks_per_node
    elif mode == "per-gpu":
        rpn = len(node.gpus)
        notes.append(f"one rank per GPU: {rpn} ranks per node")
    elif mode == "per-nic":
        if not node.nics:
            raise HpcdlError(f"mode: per-nic needs NICs in the profile of site {site.name!r}")
        # Summit Gordon Bell run (Kurth et al. 2018): one rank per IB port, each reducing a
        # share of the gradients, NCCL inside the node and MPI across nodes.
        rpn = len(node.nics)
        notes.append(f"one rank per NIC port: {rpn} ranks per node (hybrid NCCL inside, MPI across nodes)")
    elif mode == "per-node":
        rpn = 1
    elif mode == "per-core":
        rpn = usable
    else:  # per-socket
        rpn = node.sockets * (node.default_ranks_per_socket or 1)
        notes.append(f"{node.default_ranks_per_socket or 1} rank(s) per socket from the site profile")
    if mode == "per-gpu" and rpn > len(node.gpus):
        raise HpcdlError(
            f"ranks_per_node: {rpn} ranks do not fit one rank per GPU on a node with {len(node.gpus)} GPUs; "
            f"ask for at most {len(node.gpus)} ranks per node, or --mode per-socket"
        )
    if rpn > usable:
        raise HpcdlError(
            f"ranks_per_node: {rpn} ranks need a core each but a {site.name} node has {usable} usable cores"
        )
    return rpn


def _sockets_of_local_ranks(node: NodeKind, mode: str, rpn: int, use_gpus: bool) -> tuple[int, ...]:
    if use_gpus and mode == "per-gpu" and rpn <= len(node.gpus):
        # each rank on the socket of its GPU
        gpus = _gpus_by_socket(node)
        return tuple(node.gpus[g].socket for g in gpus[:rpn])
    if mode == "per-nic" and rpn <= len(node.nics):
        order = sorted(range(len(node.nics)), key=lambda i: (node.nics[i].socket, i))
        return tuple(node.nics[i].socket for i in order[:rpn])
    # spread evenly, socket-major: ranks 0..k-1 on socket 0, and so on
    return tuple(lr * node.sockets // rpn for lr in range(rpn))


def _gpus_by_socket(node: NodeKind) -> list[int]:
    return sorted(range(len(node.gpus)), key=lambda i: (node.gpus[i].socket, i))


def _cores_of_local_ranks(node: NodeKind, sockets: tuple[int, ...], notes: list[str]) -> tuple[tuple[int, ...], ...]:
    """Split each socket's usable cores evenly and contiguously among the ranks on it."""
    cores: list[tuple[int, ...]] = [()] * len(sockets)
    for s in range(node.sockets):
        on_socket = [lr for lr, sock in enumerate(sockets) if sock == s]
        if not on_socket:
            continue
        per_rank = node.usable_cores_per_socket // len(on_socket)
        if per_rank < 1:
            raise HpcdlError(
                f"ranks_per_node: {len(on_socket)} ranks on socket {s} but it has "
                f"{node.usable_cores_per_socket} usable cores"
            )
        first = s * node.cores_per_socket
        for i, lr in enumerate(on_socket):
            cores[lr] = tuple(range(first + i * per_rank, first + (i + 1) * per_rank))
    if node.reserved_cores_per_socket:
        notes.append(f"{node.reserved_cores_per_socket} core(s) per socket left to the OS and MPI progress")
    return tuple(cores)


def _gpus_of_local_ranks(node: NodeKind, mode: str, sockets: tuple[int, ...], use_gpus: bool) -> tuple[tuple[int, ...], ...]:
    if not use_gpus:
        return tuple(() for _ in sockets)
    if mode == "per-gpu":
        order = _gpus_by_socket(node)
        return tuple((order[lr],) for lr in range(len(sockets)))
    # fewer ranks than GPUs: each rank drives the GPUs of its socket, shared out evenly
    result = []
    for lr, s in enumerate(sockets):
        peers = [p for p, ps in enumerate(sockets) if ps == s]
        mine = [g for g in _gpus_by_socket(node) if node.gpus[g].socket == s]
        share = len(mine) // len(peers) if peers else 0
        i = peers.index(lr)
        result.append(tuple(mine[i * share : (i + 1) * share]) if share else tuple(mine[:1]))
    return tuple(result)


def _nics_of_local_ranks(node: NodeKind, sockets: tuple[int, ...]) -> tuple[str | None, ...]:
    """The NIC port nearest each rank: one on its socket, shared round-robin among its peers."""
    if not node.nics:
        return tuple(None for _ in sockets)
    result = []
    for lr, s in enumerate(sockets):
        near = [n for n in node.nics if n.socket == s] or list(node.nics)
        peers = [p for p, ps in enumerate(sockets) if ps == s]
        nic = near[peers.index(lr) % len(near)]
        result.append(f"{nic.device}:{nic.port}")
    return tuple(result)


def _threads_per_rank(node: NodeKind, request: JobRequest, cores_per_rank: int, notes: list[str]) -> int:
    hw_threads = cores_per_rank * node.threads_per_core
    if request.threads_per_rank is not None:
        threads = request.threads_per_rank
    elif node.default_threads_per_rank is not None:
        threads = min(node.default_threads_per_rank, cores_per_rank)
        notes.append(f"{threads} OpenMP threads per rank from the site profile")
    else:
        # one thread per physical core: extra hardware threads were slower for MKL-DNN on
        # KNL (TACC Stampede2 study) and Intel's CPU guidance sets intra-op = physical cores.
        threads = cores_per_rank
    if threads > hw_threads:
        raise HpcdlError(
            f"threads_per_rank: {threads} threads but each rank has {cores_per_rank} cores "
            f"x {node.threads_per_core} hardware threads = {hw_threads}"
        )
    return threads


def _resolve_distributed(request: JobRequest, use_gpus: bool) -> str:
    if request.distributed != "auto":
        if request.distributed == "nccl" and not use_gpus:
            raise HpcdlError("distributed: nccl needs GPUs; use gloo or mpi on CPU nodes")
        return request.distributed
    return "nccl" if use_gpus else "gloo"
