"""Network specifications: a list of layers in Caffe's vocabulary, with shapes inferred.

A net file (hpcdl/nets/<name>.yaml) lists layers. Each layer has a `type` and `name`, and
optional `bottom` (input blob names; default: the previous layer's top) and `top`
(default: its name). Parameters use Caffe's names (num_output, kernel_size, stride, pad,
group, pool, local_size, alpha, beta, dropout_ratio, operation, axis, bias_term).
`num_output: classes` in the last InnerProduct is replaced by the class count.
`param: [{lr_mult, decay_mult}, ...]` gives Caffe's per-blob multipliers (weights, then bias).

Repeated structure (inception modules, residual bottlenecks) is written once under
`blocks:` as a list of layer templates, and used in `layers:` as

    - {use: inception, p: inception_3a, c1: 64, ...}          # one copy
    - {repeat: bottleneck, times: 3, p: res3, mid: 128, ...}  # copies p=res3a, res3b, ...

Inside a template `{name}` is replaced by that variable (a value that is exactly
`{name}` keeps the variable's type, so `num_output: "{c1}"` stays an int), and
`{input}` is the top of the layer before the block, so a shortcut can reach it.
With `repeat`, `{i}` counts from 0, `{n}` from 1 and `{p}` gets the letters a, b, c...
appended, in Caffe's naming (res2a, res2b, ...). A `first:` mapping overrides variables
for the first copy only, and `first: {use: other_block}` builds the first copy from another
block (the projection shortcut that opens a ResNet stage). Blocks are expanded
here, so every backend sees one flat list of layers.

Layers marked `aux: true` (GoogLeNet's auxiliary classifiers) are left out unless
`load_net(..., aux_heads=True)`; their tops are then listed in `NetSpec.aux_outputs`
with their Caffe `loss_weight`.

Shapes and parameter counts are computed here, once, so every backend builds layers
of the same size and `hpcdl nets` can report counts without any framework installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpcdl.errors import HpcdlError

NET_DIR = Path(__file__).parent

LAYER_TYPES = (
    "Convolution", "Pooling", "ReLU", "LRN", "InnerProduct", "Dropout", "Concat",
    "BatchNorm", "Scale", "Eltwise", "Softmax", "Flatten",
    # from imported Caffe nets (hpcdl.caffe); docs/caffe.md says which backends build them
    "Deconvolution", "Sigmoid", "TanH", "PReLU", "ELU", "AbsVal", "Power", "BNLL", "Exp", "Log", "Threshold",
    "Bias", "Reshape", "Crop", "Slice",
)
# elementwise layers without parameters (Caffe's NeuronLayers); `neuron` computes them
NEURONS = ("ELU", "AbsVal", "Power", "BNLL", "Exp", "Log", "Threshold")


@dataclass(frozen=True)
class Layer:
    type: str
    name: str
    bottom: tuple[str, ...]
    top: str
    params: dict[str, Any] = field(default_factory=dict)
    in_shape: tuple[int, ...] = ()  # (C, H, W) or (N,) of the first bottom
    out_shape: tuple[int, ...] = ()
    in_channels: int = 0  # channels (or features) feeding a parametrised layer

    def p(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    @property
    def parameter_count(self) -> int:
        t, p = self.type, self.params
        if t == "Convolution":
            k = _pair(p["kernel_size"])
            weights = p["num_output"] * (self.in_channels // p.get("group", 1)) * k[0] * k[1]
            return weights + (p["num_output"] if p.get("bias_term", True) else 0)
        if t == "Deconvolution":
            # Caffe's blob: (C_in, num_output / group, kh, kw)
            k = _pair(p["kernel_size"])
            weights = self.in_channels * (p["num_output"] // p.get("group", 1)) * k[0] * k[1]
            return weights + (p["num_output"] if p.get("bias_term", True) else 0)
        if t == "InnerProduct":
            return p["num_output"] * self.in_channels + (p["num_output"] if p.get("bias_term", True) else 0)
        if t == "BatchNorm":
            # Caffe's BatchNorm keeps only running statistics; `affine: true` folds a Scale in
            return 2 * self.in_channels if p.get("affine", False) else 0
        if t == "Scale":
            return self.in_channels * (2 if p.get("bias_term", True) else 1)
        if t == "PReLU":  # one slope per channel, or one for all (channel_shared)
            return 1 if p.get("channel_shared", False) else self.in_channels
        if t == "Bias":
            return self.in_channels
        return 0


@dataclass(frozen=True)
class NetSpec:
    name: str
    description: str
    input_shape: tuple[int, int, int]  # C, H, W
    num_classes: int
    layers: tuple[Layer, ...]
    output: str
    reference: str = ""
    aux_outputs: tuple[tuple[str, float], ...] = ()  # (top, loss_weight) of auxiliary classifiers

    @property
    def parameter_count(self) -> int:
        return sum(layer.parameter_count for layer in self.layers)

    def pooled_logits(self, top: str) -> bool:
        """Whether output `top` is (C, 1, 1): class scores from a global pooling or a 1x1 map
        (SqueezeNet, Network-in-Network, MobileNet's 1x1 convolution classifier).

        Caffe's SoftmaxWithLoss and Accuracy over N x C x 1 x 1 (axis 1) are those over N x C,
        so the builders give such an output as (N, C), the shape every trainer's loss takes.
        """
        shape = next((layer.out_shape for layer in self.layers if layer.top == top), ())
        return len(shape) == 3 and shape[1:] == (1, 1)


def list_nets() -> list[str]:
    return sorted(p.stem for p in NET_DIR.glob("*.yaml"))


def net_path(name: str) -> Path:
    """A bundled net by name, or a net file by path (one `hpcdl nets import` wrote)."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name)
        try:
            found = path.is_file()
        except OSError:  # a name too long for the filesystem, say
            found = False
        if not found:
            raise HpcdlError(f"net: no such net file {name!r}")
        return path
    path = NET_DIR / f"{name}.yaml"
    if name not in list_nets():  # a bundled net's name: never joined into a path unchecked
        raise HpcdlError(f"net: unknown network {name!r}; known: {', '.join(list_nets())} (or give a net file's path)")
    return path


def load_net(name: str, num_classes: int | None = None, image_size: int | None = None, channels: int | None = None,
             aux_heads: bool = False) -> NetSpec:
    path = net_path(name)
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "layers" not in data or "input" not in data:
        raise HpcdlError(f"net {name}: a net file needs `input` and `layers`")
    inp = data["input"]
    height = inp.get("height", inp.get("size"))
    width = inp.get("width", inp.get("size"))
    shape = (channels or inp["channels"], image_size or height, image_size or width)
    classes = num_classes or data.get("classes", 1000)
    return build_spec(name if path.parent == NET_DIR else path.stem, data, shape, classes, aux_heads=aux_heads)


def net_input(name: str) -> dict:
    """The `input` mapping of a shipped net file (channels, size, and for a Caffe-defined net
    `transform: caffe` with its transform_param `mean_value`)."""
    path = NET_DIR / f"{name}.yaml"
    if not path.exists():
        return {}
    return dict(yaml.safe_load(path.read_text()).get("input") or {})


def build_spec(name: str, data: dict, input_shape: tuple[int, int, int], classes: int,
               aux_heads: bool = False) -> NetSpec:
    shapes: dict[str, tuple[int, ...]] = {"data": input_shape}
    layers: list[Layer] = []
    aux_outputs: list[tuple[str, float]] = []
    previous = "data"
    main_previous = "data"
    for raw in expand_blocks(data["layers"], data.get("blocks", {}), f"net {name}"):
        raw = dict(raw)
        ltype = raw.pop("type", None)
        lname = raw.pop("name", None)
        if not ltype or not lname:
            raise HpcdlError(f"net {name}: every layer needs a type and a name: {raw}")
        is_aux = bool(raw.pop("aux", False))
        loss_weight = raw.pop("loss_weight", None)
        if is_aux and not aux_heads:
            continue
        if ltype not in LAYER_TYPES:
            raise HpcdlError(f"net {name}: layer {lname}: unknown type {ltype!r}")
        if any(layer.name == lname for layer in layers):
            # backends key modules and weights by layer name; a repeat would silently share them
            raise HpcdlError(f"net {name}: layer name {lname!r} is used twice")
        bottom = raw.pop("bottom", previous if is_aux else main_previous)
        bottom = tuple(bottom) if isinstance(bottom, list) else (bottom,)
        top = raw.pop("top", lname)
        if raw.get("num_output") == "classes":
            raw["num_output"] = classes
        for b in bottom:
            if b not in shapes:
                raise HpcdlError(f"net {name}: layer {lname}: bottom {b!r} is not produced by an earlier layer")
        in_shape = shapes[bottom[0]]
        out_shape = _out_shape(ltype, raw, [shapes[b] for b in bottom], f"net {name}: layer {lname}")
        in_channels = in_shape[0] if ltype != "InnerProduct" else math.prod(in_shape)
        layers.append(Layer(ltype, lname, bottom, top, raw, in_shape, out_shape, in_channels))
        shapes[top] = out_shape
        if is_aux:
            if loss_weight is not None:
                aux_outputs.append((top, float(loss_weight)))
            previous = top
            continue
        previous = main_previous = top
    previous = main_previous
    return NetSpec(
        name=name,
        description=data.get("description", ""),
        input_shape=input_shape,
        num_classes=classes,
        layers=tuple(layers),
        output=previous,
        reference=data.get("reference", ""),
        aux_outputs=tuple(aux_outputs),
    )


def expand_blocks(entries: list[dict], blocks: dict, where: str, input_top: str = "data",
                  inherited: dict | None = None) -> list[dict]:
    """The flat list of layers: every `use`/`repeat` entry replaced by its block's layers.

    A block used inside another block sees the outer block's variables, `{input}` included.
    """
    flat: list[dict] = []
    previous = input_top
    for entry in entries:
        if "use" in entry or "repeat" in entry:
            entry = dict(entry)
            repeated = "repeat" in entry
            block = entry.pop("use", None) or entry.pop("repeat")
            if block not in blocks:
                raise HpcdlError(f"{where}: unknown block {block!r}; defined: {', '.join(blocks) or 'none'}")
            times = int(entry.pop("times", 1))
            first = entry.pop("first", {})
            prefix = entry.get("p", block)
            for i in range(times):
                overrides = dict(first) if i == 0 else {}
                this_block = overrides.pop("use", block)
                if this_block not in blocks:
                    raise HpcdlError(f"{where}: unknown block {this_block!r}; defined: {', '.join(blocks)}")
                variables = {"input": previous, **(inherited or {}), **entry, **overrides, "i": i, "n": i + 1}
                if repeated:
                    variables["p"] = f"{prefix}{chr(ord('a') + i)}"
                templates = blocks[this_block]
                expanded = expand_blocks([_substitute(t, variables, where) for t in templates], blocks, where,
                                         previous, variables)
                flat.extend(expanded)
                main = [layer for layer in expanded if not layer.get("aux")]
                previous = _top_of(main[-1], previous) if main else previous
        else:
            flat.append(entry)
            if not entry.get("aux"):
                previous = _top_of(entry, previous)
    return flat


def _top_of(layer: dict, previous: str) -> str:
    return layer.get("top", layer.get("name", previous))


def _substitute(value, variables: dict, where: str):
    if isinstance(value, dict):
        return {k: _substitute(v, variables, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, variables, where) for v in value]
    if isinstance(value, str) and "{" in value:
        stripped = value[1:-1]
        if value.startswith("{") and value.endswith("}") and stripped in variables:
            return variables[stripped]
        try:
            return value.format(**variables)
        except KeyError as exc:
            raise HpcdlError(f"{where}: block variable {exc.args[0]!r} is not given (in {value!r})") from None
    return value


def eltwise(layer: Layer, ins: list, maximum):
    """Caffe's Eltwise on any framework's tensors: SUM (with per-bottom coeff), PROD or MAX
    (`maximum` is the framework's elementwise maximum, e.g. torch.maximum or Gluon's F.maximum)."""
    op = layer.p("operation", "SUM")
    if op == "SUM":
        coeff = layer.p("coeff") or [1.0] * len(ins)
        out = ins[0] * coeff[0] if coeff[0] != 1 else ins[0]
        for c, other in zip(coeff[1:], ins[1:]):
            out = out + (other * c if c != 1 else other)
        return out
    out = ins[0]
    for other in ins[1:]:
        out = out * other if op == "PROD" else maximum(out, other)
    return out


def neuron(layer: Layer, x, exp, log, maximum, minimum, greater):
    """Caffe's parameter-free elementwise layers (src/caffe/layers/*_layer.cpp) on any framework's
    tensors; `maximum(x, 0)`/`minimum(x, 0)` take a scalar, `greater(x, t)` gives 1.0 or 0.0."""
    t = layer.type
    if t == "AbsVal":
        return maximum(x, 0.0) - minimum(x, 0.0)
    if t == "ELU":  # x if x > 0 else alpha (exp(x) - 1)
        return maximum(x, 0.0) + layer.p("alpha", 1.0) * (exp(minimum(x, 0.0)) - 1.0)
    if t == "BNLL":  # log(1 + exp(x)), computed as bnll_layer.cpp does so that exp never overflows
        return maximum(x, 0.0) + log(1.0 + exp(minimum(x, 0.0) - maximum(x, 0.0)))
    if t == "Threshold":
        return greater(x, float(layer.p("threshold", 0.0)))
    power, scale, shift = float(layer.p("power", 1.0)), float(layer.p("scale", 1.0)), float(layer.p("shift", 0.0))
    inner = x if scale == 1.0 else x * scale
    inner = inner if shift == 0.0 else inner + shift
    if t == "Power":  # (shift + scale x)^power
        return inner if power == 1.0 else inner ** power
    base = float(layer.p("base", -1.0))
    if t == "Exp":  # base^(shift + scale x); base -1 is e
        return exp(inner if base == -1.0 else inner * math.log(base))
    if t == "Log":  # log_base(shift + scale x); base -1 is e
        return log(inner) if base == -1.0 else log(inner) * (1.0 / math.log(base))
    raise ValueError(f"layer type {t} is not an elementwise layer")


def crop_begin(layer: Layer) -> tuple[int, ...]:
    """Where Caffe's Crop (crop_layer.cpp) starts in each of the first bottom's (C, H, W) axes:
    0 before `axis`; from `axis` on, its `offset` (one for all axes, or one per axis; none: 0).
    For one top of a Slice: 0 but along its axis, where the piece starts."""
    rank = len(layer.in_shape)
    if layer.type == "Slice":
        axis, start, _ = _slice_piece(layer.params, layer.in_shape, f"layer {layer.name}")
        return tuple(start if i == axis else 0 for i in range(rank))
    axis = layer.p("axis", 2)
    axis = (axis if axis >= 0 else axis + rank + 1) - 1  # Caffe's axes count the batch
    offset = list(layer.p("offset", []))
    n = rank - axis
    if len(offset) == 1:
        offset = offset * n
    return tuple([0] * axis + (offset or [0] * n))


def _slice_piece(p: dict, s: tuple[int, ...], where: str) -> tuple[int, int, int]:
    """(axis in (C, H, W), start, end) of top `index` of Caffe's Slice (slice_layer.cpp): the
    bottom cut at `slice_point` along `axis`, or without slice points into `count` equal parts."""
    axis = int(p.get("axis", 1))
    axis = axis if axis >= 0 else axis + len(s) + 1
    if not 1 <= axis <= len(s):
        raise HpcdlError(f"{where}: Slice along axis {p.get('axis', 1)} of a {len(s) + 1}-axis blob: hpcdl slices "
                         f"axes 1 to {len(s)} (never the batch)")
    dim, count, points = s[axis - 1], int(p["count"]), [int(x) for x in p.get("slice_point", [])]
    if points:
        if len(points) != count - 1:
            raise HpcdlError(f"{where}: Slice has {len(points)} slice_point(s) for {count} tops; Caffe needs {count - 1}")
        bounds = [0, *points, dim]
        if any(b >= e for b, e in zip(bounds, bounds[1:])):
            raise HpcdlError(f"{where}: Slice slice_point {points} must increase within 1..{dim - 1} (Caffe's check)")
    else:
        if dim % count:
            raise HpcdlError(f"{where}: Slice of {dim} into {count} equal parts: Caffe needs them to divide evenly")
        bounds = [i * dim // count for i in range(count + 1)]
    i = int(p["index"])
    return axis - 1, bounds[i], bounds[i + 1]


def _reshape(p: dict, s: tuple[int, ...], where: str) -> tuple[int, ...]:
    """Caffe's ReshapeLayer::Reshape on (N, *s): dims 0 copy the bottom's, one -1 is inferred;
    `axis` and `num_axes` pick the bottom axes the shape replaces. The batch axis must stay."""
    full_rank = len(s) + 1
    dims = [int(d) for d in p.get("shape", [])]
    axis, num_axes = int(p.get("axis", 0)), int(p.get("num_axes", -1))
    start = axis if axis >= 0 else axis + full_rank + 1
    if not 0 <= start <= full_rank:
        raise HpcdlError(f"{where}: Reshape axis {axis} is out of range for a {full_rank}-axis blob")
    end = full_rank if num_axes == -1 else start + num_axes
    if num_axes < -1 or end > full_rank:
        raise HpcdlError(f"{where}: Reshape num_axes {num_axes} is out of range for a {full_rank}-axis blob")
    if sum(1 for d in dims if d == -1) > 1 or any(d < -1 for d in dims):
        raise HpcdlError(f"{where}: Reshape shape {dims}: at most one -1 and no other negative dim (Caffe's check)")
    if start == 0:
        if end == 0:
            pass
        elif not dims or dims[0] != 0:
            raise HpcdlError(f"{where}: Reshape shape {dims} changes the batch axis (hpcdl keeps it: give dim 0 first)")
        else:
            dims, start = dims[1:], 1
    full = (None, *s)
    new = []
    for i, d in enumerate(dims):
        if d == 0:
            if start + i >= full_rank:
                raise HpcdlError(f"{where}: Reshape dim {i} is 0 (copy) but the bottom has no axis {start + i}")
            d = full[start + i]
        new.append(d)
    out = list(full[1:start]) + new + list(full[end:])
    total = math.prod(s)
    known = math.prod(d for d in out if d != -1)
    if -1 in out:
        if known == 0 or total % known:
            raise HpcdlError(f"{where}: Reshape shape {dims} does not divide the bottom's {total} values")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise HpcdlError(f"{where}: Reshape to {tuple(out)} ({math.prod(out)} values) from {s} ({total} values)")
    if len(out) not in (1, 3):
        raise HpcdlError(f"{where}: Reshape to {tuple(out)}: hpcdl blobs are (C,) or (C, H, W) per example")
    return tuple(out)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _out_shape(ltype: str, p: dict, ins: list[tuple[int, ...]], where: str) -> tuple[int, ...]:
    s = ins[0]
    if ltype == "Convolution":
        k, st, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
        h = (s[1] + 2 * pad[0] - k[0]) // st[0] + 1
        w = (s[2] + 2 * pad[1] - k[1]) // st[1] + 1
        if s[0] % p.get("group", 1):
            raise HpcdlError(f"{where}: {s[0]} input channels do not split into {p.get('group')} groups")
        return (p["num_output"], h, w)
    if ltype == "Deconvolution":
        # Caffe's DeconvolutionLayer::compute_output_shape: stride (in - 1) + kernel - 2 pad
        k, st, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
        if s[0] % p.get("group", 1) or p["num_output"] % p.get("group", 1):
            raise HpcdlError(f"{where}: channels do not split into {p.get('group')} groups")
        return (p["num_output"], st[0] * (s[1] - 1) + k[0] - 2 * pad[0], st[1] * (s[2] - 1) + k[1] - 2 * pad[1])
    if ltype == "Pooling":
        if p.get("global_pooling"):
            return (s[0], 1, 1)
        k, st, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
        # Caffe rounds pooled sizes up (pooling_layer.cpp), so ports need ceil_mode;
        # round_mode FLOOR (caffe.proto's PoolingParameter.RoundMode) rounds down
        rnd = math.floor if p.get("round_mode", "CEIL") == "FLOOR" else math.ceil
        h = rnd((s[1] + 2 * pad[0] - k[0]) / st[0]) + 1
        w = rnd((s[2] + 2 * pad[1] - k[1]) / st[1]) + 1
        if pad[0] and (h - 1) * st[0] >= s[1] + pad[0]:
            h -= 1
        if pad[1] and (w - 1) * st[1] >= s[2] + pad[1]:
            w -= 1
        return (s[0], h, w)
    if ltype == "InnerProduct":
        return (p["num_output"],)
    if ltype == "Flatten":
        return (math.prod(s),)
    if ltype == "Concat":
        axis = p.get("axis", 1)
        if axis != 1 or any(i[1:] != s[1:] for i in ins):
            raise HpcdlError(f"{where}: Concat inputs must agree in all but channels: {ins}")
        return (sum(i[0] for i in ins), *s[1:])
    if ltype == "Eltwise":
        if any(i != s for i in ins):
            raise HpcdlError(f"{where}: Eltwise inputs differ in shape: {ins}")
        return s
    if ltype == "Reshape":
        return _reshape(p, s, where)
    if ltype == "Slice":
        axis, start, end = _slice_piece(p, s, where)
        return tuple(end - start if i == axis else d for i, d in enumerate(s))
    if ltype == "Crop":
        # crop_layer.cpp: bottom[0] cut to bottom[1]'s size from `axis` on, starting at `offset`
        if len(ins) != 2:
            raise HpcdlError(f"{where}: Crop takes two bottoms (the blob, and the one whose size it takes)")
        ref = ins[1]
        axis = p.get("axis", 2)
        axis = axis if axis >= 0 else axis + len(s) + 1
        if not 1 <= axis <= len(s) or len(ref) != len(s):
            raise HpcdlError(f"{where}: Crop axis {p.get('axis', 2)} on bottoms {s} and {ref}: hpcdl crops axes "
                             f"1 to {len(s)} of equal-rank blobs (never the batch)")
        offset = list(p.get("offset", []))
        n = len(s) - (axis - 1)
        if len(offset) not in (0, 1, n):
            raise HpcdlError(f"{where}: Crop has {len(offset)} offsets; it needs 0, 1 or {n} (Caffe's check)")
        offs = (offset * n if len(offset) == 1 else offset) or [0] * n
        out = list(s[:axis - 1])
        for i, (have, want, o) in enumerate(zip(s[axis - 1:], ref[axis - 1:], offs)):
            if have < want + o:
                raise HpcdlError(f"{where}: Crop of axis {axis + i}: size {want} at offset {o} does not fit in {have}")
            out.append(want)
        return tuple(out)
    return s
