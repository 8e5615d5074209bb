"""What one image costs a net: floating-point work and gradient bytes, layer by layer.

Counted from the same NetSpec every backend builds (hpcdl.nets), so the prediction and the
trainer agree on the net. A multiply-add is 2 FLOPs. Training is forward + backward, and
backward costs about twice the forward (one product for the input gradient, one for the
weight gradient): 3x the forward FLOPs, the count used by Goyal et al. (arXiv:1706.02677)
and the MLPerf/NVIDIA throughput notes. Layers without weights (ReLU, pooling, LRN, batch-norm
statistics) are counted by their element-wise work, which is small beside the convolutions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpcdl.nets.spec import Layer, NetSpec, _pair

BACKWARD_TO_FORWARD = 2.0  # backward = input gradient + weight gradient, each about one forward


@dataclass(frozen=True)
class LayerCost:
    name: str
    forward_flops: float  # per image
    parameters: int
    # spatial parallelism: bytes of the rows one slab needs from one neighbour for this layer, per image
    # (kernel // 2 rows of the input, fp32), where the layer reads a window across the slab's edge
    halo_bytes: float = 0.0


@dataclass(frozen=True)
class NetCost:
    """One image's work through a net, and its gradient in the order backward produces it."""

    name: str
    layers: tuple[LayerCost, ...]  # forward order

    @property
    def forward_flops(self) -> float:
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def train_flops(self) -> float:
        return self.forward_flops * (1 + BACKWARD_TO_FORWARD)

    @property
    def parameters(self) -> int:
        return sum(layer.parameters for layer in self.layers)

    def gradient_ready(self) -> tuple[tuple[float, int], ...]:
        """(fraction of the backward pass done, parameters whose gradient is then ready), in backward order.

        Backward runs from the last layer to the first; a layer's gradient is ready when its own
        backward ends. The fraction is measured in backward FLOPs, so a late fully connected
        layer (AlexNet's fc6-fc8: most of the bytes, little of the work) is ready almost at once.
        """
        total = self.forward_flops or 1.0
        done, out = 0.0, []
        for layer in reversed(self.layers):
            done += layer.forward_flops
            if layer.parameters:
                out.append((min(1.0, done / total), layer.parameters))
        return tuple(out)


def layer_forward_flops(layer: Layer) -> float:
    t, p = layer.type, layer.params
    out = math.prod(layer.out_shape) if layer.out_shape else 0
    if t == "Convolution":
        k = _pair(p["kernel_size"])
        per_output = (layer.in_channels // p.get("group", 1)) * k[0] * k[1]
        return 2.0 * out * per_output
    if t == "InnerProduct":
        return 2.0 * p["num_output"] * layer.in_channels
    if t == "Pooling":
        k = (layer.in_shape[1], layer.in_shape[2]) if p.get("global_pooling") else _pair(p["kernel_size"])
        return float(out * k[0] * k[1])
    if t == "LRN":
        return float(out * (2 * p.get("local_size", 5) + 3))
    if t in ("ReLU", "Eltwise", "Dropout", "Scale", "BatchNorm", "Softmax"):
        return float(out * (2 if t in ("BatchNorm", "Scale") else 1))
    return 0.0


def layer_halo_bytes(layer: Layer) -> float:
    """Rows a slab borrows from a neighbour: kernel // 2 rows of the layer's input (C x W floats each)."""
    if layer.type not in ("Convolution", "Pooling") or not layer.in_shape or len(layer.in_shape) < 3:
        return 0.0
    if layer.params.get("global_pooling"):
        return 0.0
    rows = _pair(layer.params["kernel_size"])[0] // 2
    return 4.0 * rows * layer.in_shape[0] * layer.in_shape[2]


def net_cost(spec: NetSpec) -> NetCost:
    return NetCost(spec.name, tuple(LayerCost(l.name, layer_forward_flops(l), l.parameter_count, layer_halo_bytes(l))
                                    for l in spec.layers))
