"""A net of hpcdl.nets run on slabs: the same modules and weights as CaffeNet, split spatially.

Layers that look at neighbouring pixels (Convolution, Pooling) exchange halos; BatchNorm
takes its statistics over the whole sample; global pooling joins the slabs into one vector,
after which the layers (InnerProduct...) run replicated on every rank of the group.
Pixel-wise layers (ReLU, Scale, LRN across channels, Softmax, Eltwise, Concat) run on the
slab as they are. Dropout draws its mask per slab, so it is not bit-equal to one rank.
"""

from __future__ import annotations

import torch
from torch import nn

from hpcdl.errors import HpcdlError
from hpcdl.nets.spec import NetSpec, _pair
from hpcdl.nets.torch_build import CaffeNet, _key
from hpcdl.train.backends.pytorch.spatial.ops import (
    HaloExchange,
    LayerGeometry,
    SpatialGroup,
    batch_norm,
    global_pooling,
    slab_convolution,
    slab_pooling,
)
from hpcdl.train.slabs import Window

PIXELWISE = ("ReLU", "Scale", "LRN", "Softmax", "Dropout", "Concat", "Eltwise")


class SpatialNet(nn.Module):
    """Runs `net` on this rank's slab of each sample; `net` keeps the parameters."""

    def __init__(self, net: CaffeNet, sg: SpatialGroup, overlap: bool = True):
        super().__init__()
        self.net = net
        self.sg = sg
        self.overlap = overlap
        self.exchanges: dict[str, HaloExchange] = {}
        self.split_output = self._plan(net.spec)

    def _plan(self, spec: NetSpec) -> bool:
        """Check every layer can run split and plan its halo; True when the output stays split."""
        split = {"data": True}
        shapes = {"data": spec.input_shape}
        grid = self.sg.grid
        for i, layer in enumerate(spec.layers):
            where = f"spatial: net {spec.name}: layer {layer.name}"
            ins = [split[b] for b in layer.bottom]
            shapes[layer.top] = layer.out_shape
            if layer.type in ("Convolution", "Pooling") and ins[0] and not layer.p("global_pooling"):
                p = layer.params
                k, s, pad = _pair(p["kernel_size"]), _pair(p.get("stride", 1)), _pair(p.get("pad", 0))
                n_in, n_out = layer.in_shape[1:], layer.out_shape[1:]
                for d, parts in ((0, grid.rows), (1, grid.cols)):
                    if n_out[d] < parts or n_in[d] < parts:
                        raise HpcdlError(f"{where}: {n_out[d]} output {'rows' if d == 0 else 'columns'} cannot be "
                                         f"split {parts} ways; use fewer ways or a larger image")
                geometry = LayerGeometry((Window(k[0], s[0], pad[0]), Window(k[1], s[1], pad[1])), tuple(n_in),
                                         tuple(n_out), grid, pad_all=layer.type == "Pooling")
                self.exchanges[layer.name] = HaloExchange.plan(self.sg, geometry, i)
                split[layer.top] = True
            elif layer.type == "Pooling":  # global pooling joins the slabs
                split[layer.top] = False
            elif layer.type in ("InnerProduct", "Flatten") and ins[0] and grid.ways > 1:
                raise HpcdlError(f"{where}: {layer.type} needs the whole sample; end the convolutional part "
                                 "with global pooling, or train without spatial parallelism")
            elif layer.type in ("Concat", "Eltwise") and len(set(ins)) > 1:
                raise HpcdlError(f"{where}: joins a split and a whole blob")
            else:
                split[layer.top] = ins[0]
        self._split = split
        return split[spec.output]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.net.spec
        if not self.sg.active:
            return self.net(x)
        blobs = {"data": x}
        for i, layer in enumerate(spec.layers):
            ins = [blobs[b] for b in layer.bottom]
            module = self.net.layers[_key(layer.name)]
            t, p = layer.type, layer.params
            pixels = layer.in_shape[1] * layer.in_shape[2] if len(layer.in_shape) == 3 else 1
            if layer.name in self.exchanges:
                ex = self.exchanges[layer.name]
                if t == "Convolution":
                    out = slab_convolution(ins[0], module.weight, module.bias, ex, module.groups, self.overlap)
                else:
                    out = slab_pooling(ins[0], ex, p.get("pool", "MAX"))
            elif t == "Pooling":
                out = global_pooling(ins[0], self.sg, p.get("pool", "MAX"), pixels)
            elif t == "BatchNorm" and self._split[layer.bottom[0]]:
                out = batch_norm(ins[0], module, self.sg, pixels)
            elif t == "Concat":
                out = torch.cat(ins, dim=1)
            elif t == "Eltwise":
                out = ins[0]
                for other in ins[1:]:
                    out = out + other if p.get("operation", "SUM") == "SUM" else out * other
            else:
                out = module(ins[0])
            for b in layer.bottom:
                if self.net._last_use.get(b) == i and b not in self.net._keep:
                    blobs.pop(b, None)
            blobs[layer.top] = out
        return blobs[spec.output]
