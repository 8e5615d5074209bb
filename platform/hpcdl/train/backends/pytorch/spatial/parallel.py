"""Hybrid sample x spatial parallelism: who shares a sample, each rank's slab, the loss and
the gradient reduction.

Ranks are laid out as the plan lays them (hpcdl.plan: `SpatialLayout`): consecutive ranks
form a spatial group (inside one node, on the nearest GPUs), and the groups are the
data-parallel replicas. Rank r is in group r // ways at grid index r % ways.

The gradient of the global loss L = mean over groups of the group loss L_g, where each rank
of group g computes a part of L_g and the parts sum to L_g:
    dL/dw = (1/groups) * sum over all ranks of that rank's gradient,
summed inside a spatial group (the parts of one sample), averaged across groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from hpcdl.train.backends.pytorch.spatial.ops import SpatialGroup
from hpcdl.train.slabs import Grid


@dataclass
class Layout:
    ways: int
    data_groups: int
    data_index: int  # which replica (data-parallel group) this rank is in
    sg: SpatialGroup

    @property
    def world(self) -> int:
        return self.ways * self.data_groups


def make_layout(ways: int, split: str, rank: int, world: int) -> Layout:
    """Create the spatial groups' process groups (every rank takes part in creating each)."""
    from hpcdl.errors import HpcdlError

    if world % ways:
        raise HpcdlError(f"spatial.ways: {ways} does not divide the {world} ranks into whole spatial groups")
    grid = Grid.of(ways, split)
    groups = world // ways
    mine = None
    for g in range(groups):
        ranks = tuple(range(g * ways, (g + 1) * ways))
        handle = dist.new_group(list(ranks)) if ways > 1 else None
        if rank in ranks:
            mine = SpatialGroup(grid, rank - g * ways, ranks, handle)
    return Layout(ways, groups, rank // ways, mine)


def slab(x: torch.Tensor, layout: Layout) -> torch.Tensor:
    """This rank's part of a batch (N, C, H, W) or of a per-pixel target (N, H, W)."""
    h, w = x.shape[-2:]
    rows, cols = layout.sg.grid.owned(layout.sg.index, h, w)
    return x[..., rows[0]:rows[1], cols[0]:cols[1]]


def loss_part(output: torch.Tensor, target: torch.Tensor, layout: Layout, split_output: bool,
              pixels: int = 1, class_weights: torch.Tensor | None = None,
              label_smoothing: float = 0.0) -> torch.Tensor:
    """This rank's part of its group's loss; the parts of a spatial group sum to the group loss.

    Per-pixel output (split): the class-weighted cross-entropy summed over the slab's pixels,
    over the pixels of the whole batch (the mean over every pixel of every sample). Replicated
    output (a classifier after global pooling): the batch loss over the group's ranks.
    """
    if split_output:
        per_pixel = F.cross_entropy(output, target, reduction="none", label_smoothing=label_smoothing)
        if class_weights is not None:
            per_pixel = per_pixel * class_weights[target]
        return per_pixel.sum() / (target.shape[0] * pixels)
    return F.cross_entropy(output, target, label_smoothing=label_smoothing) / layout.ways


def reduce_gradients(params: list[torch.nn.Parameter], layout: Layout) -> None:
    """Sum the gradients over all ranks in one flat all-reduce, then average over the replicas."""
    if layout.world == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    if layout.data_groups > 1:
        flat /= layout.data_groups
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
