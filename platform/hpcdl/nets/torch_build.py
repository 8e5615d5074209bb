"""Build a NetSpec as a torch.nn.Module (the PyTorch backend of the one net definition)."""

from __future__ import annotations

import torch
from torch import nn

from hpcdl.nets.spec import NEURONS, Layer, NetSpec, _pair, crop_begin, eltwise, neuron


def _module(layer: Layer) -> nn.Module:
    t, p = layer.type, layer.params
    if t == "Convolution":
        return nn.Conv2d(
            layer.in_channels, p["num_output"], _pair(p["kernel_size"]),
            stride=_pair(p.get("stride", 1)), padding=_pair(p.get("pad", 0)),
            groups=p.get("group", 1), bias=p.get("bias_term", True),
        )
    if t == "Deconvolution":
        return nn.ConvTranspose2d(
            layer.in_channels, p["num_output"], _pair(p["kernel_size"]),
            stride=_pair(p.get("stride", 1)), padding=_pair(p.get("pad", 0)),
            groups=p.get("group", 1), bias=p.get("bias_term", True),
        )
    if t == "Pooling":
        if p.get("global_pooling"):
            return nn.AdaptiveMaxPool2d(1) if p.get("pool", "MAX") == "MAX" else nn.AdaptiveAvgPool2d(1)
        k, s, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
        ceil = p.get("round_mode", "CEIL") != "FLOOR"
        if p.get("pool", "MAX") == "MAX":
            return nn.MaxPool2d(k, s, pad, ceil_mode=ceil)
        return nn.AvgPool2d(k, s, pad, ceil_mode=ceil, count_include_pad=True)
    if t == "ReLU":
        return nn.LeakyReLU(p["negative_slope"]) if p.get("negative_slope") else nn.ReLU()
    if t == "Sigmoid":
        return nn.Sigmoid()
    if t == "TanH":
        return nn.Tanh()
    if t == "LRN":
        if p.get("norm_region") == "WITHIN_CHANNEL":
            return _WithinChannelLRN(p.get("local_size", 5), p.get("alpha", 1e-4), p.get("beta", 0.75))
        return nn.LocalResponseNorm(p.get("local_size", 5), alpha=p.get("alpha", 1e-4), beta=p.get("beta", 0.75), k=p.get("k", 1.0))
    if t == "InnerProduct":
        return nn.Sequential(nn.Flatten(), nn.Linear(layer.in_channels, p["num_output"], bias=p.get("bias_term", True)))
    if t == "Dropout":
        return nn.Dropout(p.get("dropout_ratio", 0.5))
    if t == "BatchNorm" and p.get("use_global_stats"):
        return _GlobalStatsBatchNorm(layer.in_channels, eps=p.get("eps", 1e-5), momentum=1 - p.get("moving_average_fraction", 0.9),
                                     affine=p.get("affine", False))
    if t == "BatchNorm":
        return _CaffeBatchNorm(layer.in_channels, eps=p.get("eps", 1e-5), momentum=1 - p.get("moving_average_fraction", 0.9), affine=p.get("affine", False))
    if t == "Scale":
        return _Scale(layer.in_channels, p.get("bias_term", True), float((p.get("filler") or {}).get("value", 1.0)))
    if t == "Softmax":
        return nn.Softmax(dim=1)
    if t == "Flatten":
        return nn.Flatten()
    if t in ("Concat", "Eltwise"):
        return nn.Identity()  # combined in forward
    if t == "PReLU":
        return _PReLU(1 if p.get("channel_shared") else layer.in_channels, p.get("filler"))
    if t == "Bias":
        return _Bias(layer.in_channels, p.get("filler"))
    if t in NEURONS:
        return _Neuron(layer)
    if t == "Reshape":
        return _Reshape(layer.out_shape)
    if t in ("Crop", "Slice"):
        return _Crop(crop_begin(layer), layer.out_shape)
    raise ValueError(f"layer type {t} has no PyTorch builder")


class _WithinChannelLRN(nn.Module):
    """Caffe's WITHIN_CHANNEL LRN (lrn_layer.cpp): x (1 + alpha/n^2 sum_window x^2)^-beta.

    Caffe builds it from layers: square, AVE pooling over local_size x local_size with
    pad (local_size-1)/2 and stride 1 (whose divisor counts the padding), then Power
    with shift 1, scale alpha and power -beta; k is not used.
    """

    def __init__(self, size: int, alpha: float, beta: float):
        super().__init__()
        self.pool = nn.AvgPool2d(size, 1, (size - 1) // 2, count_include_pad=True)
        self.alpha, self.beta = alpha, beta

    def forward(self, x):
        return x * (1 + self.alpha * self.pool(x * x)) ** (-self.beta)


class _CaffeBatchNorm(nn.BatchNorm2d):
    """Caffe's BatchNorm; given the Scale layer after it, that Scale's gamma and beta too.

    Caffe's nets follow each BatchNorm (statistics only) with a Scale (gamma, beta), two
    passes over the activations each way; handed the Scale, one batch_norm with an affine
    part does both (cuDNN fuses it), with the Scale still owning its parameters (their names,
    lr_mult and snapshots are unchanged). ResNet-50 has 53 such pairs; fused, a training
    step took 7 % less time on a CPU.
    """

    def forward(self, x, scale: "_Scale | None" = None):
        if scale is None:
            return super().forward(x)
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)  # as nn.BatchNorm2d's own forward
        return nn.functional.batch_norm(x, self.running_mean, self.running_var, scale.weight, scale.bias,
                                        self.training, self.momentum, self.eps)


class _GlobalStatsBatchNorm(_CaffeBatchNorm):
    """Caffe's BatchNorm with use_global_stats: true: the stored statistics, in training too."""

    def forward(self, x, scale: "_Scale | None" = None):
        weight, bias = (scale.weight, scale.bias) if scale is not None else (self.weight, self.bias)
        return nn.functional.batch_norm(x, self.running_mean, self.running_var, weight, bias, False, 0.0, self.eps)


class _Scale(nn.Module):
    """Caffe's Scale layer: per-channel gamma (and beta)."""

    def __init__(self, channels: int, bias: bool, gamma: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.full((channels,), float(gamma)))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        y = x * self.weight.view(shape)
        return y + self.bias.view(shape) if self.bias is not None else y


class _PReLU(nn.Module):
    """Caffe's PReLU (prelu_layer.cpp): max(x, 0) + a min(x, 0), a per channel (axis 1) or one
    for all (channel_shared); the slope's filler defaults to constant 0.25."""

    def __init__(self, slopes: int, filler: dict | None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(slopes))
        caffe_fill(self.weight, filler or {"type": "constant", "value": 0.25})

    def forward(self, x):
        a = self.weight.view((1, -1) + (1,) * (x.dim() - 2)) if self.weight.numel() > 1 else self.weight
        return torch.clamp(x, min=0) + a * torch.clamp(x, max=0)


class _Bias(nn.Module):
    """Caffe's Bias layer with one bottom: a learned per-channel (axis 1) bias, filler default 0."""

    def __init__(self, channels: int, filler: dict | None):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(channels))
        caffe_fill(self.bias, filler or {"type": "constant", "value": 0.0})

    def forward(self, x):
        return x + self.bias.view((1, -1) + (1,) * (x.dim() - 2))


class _Neuron(nn.Module):
    """Caffe's parameter-free elementwise layers (spec.neuron)."""

    def __init__(self, layer: Layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return neuron(self.layer, x, torch.exp, torch.log, lambda v, c: torch.clamp(v, min=c),
                      lambda v, c: torch.clamp(v, max=c), lambda v, t: (v > t).to(v.dtype))


class _Reshape(nn.Module):
    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x):
        return x.reshape(x.shape[0], *self.shape)


class _Crop(nn.Module):
    """Caffe's Crop: the first bottom cut to the spec's size from `begin` (the second bottom
    only gives the size, which the spec already knows)."""

    def __init__(self, begin: tuple[int, ...], shape: tuple[int, ...]):
        super().__init__()
        self.index = (slice(None),) + tuple(slice(b, b + n) for b, n in zip(begin, shape))

    def forward(self, x):
        return x[self.index]


class CaffeNet(nn.Module):
    """Runs the layers of a NetSpec in order, routing blobs by name (bottom/top).

    With auxiliary classifiers in the spec (GoogLeNet's loss1/loss2), forward returns
    (main, [aux...]) while training and only the main output in eval mode.
    """

    def __init__(self, spec: NetSpec):
        super().__init__()
        self.spec = spec
        self.layers = nn.ModuleDict({_key(layer.name): _module(layer) for layer in spec.layers})
        # blobs no later layer reads are dropped as soon as possible (memory on big nets)
        self._last_use: dict[str, int] = {}
        for i, layer in enumerate(spec.layers):
            for b in layer.bottom:
                self._last_use[b] = i
        self._keep = {spec.output, *(top for top, _ in spec.aux_outputs)}
        self._flat = {top for top in self._keep if spec.pooled_logits(top)}
        self._scale_after = _batchnorm_scale_pairs(spec)   # BatchNorm index -> the Scale it runs
        self._fused = set(self._scale_after.values())
        self._init_weights()

    def _init_weights(self):
        for layer in self.spec.layers:
            filler = layer.p("weight_filler")
            mod = self.layers[_key(layer.name)]
            lin = mod[1] if isinstance(mod, nn.Sequential) else mod
            if not isinstance(lin, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                continue
            if not filler:  # no filler: He et al. fan_out (hpcdl's default; Caffe's would be constant 0)
                nn.init.kaiming_normal_(lin.weight, mode="fan_out", nonlinearity="relu")
            else:  # Caffe's fillers: xavier and msra with n = fan_in unless variance_norm says otherwise
                caffe_fill(lin.weight, filler)
            if lin.bias is not None:
                caffe_fill(lin.bias, layer.p("bias_filler") or {"type": "constant", "value": 0.0})

    def forward(self, x):
        blobs = {"data": x}
        for i, layer in enumerate(self.spec.layers):
            if i in self._fused:
                continue  # its BatchNorm applied it
            ins = [blobs[b] for b in layer.bottom]
            top = layer.top
            if layer.type == "Concat":
                out = torch.cat(ins, dim=1)
            elif layer.type == "Eltwise":
                out = eltwise(layer, ins, torch.maximum)
            elif i in self._scale_after:
                scale = self.spec.layers[self._scale_after[i]]
                out, top = self.layers[_key(layer.name)](ins[0], self.layers[_key(scale.name)]), scale.top
            else:
                out = self.layers[_key(layer.name)](ins[0])
            for b in layer.bottom:
                if self._last_use.get(b) == i and b not in self._keep:
                    blobs.pop(b, None)
            blobs[top] = out
        if self.spec.aux_outputs and self.training:
            return self._logits(blobs, self.spec.output), [self._logits(blobs, top) for top, _ in self.spec.aux_outputs]
        return self._logits(blobs, self.spec.output)

    def _logits(self, blobs: dict, top: str):
        out = blobs[top]
        return out.flatten(1) if top in self._flat else out  # (N, C, 1, 1) -> (N, C), see NetSpec.pooled_logits


def _batchnorm_scale_pairs(spec: NetSpec) -> dict[int, int]:
    """BatchNorm layers (statistics only) whose output only the Scale right after them reads."""
    readers: dict[str, int] = {}
    for layer in spec.layers:
        for b in layer.bottom:
            readers[b] = readers.get(b, 0) + 1
    outputs = {spec.output, *(top for top, _ in spec.aux_outputs)}
    pairs = {}
    for i, (bn, scale) in enumerate(zip(spec.layers, spec.layers[1:])):
        if bn.type != "BatchNorm" or bn.params.get("affine", False) or scale.type != "Scale":
            continue
        if list(scale.bottom) != [bn.top]:
            continue
        # in place (Caffe's usual top == bottom), later readers meant the scaled blob anyway
        if scale.top == bn.top or (readers.get(bn.top) == 1 and bn.top not in outputs):
            pairs[i] = i + 1
    return pairs


@torch.no_grad()
def caffe_fill(tensor: torch.Tensor, filler: dict) -> None:
    """Caffe's fillers (filler.hpp) on a blob laid out as Caffe's: fan_in = count / shape[0],
    fan_out = count / shape[1] (a Deconvolution blob is (C_in, C_out/g, kh, kw), as torch's)."""
    kind = filler.get("type", "constant")
    count = tensor.numel()
    fan_in = count / tensor.shape[0] if tensor.dim() > 1 else count
    fan_out = count / tensor.shape[1] if tensor.dim() > 1 else count
    n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "AVERAGE": (fan_in + fan_out) / 2}[filler.get("variance_norm", "FAN_IN")]
    if kind == "constant":
        tensor.fill_(float(filler.get("value", 0.0)))
    elif kind == "gaussian":
        tensor.normal_(float(filler.get("mean", 0.0)), float(filler.get("std", 1.0)))
    elif kind == "uniform":
        tensor.uniform_(float(filler.get("min", 0.0)), float(filler.get("max", 1.0)))
    elif kind == "xavier":
        bound = (3.0 / n) ** 0.5
        tensor.uniform_(-bound, bound)
    elif kind == "msra":
        tensor.normal_(0.0, (2.0 / n) ** 0.5)
    elif kind == "bilinear":
        # BilinearFiller (BVLC master): upsampling kernels, f = ceil(k / 2), c = (k - 1) / 2f
        kh, kw = tensor.shape[-2], tensor.shape[-1]
        if tensor.dim() != 4 or kh != kw:
            raise ValueError("the bilinear filler needs a square 4-D kernel (Caffe's check)")
        f = -(-kw // 2)
        c = (kw - 1) / (2.0 * f)
        x = torch.arange(kw, dtype=torch.float64)
        y = torch.arange(kh, dtype=torch.float64)
        kernel = (1 - (y / f - c).abs())[:, None] * (1 - (x / f - c).abs())[None, :]
        tensor.copy_(kernel.to(tensor.dtype).expand_as(tensor))
    else:
        raise ValueError(f"filler type {kind} has no PyTorch builder")


def _key(name: str) -> str:
    return name.replace(".", "_")  # torch module names cannot hold dots


def parameter_multipliers(model: CaffeNet) -> list[tuple[str, nn.Parameter, float, float]]:
    """(name, tensor, lr_mult, decay_mult) for every parameter, from the layers' Caffe `param`.

    Caffe lists one {lr_mult, decay_mult} per blob of a layer: weights first, then bias
    (gamma then beta for Scale). A layer without `param` gets 1 and 1.
    """
    rows = []
    for layer in model.spec.layers:
        mults = layer.p("param") or []
        mod = model.layers[_key(layer.name)]
        for j, (pname, tensor) in enumerate(mod.named_parameters()):
            m = mults[j] if j < len(mults) else {}
            rows.append((f"{layer.name}.{pname.split('.')[-1]}", tensor, float(m.get("lr_mult", 1.0)), float(m.get("decay_mult", 1.0))))
    return rows


def build_torch(spec: NetSpec) -> CaffeNet:
    return CaffeNet(spec)
