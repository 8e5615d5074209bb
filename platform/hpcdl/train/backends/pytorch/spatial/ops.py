"""Slab operations with halo exchange, as autograd functions.

The rule that makes the gradients exact: each rank of a spatial group computes a part of the
group's loss, and the parts sum to the whole-sample loss. A value every rank of the group
holds a copy of (a batch-norm mean, a globally pooled vector) is an all-reduce sum whose
backward is again an all-reduce sum (`spatial_sum`); a halo row is a copy of a neighbour's
row whose gradient is sent back and added to the owner's (`HaloExchange`). The weight
gradients of the ranks of a group then sum to the group's gradient.

Halo exchange is point to point (isend/irecv), posted before the interior of a slab is
convolved and waited for only before its edge rows are: the interior computation overlaps
the exchange, forward and backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from hpcdl.train.slabs import Grid, Rect, Window, intersect, segments


@dataclass
class SpatialGroup:
    """This rank's place in its spatial group: grid index, the group's global ranks, its process group."""

    grid: Grid
    index: int
    ranks: tuple[int, ...]
    group: object = None  # torch.distributed group for the group's all-reduces (None: one rank)

    @property
    def ways(self) -> int:
        return self.grid.ways

    @property
    def active(self) -> bool:
        return self.grid.ways > 1


class _SpatialSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=group)
        return y

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def spatial_sum(x: torch.Tensor, sg: SpatialGroup) -> torch.Tensor:
    """The sum over the spatial group, held by every rank; its gradient sums the ranks' gradients."""
    return _SpatialSum.apply(x, sg.group) if sg.active else x


class _SpatialMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.MAX, group=group)
        ctx.group = group
        ctx.save_for_backward(x == y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (mine,) = ctx.saved_tensors
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad * mine, None  # the gradient goes to the rank(s) holding the maximum


@dataclass
class LayerGeometry:
    """One window layer over the group: every rank's output rect, input rect and needed rect."""

    windows: tuple[Window, Window]
    n_in: tuple[int, int]
    n_out: tuple[int, int]
    grid: Grid
    pad_all: bool  # pooling pads every axis explicitly; a convolution pads unsplit axes itself

    def owned_in(self, q: int) -> Rect:
        return self.grid.owned(q, *self.n_in)

    def owned_out(self, q: int) -> Rect:
        return self.grid.owned(q, *self.n_out)

    def needed(self, q: int, out: Rect | None = None) -> Rect:
        """The input rect (global coordinates, padding included) the outputs `out` of rank q read."""
        out = out or self.owned_out(q)
        rect = []
        for d in (0, 1):
            if self.grid.split(d) or self.pad_all:
                rect.append(self.windows[d].needed(out[d]))
            else:
                rect.append((0, self.n_in[d]))
        return tuple(rect)

    def halo_of(self, q: int) -> Rect:
        """The part of q's needed rect that lies in the sample (no padding)."""
        (a, b), (c, d) = self.needed(q)
        return (max(a, 0), min(b, self.n_in[0])), (max(c, 0), min(d, self.n_in[1]))


def _rect_cut(r: Rect, outer: Rect) -> Rect | None:
    rows, cols = intersect(r[0], outer[0]), intersect(r[1], outer[1])
    return (rows, cols) if rows and cols else None


def _local(rect: Rect, origin: Rect) -> tuple[slice, slice]:
    return (slice(rect[0][0] - origin[0][0], rect[0][1] - origin[0][0]),
            slice(rect[1][0] - origin[1][0], rect[1][1] - origin[1][0]))


@dataclass
class HaloExchange:
    """The blocks one rank sends to and receives from its neighbours for one layer, and the
    requests in flight. Tags keep layers apart: 2*layer forward, 2*layer+1 backward."""

    sg: SpatialGroup
    geometry: LayerGeometry
    layer: int
    sends: list[tuple[int, Rect]] = field(default_factory=list)  # (peer index, rect of my input)
    recvs: list[tuple[int, Rect]] = field(default_factory=list)  # (peer index, rect of its input)
    _requests: list = field(default_factory=list)
    _buffers: list = field(default_factory=list)
    _pending: list = field(default_factory=list)
    _stashed: list = field(default_factory=list)

    @classmethod
    def plan(cls, sg: SpatialGroup, geometry: LayerGeometry, layer: int) -> "HaloExchange":
        me = sg.index
        ex = cls(sg, geometry, layer)
        for q in range(sg.ways):
            if q == me:
                continue
            give = _rect_cut(geometry.halo_of(q), geometry.owned_in(me))
            if give:
                ex.sends.append((q, give))
            take = _rect_cut(geometry.halo_of(me), geometry.owned_in(q))
            if take:
                ex.recvs.append((q, take))
        return ex

    def _tag(self, backward: bool) -> int:
        return 2 * self.layer + (1 if backward else 0)

    def start_forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        origin = self.geometry.owned_in(self.sg.index)
        n, c = x.shape[:2]
        ops, received = [], []
        for q, rect in self.sends:
            rows, cols = _local(rect, origin)
            block = x[:, :, rows, cols].contiguous()
            self._buffers.append(block)  # kept alive until the send completes
            ops.append(dist.P2POp(dist.isend, block, self.sg.ranks[q], tag=self._tag(False)))
        for q, ((r0, r1), (c0, c1)) in self.recvs:
            buf = torch.empty((n, c, r1 - r0, c1 - c0), dtype=x.dtype, device=x.device)
            ops.append(dist.P2POp(dist.irecv, buf, self.sg.ranks[q], tag=self._tag(False)))
            received.append(buf)
        # one batch: NCCL needs a pair's sends and receives posted together, or both ranks
        # would send first and wait on each other
        self._requests = dist.batch_isend_irecv(ops) if ops else []
        return received

    def wait(self) -> None:
        for req in self._requests:
            req.wait()
        self._requests, self._buffers = [], []

    def start_backward(self, grads) -> None:
        """Send the gradient of every halo block back to its owner (with gloo at once, so the
        interior's backward overlaps it; with NCCL together with the receives, in one batch)."""
        self._pending, self._stashed = [], []
        for (q, _), g in zip(self.recvs, grads):
            op = dist.P2POp(dist.isend, g.contiguous(), self.sg.ranks[q], tag=self._tag(True))
            if _batched(op.tensor):
                self._stashed.append(op)
            else:
                self._pending.extend(dist.batch_isend_irecv([op]))
            self._buffers.append(op.tensor)

    def finish_backward(self, grad_x: torch.Tensor) -> torch.Tensor:
        """Add the gradients the neighbours send back for the rows they borrowed."""
        origin = self.geometry.owned_in(self.sg.index)
        grad_x = grad_x.clone()
        ops, incoming = list(self._stashed), []
        n, c = grad_x.shape[:2]
        for q, ((r0, r1), (c0, c1)) in self.sends:
            buf = torch.empty((n, c, r1 - r0, c1 - c0), dtype=grad_x.dtype, device=grad_x.device)
            ops.append(dist.P2POp(dist.irecv, buf, self.sg.ranks[q], tag=self._tag(True)))
            incoming.append((_local(((r0, r1), (c0, c1)), origin), buf))
        for req in (dist.batch_isend_irecv(ops) if ops else []) + self._pending:
            req.wait()
        for (rows, cols), buf in incoming:
            grad_x[:, :, rows, cols] += buf
        self._pending, self._stashed, self._buffers = [], [], []
        return grad_x


def _batched(t: torch.Tensor) -> bool:
    """NCCL (GPU tensors) posts a pair's sends and receives in one batch."""
    return t.is_cuda


class _PostHalo(torch.autograd.Function):
    """Posts the halo sends and receives; returns the slab (to compute on now) and the receive buffers."""

    @staticmethod
    def forward(ctx, x, ex):
        ctx.ex = ex
        return (x.view_as(x), *ex.start_forward(x))

    @staticmethod
    def backward(ctx, grad_x, *_grad_bufs):
        return ctx.ex.finish_backward(grad_x), None


class _WaitHalo(torch.autograd.Function):
    """Waits for the halo to arrive; backward sends each halo block's gradient to its owner."""

    @staticmethod
    def forward(ctx, ex, *bufs):
        ctx.ex = ex
        ex.wait()
        return tuple(b.view_as(b) for b in bufs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.ex.start_backward(grads)
        return (None, *grads)


class Slab:
    """A rank's slab and its halo blocks, from which any input rect of a layer is cut."""

    def __init__(self, x: torch.Tensor, ex: HaloExchange, pad_value: float):
        self.ex = ex
        self.geometry = ex.geometry
        self.pad_value = pad_value
        self.origin = self.geometry.owned_in(ex.sg.index)
        self.grid = self.geometry.grid
        if ex.sends or ex.recvs:
            self.x, *self._posted = _PostHalo.apply(x, ex)
        else:
            self.x, self._posted = x, []
        self.halo: dict[int, torch.Tensor] = {}

    def wait(self) -> None:
        if self._posted:
            arrived = _WaitHalo.apply(self.ex, *self._posted)
            self.halo = {q: t for (q, _), t in zip(self.ex.recvs, arrived)}
        elif self.ex.sends:
            self.ex.wait()

    def own_view(self, rect: Rect) -> torch.Tensor:
        rows, cols = _local(rect, self.origin)
        return self.x[:, :, rows, cols]

    def cut(self, rect: Rect) -> torch.Tensor:
        """The input over `rect` (global coordinates): own rows, halo rows and padding, joined."""
        n_in = self.geometry.n_in
        row_parts = []
        for rows, ri in segments(rect[0], n_in[0], self.grid.rows):
            col_parts = []
            for cols, ci in segments(rect[1], n_in[1], self.grid.cols):
                col_parts.append(self._block((rows, cols), ri, ci))
            row_parts.append(col_parts[0] if len(col_parts) == 1 else torch.cat(col_parts, dim=3))
        return row_parts[0] if len(row_parts) == 1 else torch.cat(row_parts, dim=2)

    def _block(self, rect: Rect, ri: int | None, ci: int | None) -> torch.Tensor:
        x = self.x
        if ri is None or ci is None:
            shape = (x.shape[0], x.shape[1], rect[0][1] - rect[0][0], rect[1][1] - rect[1][0])
            return torch.full(shape, self.pad_value, dtype=x.dtype, device=x.device)
        owner = ri * self.grid.cols + ci
        if owner == self.ex.sg.index:
            return self.own_view(rect)
        for q, got in self.ex.recvs:
            if q == owner:
                rows, cols = _local(rect, got)
                return self.halo[q][:, :, rows, cols]
        raise RuntimeError(f"spatial: rows {rect} of rank {owner} were needed but not exchanged")


def slab_convolution(x: torch.Tensor, weight, bias, ex: HaloExchange, groups: int, overlap: bool) -> torch.Tensor:
    """A convolution of a slab: the interior while the halo travels, then the edges."""
    geo = ex.geometry
    me = ex.sg.index
    out = geo.owned_out(me)
    own = geo.owned_in(me)
    stride = (geo.windows[0].s, geo.windows[1].s)
    # unsplit axes: the convolution pads them itself; split axes: padding is cut explicitly
    padding = tuple(0 if geo.grid.split(d) else geo.windows[d].p for d in (0, 1))
    slab = Slab(x, ex, 0.0)

    def conv(rect_out: Rect, source) -> torch.Tensor:
        return F.conv2d(source(geo.needed(me, rect_out)), weight, bias, stride, padding, 1, groups)

    inner = [geo.windows[d].inside(out[d], own[d]) if geo.grid.split(d) else out[d] for d in (0, 1)]
    if not overlap or any(lo >= hi for lo, hi in inner):
        slab.wait()
        return conv(out, slab.cut)
    interior = conv((inner[0], inner[1]), slab.own_view)  # overlaps the exchange
    slab.wait()
    (u0, u1), (v0, v1) = out
    (i0, i1), (j0, j1) = inner
    middle = [part for part in (
        conv(((i0, i1), (v0, j0)), slab.cut) if j0 > v0 else None,
        interior,
        conv(((i0, i1), (j1, v1)), slab.cut) if v1 > j1 else None,
    ) if part is not None]
    rows = [part for part in (
        conv(((u0, i0), (v0, v1)), slab.cut) if i0 > u0 else None,
        middle[0] if len(middle) == 1 else torch.cat(middle, dim=3),
        conv(((i1, u1), (v0, v1)), slab.cut) if u1 > i1 else None,
    ) if part is not None]
    return rows[0] if len(rows) == 1 else torch.cat(rows, dim=2)


def slab_pooling(x: torch.Tensor, ex: HaloExchange, pool: str) -> torch.Tensor:
    """MAX or AVE pooling of a slab, with Caffe's ceil-mode sizes and AVE divisor."""
    geo = ex.geometry
    me = ex.sg.index
    out = geo.owned_out(me)
    wr, wc = geo.windows
    slab = Slab(x, ex, float("-inf") if pool == "MAX" else 0.0)
    slab.wait()
    source = slab.cut(geo.needed(me, out))
    if pool == "MAX":
        return F.max_pool2d(source, (wr.k, wc.k), (wr.s, wc.s))
    total = F.avg_pool2d(source, (wr.k, wc.k), (wr.s, wc.s), divisor_override=1)
    rows = torch.tensor([wr.divisor(o, geo.n_in[0]) for o in range(*out[0])], dtype=x.dtype, device=x.device)
    cols = torch.tensor([wc.divisor(o, geo.n_in[1]) for o in range(*out[1])], dtype=x.dtype, device=x.device)
    return total / (rows[:, None] * cols[None, :])


def global_pooling(x: torch.Tensor, sg: SpatialGroup, pool: str, pixels: int) -> torch.Tensor:
    """Global pooling of a split sample: a vector every rank of the group holds."""
    if pool == "MAX":
        local = x.amax(dim=(2, 3), keepdim=True)
        return _SpatialMax.apply(local, sg.group) if sg.active else local
    return spatial_sum(x.sum(dim=(2, 3), keepdim=True), sg) / pixels


def batch_norm(x: torch.Tensor, module: torch.nn.BatchNorm2d, sg: SpatialGroup, pixels: int) -> torch.Tensor:
    """Batch normalisation with statistics over the whole sample (all slabs of the group).

    Two passes (mean, then the mean squared deviation) as PyTorch computes them, so 1 rank
    and N ranks agree to rounding. The running statistics follow nn.BatchNorm2d.
    """
    if not module.training:
        return module(x)
    count = x.shape[0] * pixels
    view = (1, -1, 1, 1)
    mean = spatial_sum(x.sum(dim=(0, 2, 3)), sg) / count
    centred = x - mean.view(view)
    var = spatial_sum((centred * centred).sum(dim=(0, 2, 3)), sg) / count
    y = centred * torch.rsqrt(var + module.eps).view(view)
    if module.affine:
        y = y * module.weight.view(view) + module.bias.view(view)
    if module.track_running_stats:
        with torch.no_grad():
            module.num_batches_tracked += 1
            m = module.momentum if module.momentum is not None else 1.0 / float(module.num_batches_tracked)
            module.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
            module.running_var.mul_(1 - m).add_(var.detach() * count / max(count - 1, 1), alpha=m)
    return y
