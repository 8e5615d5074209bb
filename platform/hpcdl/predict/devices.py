"""Per-device training rates for the seed hardware, each with its source.

A rate is sustained training FLOP/s for one device (one GPU, one GCD, or one CPU socket's
cores), taken from a published single-device throughput where one exists: images/s x the
net's training FLOPs per image (hpcdl.predict.costs, counted from our own net definition).
Applied to another net it assumes the same FLOP efficiency, which holds to tens of percent
between the conv nets here; `hpcdl validate`'s throughput check replaces it with the site's
own measurement (hpcdl.predict.calibration).

Where no single-device throughput was found, the rate is derived from a published peak and
that is said in `source`. Nothing here was fitted to a scaling curve.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceRate:
    key: str
    match: tuple[str, ...]  # substrings of a profile's gpu model / cpu_model / cpu_target (lower case)
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
TABLE: tuple[DeviceRate, ...] = (
    DeviceRate("k40", ("k40",), "fp32", 4.29, 288, "googlenet", 128 / (0.563 + 1.124), 128, None,
               "BVLC/caffe models/bvlc_googlenet readme: K40c + cuDNN, batch 128, forward 563 ms + backward 1124 ms"),
    DeviceRate("p100", ("p100",), "fp32", 10.6, 732, "resnet50", 219.0, 64, None,
               "tensorflow.org performance benchmarks (2017): tf_cnn_benchmarks ResNet-50, 1 P100 (DGX-1), batch 64, "
               "synthetic data (VGG16 in the same table: 154 images/s at batch 64)", measured=(("vgg16", 154.0, 64),)),
    DeviceRate("v100", ("v100",), "fp32", 15.7, 900, "resnet50", 367.0, 112, None, f"{DLE_PT}, FP32, DGX-1 V100 16GB"),
    DeviceRate("v100-fp16", ("v100",), "fp16", 125.0, 900, "resnet50", 1200.0, 256, None, f"{DLE_PT}, AMP, DGX-1 V100 16GB"),
    DeviceRate("a100", ("a100",), "fp32", 156.0, 2039, "resnet50", 938.0, 256, None, f"{DLE_PT}, TF32, DGX A100 80GB"),
    DeviceRate("a100-fp16", ("a100",), "fp16", 312.0, 2039, "resnet50", 2470.0, 256, None, f"{DLE_PT}, AMP, DGX A100 80GB"),
    # no DLE table for H100 (the README stops at A100): A100's measured rate x the HBM bandwidth
    # ratio 3.35/2.04 TB/s (H100 SXM and A100 80GB data sheets); conv-net training is not tensor-core bound
    DeviceRate("h100", ("h100",), "fp32", 494.7, 3350, "resnet50", 938.0 * 3350 / 2039, 256, None,
               f"derived: {DLE_PT}, TF32, A100 x HBM bandwidth ratio 3.35/2.04 TB/s (H100 SXM data sheet)"),
    DeviceRate("h100-fp16", ("h100",), "fp16", 989.4, 3350, "resnet50", 2470.0 * 3350 / 2039, 256, None,
               f"derived: {DLE_PT}, AMP, A100 x HBM bandwidth ratio 3.35/2.04 TB/s (H100 SXM data sheet)"),
    # one MI250X GCD (the OS shows each as a GPU): V100's measured rate x the fp32 vector peak ratio
    # 23.9/15.7 TF and x the matrix fp16 ratio 191.5/125 TF (AMD MI250X and NVIDIA V100 data sheets)
    DeviceRate("mi250x", ("mi250x", "mi250"), "fp32", 23.9, 1638, "resnet50", 367.0 * 23.9 / 15.7, 112, None,
               f"derived: {DLE_PT}, FP32 V100 x the fp32 vector peak ratio of one MI250X GCD (23.9/15.7 TF)"),
    DeviceRate("mi250x-fp16", ("mi250x", "mi250"), "fp16", 191.5, 1638, "resnet50", 1200.0 * 191.5 / 125.0, 256, None,
               f"derived: {DLE_PT}, AMP V100 x the fp16 matrix peak ratio of one MI250X GCD (191.5/125 TF)"),
    # CPUs: per-core peak = clock x fp32 FLOPs/cycle (2 FMA units x vector lanes x 2); MKL-DNN
    # (oneDNN) sustains a fraction of it on convolutions. That fraction was not measured here:
    # 0.4 is an estimate to be replaced by the site's throughput check. batch_half is per rank:
    # MKL-DNN splits a minibatch over the OpenMP threads, so it needs about one image per
    # few threads (set from the rank's threads in hpcdl.predict.model).
    DeviceRate("knl", ("knl", "xeon phi"), "fp32", 1.4 * 64 / 1000, 490, None, None, None, 0.4,
               "Xeon Phi 7250: 1.4 GHz x 2 AVX-512 FMA units x 16 fp32 lanes x 2 = 89.6 GFLOP/s per core (6.1 TF "
               "on 68 cores; Intel ARK, Sodani et al. IEEE Micro 2016); MCDRAM 490 GB/s; MKL-DNN at 40 % of peak "
               "(estimate); one core streams about 8 GB/s (a small fraction of MCDRAM's 490 GB/s: K. Rupp, STREAM "
               "on KNL, 2016)", per_core=True, core_stream_gbyte_s=8.0),
    DeviceRate("skylake", ("skylake_avx512", "cascadelake", "icelake", "sapphirerapids", "xeon platinum", "xeon gold"),
               "fp32", 2.0 * 64 / 1000, 128, None, None, None, 0.4,
               "Xeon Scalable: about 2.0 GHz AVX-512 all-core clock x 64 fp32 FLOPs/cycle (2 FMA units); oneDNN at "
               "40 % of peak (estimate); one core streams about 12 GB/s (single-core STREAM)", per_core=True,
               core_stream_gbyte_s=12.0),
    DeviceRate("power9", ("power9",), "fp32", 3.0 * 16 / 1000, 170, None, None, None, 0.4,
               "POWER9: about 3.0 GHz x 16 fp32 FLOPs/cycle (8 in fp64: two 22-core sockets give Summit's about 1 TF "
               "fp64 per node, OLCF); 40 % of peak (estimate); one core streams about 15 GB/s", per_core=True,
               core_stream_gbyte_s=15.0),
    DeviceRate("x86-avx2", ("zen", "haswell", "broadwell", "x86_64", ""), "fp32", 2.5 * 32 / 1000, 100, None, None,
               None, 0.4, "x86 with AVX2: about 2.5 GHz x 32 fp32 FLOPs/cycle (2 FMA units x 8 lanes x 2); 40 % of "
               "peak (estimate); one core streams about 12 GB/s (single-core STREAM)", per_core=True,
               core_stream_gbyte_s=12.0),
)


def gpu_rate(model: str, precision: str) -> DeviceRate | None:
    want = "fp16" if precision in ("fp16", "bf16") else "fp32"
    model = model.lower()
    for rate in TABLE:
        if not rate.per_core and rate.precision == want and any(m in model for m in rate.match):
            return rate
    return None


def cpu_rate(cpu_model: str, cpu_target: str) -> DeviceRate:
    text = f"{cpu_model} {cpu_target}".lower()
    for rate in TABLE:
        if rate.per_core and any(m and m in text for m in rate.match):
            return rate
    return TABLE[-1]
