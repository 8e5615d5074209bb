"""Build a NetSpec as a Keras model (the TensorFlow backend of the one net definition).

Images are NHWC inside the model: TensorFlow's CPU kernels implement Conv2D and pooling
for channels-last only. The model takes the trainer's NCHW arrays and transposes once at
the input, so every backend is fed the same data. Shapes of the spec's (C, H, W) are
(H, W, C) here; channel-wise layers (Concat, Softmax, BatchNorm, Scale, LRN) use the last
axis. Layer sizes come from the spec, so parameter counts equal the PyTorch build's.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import keras
from keras import layers

from hpcdl.nets.spec import NEURONS, Layer, NetSpec, _pair, crop_begin, neuron


def _initializer(layer: Layer, fan_ratio: dict[str, float] | None = None):
    """The layer's weight filler as a Keras initializer.

    `fan_ratio` (mode -> Keras' fan / Caffe's fan) corrects the variance-scaling fillers for
    a kernel whose Keras shape gives other fans than Caffe's blob (a depthwise kernel).
    """
    filler = layer.p("weight_filler") or {}
    ratio = fan_ratio or {}
    kind = filler.get("type", "msra")
    if kind == "gaussian":
        return keras.initializers.RandomNormal(float(filler.get("mean", 0.0)), filler.get("std", 0.01))
    if kind == "constant":
        return keras.initializers.Constant(float(filler.get("value", 0.0)))
    if kind == "uniform":
        return keras.initializers.RandomUniform(float(filler.get("min", 0.0)), float(filler.get("max", 1.0)))
    if kind in ("xavier", "msra") and filler:
        # Caffe's n: fan_in = in * kh * kw, fan_out = out * kh * kw, as Keras' fans
        mode = {"FAN_IN": "fan_in", "FAN_OUT": "fan_out", "AVERAGE": "fan_avg"}[filler.get("variance_norm", "FAN_IN")]
        if kind == "xavier":
            return keras.initializers.VarianceScaling(1.0 * ratio.get(mode, 1.0), mode=mode, distribution="uniform")
        return keras.initializers.VarianceScaling(2.0 * ratio.get(mode, 1.0), mode=mode, distribution="untruncated_normal")
    if filler:
        raise ValueError(f"layer {layer.name}: filler {kind!r} has no Keras builder (PyTorch builds it)")
    # He et al. (fan_out), as the PyTorch build's kaiming_normal_(mode="fan_out")
    return keras.initializers.VarianceScaling(2.0 * ratio.get("fan_out", 1.0), mode="fan_out",
                                              distribution="untruncated_normal")


def is_depthwise(layer: Layer) -> bool:
    """A convolution with one group per input channel (MobileNet's `conv2_1/dw`: group ==
    channels == num_output, or a multiple of them): Keras' DepthwiseConv2D computes it."""
    g = layer.p("group", 1)
    return g > 1 and layer.in_shape[0] == g and layer.p("num_output") % g == 0


def _filler_initializer(filler: dict | None, default: float, where: str):
    """A bias's, a PReLU slope's or a Bias layer's filler (constant, gaussian or uniform; a
    constant `default` where none is given) as a Keras initializer."""
    filler = filler or {"type": "constant", "value": default}
    kind = filler.get("type", "constant")
    if kind == "constant":
        return keras.initializers.Constant(float(filler.get("value", 0.0)))
    if kind == "gaussian":
        return keras.initializers.RandomNormal(float(filler.get("mean", 0.0)), float(filler.get("std", 1.0)))
    if kind == "uniform":
        return keras.initializers.RandomUniform(float(filler.get("min", 0.0)), float(filler.get("max", 1.0)))
    raise ValueError(f"{where}: filler {kind!r} has no Keras builder (PyTorch builds it)")


def _bias_initializer(layer: Layer):
    return _filler_initializer(layer.p("bias_filler"), 0.0, f"layer {layer.name}: bias")


class CaffePooling(layers.Layer):
    """Caffe's pooling: output sizes rounded up (pooling_layer.cpp), padding made explicit.

    Keras pooling rounds down ('valid') or pads to 'same'; neither is Caffe's rule. The
    input is padded by `pad` on the top/left and by `pad` plus whatever the rounded-up
    last window needs on the bottom/right, then pooled 'valid'. MAX pads with -inf, so a
    padded cell never wins. AVE divides each window by Caffe's pool size: the window
    clipped to the input plus `pad`, so the round-up cells do not count but `pad` does.
    """

    def __init__(self, pool: str, kernel, stride, pad, in_hw, out_hw, **kwargs):
        super().__init__(**kwargs)
        self.pool, self.kernel, self.stride, self.pad = pool, tuple(kernel), tuple(stride), tuple(pad)
        self.in_hw, self.out_hw = tuple(in_hw), tuple(out_hw)
        extra = [
            (o - 1) * s + k - (i + 2 * p)
            for o, s, k, i, p in zip(self.out_hw, self.stride, self.kernel, self.in_hw, self.pad)
        ]
        self.paddings = [[0, 0], [self.pad[0], self.pad[0] + max(0, extra[0])],
                         [self.pad[1], self.pad[1] + max(0, extra[1])], [0, 0]]
        if pool == "AVE":
            self.divisor = tf.constant(_caffe_pool_sizes(self.kernel, self.stride, self.pad, self.in_hw, self.out_hw))

    def call(self, x):
        if self.pool == "MAX":
            x = tf.pad(x, self.paddings, constant_values=tf.constant(float("-inf"), x.dtype))
            return tf.nn.max_pool2d(x, self.kernel, self.stride, "VALID")
        x = tf.pad(x, self.paddings)
        window_sums = tf.nn.avg_pool2d(x, self.kernel, self.stride, "VALID") * float(self.kernel[0] * self.kernel[1])
        return window_sums / tf.cast(self.divisor, x.dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self.out_hw, input_shape[-1])


def _caffe_pool_sizes(kernel, stride, pad, in_hw, out_hw) -> np.ndarray:
    """Caffe's AVE divisor per output cell: hend = min(hstart + k, H + pad), hstart = o*s - pad."""
    sizes = []
    for k, s, p, i, o in zip(kernel, stride, pad, in_hw, out_hw):
        start = np.arange(o) * s - p
        sizes.append(np.minimum(start + k, i + p) - start)
    return (sizes[0][:, None] * sizes[1][None, :]).astype(np.float32)[None, :, :, None]


class CaffeScale(layers.Layer):
    """Caffe's Scale layer: a per-channel gamma (and beta)."""

    def __init__(self, bias_term: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.bias_term = bias_term

    def build(self, input_shape):
        channels = input_shape[-1]
        self.gamma = self.add_weight(shape=(channels,), initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=(channels,), initializer="zeros", name="beta") if self.bias_term else None

    def call(self, x):
        return x * self.gamma + self.beta if self.bias_term else x * self.gamma


class CaffePReLU(layers.Layer):
    """Caffe's PReLU: max(x, 0) + a min(x, 0), a per channel (the last axis here) or shared."""

    def __init__(self, slopes: int, filler: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.slopes, self.filler = slopes, filler

    def build(self, input_shape):
        self.slope = self.add_weight(shape=(self.slopes,), name="slope",
                                     initializer=_filler_initializer(self.filler, 0.25, self.name))

    def call(self, x):
        return tf.nn.relu(x) + self.slope * tf.minimum(x, 0.0)


class CaffeBias(layers.Layer):
    """Caffe's Bias layer with one bottom: a learned per-channel bias (its weight is not named
    `bias`: it is the layer's first blob, which keras_multipliers reads by name)."""

    def __init__(self, channels: int, filler: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.channels, self.filler = channels, filler

    def build(self, input_shape):
        self.offset = self.add_weight(shape=(self.channels,), name="offset",
                                      initializer=_filler_initializer(self.filler, 0.0, self.name))

    def call(self, x):
        return x + self.offset


class CaffeNeuron(layers.Layer):
    """Caffe's parameter-free elementwise layers (spec.neuron)."""

    def __init__(self, layer: Layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, x):
        return neuron(self.layer, x, tf.exp, tf.math.log, tf.maximum, tf.minimum,
                      lambda v, t: tf.cast(v > t, v.dtype))


class CaffeReshape(layers.Layer):
    """Caffe's Reshape, done in Caffe's (C, H, W) order: the NHWC input is put in NCHW first and
    a (C, H, W) result back in NHWC, so the values land where Caffe puts them."""

    def __init__(self, shape, **kwargs):
        super().__init__(**kwargs)
        self.shape = tuple(int(d) for d in shape)

    def call(self, x):
        if len(x.shape) == 4:
            x = tf.transpose(x, (0, 3, 1, 2))
        y = tf.reshape(x, (-1, *self.shape))
        return tf.transpose(y, (0, 2, 3, 1)) if len(self.shape) == 3 else y

    def compute_output_shape(self, input_shape):
        s = self.shape
        return (input_shape[0], s[1], s[2], s[0]) if len(s) == 3 else (input_shape[0], *s)


class CaffeCrop(layers.Layer):
    """Caffe's Crop of the first bottom to the spec's size from `begin` ((C, H, W) order)."""

    def __init__(self, begin, shape, **kwargs):
        super().__init__(**kwargs)
        self.begin, self.shape = tuple(begin), tuple(shape)

    def call(self, x):
        if len(self.shape) == 3:  # NHWC
            (c0, h0, w0), (c, h, w) = self.begin, self.shape
            return x[:, h0:h0 + h, w0:w0 + w, c0:c0 + c]
        return x[:, self.begin[0]:self.begin[0] + self.shape[0]]

    def compute_output_shape(self, input_shape):
        s = self.shape
        return (input_shape[0], s[1], s[2], s[0]) if len(s) == 3 else (input_shape[0], *s)


class CaffeLRN(layers.Layer):
    """Caffe's across-channel LRN. Caffe divides alpha by local_size; tf.nn.lrn does not."""

    def __init__(self, local_size: int, alpha: float, beta: float, k: float, **kwargs):
        super().__init__(**kwargs)
        self.local_size, self.alpha, self.beta, self.k = local_size, alpha, beta, k

    def call(self, x):
        return tf.nn.local_response_normalization(
            x, depth_radius=(self.local_size - 1) // 2, bias=self.k, alpha=self.alpha / self.local_size, beta=self.beta
        )


class WithinChannelLRN(layers.Layer):
    """Caffe's WITHIN_CHANNEL LRN: x (1 + alpha * AVE-pool(x^2, n x n, pad (n-1)/2, stride 1))^-beta.

    Caffe's AVE divisor counts the padding, so the pool is a zero-padded window sum / n^2.
    """

    def __init__(self, local_size: int, alpha: float, beta: float, **kwargs):
        super().__init__(**kwargs)
        self.local_size, self.alpha, self.beta = local_size, alpha, beta

    def call(self, x):
        pad = (self.local_size - 1) // 2
        sq = tf.pad(x * x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
        mean = tf.nn.avg_pool2d(sq, self.local_size, 1, "VALID")
        return x * tf.pow(1.0 + self.alpha * mean, -self.beta)


class CaffeDeconv2D(layers.Layer):
    """Caffe's Deconvolution (group 1): Conv2DTranspose 'valid', then `pad` cropped from each side,
    so the output is stride (in - 1) + kernel - 2 pad as in Caffe."""

    def __init__(self, filters: int, kernel, stride, pad, **conv_args):
        super().__init__(name=conv_args.pop("name"))
        self.pad = tuple(pad)
        self.deconv = layers.Conv2DTranspose(filters, kernel, strides=stride, padding="valid",
                                             name=f"{self.name}_t", **conv_args)

    def call(self, x):
        y = self.deconv(x)
        ph, pw = self.pad
        return y[:, ph:y.shape[1] - ph, pw:y.shape[2] - pw, :]


class GroupedConv2D(layers.Layer):
    """Caffe's grouped convolution (AlexNet's two towers) as one Conv2D per group.

    Keras' Conv2D(groups=...) has no CPU kernel in TensorFlow; splitting the channels is
    the same arithmetic with the same parameter count.
    """

    def __init__(self, groups: int, filters: int, **conv_args):
        super().__init__(name=conv_args.pop("name"))
        self.groups = groups
        self.convs = [layers.Conv2D(filters // groups, name=f"{self.name}_g{g}", **conv_args) for g in range(groups)]

    def call(self, x):
        parts = tf.split(x, self.groups, axis=-1)
        return tf.concat([conv(part) for conv, part in zip(self.convs, parts)], axis=-1)


def _flatten_caffe_order(x):
    """Flatten in Caffe's (C, H, W) order, so InnerProduct sees features as Caffe does."""
    if len(x.shape) == 4:
        x = tf.transpose(x, (0, 3, 1, 2))
    return tf.reshape(x, (-1, int(np.prod(x.shape[1:]))))


def keras_name(name: str) -> str:
    """Keras refuses '/' in layer names, which BVLC GoogLeNet uses (inception_3a/1x1)."""
    return name.replace("/", "__")


def _apply(layer: Layer, ins: list):
    t, p, name = layer.type, layer.params, keras_name(layer.name)
    x = ins[0]
    if t == "Convolution":
        pad = _pair(p.get("pad", 0))
        if any(pad):
            x = layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
        conv_args = dict(
            kernel_size=_pair(p["kernel_size"]), strides=_pair(p.get("stride", 1)), padding="valid",
            use_bias=p.get("bias_term", True), kernel_initializer=_initializer(layer),
            bias_initializer=_bias_initializer(layer), name=name,
        )
        if is_depthwise(layer):
            # Caffe's blob (C*k, 1, kh, kw) has fan_in kh*kw and fan_out C*k*kh*kw; Keras' depthwise
            # kernel (kh, kw, C, k) would give C*kh*kw and k*kh*kw
            c, k = p["group"], p["num_output"] // p["group"]
            fans = {"fan_in": c, "fan_out": 1.0 / c, "fan_avg": (c + k) / (1.0 + c * k)}
            conv_args.pop("kernel_initializer")
            return layers.DepthwiseConv2D(depth_multiplier=k, depthwise_initializer=_initializer(layer, fans),
                                          **conv_args)(x)
        if p.get("group", 1) > 1:
            return GroupedConv2D(p["group"], p["num_output"], **conv_args)(x)
        return layers.Conv2D(p["num_output"], **conv_args)(x)
    if t == "Pooling":
        pool = p.get("pool", "MAX")
        if p.get("global_pooling"):
            return (layers.GlobalMaxPooling2D if pool == "MAX" else layers.GlobalAveragePooling2D)(keepdims=True, name=name)(x)
        return CaffePooling(
            pool, _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0)),
            layer.in_shape[1:], layer.out_shape[1:], name=name,
        )(x)
    if t == "ReLU":
        if p.get("negative_slope"):
            return layers.LeakyReLU(negative_slope=p["negative_slope"], name=name)(x)
        return layers.ReLU(name=name)(x)
    if t in ("Sigmoid", "TanH"):
        return layers.Activation("sigmoid" if t == "Sigmoid" else "tanh", name=name)(x)
    if t == "Deconvolution":
        if p.get("group", 1) != 1:
            raise ValueError(f"layer {layer.name}: grouped Deconvolution has no Keras builder (PyTorch and MXNet build it)")
        return CaffeDeconv2D(
            p["num_output"], _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0)),
            use_bias=p.get("bias_term", True), kernel_initializer=_initializer(layer),
            bias_initializer=_bias_initializer(layer), name=name,
        )(x)
    if t == "LRN" and p.get("norm_region") == "WITHIN_CHANNEL":
        return WithinChannelLRN(p.get("local_size", 5), p.get("alpha", 1e-4), p.get("beta", 0.75), name=name)(x)
    if t == "LRN":
        return CaffeLRN(p.get("local_size", 5), p.get("alpha", 1e-4), p.get("beta", 0.75), p.get("k", 1.0), name=name)(x)
    if t == "InnerProduct":
        if len(x.shape) > 2:
            x = layers.Lambda(_flatten_caffe_order, name=f"{name}_flatten")(x)
        return layers.Dense(
            p["num_output"], use_bias=p.get("bias_term", True), kernel_initializer=_initializer(layer),
            bias_initializer=_bias_initializer(layer), name=name,
        )(x)
    if t == "Dropout":
        return layers.Dropout(p.get("dropout_ratio", 0.5), name=name)(x)
    if t == "BatchNorm":
        affine = p.get("affine", False)
        bn = layers.BatchNormalization(
            axis=-1, momentum=p.get("moving_average_fraction", 0.9), epsilon=p.get("eps", 1e-5),
            center=affine, scale=affine, name=name,
        )
        if p.get("use_global_stats"):
            bn.trainable = False  # Keras 3: a frozen BatchNormalization runs on its moving statistics, as Caffe's
        return bn(x)
    if t == "Scale":
        return CaffeScale(p.get("bias_term", True), name=name)(x)
    if t == "Softmax":
        return layers.Softmax(axis=-1, name=name)(x)
    if t == "Flatten":
        return layers.Lambda(_flatten_caffe_order, name=name)(x)
    if t == "Concat":
        return layers.Concatenate(axis=-1, name=name)(ins)
    if t == "Eltwise":
        op = p.get("operation", "SUM")
        coeff = p.get("coeff")
        if op == "SUM" and coeff and any(c != 1 for c in coeff):
            ins = [i if c == 1 else layers.Rescaling(float(c), name=f"{name}_coeff{j}")(i)
                   for j, (c, i) in enumerate(zip(coeff, ins))]
        return {"SUM": layers.Add, "PROD": layers.Multiply, "MAX": layers.Maximum}[op](name=name)(ins)
    if t == "PReLU":
        return CaffePReLU(1 if p.get("channel_shared") else layer.in_channels, p.get("filler"), name=name)(x)
    if t == "Bias":
        return CaffeBias(layer.in_channels, p.get("filler"), name=name)(x)
    if t in NEURONS:
        return CaffeNeuron(layer, name=name)(x)
    if t == "Reshape":
        return CaffeReshape(layer.out_shape, name=name)(x)
    if t in ("Crop", "Slice"):
        return CaffeCrop(crop_begin(layer), layer.out_shape, name=name)(x)
    raise ValueError(f"layer type {t} has no Keras builder")


def build_keras(spec: NetSpec) -> keras.Model:
    """A functional Keras model taking (N, C, H, W) float32 and giving the spec's output blob.

    A spec with auxiliary classifiers (GoogLeNet's loss1/loss2, load_net(aux_heads=True))
    gives [main, aux...] in the order of `spec.aux_outputs`, for Caffe's weighted loss.
    """
    inputs = keras.Input(shape=spec.input_shape, name="data")
    blobs = {"data": layers.Permute((2, 3, 1), name="to_nhwc")(inputs)}
    for layer in spec.layers:
        blobs[layer.top] = _apply(layer, [blobs[b] for b in layer.bottom])

    def logits(top):  # (N, 1, 1, C) -> (N, C), see NetSpec.pooled_logits
        if not spec.pooled_logits(top):
            return blobs[top]
        return layers.Flatten(name=f"{keras_name(top)}_logits")(blobs[top])

    if spec.aux_outputs:
        return keras.Model(inputs, [logits(spec.output), *(logits(top) for top, _ in spec.aux_outputs)], name=spec.name)
    return keras.Model(inputs, logits(spec.output), name=spec.name)


def keras_multipliers(model: keras.Model, spec: NetSpec) -> list[tuple[float, float]]:
    """Caffe's (lr_mult, decay_mult) of each of `model.trainable_variables`, from the layers' `param`.

    Caffe lists one {lr_mult, decay_mult} per blob of a layer, weights first, then bias
    (gamma then beta for Scale); a tensor with no entry gets 1 and 1. A grouped
    convolution's per-group kernels and biases take the layer's weight and bias entries.
    """
    by_id: dict[int, tuple[float, float]] = {}
    for layer in spec.layers:
        mults = layer.p("param") or []
        if not mults:
            continue
        try:
            built = model.get_layer(keras_name(layer.name))
        except ValueError:
            continue
        for w in built.trainable_weights:
            j = 1 if w.name.split("/")[-1].split(":")[0] in ("bias", "beta") else 0
            m = mults[j] if j < len(mults) else {}
            by_id[id(w)] = (float(m.get("lr_mult", 1.0)), float(m.get("decay_mult", 1.0)))
    return [by_id.get(id(v), (1.0, 1.0)) for v in model.trainable_variables]


def trainable_parameter_count(model: keras.Model) -> int:
    """Learned parameters only: Caffe and PyTorch do not count batch-norm running statistics."""
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


def nchw_shape(keras_shape) -> tuple[int, ...]:
    """A Keras activation shape (without batch) in the spec's (C, H, W) convention."""
    shape = tuple(int(d) for d in keras_shape)
    return (shape[2], shape[0], shape[1]) if len(shape) == 3 else shape
