"""Published scaling studies, predicted from published hardware facts (never fitted to their curves).

Each case names the machine (a shipped site profile, or one written here from the paper's
hardware description), the net, the batch per node or rank, how gradients travelled, and
the published figure with its source. `docs/predict.md` shows each case predicted beside
published, and tests/test_predict_published.py holds the model to the stated tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from hpcdl.plan import JobRequest
from hpcdl.predict import Options, predict
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site

# Facebook's Big Basin server as Goyal et al. (arXiv:1706.02677, section 5) describe it: 8 NVIDIA
# Tesla P100 (SXM2, NVLink), one 50 Gbit Ethernet NIC per server, Gloo across servers.
# NVLink 1: 4 links of 20 GB/s per direction per P100 (NVIDIA DGX-1 white paper); a NCCL ring
# uses one link per hop.
BIG_BASIN = {
    "name": "bigbasin", "description": "Big Basin (Goyal et al. 2017): 8 x P100 NVLink, 50 GbE", "scheduler": "slurm",
    "launcher": "mpirun", "node_kinds": {"bigbasin": {
        "sockets": 2, "cores_per_socket": 14, "memory_gb": 256, "cpu_target": "broadwell",
        "gpus": [{"model": "Tesla P100-SXM2-16GB", "socket": s} for s in (0, 0, 0, 0, 1, 1, 1, 1)],
        "nics": [{"kind": "ethernet", "device": "eth0", "socket": 0, "gbit_s": 50}],
        "intra_node_link": {"kind": "nvlink", "gbyte_s": 20, "latency_us": 5}}},
}


# Nets the published studies trained that hpcdl does not ship for training (net files by path)
NET_FILES = Path(__file__).parent / "nets"
RESNET101 = str(NET_FILES / "resnet101.yaml")
VGG16 = str(NET_FILES / "vgg16.yaml")


def uber_pascal(rdma: bool) -> dict:
    """Uber's Horovod benchmark servers (Sergeev & Del Balso, arXiv:1802.05799, section 8; the Horovod
    README and docs/benchmarks): 4 Pascal GPUs per server, a 25 Gbit/s network, RoCE (RDMA) or plain
    TCP. The GPUs' link inside the server is not stated: PCIe (hpcdl's default without NVLink)."""
    nic = {"kind": "ethernet", "device": "eth0", "socket": 0, "gbit_s": 25}
    if rdma:
        nic["rdma"] = True
    return {"name": "uber-pascal", "description": "4 x Pascal GPU, 25 GbE" + (" RoCE" if rdma else " TCP"),
            "scheduler": "slurm", "launcher": "mpirun", "node_kinds": {"pascal": {
                "sockets": 2, "cores_per_socket": 14, "memory_gb": 256, "cpu_target": "broadwell",
                "gpus": [{"model": "Tesla P100-PCIE-16GB", "socket": s} for s in (0, 0, 1, 1)], "nics": [nic]}}}


# NVIDIA DGX-1 (P100) as tensorflow.org's benchmarks ran it: 8 P100 SXM2 in NVLink 1's hybrid cube
# mesh (20 GB/s per link per direction; DGX-1 white paper), one server, no network used
DGX1_P100 = {
    "name": "dgx1", "description": "NVIDIA DGX-1: 8 x P100 NVLink", "scheduler": "slurm", "launcher": "mpirun",
    "node_kinds": {"dgx1": {
        "sockets": 2, "cores_per_socket": 20, "memory_gb": 512, "cpu_target": "broadwell",
        "gpus": [{"model": "Tesla P100-SXM2-16GB", "socket": s} for s in (0, 0, 0, 0, 1, 1, 1, 1)],
        "nics": [{"kind": "infiniband", "device": "mlx5_0", "socket": 0}],
        "intra_node_link": {"kind": "nvlink", "gbyte_s": 20, "latency_us": 5}}},
}


# IBM Power System S822LC for HPC ("Minsky") as Cho et al. (arXiv:1708.02188) used 64 of them: two
# POWER8 sockets, 4 P100 SXM2 joined by NVLink 1 (20 GB/s per link per direction, the GPUs in NVLink
# pairs; DGX-1 white paper's link rate), InfiniBand across (EDR 100 Gb/s, hpcdl's InfiniBand default:
# the paper names InfiniBand, the rate is the default's).
MINSKY = {
    "name": "minsky", "description": "IBM S822LC for HPC: 4 x P100 NVLink, InfiniBand", "scheduler": "lsf",
    "launcher": "mpirun", "node_kinds": {"minsky": {
        "sockets": 2, "cores_per_socket": 10, "threads_per_core": 8, "cpu_numbering": "core-major", "memory_gb": 512,
        "cpu_target": "power8", "gpus": [{"model": "Tesla P100-SXM2-16GB", "socket": s} for s in (0, 0, 1, 1)],
        "nics": [{"kind": "infiniband", "device": "mlx5_0", "socket": 0}],
        "intra_node_link": {"kind": "nvlink", "gbyte_s": 20, "latency_us": 5}}},
}


# Horovod as Uber benchmarked it in 2018: NCCL 2 before 2.4 has its ring only (the double binary
# tree came with NCCL 2.4, February 2019), the background cycle was 5 ms (horovod/common/operations.cc
# SetCycleTimeMs(5) before it became 1 ms) and the fusion buffer 64 MB (the paper's section 7).
HOROVOD_2018 = Options(algorithms=("ring",), cycle_ms=5, bucket_mb=64)
# ResNet-101 on 512 GPUs, what was fixed and what is left. Fixed, both from published sources: (1) a flat
# ring charged all 1,022 steps the slower link's latency, where NCCL's own model (src/graph/tuning.cc,
# ncclTopoTuneModel) charges only the 2(N-1) steps between nodes the network's and the 2(p-N) others the
# node's own link's (collectives.ring_over_nodes): 10.2 -> 8.2 ms a buffer; (2) Horovod's half-cycle
# wait was added to the stream of allreduces, where the 2018 background thread (horovod/common/
# operations.cc, 5 ms cycle, 64 MB threshold) enqueues each fused ncclAllReduce and goes on, a detached
# finalizer thread waiting for it: the wait overlaps the allreduces already queued. 45 % -> 62 %.
RING_LATENCY_MISS = ("73 fusion buffers (one per 5 ms cycle of a 371 ms backward; the 2018 Horovod enqueues each "
                     "cycle's buffer without waiting for the last) each pay a 512-rank ring's latency: 768 steps "
                     "inside the servers at PCIe's 10 us default and 254 between them at RoCE's 2 us, 8.2 ms a "
                     "buffer, 0.6 s of allreduce against 0.4 s of backward, so the model predicts 62 %. NCCL's own "
                     "tuning model (src/graph/tuning.cc) gives no less for such a ring: per hop 5.7 us over PCIe "
                     "and 9.6 us over the network with its Simple protocol, 6.8 ms a buffer (13 ms with its 1.9x "
                     "for multi-node messages over 2 MB), or 1.0 (x1.8 across nodes) and 2.7 us with LL, 2.1 ms "
                     "at a quarter of the bandwidth. The published 90 % needs fewer buffers or a shorter ring: "
                     "Horovod's coordinator tick (every rank's requests gathered by rank 0 before the buffer is "
                     "sent) may outlast 5 ms at 512 ranks, and the 2018 code had HOROVOD_HIERARCHICAL_ALLREDUCE "
                     "(NCCL inside the server, MPI across), but neither a tick time nor the use of the hierarchical "
                     "option is published for this run, and neither is credited")
HOROVOD_2018_FACTS = ("Horovod of 2018: NCCL 2 ring only (trees came with NCCL 2.4), 5 ms cycle, 64 MB fusion buffer; "
                      "batch 64 per GPU (the benchmark page's tf_cnn_benchmarks command)")


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    site: str | dict
    net: str
    batch_per_rank: int
    nodes: tuple[int, ...]
    mode: str
    request: dict
    options: Options
    published: dict[int, float]  # nodes -> published efficiency (or speed-up ratio, see `measure`)
    tolerance: float  # absolute, on efficiency
    source: str
    facts: str  # the hardware facts the prediction used
    global_batch: int | None = None
    notes: tuple[str, ...] = field(default=())
    # why the model misses this case, where it does after honest fixes (never a fitted constant):
    # the test accepts its points outside the tolerance only with this reason, shown in the guide
    known_miss: str = ""
    # efficiency against one GPU alone x the GPU count (Horovod's, tensorflow.org's definition), not per node
    against_one_gpu: bool = False


# Caffe on CPU nodes: the solver reduces the gradients after the backward pass. BVLC Caffe's
# layer-wise reduce (SolverParameter.layer_wise_reduce) overlaps only NCCL on a CUDA stream;
# on a CPU rank the adding and (Omni-Path being onload) the copying run on the host's cores.
CAFFE_ON_CPU = Options(bucket_mb=0, library="mpi", overlap=False)
TOLERANCE = 0.10  # absolute, on efficiency: the spread between runs and frameworks in these studies


STAMPEDE2_FACTS = ("Xeon Phi 7250 (68 cores at 1.4 GHz, AVX-512: 6.1 TF fp32 peak), 64 cores for MKL-DNN, one rank "
                   "per node; Intel Omni-Path 100 Gb/s, about 1 us MPI latency")
# the study ran one rank per node, so the cases ask for it (the profile's default is now TACC's 2)
CASES: tuple[Case, ...] = (
    *(Case(f"stampede2-weak-{net}", f"TACC Caffe on Stampede2 KNL, weak scaling, {net}", "stampede2-knl", net, batch,
           (1, 128, 256, 512, 1024), "weak", {"ranks_per_node": 1}, CAFFE_ON_CPU, {512: 0.80}, TOLERANCE,
           "TACC's Caffe (MKL-DNN, Intel MPI) weak-scaling study on Stampede2 KNL, 128-1,024 nodes: about 80 % at "
           "512 nodes", STAMPEDE2_FACTS + f"; batch {batch} per node (the BVLC solver's batch)",
           notes=("efficiency read against one node",))
      for net, batch in (("cifar10_quick", 100), ("caffenet", 256), ("alexnet", 256), ("googlenet", 32))),
    Case("stampede2-strong-caffenet", "TACC Caffe on Stampede2 KNL, strong scaling at fixed mini-batch, CaffeNet",
         "stampede2-knl", "caffenet", 256, (1, 2, 4, 8), "strong", {"ranks_per_node": 1}, CAFFE_ON_CPU, {4: 0.50}, TOLERANCE,
         "TACC's Caffe strong-scaling study on Stampede2 KNL (mini-batch fixed, 1-8 nodes): about 50 % at 4 nodes",
         STAMPEDE2_FACTS + "; global batch 256 (the BVLC CaffeNet solver's) split over the nodes"),
    Case("summit-horovod-resnet50", "Keras + Horovod ResNet-50 on Summit, weak scaling", "summit", "resnet50", 32,
         (1, 2, 4, 8, 16, 32, 64), "weak", {"distributed": "horovod"}, Options(), {64: 0.95}, TOLERANCE,
         "OLCF's Keras + Horovod ResNet-50 on Summit: near-ideal weak scaling to 64 nodes (384 V100)",
         "6 x V100 per node (DeepLearningExamples: 367 images/s fp32 per V100), NVLink 2 inside the node, dual-rail "
         "EDR InfiniBand (4 x 50 Gb/s ports) across; Horovod: 128 MiB fusion, 1 ms cycle, NCCL"),
    Case("goyal-resnet50-8k", "Goyal et al.: ResNet-50, 8k mini-batch on 256 P100 (32 Big Basin servers)", BIG_BASIN,
         "resnet50", 32, (1, 2, 4, 8, 16, 32), "weak", {"distributed": "mpi"}, Options(bucket_mb=0, library="mpi"),
         {32: 0.90}, TOLERANCE,
         "Goyal et al., arXiv:1706.02677: about 90 % scaling efficiency from 8 to 256 GPUs (1 to 32 servers), "
         "32 images per GPU",
         "8 x P100 per server (tf_cnn_benchmarks: 219 images/s fp32 per P100), NVLink 1 (20 GB/s per link), one "
         "50 Gbit Ethernet NIC per server (TCP: a host core copies each byte); per-layer allreduce overlapped with "
         "backward (the paper's section 4): NCCL inside, Gloo recursive halving/doubling across"),
    *(Case(f"horovod-{net_key}-{gpus}", f"Horovod (Uber): {label} on {gpus} Pascal GPUs, 25 GbE with RoCE",
           uber_pascal(rdma=True), net, 64, (1, gpus // 4), "weak", {"distributed": "horovod"}, HOROVOD_2018,
           {gpus // 4: published}, TOLERANCE, source,
           "4 x P100 per server (tensorflow.org benchmarks, tf_cnn_benchmarks on one P100: ResNet-50 219 images/s, "
           "VGG16 154), PCIe inside the server (no NVLink stated), one 25 Gbit/s Ethernet port with RoCE (RDMA: the "
           "NIC moves the bytes); " + HOROVOD_2018_FACTS,
           notes=("efficiency against one GPU alone x the GPU count, as Horovod's figures are",), known_miss=miss,
           against_one_gpu=True)
      for net_key, net, label, gpus, published, source, miss in (
          ("resnet101", RESNET101, "ResNet-101", 128, 0.90,
           "Horovod README as of early 2018 (github.com/uber/horovod, kept in its forks): 32 servers with 4 Pascal GPUs each, RoCE-capable "
           "25 Gbit/s network: 90 % scaling efficiency for Inception V3 and ResNet-101", ""),
          ("vgg16", VGG16, "VGG-16", 128, 0.79,
           "Horovod README (2018): the same 128 GPUs: 79 % scaling efficiency for VGG-16", ""),
          ("resnet101", RESNET101, "ResNet-101", 512, 0.90,
           "Horovod docs, Benchmarks page (docs/benchmarks.rst): 128 servers with 4 Pascal GPUs each, RoCE-capable "
           "25 Gbit/s network: 90 % scaling efficiency for Inception V3 and ResNet-101", RING_LATENCY_MISS),
          ("vgg16", VGG16, "VGG-16", 512, 0.68,
           "Horovod docs, Benchmarks page: the same 512 GPUs: 68 % scaling efficiency for VGG-16", ""))),
    Case("horovod-tcp-resnet101-128", "Horovod (Uber): ResNet-101 on 128 Pascal GPUs, 25 GbE with plain TCP",
         uber_pascal(rdma=False), RESNET101, 64, (1, 32), "weak", {"distributed": "horovod"}, HOROVOD_2018, {32: 0.88},
         TOLERANCE,
         "Sergeev & Del Balso, arXiv:1802.05799, section 8 (Figures 6-7): Horovod over plain 25GbE TCP, 128 "
         "Pascal GPUs: 88 % scaling efficiency for Inception V3 and ResNet-101",
         "as the RoCE case, but TCP: a host core copies every byte through the kernel (about 10 us per message); "
         + HOROVOD_2018_FACTS,
         notes=("efficiency against one GPU alone x the GPU count, as Horovod's figures are",), against_one_gpu=True),
    Case("tf-dgx1-vgg16", "tensorflow.org benchmarks: VGG16 on one DGX-1, 1 to 8 P100 (replicated, NCCL allreduce)",
         DGX1_P100, VGG16, 64, (1,), "weak", {"distributed": "nccl"}, Options(bucket_mb=0, library="nccl"), {1: 1081 / (8 * 154)},
         TOLERANCE,
         "tensorflow.org Performance Benchmarks (TensorFlow 1.1, May 2017), Details for NVIDIA DGX-1: VGG16, synthetic "
         "data, batch 64 per GPU, variable_update replicated with NCCL: 154 images/s on 1 GPU, 1,081 on 8 (88 %)",
         "DGX-1: 8 x P100 SXM2 (the same table: 154 images/s for VGG16 on one), NVLink 1 (20 GB/s per link); "
         "one NCCL allreduce per variable as backward produces it (TensorFlow's dataflow)",
         notes=("efficiency against one GPU alone x 8",), against_one_gpu=True,
         known_miss="the model hides all 50 ms of the 553 MB ring allreduce behind VGG16's 277 ms backward (fc6's "
         "gradient is ready almost at once); the 18.9 % slowdown of backward while NCCL shares the GPU (Lee et al. "
         "2025's measured average) costs 8 ms of it, so the model predicts 98 %, where the published 88 % says about "
         "55 ms per iteration were lost. Without overlap the model gives 89 %, but that TensorFlow 1.1's replicated "
         "mode did not overlap is not published"),
    Case("powerai-ddl-resnet50-256", "Cho et al. (IBM PowerAI DDL): ResNet-50 in Caffe on 256 P100 (64 Minsky servers)",
         MINSKY, "resnet50", 32, (1, 2, 4, 8, 16, 32, 64), "weak", {"distributed": "mpi"},
         Options(bucket_mb=0, library="mpi"), {64: 0.95}, TOLERANCE,
         "Cho et al., PowerAI DDL, arXiv:1708.02188 (and IBM's announcement, 2017-08-08): 95 % scaling efficiency "
         "on 256 P100 GPUs (64 S822LC servers) with Caffe, against Goyal et al.'s 89 %",
         "4 x P100 SXM2 per server (tf_cnn_benchmarks: 219 images/s fp32 per P100), NVLink 1 (20 GB/s per link) "
         "inside, InfiniBand across (EDR 100 Gb/s, RDMA); DDL's multi-ring allreduce taken as MPI's menu "
         "(ring, Rabenseifner, hierarchical), one allreduce per layer overlapped with backward; batch 32 per GPU "
         "(Goyal et al.'s, the run DDL was set against)",
         notes=("efficiency against one server of 4 GPUs",
                "the paper and IBM's announcement set the 95 % beside Goyal et al.'s ResNet-50 without naming the "
                "net of that run in the abstract; ResNet-50 is taken")),
)


def site_of(case: Case) -> Site:
    return Site.model_validate(case.site) if isinstance(case.site, dict) else load_site(case.site)


def run_case(case: Case):
    site = site_of(case)
    request = JobRequest(**case.request)
    prediction = predict(site, case.net, case.batch_per_rank, list(case.nodes), case.mode, request, None,
                         case.options, case.global_batch)
    if not case.against_one_gpu:
        return prediction
    # the study's definition: X(N) / (ranks x X(one GPU alone)), the one GPU with nothing to reduce
    alone = predict(site, case.net, case.batch_per_rank, [1], case.mode,
                    request.model_copy(update={"ranks_per_node": 1}), None, case.options).rows[0]
    rows = tuple(replace(r, efficiency=r.images_per_sec / (r.ranks * alone.images_per_sec)) for r in prediction.rows)
    return replace(prediction, rows=rows)


def compare(case: Case) -> list[dict]:
    """Per published point: nodes, published, predicted efficiency (against the case's smallest count)."""
    rows = {r.nodes: r for r in run_case(case).rows}
    return [{"nodes": n, "published": e, "predicted": rows[n].efficiency,
             "within": abs(rows[n].efficiency - e) <= case.tolerance} for n, e in sorted(case.published.items())]



def markdown_table(case: Case) -> str:
    """The case as docs/predict.md shows it: every node count predicted, the published points beside."""
    rows = run_case(case).rows
    lines = ["| nodes | ranks | images/s | compute (ms) | allreduce (ms) | exposed (ms) | algorithm | predicted E | "
             "published E |", "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        published = f"{case.published[r.nodes]:.0%}" if r.nodes in case.published else ""
        lines.append(f"| {r.nodes} | {r.ranks} | {r.images_per_sec:,.0f} | {r.compute_s * 1e3:.1f} | "
                     f"{r.comm_s * 1e3:.1f} | {r.exposed_comm_s * 1e3:.1f} | {r.algorithm} | {r.efficiency:.1%} | "
                     f"{published} |")
    return "\n".join(lines)


def markdown() -> str:
    """Every case: what was published, the facts used, and the table (generated; see docs/predict.md)."""
    parts = []
    for case in CASES:
        verdict = ", ".join(f"{c['nodes']} nodes: predicted {c['predicted']:.0%}, published {c['published']:.0%} "
                            f"({'within' if c['within'] else 'outside'} +/-{case.tolerance:.0%})"
                            for c in compare(case))
        parts.append(f"### {case.title}\n\nPublished: {case.source}.\n\nHardware facts used: {case.facts}.\n\n"
                     + "".join(f"Note: {n}.\n\n" for n in case.notes)
                     + f"{markdown_table(case)}\n\nResult: {verdict}.\n"
                     + (f"\n**Known miss**: {case.known_miss}.\n" if case.known_miss else ""))
    return "\n".join(parts)
