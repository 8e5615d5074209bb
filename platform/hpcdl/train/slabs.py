"""Where each slab of a spatially split sample lies: pure arithmetic, no torch.

A spatial group of `ways` ranks shares one sample. The ranks form a grid of `rows` x `cols`
(rows only: `ways` x 1; rows and columns: the squarest grid, rows >= cols). Every activation
of shape (C, H, W) is cut the same way: rank (ri, ci) owns rows `bounds(H, rows)[ri]` and
columns `bounds(W, cols)[ci]`. A window (a convolution or pooling kernel k, stride s, pad p)
producing output rows [u0, u1) reads input rows [u0*s - p, (u1-1)*s - p + k): rows a
neighbour owns are its halo, rows outside [0, H) are padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Range = tuple[int, int]  # [start, end)
Rect = tuple[Range, Range]  # rows, columns


def bounds(n: int, parts: int) -> list[Range]:
    """Split n rows into `parts` contiguous ranges as even as they go (the first ones smaller)."""
    edges = [n * k // parts for k in range(parts + 1)]
    return list(zip(edges, edges[1:]))


def intersect(a: Range, b: Range) -> Range | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else None


@dataclass(frozen=True)
class Grid:
    """The ranks of one spatial group as a grid: rank index i sits at (i // cols, i % cols)."""

    rows: int
    cols: int

    @property
    def ways(self) -> int:
        return self.rows * self.cols

    @classmethod
    def of(cls, ways: int, split: str) -> "Grid":
        if split == "rows":
            return cls(ways, 1)
        # rows and columns: the squarest factorisation, which has the least halo per slab area
        cols = max(c for c in range(1, math.isqrt(ways) + 1) if ways % c == 0)
        return cls(ways // cols, cols)

    def coords(self, index: int) -> tuple[int, int]:
        return divmod(index, self.cols)

    def owned(self, index: int, h: int, w: int) -> Rect:
        ri, ci = self.coords(index)
        return bounds(h, self.rows)[ri], bounds(w, self.cols)[ci]

    def owner(self, dim: int, n: int, row_or_col: int) -> int:
        """The grid row (dim 0) or column (dim 1) owning position `row_or_col` of an n-long axis."""
        parts = self.rows if dim == 0 else self.cols
        for k, (lo, hi) in enumerate(bounds(n, parts)):
            if lo <= row_or_col < hi:
                return k
        raise ValueError(f"{row_or_col} is outside 0..{n - 1}")

    def split(self, dim: int) -> bool:
        return (self.rows if dim == 0 else self.cols) > 1


@dataclass(frozen=True)
class Window:
    """A kernel along one axis: size k, stride s, padding p."""

    k: int
    s: int
    p: int

    def needed(self, out: Range) -> Range:
        """Input positions (padding included, so possibly < 0 or >= n) that outputs [u0, u1) read."""
        u0, u1 = out
        return u0 * self.s - self.p, (u1 - 1) * self.s - self.p + self.k

    def inside(self, out: Range, owned: Range) -> Range:
        """The outputs of `out` whose windows lie wholly in `owned`: computable before any halo arrives."""
        lo = max(out[0], -(-(owned[0] + self.p) // self.s))
        hi = min(out[1], (owned[1] - self.k + self.p) // self.s + 1)
        return (lo, max(lo, hi))

    def divisor(self, o: int, n: int) -> int:
        """Caffe's and PyTorch's AVE pooling divisor along this axis: padding counts, beyond it does not."""
        start = o * self.s - self.p
        return min(start + self.k, n + self.p) - start


def segments(want: Range, n: int, parts: int) -> list[tuple[Range, int | None]]:
    """`want` cut at the owners' edges: (range, owning grid row/column), None for padding."""
    out: list[tuple[Range, int | None]] = []
    if want[0] < 0:
        out.append(((want[0], min(0, want[1])), None))
    for k, owned in enumerate(bounds(n, parts)):
        part = intersect(want, owned)
        if part:
            out.append((part, k))
    if want[1] > n:
        out.append(((max(n, want[0]), want[1]), None))
    return out
