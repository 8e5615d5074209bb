"""Per-device training rates for the seed hardware, each with its source.

A rate is sustained training FLOP/s for one device (one GPU, one GCD, or one CPU socket's
cores), taken from a published single-device throughput where one exists: images/s x the
net's training FLOPs per image (hpcdl.predict.costs, counted from our own net definition).
Applied to another net it assumes the same FLOP efficiency, which holds to tens of percent
between the conv nets here; `hpcdl validate`'s throughput check replaces it with the site's
own measurement (hpcdl.predict.calibration).

Where no single-device throughput was found, the rate is derived and `source` says so: a GPU
from a measured device's rate x the ratio of the two data sheets' memory bandwidths (conv-net
training is not tensor-core bound: the H100 row's rule), a CPU from its per-core peak (clock x
fp32 FLOPs/cycle from the vendor's data sheet) x 0.4. Nothing here was fitted to a scaling curve.
A device that is in no row gets no rate: `hpcdl predict` then says which field and asks for
the site's own measurement (`hpcdl validate`, then `--calibration`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceRate:
    key: str
    # GPUs: model names, each matched as a whole word of the profile's gpu model ('a10' is not
    # 'a100', 'h200' not 'gh200', 'v100' not 'v100s'). CPUs: archspec cpu_target names, matched
    # exactly, then phrases of cpu_model (see cpu_rate for the order)
    match: tuple[str, ...]
    precision: str  # fp32 (also TF32 on A100/H100) or fp16 (mixed precision)
    peak_tflops: float  # vendor peak for this precision (dense), per device
    memory_gbyte_s: float  # device memory bandwidth (the optimizer update is bound by it)
    net: str | None  # net of the published measurement
    images_per_sec: float | None  # published training images/s on one device
    batch: int | None  # per-device batch of that measurement
    efficiency: float | None  # fraction of peak where no measurement exists
    source: str
    batch_half: float = 5.0  # per-device batch at which the device runs at half its large-batch rate
    per_core: bool = False  # CPU rate is per core (scaled by the rank's cores)
    core_stream_gbyte_s: float | None = None  # what one core streams (CPUs): an MPI rank's reduction and copies
    # other nets measured on this device in the same published table: (net, images/s, batch). A net
    # measured here runs at its own rate; the FLOP transfer from `net` is only for nets not measured
    # (VGG-16's large 3x3 convolutions reach 2.7x ResNet-50's FLOP/s on a P100: 154 against 219
    # images/s for 3.8x the FLOPs per image)
    measured: tuple[tuple[str, float, int], ...] = ()

    def train_flops_per_s(self, train_flops_per_image: dict[str, float], net: str | None = None,
                          net_train_flops: float | None = None) -> float:
        """Sustained training FLOP/s at a large batch: from `net`'s own measurement where this device has
        one (`net_train_flops` its training FLOPs per image), else from the reference net's."""
        for name, images, batch in self.measured:
            if name == net and net_train_flops:
                return images * net_train_flops / (batch / (batch + self.batch_half))
        if self.images_per_sec and self.net:
            at_batch = self.batch / (self.batch + self.batch_half) if self.batch else 1.0
            return self.images_per_sec * train_flops_per_image[self.net] / at_batch
        return self.peak_tflops * 1e12 * (self.efficiency or 0.4)

    def source_for(self, net: str | None) -> str:
        if any(name == net for name, _, _ in self.measured):
            return f"{self.key}: {net} measured in the same table ({self.source})"
        return f"{self.key}: {self.source}"


# GPU batch_half: TensorRT 4 on V100, ResNet-50 fp32 (gist 1duo/efd3be1d): 966 images/s at batch
# 8 and 1,383 at 32 against 1,593 at 256, i.e. half rate near batch 5.
DLE_PT = "NVIDIA DeepLearningExamples PyTorch ResNet-50 v1.5 README (pytorch-21.03), 1 GPU"
# the measured rows that derived GPU rows start from: (images/s, batch, memory GB/s)
_A100_TF32, _A100_AMP, _A100_BW = (938.0, 256), (2470.0, 256), 2039
_V100_FP32, _V100_AMP, _V100_BW = (367.0, 112), (1200.0, 256), 900


def _by_bandwidth(key: str, names: tuple[str, ...], peaks: tuple[float, float], bandwidth: float, sheet: str,
                  base: str = "a100") -> tuple[DeviceRate, DeviceRate]:
    """A GPU with no published single-device training figure: a measured device's ResNet-50 rate x
    the ratio of the two data sheets' memory bandwidths (the H100 row's rule), at fp32 and fp16."""
    if base == "a100":
        (f32, b32), (f16, b16), bw, how = _A100_TF32, _A100_AMP, _A100_BW, ("TF32", "AMP", "A100 80GB")
    else:
        (f32, b32), (f16, b16), bw, how = _V100_FP32, _V100_AMP, _V100_BW, ("FP32", "AMP", "V100 16GB")
    ratio = f"{bandwidth:g}/{bw} GB/s"
    return (
        DeviceRate(key, names, "fp32", peaks[0], bandwidth, "resnet50", f32 * bandwidth / bw, b32, None,
                   f"derived: {DLE_PT}, {how[0]}, {how[2]} x memory bandwidth ratio {ratio} ({sheet})"),
        DeviceRate(f"{key}-fp16", names, "fp16", peaks[1], bandwidth, "resnet50", f16 * bandwidth / bw, b16, None,
                   f"derived: {DLE_PT}, {how[1]}, {how[2]} x memory bandwidth ratio {ratio} ({sheet})"),
    )


# Order is precedence: the first row whose name is a word of the model string wins. A model string
# can name two devices (TACC writes Vista's 'GH200 H200 96GB'), so a superchip comes before the GPU
# it carries. Peaks are dense (no sparsity): fp32 is TF32 where the device has it, fp16 the matrix peak.
GPU_TABLE: tuple[DeviceRate, ...] = (
    DeviceRate("k40", ("k40", "k40c", "k40m", "k40t"), "fp32", 4.29, 288, "googlenet", 128 / (0.563 + 1.124), 128,
               None, "measured: BVLC/caffe models/bvlc_googlenet readme: K40c + cuDNN, batch 128, forward 563 ms + backward "
               "1124 ms"),
    DeviceRate("p100", ("p100",), "fp32", 10.6, 732, "resnet50", 219.0, 64, None,
               "measured: tensorflow.org performance benchmarks (2017): tf_cnn_benchmarks ResNet-50, 1 P100 (DGX-1), batch 64, "
               "synthetic data (VGG16 in the same table: 154 images/s at batch 64)", measured=(("vgg16", 154.0, 64),)),
    # Pascal has no tensor cores: mixed precision gives its convolutions no matrix unit, so the fp16 rows take the
    # fp32 rate (derived, an assumption: no single-GPU AMP figure for Pascal was found); peaks as the data sheets give
    # them (Tesla P100 SXM2: 21.2 TF fp16; Tesla P40: 11.76 TF fp32, 346 GB/s GDDR5, no fp16 figure: its fp32 peak)
    DeviceRate("p100-fp16", ("p100",), "fp16", 21.2, 732, "resnet50", 219.0, 64, None,
               "derived: the P100 fp32 row's tf_cnn_benchmarks ResNet-50 rate (no tensor cores for mixed precision)"),
    DeviceRate("p40", ("p40",), "fp32", 11.76, 346, "resnet50", 219.0 * 346 / 732, 64, None,
               "derived: the P100 row's tf_cnn_benchmarks ResNet-50 rate x memory bandwidth ratio 346/732 GB/s "
               "(NVIDIA Tesla P40 and P100 data sheets)"),
    DeviceRate("p40-fp16", ("p40",), "fp16", 11.76, 346, "resnet50", 219.0 * 346 / 732, 64, None,
               "derived: the P40 fp32 row's rate (no tensor cores for mixed precision)"),
    DeviceRate("v100", ("v100",), "fp32", 15.7, 900, "resnet50", 367.0, 112, None, f"measured: {DLE_PT}, FP32, DGX-1 V100 16GB"),
    DeviceRate("v100-fp16", ("v100",), "fp16", 125.0, 900, "resnet50", 1200.0, 256, None,
               f"measured: {DLE_PT}, AMP, DGX-1 V100 16GB"),
    *_by_bandwidth("v100s", ("v100s",), (16.4, 130.0), 1134, "NVIDIA V100S PCIe data sheet: 1,134 GB/s", "v100"),
    *_by_bandwidth("t4", ("t4",), (8.1, 65.0), 320, "NVIDIA T4 data sheet: 320 GB/s GDDR6", "v100"),
    DeviceRate("a100", ("a100",), "fp32", 156.0, 2039, "resnet50", 938.0, 256, None, f"measured: {DLE_PT}, TF32, DGX A100 80GB"),
    DeviceRate("a100-fp16", ("a100",), "fp16", 312.0, 2039, "resnet50", 2470.0, 256, None,
               f"measured: {DLE_PT}, AMP, DGX A100 80GB"),
    *_by_bandwidth("a10", ("a10",), (62.5, 125.0), 600, "NVIDIA A10 data sheet: 600 GB/s GDDR6"),
    *_by_bandwidth("a40", ("a40",), (74.8, 149.7), 696, "NVIDIA A40 data sheet: 696 GB/s GDDR6"),
    *_by_bandwidth("l40s", ("l40s",), (183.0, 362.1), 864, "NVIDIA L40S data sheet: 864 GB/s GDDR6"),
    # the L40 (TalTech's ada nodes) has the L40S's memory at half its tensor peaks: TF32 90.5, FP16 181.05 TF dense
    *_by_bandwidth("l40", ("l40",), (90.5, 181.05), 864, "NVIDIA L40 data sheet: 864 GB/s GDDR6"),
    # Turing workstation GPUs by their one shared word (RCC Midway3's "Quadro RTX 6000"; the RTX 8000 has the same
    # memory): V100's measured rate x the bandwidth ratio, as for T4
    *_by_bandwidth("rtx", ("rtx",), (16.3, 130.5), 672, "NVIDIA Quadro RTX 6000 data sheet: 672 GB/s GDDR6", "v100"),
    # no DLE table for H100 (the README stops at A100): A100's measured rate x the HBM bandwidth
    # ratio 3.35/2.04 TB/s (H100 SXM and A100 80GB data sheets); conv-net training is not tensor-core bound
    DeviceRate("h100", ("h100",), "fp32", 494.7, 3350, "resnet50", 938.0 * 3350 / 2039, 256, None,
               f"derived: {DLE_PT}, TF32, A100 x HBM bandwidth ratio 3.35/2.04 TB/s (H100 SXM data sheet)"),
    DeviceRate("h100-fp16", ("h100",), "fp16", 989.4, 3350, "resnet50", 2470.0 * 3350 / 2039, 256, None,
               f"derived: {DLE_PT}, AMP, A100 x HBM bandwidth ratio 3.35/2.04 TB/s (H100 SXM data sheet)"),
    # GH200 before H200: 'gh200' is its own word, but TACC's model string also says 'H200'. The 96 GB
    # HBM3 part (Alps, Vista): 4.0 TB/s; the 144 GB HBM3e part has 4.9 TB/s and is predicted low by this row
    *_by_bandwidth("gh200", ("gh200",), (494.7, 989.4), 4000,
                   "NVIDIA GH200 Grace Hopper Superchip data sheet: 96 GB HBM3 at 4 TB/s"),
    *_by_bandwidth("h200", ("h200",), (494.7, 989.4), 4800, "NVIDIA H200 SXM data sheet: 141 GB HBM3e at 4.8 TB/s"),
    *_by_bandwidth("b200", ("b200",), (1125.0, 2250.0), 8000,
                   "NVIDIA DGX B200 data sheet: 64 TB/s HBM3e over 8 GPUs"),
    # one MI250X GCD (the OS shows each as a GPU): V100's measured rate x the fp32 vector peak ratio
    # 23.9/15.7 TF and x the matrix fp16 ratio 191.5/125 TF (AMD MI250X and NVIDIA V100 data sheets)
    DeviceRate("mi250x", ("mi250x", "mi250"), "fp32", 23.9, 1638, "resnet50", 367.0 * 23.9 / 15.7, 112, None,
               f"derived: {DLE_PT}, FP32 V100 x the fp32 vector peak ratio of one MI250X GCD (23.9/15.7 TF)"),
    DeviceRate("mi250x-fp16", ("mi250x", "mi250"), "fp16", 191.5, 1638, "resnet50", 1200.0 * 191.5 / 125.0, 256, None,
               f"derived: {DLE_PT}, AMP V100 x the fp16 matrix peak ratio of one MI250X GCD (191.5/125 TF)"),
    *_by_bandwidth("mi300x", ("mi300x",), (163.4, 1307.4), 5300, "AMD Instinct MI300X data sheet: 5.3 TB/s HBM3"),
    *_by_bandwidth("mi300a", ("mi300a",), (122.6, 980.6), 5300, "AMD Instinct MI300A data sheet: 5.3 TB/s HBM3"),
    *_by_bandwidth("mi210", ("mi210",), (22.6, 181.0), 1638, "AMD Instinct MI210 data sheet: 1.6 TB/s HBM2e"),
    *_by_bandwidth("mi100", ("mi100",), (23.1, 184.6), 1229, "AMD Instinct MI100 data sheet: 1.23 TB/s HBM2"),
)

# CPUs: per-core peak = clock x fp32 FLOPs/cycle (FMA units x vector lanes x 2); MKL-DNN (oneDNN)
# sustains a fraction of it on convolutions. That fraction was not measured here: 0.4 is an
# estimate to be replaced by the site's throughput check. batch_half is per rank: MKL-DNN splits
# a minibatch over the OpenMP threads, so it needs about one image per few threads (set from the
# rank's threads in hpcdl.predict.model). `match` holds archspec target names (what
# `hpcdl sites detect` writes as cpu_target), then cpu_model phrases after a '=' sign.
_STREAM = "one core streams about 12 GB/s (single-core STREAM"
CPU_TABLE: tuple[DeviceRate, ...] = (
    DeviceRate("knl", ("knl", "mic_knl", "=xeon phi"), "fp32", 1.4 * 64 / 1000, 490, None, None, None, 0.4,
               "derived: Xeon Phi 7250: 1.4 GHz x 2 AVX-512 FMA units x 16 fp32 lanes x 2 = 89.6 GFLOP/s per core (6.1 TF "
               "on 68 cores; Intel ARK, Sodani et al. IEEE Micro 2016); MCDRAM 490 GB/s; MKL-DNN at 40 % of peak "
               "(estimate); one core streams about 8 GB/s (a small fraction of MCDRAM's 490 GB/s: K. Rupp, STREAM "
               "on KNL, 2016)", per_core=True, core_stream_gbyte_s=8.0),
    # Sapphire/Emerald Rapids (archspec names Emerald Rapids sapphirerapids too): fp32 on the same two
    # AVX-512 FMA units as Skylake; AMX multiplies bf16/int8 only, which this fp32 row does not use
    DeviceRate("sapphirerapids", ("sapphirerapids", "emeraldrapids", "=sapphire rapids", "=emerald rapids",
                                  "=xeon cpu max"), "fp32", 2.0 * 64 / 1000, 307, None, None, None, 0.4,
               "derived: 4th/5th gen Xeon Scalable (Sapphire/Emerald Rapids): 2.0 GHz base (Intel ARK, Xeon "
               "Platinum 8480+) x 64 fp32 FLOPs/cycle (2 AVX-512 FMA units x 16 lanes x 2; AMX is bf16/int8, not "
               "used at fp32); oneDNN at 40 % of peak (estimate); 8 DDR5-4800 channels = 307 GB/s per socket; "
               f"{_STREAM}, as Skylake: not measured here)", per_core=True, core_stream_gbyte_s=12.0),
    DeviceRate("skylake", ("skylake_avx512", "cascadelake", "cannonlake", "icelake", "=xeon platinum", "=xeon gold"),
               "fp32", 2.0 * 64 / 1000, 128, None, None, None, 0.4,
               "derived: Xeon Scalable: about 2.0 GHz AVX-512 all-core clock x 64 fp32 FLOPs/cycle (2 FMA units); oneDNN at "
               f"40 % of peak (estimate); {_STREAM})", per_core=True, core_stream_gbyte_s=12.0),
    DeviceRate("power9", ("power9", "power9le", "=power9"), "fp32", 3.0 * 16 / 1000, 170, None, None, None, 0.4,
               "derived: POWER9: about 3.0 GHz x 16 fp32 FLOPs/cycle (8 in fp64: two 22-core sockets give Summit's about 1 TF "
               "fp64 per node, OLCF); 40 % of peak (estimate); one core streams about 15 GB/s", per_core=True,
               core_stream_gbyte_s=15.0),
    # Grace and A64FX: Arm, never the x86 rows
    DeviceRate("grace", ("neoverse_v2", "=grace"), "fp32", 3.1 * 32 / 1000, 500, None, None, None, 0.4,
               "derived: NVIDIA Grace (Neoverse V2): 7.1 TF fp64 on 144 cores at 3.1 GHz (Grace CPU Superchip data "
               "sheet) = 16 fp64, 32 fp32 FLOPs/cycle (4 x 128-bit SVE2 FMA pipes); 40 % of peak (estimate); "
               f"LPDDR5X up to 500 GB/s per CPU; {_STREAM}, as x86: not measured here)", per_core=True,
               core_stream_gbyte_s=12.0),
    DeviceRate("a64fx", ("a64fx", "=a64fx"), "fp32", 1.8 * 64 / 1000, 1024, None, None, None, 0.4,
               "derived: Fujitsu A64FX: 2.7 TF fp64 on 48 cores at 1.8 GHz (Fujitsu A64FX data sheet) = 32 fp64, 64 "
               "fp32 FLOPs/cycle (2 x 512-bit SVE FMA pipes); 40 % of peak (estimate); HBM2 1,024 GB/s; "
               f"{_STREAM}, as x86: not measured here)", per_core=True, core_stream_gbyte_s=12.0),
    # Zen 4 runs AVX-512 on its two 256-bit FMA pipes (two passes): the same 32 fp32 FLOPs/cycle as Zen 3
    DeviceRate("zen4", ("zen4", "=genoa", "=bergamo"), "fp32", 2.4 * 32 / 1000, 461, None, None, None, 0.4,
               "derived: AMD EPYC 9004 (Zen 4): 2.4 GHz base (AMD EPYC 9654 data sheet) x 32 fp32 FLOPs/cycle "
               "(2 x 256-bit FMA pipes; AVX-512 takes two passes); 40 % of peak (estimate); 12 DDR5-4800 channels "
               f"= 461 GB/s per socket; {_STREAM})", per_core=True, core_stream_gbyte_s=12.0),
    DeviceRate("zen5", ("zen5", "=turin"), "fp32", 2.7 * 64 / 1000, 614, None, None, None, 0.4,
               "derived: AMD EPYC 9005 (Zen 5): 2.7 GHz base (AMD EPYC 9755 data sheet) x 64 fp32 FLOPs/cycle "
               "(full 512-bit AVX-512 data path, 2 FMA pipes); 40 % of peak (estimate); 12 DDR5-6400 channels = "
               f"614 GB/s per socket; {_STREAM})", per_core=True, core_stream_gbyte_s=12.0),
    # AVX2 x86; also the x86 a profile does not name further (GENERIC_X86): last, the floor
    DeviceRate("x86-avx2", ("zen", "zen2", "zen3", "haswell", "broadwell", "skylake", "alderlake", "arrowlake",
                            "arrowlake_s"), "fp32", 2.5 * 32 / 1000, 100, None, None, None, 0.4,
               "derived: x86 with AVX2: about 2.5 GHz x 32 fp32 FLOPs/cycle (2 FMA units x 8 lanes x 2); 40 % of "
               f"peak (estimate); {_STREAM})", per_core=True, core_stream_gbyte_s=12.0),
)
TABLE: tuple[DeviceRate, ...] = GPU_TABLE + CPU_TABLE

# the instruction set of each CPU row: a cpu_model's words never move a node to another one
CPU_ISA = {"knl": "x86_64", "sapphirerapids": "x86_64", "skylake": "x86_64", "power9": "ppc64", "grace": "aarch64",
           "a64fx": "aarch64", "zen4": "x86_64", "zen5": "x86_64", "x86-avx2": "x86_64"}
# cpu_target values that name an instruction set, not a microarchitecture: for these the cpu_model's
# words decide among that instruction set's rows (a profile written before its site's CPU was known);
# an empty target says nothing, so any row may match
GENERIC_TARGETS = {"": None, "x86_64": "x86_64", "x86_64_v2": "x86_64", "x86_64_v3": "x86_64",
                   "x86_64_v4": "x86_64", "aarch64": "aarch64", "arm64": "aarch64", "ppc64le": "ppc64",
                   "ppc64": "ppc64", "riscv64": "riscv64"}
# x86 a profile does not name further (the schema's default x86_64; archspec's AVX2 and AVX-512 levels)
GENERIC_X86 = frozenset({"", "x86_64", "x86_64_v3", "x86_64_v4"})
# a host core's stream where the profile's CPU is in no row: only GPU ranks use it (an onload NIC's copies)
DEFAULT_CORE_STREAM_GBYTE_S = 12.0


def words(text: str) -> tuple[str, ...]:
    """The lower-case words of a model string: 'NVIDIA A100-SXM4-40GB' -> ('nvidia', 'a100', 'sxm4', '40gb')."""
    return tuple(w for w in re.split(r"[^a-z0-9]+", text.lower()) if w)


def _has_phrase(have: tuple[str, ...], phrase: str) -> bool:
    want = words(phrase)
    return bool(want) and any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def gpu_rate(model: str, precision: str) -> DeviceRate | None:
    """The first GPU row (GPU_TABLE order) one of whose names is a whole word of `model`, at the plan's precision."""
    want = "fp16" if precision in ("fp16", "bf16") else "fp32"
    have = set(words(model))
    for rate in GPU_TABLE:
        if rate.precision == want and have.intersection(rate.match):
            return rate
    return None


def cpu_rate(cpu_model: str, cpu_target: str) -> DeviceRate | None:
    """The CPU row for a profile's node; None where no row knows it.

    Precedence: 1. cpu_target, an archspec name, exactly (a row's plain names); 2. where cpu_target
    names only an instruction set (x86_64, aarch64 ...: GENERIC_TARGETS), the cpu_model's words (a
    row's '='-names) among that instruction set's rows; 3. a generic x86 target (the schema's default x86_64) gets the AVX2 row.
    An Arm or POWER node is never given an x86 row.
    """
    target = cpu_target.strip().lower()
    if target not in GENERIC_TARGETS:
        for rate in CPU_TABLE:
            if target in (m for m in rate.match if not m.startswith("=")):
                return rate
        return None
    have, isa = words(cpu_model), GENERIC_TARGETS[target]
    for rate in CPU_TABLE:
        if isa in (None, CPU_ISA[rate.key]) and any(_has_phrase(have, m[1:]) for m in rate.match if m.startswith("=")):
            return rate
    if target in GENERIC_X86:
        return CPU_TABLE[-1]
    return None
