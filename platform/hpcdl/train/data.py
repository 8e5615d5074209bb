"""Data sets as in-memory arrays (N, C, H, W) float32 and int64 labels, with a held-out split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcdl.errors import HpcdlError
from hpcdl.train.recipe import DataSpec


@dataclass(frozen=True)
class Dataset:
    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int


def load_dataset(spec: DataSpec, shape: tuple[int, int, int], seed: int) -> Dataset:
    if spec.source == "digits":
        return _digits(spec, shape, seed)
    if spec.source == "synthetic":
        return _synthetic(spec, shape, seed)
    raise HpcdlError(f"data.source: {spec.source!r} is not available in this version of the trainer")


def _split(name, x, y, classes, fraction, seed) -> Dataset:
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = max(1, int(round(len(x) * fraction)))
    test, train = order[:n_test], order[n_test:]
    return Dataset(name, x[train], y[train], x[test], y[test], classes)


def _digits(spec: DataSpec, shape: tuple[int, int, int], seed: int) -> Dataset:
    """scikit-learn's 1,797 real 8x8 handwritten digits, scaled up to the net's input size."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0  # pixel values are 0..16
    c, h, w = shape
    x = _resize(images, h, w)
    x = (x - x.mean()) / x.std()
    x = np.repeat(x[:, None, :, :], c, axis=1)  # grey -> the net's channels
    y = digits.target.astype(np.int64)
    return _split("digits", np.ascontiguousarray(x), y, 10, spec.holdout_fraction, seed)


def _resize(images: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of (N, h0, w0) images, numpy only."""
    n, h0, w0 = images.shape
    ys = (np.arange(h) + 0.5) * h0 / h - 0.5
    xs = (np.arange(w) + 0.5) * w0 / w - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, h0 - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, w0 - 1)
    y1, x1 = np.clip(y0 + 1, 0, h0 - 1), np.clip(x0 + 1, 0, w0 - 1)
    wy = np.clip(ys - y0, 0, 1)[None, :, None]
    wx = np.clip(xs - x0, 0, 1)[None, None, :]
    top = images[:, y0][:, :, x0] * (1 - wx) + images[:, y0][:, :, x1] * wx
    bottom = images[:, y1][:, :, x0] * (1 - wx) + images[:, y1][:, :, x1] * wx
    return (top * (1 - wy) + bottom * wy).astype(np.float32)


def _synthetic(spec: DataSpec, shape: tuple[int, int, int], seed: int) -> Dataset:
    """Random images whose class shifts the mean: learnable, so accuracy still means something."""
    classes = spec.num_classes or 10
    rng = np.random.default_rng(seed)
    n = spec.synthetic_samples
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = rng.standard_normal((n, *shape), dtype=np.float32)
    x += (y.astype(np.float32) / classes - 0.5)[:, None, None, None] * 2
    return _split("synthetic", x, y, classes, spec.holdout_fraction, seed)


def epoch_order(n: int, epoch: int, seed: int, rank: int, world: int) -> np.ndarray:
    """This rank's sample indices for an epoch: one shuffle shared by all ranks, dealt round-robin.

    Every rank sees the same number of samples (the tail that does not divide is dropped),
    and the ranks together cover the epoch exactly once.
    """
    order = np.random.default_rng(seed * 100_003 + epoch).permutation(n)
    usable = (n // world) * world
    return order[:usable][rank::world]
