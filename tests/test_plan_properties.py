"""Properties every plan keeps, over generated sites and requests (hypothesis).

On any node the planner accepts:
  - no core is shared by two ranks of a node, and no reserved core is used;
  - in one-rank-per-GPU mode no GPU is given twice;
  - a rank's cores lie on its socket, and its GPUs and NIC too whenever the node has one there (the
    one rank of per-node mode holds every usable core of the node);
  - a rank runs no more threads than its cores can (one per core unless more were asked for);
  - a rank's CPUs, and srun's -c, count the hardware threads the scheduler counts per core;
  - ranks = nodes x ranks per node, numbered node by node, spread evenly over the sockets.
What it refuses, it refuses with an HpcdlError of one line.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.sites.schema import Gpu, Nic, NodeKind, Site


@st.composite
def nodes(draw) -> NodeKind:
    sockets = draw(st.integers(1, 4))
    domains = draw(st.sampled_from([1, 2, 4]))
    cores_per_socket = domains * draw(st.integers(1, 16))
    reserved = draw(st.integers(0, min(2, cores_per_socket - 1)))
    threads = draw(st.sampled_from([1, 2, 4]))
    # the CPUs the batch system counts per core: all hardware threads (Slurm's default) or fewer
    # (a Slurm profile must say which on an SMT node; unset is Slurm's default on a node without SMT)
    counted = draw(st.sampled_from([t for t in (1, 2, 4) if t <= threads]) if threads > 1
                   else st.one_of(st.none(), st.just(1)))

    def device_place():
        return st.integers(0, sockets - 1).flatmap(
            lambda s: st.tuples(st.just(s), st.one_of(st.none(), st.integers(s * domains, (s + 1) * domains - 1)))
        )

    gpu_places = draw(st.lists(device_place(), max_size=8))
    nic_places = draw(st.lists(device_place(), max_size=4))
    kinds = draw(st.sampled_from(["infiniband", "omnipath", "slingshot", "ethernet"]))
    extra_reserved = draw(st.lists(st.integers(0, sockets * cores_per_socket - 1), max_size=3, unique=True))
    node = dict(
        sockets=sockets,
        cores_per_socket=cores_per_socket,
        threads_per_core=threads,
        scheduler_cpus_per_core=counted,
        cpu_numbering=draw(st.sampled_from(["thread-major", "core-major", "socket-interleaved"])),
        memory_gb=64,
        domains_per_socket=domains,
        reserved_cores_per_socket=reserved,
        reserved_cores=tuple(extra_reserved),
        default_ranks_per_socket=draw(st.one_of(st.none(), st.integers(1, 4))),
        gpus=tuple(Gpu(model="g", socket=s, domain=d) for s, d in gpu_places),
        nics=tuple(Nic(kind=kinds, device=f"dev{i}", socket=s, domain=d) for i, (s, d) in enumerate(nic_places)),
    )
    try:
        return NodeKind(**node)
    except ValueError:  # the extra reserved cores took a whole socket: not a node anyone has
        node["reserved_cores"] = ()
        return NodeKind(**node)


@st.composite
def sites(draw) -> Site:
    return Site(
        name="generated",
        scheduler="slurm",
        launcher=draw(st.sampled_from(["srun", "mpirun", "mpiexec", "aprun", "local", "ibrun"])),
        mpi=draw(st.sampled_from(["openmpi", "cray-mpich", "intel-mpi", "mvapich2"])),
        node_kinds={"n": draw(nodes())},
    )


requests = st.builds(
    JobRequest,
    nodes=st.integers(1, 3),
    framework=st.sampled_from(["pytorch", "tensorflow", "mxnet"]),
    ranks_per_node=st.one_of(st.none(), st.integers(1, 12)),
    threads_per_rank=st.one_of(st.none(), st.integers(1, 24)),
    mode=st.sampled_from(["auto", "per-gpu", "per-nic", "per-socket", "per-node", "per-core"]),
    distributed=st.sampled_from(["auto", "gloo", "mpi", "horovod"]),
)


def plan_or_refusal(site, request):
    try:
        return make_plan(site, request)
    except HpcdlError as exc:
        assert str(exc) and "\n" not in str(exc)
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites(), request=requests)
def test_every_plan_keeps_the_placement_rules(site, request):
    plan = plan_or_refusal(site, request)
    if plan is None:
        return
    node = site.node_kinds["n"]

    # ranks = nodes x ranks per node, numbered node by node
    assert len(plan.ranks) == request.nodes * plan.ranks_per_node == plan.world_size
    if request.ranks_per_node is not None:
        assert plan.ranks_per_node == request.ranks_per_node
    assert [r.rank for r in plan.ranks] == list(range(plan.world_size))
    assert all(r.rank == r.node * plan.ranks_per_node + r.local_rank for r in plan.ranks)

    for n in range(request.nodes):
        on_node = [r for r in plan.ranks if r.node == n]
        # no core shared by two ranks of a node; no reserved core used
        cores = [c for r in on_node for c in r.cores]
        assert len(cores) == len(set(cores))
        usable = {c for s in range(node.sockets) for c in node.usable_cores_of_socket(s)}
        assert set(cores) <= usable
        cpus = [c for r in on_node for c in r.cpus]
        assert len(cpus) == len(set(cpus))
        # no GPU given twice in one-rank-per-GPU mode
        if plan.mode == "per-gpu":
            gpus = [g for r in on_node for g in r.gpus]
            assert len(gpus) == len(set(gpus)) == plan.ranks_per_node

    # ranks spread evenly over the sockets: one socket has more than one rank over another only
    # when the other has no device left to build a rank around
    per_socket = [sum(1 for r in plan.local_ranks() if r.socket == s) for s in range(node.sockets)]
    devices = {"per-gpu": node.gpus, "per-nic": node.nics}.get(plan.mode)
    for a in range(node.sockets):
        for b in range(node.sockets):
            if per_socket[a] > per_socket[b] + 1:
                assert devices is not None and per_socket[b] == sum(1 for d in devices if d.socket == b)

    for r in plan.local_ranks():
        assert r.cores, "every rank has at least one core"
        assert len(r.cores) == len(plan.ranks[0].cores), "every rank has the same number of cores"
        if plan.mode == "per-node":
            # the node's one rank holds every usable core of every socket (EPCC ARCHER2: one task of 128 cores)
            assert set(r.cores) == {c for s in range(node.sockets) for c in node.usable_cores_of_socket(s)}
        else:
            # the rank's cores, GPUs and NIC on its socket when the node has them there
            assert {node.socket_of_core(c) for c in r.cores} == {r.socket}
            if any(g.socket == r.socket for g in node.gpus):
                assert all(node.gpus[g].socket == r.socket for g in r.gpus)
            if r.nic is not None and any(nic.socket == r.socket for nic in node.nics):
                nic = next(x for x in node.nics if f"{x.device}:{x.port}" == r.nic)
                assert nic.socket == r.socket
        # threads no more than the cores can run; one per core unless more were asked for
        assert 1 <= r.omp_num_threads <= len(r.cpus)
        if request.threads_per_rank is None:
            assert r.omp_num_threads <= len(r.cores)
        # a rank's CPUs are the hardware threads the scheduler counts: -c is cores x that
        assert r.cpus == tuple(cpu for c in r.cores for cpu in node.cpus_of_core(c)[: node.cpus_per_core])
        assert len(r.cpus) == len(r.cores) * node.cpus_per_core
    if plan.launcher == "srun":
        assert f"--cpus-per-task={len(plan.ranks[0].cpus)}" in plan.launcher_argv


@settings(max_examples=100, deadline=None)
@given(site=sites(), nodes_=st.integers(1, 3))
def test_a_gpu_node_runs_one_rank_per_gpu_by_default_spread_evenly_over_sockets(site, nodes_):
    node = site.node_kinds["n"]
    plan = plan_or_refusal(site, JobRequest(nodes=nodes_))
    if plan is None or not node.gpus:
        return
    assert plan.mode == "per-gpu" and plan.ranks_per_node == len(node.gpus)
    assert sorted(g for r in plan.local_ranks() for g in r.gpus) == list(range(len(node.gpus)))


@settings(max_examples=100, deadline=None)
@given(site=sites(), extra=st.integers(1, 4))
def test_more_ranks_than_gpus_in_per_gpu_mode_is_always_refused(site, extra):
    node = site.node_kinds["n"]
    if not node.gpus:
        return
    try:
        make_plan(site, JobRequest(mode="per-gpu", ranks_per_node=len(node.gpus) + extra))
    except HpcdlError as exc:
        assert "ranks_per_node" in str(exc)
    else:
        raise AssertionError("planned more ranks than GPUs in per-gpu mode")
