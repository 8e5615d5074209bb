"""From a site, a plan and a net to the model's Machine and Workload (pure: no I/O).

The rank's compute rate: the site's calibration (its validation throughput check) where
there is one for this kind of rank, else the reference table (hpcdl.predict.devices). The
links: the calibration's (its collectives check) where measured, else the profile's fabric
facts (hpcdl.predict.fabric).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from hpcdl.plan.model import Plan
from hpcdl.predict.calibration import Calibration
from hpcdl.predict.costs import NetCost, net_cost
from hpcdl.predict.devices import CPU_TABLE, DEFAULT_CORE_STREAM_GBYTE_S, cpu_rate, gpu_rate
from hpcdl.predict.fabric import HOROVOD_CYCLE_S, fabric_of, host_limited, library_overhead_s
from hpcdl.predict.model import DDP_BUCKET_BYTES, HOROVOD_FUSION_BYTES, OVERLAP_SLOWDOWN_GPU, Machine, Workload
from hpcdl.errors import HpcdlError
from hpcdl.nets import load_net
from hpcdl.sites.schema import Site


# The spread of one GPU's time per iteration where the site measured none: a published measurement stands in.
# TACC's "TensorFlow at TACC" guide (portal.tacc.utexas.edu/software/tensorflow, Longhorn section, run of
# 2020-06-04) shows tf_cnn_benchmarks training ResNet-50 on one V100 at batch 32: "images/sec: 343.4 +/- 0.3
# (jitter = 3.6)", where tf_cnn_benchmarks' jitter is 1.4826 x the median absolute deviation of the per-step
# rate (benchmark_cnn.py): a robust standard deviation of single iterations, 3.6 / 343.4 = 1.05 % of the mean.
# Every synchronous step waits for the slowest of N such GPUs (hpcdl.predict.model.slowest_rank_wait).
PUBLISHED_GPU_JITTER = 3.6 / 343.4
PUBLISHED_GPU_JITTER_SOURCE = (f"{PUBLISHED_GPU_JITTER:.2%} spread of one GPU's time per iteration, published (TACC's "
                               "TensorFlow guide: one V100, ResNet-50, batch 32, tf_cnn_benchmarks' per-step jitter "
                               "3.6 at 343.4 images/s), not measured on this site (hpcdl validate's scaling check "
                               "measures it; predict with --calibration)")


class NoReferenceRate(HpcdlError):
    """The device has neither a row in the rate table nor a site calibration: nothing to predict
    from. `hpcdl predict` stops with it; a plan shown with --recipe says it and stands."""


@dataclass(frozen=True)
class Options:
    """How gradients travel; None means the framework's default for the plan's distribution."""

    bucket_mb: float | None = None  # 0: one allreduce per layer (Caffe with Intel MLSL)
    fp16_allreduce: bool = False  # Horovod's Compression.fp16: half the bytes on the wire
    overlap: bool = True
    library: str | None = None  # nccl, gloo, mpi, horovod (default: the plan's distribution)
    hierarchical: bool | None = None
    cpu_share: float | None = None  # of a core per thread on a shared host (measured by hpcdl validate)
    spatial_ways: int = 1  # ranks sharing each sample (the recipe's spatial.ways)
    # the algorithms the library had in the version used, where fewer than today's (NCCL before 2.4,
    # February 2019, had its ring only: the double binary tree came with 2.4)
    algorithms: tuple[str, ...] | None = None
    cycle_ms: float | None = None  # HOROVOD_CYCLE_TIME where not today's 1 ms default (5 ms in the 2018 releases)
    # the study's own single-device training rate, where it publishes one: (images/s, per-device batch,
    # where it was published). It stands in for the reference table, so a study's absolute images/s is
    # predicted from the setup it ran (its framework, data path and precision), not from another benchmark's
    device_rate: tuple[float, int, str] | None = None
    notes: tuple[str, ...] = field(default=())


@functools.lru_cache(maxsize=1)
def train_flops_table() -> dict[str, float]:
    from hpcdl.nets import list_nets

    return {n: net_cost(load_net(n)).train_flops for n in list_nets()}


def library_of(plan: Plan, options: Options) -> str:
    if options.library:
        return options.library
    return plan.distributed if plan.distributed in ("nccl", "gloo", "mpi", "horovod") else "gloo"


def machine_for(site: Site, plan: Plan, calibration: Calibration | None = None, options: Options = Options(),
                net: NetCost | None = None) -> Machine:
    """The rank's rate and links; `net`, where given, picks a device's own published rate for that net."""
    kind, node = site.node_kind(plan.node_kind)
    rank = plan.local_ranks()[0]
    library = library_of(plan, options)
    fabric = fabric_of(node)
    cpu = cpu_rate(node.cpu_model, node.cpu_target)
    core = cpu.core_stream_gbyte_s if cpu else DEFAULT_CORE_STREAM_GBYTE_S
    if core:
        fabric = host_limited(fabric, core, cpu_reduces=not rank.gpus)
    intra, inter = fabric.intra, fabric.inter
    wire = "nccl" if library == "horovod" and rank.gpus else library
    # the library's own cost is per collective (a kernel launch, its proxy threads), not per step
    per_collective = library_overhead_s(wire)
    network_source = f"inside: {fabric.intra_source}; across: {fabric.inter_source}"
    measured = calibration.links_for(library) if calibration else {}
    if "intra-node" in measured:
        intra = measured["intra-node"]
    if "inter-node" in measured:
        inter = measured["inter-node"]
    if measured:
        per_collective = 0.0  # the measured small-message times already hold it
        network_source = f"{calibration.source}: {library} collectives ({', '.join(sorted(measured))}); " + network_source
    threads = plan.threads_per_rank
    host_cores = node.sockets * node.usable_cores_per_socket
    gpu = gpu_rate(node.gpus[rank.gpus[0]].model, plan.precision) if rank.gpus else None
    compute = (calibration.compute_for(bool(rank.gpus), net.name if net else None, plan.precision)
               if calibration else None)
    if cpu is None and not rank.gpus and compute is None:
        raise NoReferenceRate(f"no reference rate for CPU: cpu_target {node.cpu_target!r} (cpu_model {node.cpu_model!r}) "
                         f"of node kind {kind!r}; run `hpcdl validate` on the site and predict with --calibration")
    # what the optimizer update streams through (an unknown device with a calibration: the AVX2 row's, a floor)
    memory = gpu.memory_gbyte_s if gpu else (cpu or CPU_TABLE[-1]).memory_gbyte_s
    if compute is not None:
        # measured per rank of `threads` threads (CPU) or per GPU: the same work per thread or GPU here
        scale = 1.0 if rank.gpus else threads / compute.threads_per_rank
        flops, half, source = compute.flops_per_s * scale, compute.batch_half(threads), compute.source
        if net is not None and compute.net != net.name:
            source += f" (measured on {compute.net}; {net.name} taken at the same FLOP rate)"
        if compute.precision != plan.precision:
            source += f" (measured at {compute.precision}, not {plan.precision})"
    elif options.device_rate and net is not None:
        images, batch, where = options.device_rate
        half = gpu.batch_half if gpu else (5.0 if rank.gpus else max(1.0, threads / 4))
        flops = images * net.train_flops / (batch / (batch + half)) * max(1, len(rank.gpus))
        source = f"measured in the study itself: {images:g} images/s on one device at batch {batch} ({where})"
    elif rank.gpus:
        if gpu is None:
            model = node.gpus[rank.gpus[0]].model
            raise NoReferenceRate(f"no reference rate for GPU model {model!r} (gpus[].model of node kind "
                             f"{kind!r}) at {plan.precision}; run `hpcdl validate` on the site and predict "
                             "with --calibration")
        name = net.name if net else None
        flops = gpu.train_flops_per_s(train_flops_table(), name, net.train_flops if net else None) * len(rank.gpus)
        half, source = gpu.batch_half, gpu.source_for(name)
    else:
        cores = min(threads, len(rank.cores)) if threads else len(rank.cores)
        flops = cpu.peak_tflops * 1e12 * (cpu.efficiency or 0.4) * cores
        half = max(1.0, threads / 4)
        source = f"{cpu.key}: {cpu.source} x {cores} core(s)"
    shared = node.nodes_per_host > 1
    jitter = compute.iteration_jitter if compute is not None else 0.0
    if jitter:
        jitter_source = f"{jitter:.1%} spread of a rank's time per iteration ({compute.source})"
    elif rank.gpus:
        jitter, jitter_source = PUBLISHED_GPU_JITTER, PUBLISHED_GPU_JITTER_SOURCE
    else:
        jitter_source = ("not counted: no per-iteration spread measured for this site (hpcdl validate's scaling check "
                         "measures it; predict with --calibration)")
    nic = node.nics[0] if node.nics else None
    return Machine(
        rank_flops_per_s=flops, batch_half=half, memory_gbyte_s=memory, intra=intra, inter=inter,
        rails=fabric.rails, host_cores=host_cores if shared and not rank.gpus else 0,
        nodes_per_host=node.nodes_per_host, threads_per_rank=threads, measured_cpu_share=options.cpu_share,
        compute_source=source, network_source=network_source, per_collective_s=per_collective,
        overlap_slowdown=OVERLAP_SLOWDOWN_GPU if rank.gpus else 0.0,
        iteration_jitter=jitter, jitter_source=jitter_source,
        leaf_nodes=(nic.leaf_nodes or 0) if nic else 0, taper=(nic.taper or 1.0) if nic else 1.0,
    )


def workload_for(plan: Plan, net: NetCost, batch_per_rank: int, options: Options = Options()) -> Workload:
    library = library_of(plan, options)
    if options.bucket_mb is not None:
        bucket = options.bucket_mb * 2**20
    else:
        bucket = HOROVOD_FUSION_BYTES if library == "horovod" else DDP_BUCKET_BYTES
    cycle = options.cycle_ms / 1e3 if options.cycle_ms else HOROVOD_CYCLE_S
    algorithms_library = library
    if library == "horovod" and options.hierarchical is False:
        algorithms_library = "nccl"
    return Workload(
        net=net, batch_per_rank=batch_per_rank, library=algorithms_library, bucket_bytes=bucket,
        gradient_bytes_per_parameter=2.0 if options.fp16_allreduce else 4.0, overlap=options.overlap,
        algorithms=options.algorithms,
        per_bucket_wait_s=cycle / 2 if library == "horovod" else 0.0,
        cycle_s=cycle if library == "horovod" else 0.0, spatial_ways=options.spatial_ways,
    )
