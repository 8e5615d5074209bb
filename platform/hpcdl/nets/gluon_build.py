"""Build a NetSpec as an MXNet Gluon block (the MXNet backend of the one net definition).

MXNet is NCHW like Caffe and its pooling has Caffe's round-up rule built in
(`pooling_convention='full'`, which Gluon calls ceil_mode), so most layers map one to
one. Every layer is given its input size from the spec, so parameters exist (and can be
counted) before the first forward pass and equal the PyTorch build's.
"""

from __future__ import annotations

import mxnet as mx
from mxnet.gluon import HybridBlock, nn

from hpcdl.nets.spec import NEURONS, Layer, NetSpec, _pair, crop_begin, eltwise, neuron


def _initializer(layer: Layer):
    filler = layer.p("weight_filler") or {}
    kind = filler.get("type")
    if not filler:  # He et al. (fan_out), as the PyTorch build's kaiming_normal_(mode="fan_out")
        return mx.init.MSRAPrelu(factor_type="out", slope=0.0)
    if kind == "gaussian" and not filler.get("mean"):
        return mx.init.Normal(filler.get("std", 0.01))
    if kind in ("constant", "uniform", "xavier", "msra", "gaussian"):
        # Caffe's fillers: xavier and msra with n = fan_in unless variance_norm says otherwise
        return _caffe_initializer(filler)
    raise ValueError(f"layer {layer.name}: filler {kind!r} has no Gluon builder (PyTorch builds it)")


def _bias_initializer(layer: Layer):
    filler = layer.p("bias_filler") or {"type": "constant", "value": 0.0}
    if filler.get("type", "constant") == "constant":
        return mx.init.Constant(float(filler.get("value", 0.0)))
    return _caffe_initializer(filler)


def _caffe_initializer(filler: dict):
    """Caffe's fillers (filler.hpp) as an MXNet initializer, on Caffe's blob layout."""
    import numpy as np

    class CaffeFiller(mx.init.Initializer):
        def _init_weight(self, _, arr):
            kind = filler.get("type", "constant")
            shape = arr.shape
            count = int(np.prod(shape))
            fan_in = count / shape[0] if len(shape) > 1 else count
            fan_out = count / shape[1] if len(shape) > 1 else count
            n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "AVERAGE": (fan_in + fan_out) / 2}[filler.get("variance_norm", "FAN_IN")]
            rng = np.random.default_rng()
            if kind == "constant":
                value = np.full(shape, float(filler.get("value", 0.0)))
            elif kind == "gaussian":
                value = rng.normal(float(filler.get("mean", 0.0)), float(filler.get("std", 1.0)), shape)
            elif kind == "uniform":
                value = rng.uniform(float(filler.get("min", 0.0)), float(filler.get("max", 1.0)), shape)
            elif kind == "xavier":
                value = rng.uniform(-(3.0 / n) ** 0.5, (3.0 / n) ** 0.5, shape)
            elif kind == "msra":
                value = rng.normal(0.0, (2.0 / n) ** 0.5, shape)
            else:
                raise ValueError(f"filler type {kind} has no Gluon builder")
            arr[:] = value.astype(np.float32)

        _init_bias = _init_weight
        _init_default = _init_weight

    return CaffeFiller()


class CaffeScale(HybridBlock):
    """Caffe's Scale layer: a per-channel gamma (and beta) on axis 1."""

    def __init__(self, channels: int, bias_term: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.bias_term = bias_term
        with self.name_scope():
            self.gamma = self.params.get("gamma", shape=(1, channels, 1, 1), init=mx.init.One())
            self.beta = self.params.get("beta", shape=(1, channels, 1, 1), init=mx.init.Zero()) if bias_term else None

    def hybrid_forward(self, F, x, gamma, beta=None):
        y = F.broadcast_mul(x, gamma)
        return F.broadcast_add(y, beta) if beta is not None else y


class CaffeLRN(HybridBlock):
    """Across-channel LRN; MXNet's LRN uses Caffe's formula (alpha divided by nsize)."""

    def __init__(self, local_size: int, alpha: float, beta: float, k: float, **kwargs):
        super().__init__(**kwargs)
        self.local_size, self.alpha, self.beta, self.k = local_size, alpha, beta, k

    def hybrid_forward(self, F, x):
        return F.LRN(x, alpha=self.alpha, beta=self.beta, knorm=self.k, nsize=self.local_size)


class WithinChannelLRN(HybridBlock):
    """Caffe's WITHIN_CHANNEL LRN: x (1 + alpha * AVE-pool(x^2, n x n, pad (n-1)/2, stride 1))^-beta
    (the AVE divisor counts the padding, as Caffe's)."""

    def __init__(self, local_size: int, alpha: float, beta: float, **kwargs):
        super().__init__(**kwargs)
        self.local_size, self.alpha, self.beta = local_size, alpha, beta

    def hybrid_forward(self, F, x):
        pad = (self.local_size - 1) // 2
        mean = F.Pooling(x * x, kernel=(self.local_size, self.local_size), stride=(1, 1), pad=(pad, pad),
                         pool_type="avg", count_include_pad=True)
        return x * F.power(1.0 + self.alpha * mean, -self.beta)


class _CaffePooling(HybridBlock):
    """A Gluon pooling whose output is cut to Caffe's size (the last window in the padding dropped)."""

    def __init__(self, pool, out_hw: tuple[int, int], **kwargs):
        super().__init__(**kwargs)
        self.out_hw = out_hw
        with self.name_scope():
            self.pool = pool

    def hybrid_forward(self, F, x):
        return F.slice(self.pool(x), begin=(None, None, 0, 0), end=(None, None, *self.out_hw))


def _filler_init(filler: dict | None, default: float):
    filler = filler or {"type": "constant", "value": default}
    if filler.get("type", "constant") == "constant":
        return mx.init.Constant(float(filler.get("value", 0.0)))
    return _caffe_initializer(filler)


def _per_channel(F, x, v, rank: int):
    """`v` (C,) broadcast over axis 1 of an (N, C) or (N, C, H, W) blob."""
    return F.reshape(v, shape=(1, -1) + (1,) * (rank - 2))


class CaffePReLU(HybridBlock):
    """Caffe's PReLU: max(x, 0) + a min(x, 0), a per channel (axis 1) or one shared slope."""

    def __init__(self, slopes: int, rank: int, filler: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.rank = rank
        with self.name_scope():
            self.alpha = self.params.get("alpha", shape=(slopes,), init=_filler_init(filler, 0.25))

    def hybrid_forward(self, F, x, alpha):
        a = _per_channel(F, x, alpha, self.rank)
        return F.relu(x) + F.broadcast_mul(a, F.minimum(x, 0.0))


class CaffeBias(HybridBlock):
    """Caffe's Bias layer with one bottom: a learned per-channel bias (named `offset`, not
    `bias`: it is the layer's first blob, which gluon_multipliers reads by name)."""

    def __init__(self, channels: int, rank: int, filler: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.rank = rank
        with self.name_scope():
            self.offset = self.params.get("offset", shape=(channels,), init=_filler_init(filler, 0.0))

    def hybrid_forward(self, F, x, offset):
        return F.broadcast_add(x, _per_channel(F, x, offset, self.rank))


class CaffeNeuron(HybridBlock):
    """Caffe's parameter-free elementwise layers (spec.neuron)."""

    def __init__(self, layer: Layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def hybrid_forward(self, F, x):
        return neuron(self.layer, x, F.exp, F.log, F.maximum, F.minimum, lambda v, t: v > t)


class CaffeReshape(HybridBlock):
    def __init__(self, shape, **kwargs):
        super().__init__(**kwargs)
        self.shape = tuple(int(d) for d in shape)

    def hybrid_forward(self, F, x):
        return F.reshape(x, shape=(0, *self.shape))  # 0: the batch axis as it is


class CaffeCrop(HybridBlock):
    def __init__(self, begin, shape, **kwargs):
        super().__init__(**kwargs)
        self.begin = tuple(begin)
        self.end = tuple(b + n for b, n in zip(begin, shape))

    def hybrid_forward(self, F, x):
        return F.slice(x, begin=(None, *self.begin), end=(None, *self.end))


class _Softmax(HybridBlock):
    def hybrid_forward(self, F, x):
        return F.softmax(x, axis=1)


def _block(layer: Layer):
    t, p = layer.type, layer.params
    prefix = f"{layer.name}_"
    if t == "Convolution":
        return nn.Conv2D(
            p["num_output"], _pair(p["kernel_size"]), strides=_pair(p.get("stride", 1)), padding=_pair(p.get("pad", 0)),
            groups=p.get("group", 1), use_bias=p.get("bias_term", True), in_channels=layer.in_channels,
            weight_initializer=_initializer(layer), bias_initializer=_bias_initializer(layer), prefix=prefix,
        )
    if t == "Deconvolution":
        return nn.Conv2DTranspose(
            p["num_output"], _pair(p["kernel_size"]), strides=_pair(p.get("stride", 1)), padding=_pair(p.get("pad", 0)),
            groups=p.get("group", 1), use_bias=p.get("bias_term", True), in_channels=layer.in_channels,
            weight_initializer=_initializer(layer), bias_initializer=_bias_initializer(layer), prefix=prefix,
        )
    if t == "Pooling":
        pool = p.get("pool", "MAX")
        if p.get("global_pooling"):
            return (nn.GlobalMaxPool2D if pool == "MAX" else nn.GlobalAvgPool2D)(prefix=prefix)
        k, st, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
        ceil = p.get("round_mode", "CEIL") != "FLOOR"
        args = dict(pool_size=k, strides=st, padding=pad, ceil_mode=ceil, prefix=prefix)
        block = nn.MaxPool2D(**args) if pool == "MAX" else nn.AvgPool2D(count_include_pad=True, **args)
        # MXNet's ceil mode keeps a last window that starts in the padding; Caffe's
        # pooling_layer.cpp drops it (the spec's out_shape): cut that row/column off
        full = tuple(-(-(i + 2 * q - kk) // s) + 1 for i, q, kk, s in zip(layer.in_shape[1:], pad, k, st))
        if ceil and full != tuple(layer.out_shape[1:]):
            return _CaffePooling(block, tuple(layer.out_shape[1:]), prefix=f"{layer.name}_clip_")
        return block
    if t == "ReLU":
        if p.get("negative_slope"):
            return nn.LeakyReLU(p["negative_slope"], prefix=prefix)
        return nn.Activation("relu", prefix=prefix)
    if t in ("Sigmoid", "TanH"):
        return nn.Activation("sigmoid" if t == "Sigmoid" else "tanh", prefix=prefix)
    if t == "LRN" and p.get("norm_region") == "WITHIN_CHANNEL":
        return WithinChannelLRN(p.get("local_size", 5), p.get("alpha", 1e-4), p.get("beta", 0.75), prefix=prefix)
    if t == "LRN":
        return CaffeLRN(p.get("local_size", 5), p.get("alpha", 1e-4), p.get("beta", 0.75), p.get("k", 1.0), prefix=prefix)
    if t == "InnerProduct":
        return nn.Dense(
            p["num_output"], use_bias=p.get("bias_term", True), flatten=True, in_units=layer.in_channels,
            weight_initializer=_initializer(layer), bias_initializer=_bias_initializer(layer), prefix=prefix,
        )
    if t == "Dropout":
        return nn.Dropout(p.get("dropout_ratio", 0.5), prefix=prefix)
    if t == "BatchNorm":
        affine = p.get("affine", False)
        return nn.BatchNorm(
            axis=1, momentum=p.get("moving_average_fraction", 0.9), epsilon=p.get("eps", 1e-5),
            center=affine, scale=affine, in_channels=layer.in_channels, prefix=prefix,
            use_global_stats=bool(p.get("use_global_stats", False)),  # Caffe's: stored statistics in training too
        )
    if t == "Scale":
        return CaffeScale(layer.in_channels, p.get("bias_term", True), prefix=prefix)
    if t == "Softmax":
        return _Softmax(prefix=prefix)
    if t == "Flatten":
        return nn.Flatten(prefix=prefix)
    if t in ("Concat", "Eltwise"):
        return None  # combined in _route
    rank = len(layer.in_shape) + 1
    if t == "PReLU":
        return CaffePReLU(1 if p.get("channel_shared") else layer.in_channels, rank, p.get("filler"), prefix=prefix)
    if t == "Bias":
        return CaffeBias(layer.in_channels, rank, p.get("filler"), prefix=prefix)
    if t in NEURONS:
        return CaffeNeuron(layer, prefix=prefix)
    if t == "Reshape":
        return CaffeReshape(layer.out_shape, prefix=prefix)
    if t in ("Crop", "Slice"):
        return CaffeCrop(crop_begin(layer), layer.out_shape, prefix=prefix)
    raise ValueError(f"layer type {t} has no Gluon builder")


class CaffeNet(HybridBlock):
    """Runs the layers of a NetSpec in order, routing blobs by name (bottom/top)."""

    def __init__(self, spec: NetSpec, **kwargs):
        super().__init__(prefix=f"{spec.name}_", **kwargs)
        self.spec = spec
        self.blocks = {}
        with self.name_scope():
            for layer in spec.layers:
                block = _block(layer)
                if block is not None:
                    self.register_child(block, layer.name)
                    self.blocks[layer.name] = block

    def route(self, F, x) -> dict:
        """Every blob of the net by its top name (the trainer uses only the output)."""
        blobs = {"data": x}
        for layer in self.spec.layers:
            ins = [blobs[b] for b in layer.bottom]
            if layer.type == "Concat":
                out = F.concat(*ins, dim=1)
            elif layer.type == "Eltwise":
                out = eltwise(layer, ins, F.maximum)
            else:
                out = self.blocks[layer.name](ins[0])
            blobs[layer.top] = out
        return blobs

    def hybrid_forward(self, F, x):
        """The output blob; with auxiliary classifiers, (main, aux...) for Caffe's weighted loss."""
        blobs = self.route(F, x)

        def logits(top):  # (N, C, 1, 1) -> (N, C), see NetSpec.pooled_logits
            return F.flatten(blobs[top]) if self.spec.pooled_logits(top) else blobs[top]

        if self.spec.aux_outputs:
            return tuple([logits(self.spec.output), *(logits(top) for top, _ in self.spec.aux_outputs)])
        return logits(self.spec.output)


def build_gluon(spec: NetSpec) -> CaffeNet:
    return CaffeNet(spec)


def gluon_multipliers(net: CaffeNet, learned: list) -> list[tuple[float, float]]:
    """Caffe's (lr_mult, decay_mult) of each parameter in `learned`, from the layers' `param`
    (weights first, then bias; gamma then beta for Scale); 1 and 1 where not given."""
    by_id: dict[int, tuple[float, float]] = {}
    for layer in net.spec.layers:
        mults = layer.p("param") or []
        block = net.blocks.get(layer.name)
        if not mults or block is None:
            continue
        for name, param in block.collect_params().items():
            j = 1 if name.endswith(("bias", "beta")) else 0
            m = mults[j] if j < len(mults) else {}
            by_id[id(param)] = (float(m.get("lr_mult", 1.0)), float(m.get("decay_mult", 1.0)))
    return [by_id.get(id(p), (1.0, 1.0)) for p in learned]


def trainable_parameter_count(net: CaffeNet) -> int:
    """Learned parameters only (grad_req 'null' marks running statistics and fixed gamma/beta)."""
    total = 0
    for param in net.collect_params().values():
        if param.grad_req != "null":
            size = 1
            for d in param.shape:
                size *= d
            total += size
    return total
