"""One training iteration, predicted: compute, gradient allreduce per bucket, overlap, data, update.

Pure functions of data: the machine (rates and links), the placement (nodes x ranks per
node) and the workload (net costs, batch, how gradients are bucketed). No I/O.

    time per iteration = data (the part prefetching does not hide)
                       + forward + backward (slowed while an allreduce shares the GPU with it)
                       + halo exchange (spatial parallelism)
                       + exposed communication (what is left of the allreduce after backward ends)
                       + optimizer update
                       + the wait for the slowest rank (expected maximum of the ranks' measured jitter)

Backward produces gradients from the last layer to the first; the framework packs them into
buckets (PyTorch DDP, 25 MiB) or fusion buffers (Horovod, HOROVOD_FUSION_THRESHOLD) or
sends each layer's (Caffe with Intel MLSL). A bucket's allreduce starts when its last
gradient is ready and the previous bucket's allreduce is done, so the allreduce overlaps the
rest of backward; the model follows that timeline bucket by bucket, because at scale a
stream of small buckets is latency-bound (ring latency grows with p, a tree's with lg p).
Horovod's background thread hands each fused buffer to the GPU's stream at its cycle and goes on
(a finalizer thread waits for the allreduce), so a buffer's wait for its cycle overlaps the
allreduces already queued on the stream rather than adding to them.
While a bucket's allreduce runs on a GPU, backward runs at 1/(1 + OVERLAP_SLOWDOWN_GPU) of
its speed (the collective's kernels share the SMs and memory bandwidth), which moves the
later buckets' ready times and the end of backward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from statistics import NormalDist

from hpcdl.errors import HpcdlError
from hpcdl.predict.collectives import LIBRARY_ALGORITHMS, Link, Topology, best_allreduce
from hpcdl.predict.costs import NetCost

DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel bucket_cap_mb=25
HOROVOD_FUSION_BYTES = 128 * 2**20  # HOROVOD_FUSION_THRESHOLD default (horovod/common/common.h)
# Backward runs slower while an allreduce overlaps it on the same GPU: the collective's kernels take
# SMs and, above all, memory bandwidth (NCCL stores each byte it receives and reads it back: 2-3x
# the link's bytes in memory traffic, NCCL's maintainer in NVIDIA/nccl#1428). Lee et al.,
# "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning"
# (arXiv:2507.03114, 2025) measured it on A100, H100, MI250 and MI210: compute overlapped with
# communication ran on average 18.9 % slower (40 % at most) than alone. Their average, not fitted here.
OVERLAP_SLOWDOWN_GPU = 0.189
UPDATE_BYTES_PER_PARAMETER = 20  # SGD with momentum: read w, g, v and write w, v, fp32


class BatchTooSmall(HpcdlError, ValueError):
    """Strong scaling asked for more ranks (spatial groups) than the fixed global batch has samples."""


@dataclass(frozen=True)
class Machine:
    """What one rank can do and how ranks reach each other."""

    rank_flops_per_s: float  # sustained training FLOP/s of one rank at a large batch
    batch_half: float  # per-rank batch at which a rank runs at half that rate
    memory_gbyte_s: float  # what the optimizer update streams through
    intra: Link
    inter: Link
    rails: int = 1
    host_cores: int = 0  # cores of one physical host, for pretend nodes sharing it (0: no sharing)
    nodes_per_host: int = 1
    threads_per_rank: int = 1
    measured_cpu_share: float | None = None  # share of a core per thread measured on a shared host
    compute_source: str = ""
    network_source: str = ""
    per_collective_s: float = 0.0  # the library's own cost once per allreduce (NCCL's kernel launch)
    # how much slower backward runs while a collective shares the device with it (its kernels take
    # SMs and memory bandwidth): 0.189 = 18.9 % slower on GPUs (OVERLAP_SLOWDOWN_GPU), 0 on CPU ranks
    overlap_slowdown: float = 0.0
    # the spread of one rank's time per iteration, as a fraction of it (standard deviation / mean), measured
    # by the validation suite's scaling check on the site; 0 where nothing was measured (no wait counted)
    iteration_jitter: float = 0.0
    jitter_source: str = ""
    # the fabric above the node: nodes under one leaf switch and the leaf's taper (downlink : uplink
    # bandwidth; 1 = non-blocking). A job wider than one leaf sends its inter-node bytes through the
    # uplinks at 1/taper of the NIC rate. 0 nodes: not known, no contention counted
    leaf_nodes: int = 0
    taper: float = 1.0
    # decode and augment rate of one host core (images/s) and the cores a node gives the data pipeline;
    # 0: not known, the input assumed hidden behind compute
    decode_images_per_core_s: float = 0.0
    data_cores_per_node: int = 0


@dataclass(frozen=True)
class Workload:
    net: NetCost
    batch_per_rank: int
    library: str = "nccl"  # nccl, gloo, mpi or horovod: which algorithms are on offer
    bucket_bytes: float = DDP_BUCKET_BYTES  # 0: one allreduce per layer
    gradient_bytes_per_parameter: float = 4.0  # 2 with fp16 gradient compression
    overlap: bool = True
    per_bucket_wait_s: float = 0.0  # Horovod: half a background cycle before each fused buffer
    cycle_s: float = 0.0  # Horovod's background cycle (HOROVOD_CYCLE_TIME): fusion closes each cycle
    data_s: float = 0.0  # input pipeline time per iteration not hidden by prefetching
    spatial_ways: int = 1  # ranks sharing each sample, one slab each (spatial parallelism)
    algorithms: tuple[str, ...] | None = None  # the library version's menu where narrower than LIBRARY_ALGORITHMS


@dataclass(frozen=True)
class Iteration:
    nodes: int
    ranks: int
    ranks_per_node: int
    batch_per_rank: int
    global_batch: int
    compute_s: float  # forward + backward, backward slowed where collectives overlap it (contention_s of it)
    comm_s: float  # all allreduces end to end, as if nothing overlapped
    exposed_comm_s: float
    data_s: float
    update_s: float
    time_per_iter_s: float
    images_per_sec: float
    buckets: int
    algorithm: str
    efficiency: float | None = None
    contention_s: float = 0.0  # what collectives sharing the device added to backward (part of compute_s)
    straggler_s: float = 0.0  # the wait for the slowest rank (expected maximum of the ranks' jitter)
    halo_s: float = 0.0  # spatial parallelism: the halo exchange between the slabs of a sample, forward and backward

    def to_dict(self) -> dict:
        return asdict(self)


def compute_time(machine: Machine, net: NetCost, batch: int, nodes: int, ranks_per_node: int,
                 ways: int = 1) -> float:
    """Forward + backward of `batch` samples, each cut into `ways` slabs of which this rank computes one.

    A rank's rate depends on how much parallel work fills the device: `batch / ways` samples' worth
    (a slab is 1/ways of a sample), at `b / (b + batch_half)` of the large-batch rate (slab efficiency).
    """
    work = batch / ways
    at_batch = work / (work + machine.batch_half)
    t = work * net.train_flops / (machine.rank_flops_per_s * at_batch)
    return t / cpu_share(machine, nodes, ranks_per_node)


def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals], Blom's approximation Phi^-1((n - 0.375) / (n + 0.25)):
    0 for one rank, 0.59 for 2 (exactly 1/sqrt(pi) = 0.56), 1.43 for 8, 3.03 for 512; never falls with n."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def slowest_rank_wait(jitter: float, iteration_s: float, ranks: int) -> float:
    """What a synchronous step waits beyond the mean rank: the expected maximum of `ranks` iteration
    times of spread `jitter` x `iteration_s` (every rank waits at the allreduce for the last one)."""
    return jitter * iteration_s * expected_max_normal(ranks)


def leaf_limited(link: Link, nodes: int, leaf_nodes: int, taper: float) -> Link:
    """The inter-node link of a job spanning `nodes`: past one leaf switch of `leaf_nodes` its bytes share
    the leaf's uplinks, 1/taper of the nodes' injection bandwidth (never faster than within the leaf)."""
    if not leaf_nodes or nodes <= leaf_nodes or taper <= 1.0:
        return link
    return Link(link.alpha_s, link.beta_s_per_byte * taper, link.gamma_s_per_byte)


def halo_time(link: Link, net: NetCost, samples: int, ways: int) -> float:
    """Spatial parallelism: per layer with a halo, a slab sends its edge rows to each of its (up to two)
    neighbours and receives theirs, forward and again for the gradient in backward (Dryden et al.,
    IPDPS 2019). Counted in full: the trainer's overlap of the interior is not credited."""
    if ways <= 1:
        return 0.0
    neighbours = 2 if ways > 2 else 1
    return sum(2 * neighbours * (link.alpha_s + samples * layer.halo_bytes * link.beta_s_per_byte)
               for layer in net.layers if layer.halo_bytes)


def data_time(machine: Machine, images_per_node: float, compute_s: float) -> float:
    """The input pipeline's part of an iteration that prefetching cannot hide: the node's images at the
    data cores' decode rate, beyond the compute it overlaps."""
    if not machine.decode_images_per_core_s or not machine.data_cores_per_node:
        return 0.0
    decode = images_per_node / (machine.decode_images_per_core_s * machine.data_cores_per_node)
    return max(0.0, decode - compute_s)


def cpu_share(machine: Machine, nodes: int, ranks_per_node: int) -> float:
    """The fraction of a core each thread gets where ranks share a host's cores.

    Measured, where the validation runner sampled the host while the job ran (other people's
    work on a development machine; hpcdl.predict.host). Else pretend nodes on one host: with
    more threads than cores the fair scheduler gives each cores/threads of one.
    """
    if machine.measured_cpu_share is not None:
        return max(1e-3, min(1.0, machine.measured_cpu_share))
    if not machine.host_cores:
        return 1.0
    on_host = min(nodes, machine.nodes_per_host) * ranks_per_node * machine.threads_per_rank
    return min(1.0, machine.host_cores / on_host)


def buckets(net: NetCost, bucket_bytes: float, bytes_per_parameter: float,
            cycle_fraction: float = 0.0) -> list[tuple[float, float]]:
    """(fraction of backward done when the bucket is ready, its bytes), in the order they are sent.

    A bucket closes when it holds `bucket_bytes` (DDP's bucket, Horovod's fusion threshold;
    0: every layer alone). With `cycle_fraction` (Horovod's background cycle as a fraction of
    the backward pass) a buffer also closes at the end of each cycle with whatever is ready:
    Horovod fuses only the tensors that became ready within one cycle.
    """
    out: list[tuple[float, float]] = []
    filled, ready = 0.0, 0.0
    for fraction, params in net.gradient_ready():
        if filled and cycle_fraction and int(fraction / cycle_fraction) > int(ready / cycle_fraction):
            out.append((ready, filled))
            filled = 0.0
        filled += params * bytes_per_parameter
        ready = fraction
        if filled >= bucket_bytes:
            out.append((ready, filled))
            filled = 0.0
    if filled:
        out.append((ready, filled))
    return out


def advance(clock: float, work: float, busy: list[tuple[float, float]], slowdown: float) -> float:
    """The wall time at which `work` more seconds of backward are done, starting at `clock`.

    Backward runs at full speed, and at 1/(1 + slowdown) of it while a collective in `busy`
    (start, end spans, in order, not overlapping) shares the device.
    """
    for start, end in busy:
        if end <= clock:
            continue
        if start > clock:
            if work <= start - clock:
                return clock + work
            work -= start - clock
            clock = start
        span = (end - clock) / (1 + slowdown)
        if work <= span:
            return clock + work * (1 + slowdown)
        work -= span
        clock = end
    return clock + work


def predict_iteration(machine: Machine, work: Workload, nodes: int, ranks_per_node: int) -> Iteration:
    ranks = nodes * ranks_per_node
    # a spatial group's ranks each compute one slab of every sample: 1/ways of the work, at the rate a
    # device reaches with that much work (slab efficiency), and exchange halo rows with their neighbours
    ways = work.spatial_ways
    compute = compute_time(machine, work.net, work.batch_per_rank, nodes, ranks_per_node, ways)
    halo = halo_time(machine.intra, work.net, work.batch_per_rank, ways)
    backward = compute * 2 / 3
    inter = leaf_limited(machine.inter, nodes, machine.leaf_nodes, machine.taper)
    topo = Topology(nodes, ranks_per_node, machine.intra, inter, machine.rails)
    algorithms = tuple(a for a in LIBRARY_ALGORITHMS[work.library] if work.algorithms is None or a in work.algorithms)
    comm_end, comm_total, chosen = 0.0, 0.0, {}
    cycle = work.cycle_s / backward if work.cycle_s and backward else 0.0
    plan = buckets(work.net, work.bucket_bytes, work.gradient_bytes_per_parameter, cycle) if ranks > 1 else []
    slow = machine.overlap_slowdown if work.overlap else 0.0
    busy: list[tuple[float, float]] = []  # the collectives' kernels' spans, in wall time from the start of backward
    clock, done = 0.0, 0.0  # wall time and backward work (unslowed seconds) done by then
    for fraction, size in plan:
        t, name = best_allreduce(size, topo, algorithms)
        t += machine.per_collective_s
        if work.overlap:
            clock, done = advance(clock, fraction * backward - done, busy, slow), fraction * backward
            ready = clock
        else:
            ready = backward
        # Horovod's wait for its cycle delays when the buffer is handed to the stream, not the stream:
        # its background thread enqueues the NCCL allreduce and goes on (a finalizer thread waits for it),
        # so a buffer waiting for its cycle overlaps the allreduces already queued
        start = max(comm_end, ready + work.per_bucket_wait_s)
        comm_end = start + t
        busy.append((start, comm_end))  # the collective's kernels' span (the cycle's wait takes no SMs)
        comm_total += t + work.per_bucket_wait_s  # end to end as before: the waits with the allreduces
        chosen[name] = chosen.get(name, 0.0) + size
    backward_end = advance(clock, backward - done, busy, slow) if work.overlap else backward
    contention = backward_end - backward
    exposed = max(0.0, comm_end - backward_end) if plan else 0.0
    update = work.net.parameters * UPDATE_BYTES_PER_PARAMETER / (machine.memory_gbyte_s * 1e9)
    global_batch = ranks * work.batch_per_rank // ways
    data = work.data_s + data_time(machine, global_batch / nodes, compute)
    straggler = slowest_rank_wait(machine.iteration_jitter, compute, ranks)
    compute += contention
    total = data + compute + halo + exposed + update + straggler
    return Iteration(
        nodes=nodes, ranks=ranks, ranks_per_node=ranks_per_node, batch_per_rank=work.batch_per_rank,
        global_batch=global_batch, compute_s=compute, comm_s=comm_total, exposed_comm_s=exposed, data_s=data,
        update_s=update, time_per_iter_s=total, images_per_sec=global_batch / total, buckets=len(plan),
        algorithm=max(chosen, key=chosen.get) if chosen else "none", contention_s=contention,
        straggler_s=straggler, halo_s=halo,
    )


def scaling(machine: Machine, work: Workload, ranks_per_node: int, nodes: list[int], mode: str,
            global_batch: int | None = None) -> list[Iteration]:
    """Weak (batch per rank fixed) or strong (global batch fixed) scaling over `nodes`.

    Efficiency is per node against the smallest node count: E(N) = (X(N)/N) / (X(N0)/N0),
    with N0 = 1 when it is in the list (the validation suite's and the papers' definition).
    Strong scaling keeps the global batch of the smallest count (or `global_batch`) and splits
    it over the ranks (over the spatial groups, where a group's ranks share each sample). A count
    whose groups outnumber the batch's samples is refused (BatchTooSmall), never given a larger
    batch; where the batch does not divide evenly, each group gets the floor and the global
    batch the row shows is what was split (never more than asked).
    """
    if mode not in ("weak", "strong"):
        raise ValueError(f"scaling mode {mode!r}: weak or strong")
    nodes = sorted(set(nodes))
    base_nodes = nodes[0]
    ways = work.spatial_ways
    total = global_batch or work.batch_per_rank * base_nodes * ranks_per_node // ways
    if mode == "strong":
        too_many = [n for n in nodes if n * ranks_per_node // ways > total]
        if too_many:
            unit = f"{ways}-way spatial group" if ways > 1 else "rank"
            raise BatchTooSmall(f"strong scaling: the global batch of {total} cannot give each {unit} one sample "
                                f"on {', '.join(str(n) for n in too_many)} node(s) of {ranks_per_node} rank(s); "
                                "drop those counts or raise --global-batch")
    out = []
    for n in nodes:
        groups = n * ranks_per_node // ways
        w = work if mode == "weak" else replace(work, batch_per_rank=total // groups)
        out.append(predict_iteration(machine, w, n, ranks_per_node))
    base = out[0].images_per_sec / base_nodes
    return [replace(it, efficiency=(it.images_per_sec / it.nodes) / base) for it in out]


def time_to_solution(it: Iteration, images: float) -> float:
    return images / it.images_per_sec if it.images_per_sec else math.inf
