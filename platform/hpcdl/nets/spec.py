"""Network specifications: a list of layers in Caffe's vocabulary, with shapes inferred.

A net file (hpcdl/nets/<name>.yaml) lists layers. Each layer has a `type` and `name`, and
optional `bottom` (input blob names; default: the previous layer's top) and `top`
(default: its name). Parameters use Caffe's names (num_output, kernel_size, stride, pad,
group, pool, local_size, alpha, beta, dropout_ratio, operation, axis, bias_term).
`num_output: classes` in the last InnerProduct is replaced by the class count.

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
)


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
        if t == "InnerProduct":
            return p["num_output"] * self.in_channels + (p["num_output"] if p.get("bias_term", True) else 0)
        if t == "BatchNorm":
            # Caffe's BatchNorm keeps only running statistics; `affine: true` folds a Scale in
            return 2 * self.in_channels if p.get("affine", False) else 0
        if t == "Scale":
            return self.in_channels * (2 if p.get("bias_term", True) else 1)
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

    @property
    def parameter_count(self) -> int:
        return sum(layer.parameter_count for layer in self.layers)


def list_nets() -> list[str]:
    return sorted(p.stem for p in NET_DIR.glob("*.yaml"))


def load_net(name: str, num_classes: int | None = None, image_size: int | None = None, channels: int | None = None) -> NetSpec:
    path = NET_DIR / f"{name}.yaml"
    if not path.exists():
        raise HpcdlError(f"net: unknown network {name!r}; known: {', '.join(list_nets())}")
    data = yaml.safe_load(path.read_text())
    inp = data["input"]
    shape = (channels or inp["channels"], image_size or inp["size"], image_size or inp["size"])
    classes = num_classes or data.get("classes", 1000)
    return build_spec(name, data, shape, classes)


def build_spec(name: str, data: dict, input_shape: tuple[int, int, int], classes: int) -> NetSpec:
    shapes: dict[str, tuple[int, ...]] = {"data": input_shape}
    layers: list[Layer] = []
    previous = "data"
    for raw in _expand(data["layers"]):
        raw = dict(raw)
        ltype = raw.pop("type")
        lname = raw.pop("name")
        if ltype not in LAYER_TYPES:
            raise HpcdlError(f"net {name}: layer {lname}: unknown type {ltype!r}")
        bottom = raw.pop("bottom", previous)
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
        previous = top
    return NetSpec(
        name=name,
        description=data.get("description", ""),
        input_shape=input_shape,
        num_classes=classes,
        layers=tuple(layers),
        output=previous,
        reference=data.get("reference", ""),
    )


def _expand(layers: list[dict]) -> list[dict]:
    return list(layers)


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
    if ltype == "Pooling":
        if p.get("global_pooling"):
            return (s[0], 1, 1)
        k, st, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
        # Caffe rounds pooled sizes up (pooling_layer.cpp), so ports need ceil_mode
        h = math.ceil((s[1] + 2 * pad[0] - k[0]) / st[0]) + 1
        w = math.ceil((s[2] + 2 * pad[1] - k[1]) / st[1]) + 1
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
    return s
