"""Synthetic samples in the shape of LLNL's mesh-tangling data, generated slab by slab.

Dryden, Maruyama et al. (IPDPS 2019) train on 2D hydrodynamics meshes: 18 channels of state
variables and mesh-quality metrics per cell, 1024 x 1024 or 2048 x 2048 cells, and a per-cell
binary target (relax this cell or not), a rare class. The data set itself is not public; these
samples have its shape and a learnable rule:

- each channel is a sum of a few plane waves whose frequencies are set relative to the image
  size (so statistics do not depend on the size), plus per-cell noise;
- a cell is "tangled" (class 1) where a combination of channels 0, 1 and 2 passes a threshold:
  about one cell in ten.

Any slab of any sample is computed from the sample's number and the global coordinates alone,
so a rank generates only its own slab, and a 2048 x 2048 sample never has to exist whole in one
rank's memory. The rare class is weighted in the loss as the 2018 Summit climate run weighted
its rare classes (Kurth et al., arXiv:1810.01993; their code, azrael417/ClimDeepLearn
deeplab-tf-train.py: per-class weight 1/frequency, normalised to sum to 1, looked up per pixel).
"""

from __future__ import annotations

import numpy as np

from hpcdl.train.data import epoch_order
from hpcdl.train.slabs import Rect

WAVES = 3
NOISE = 0.1
THRESHOLD = 1.75  # class 1 where f0 + f1 * f2 > THRESHOLD: about one cell in ten


class MeshSamples:
    """Samples [first, first + count) of the synthetic mesh set, any slab of any sample on demand."""

    def __init__(self, channels: int, size: int, seed: int, count: int, first: int = 0):
        self.channels, self.size, self.seed, self.count, self.first = channels, size, seed, count, first

    def __len__(self) -> int:
        return self.count

    def _waves(self, sample: int):
        rng = np.random.default_rng((self.seed, sample))
        amp = rng.uniform(0.5, 1.0, (self.channels, WAVES))
        freq = rng.uniform(1.0, 6.0, (self.channels, WAVES, 2)) * rng.choice([-1.0, 1.0], (self.channels, WAVES, 2))
        phase = rng.uniform(0, 2 * np.pi, (self.channels, WAVES))
        return amp / np.sqrt((amp ** 2).sum(axis=1, keepdims=True) / 2), freq, phase

    def _fields(self, sample: int, rect: Rect, size: int) -> np.ndarray:
        (r0, r1), (c0, c1) = rect
        amp, freq, phase = self._waves(sample)
        y = np.arange(r0, r1, dtype=np.float64) / size
        x = np.arange(c0, c1, dtype=np.float64) / size
        # sin(a + b) = sin a cos b + cos a sin b: a wave is a rank-2 product of a row and a column
        # profile, so a slab is one small matrix product per channel
        a = 2 * np.pi * freq[..., 0, None] * y + phase[..., None]          # (C, K, h)
        b = 2 * np.pi * freq[..., 1, None] * x                             # (C, K, w)
        rows = np.concatenate([amp[..., None] * np.sin(a), amp[..., None] * np.cos(a)], axis=1)
        cols = np.concatenate([np.cos(b), np.sin(b)], axis=1)
        return np.matmul(rows.transpose(0, 2, 1), cols).astype(np.float32)

    def slab(self, rows: np.ndarray, rect: Rect | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Inputs (n, C, h, w) float32 and targets (n, h, w) int64 of the given samples, over `rect`."""
        rect = rect or ((0, self.size), (0, self.size))
        (r0, r1), (c0, c1) = rect
        xs = np.empty((len(rows), self.channels, r1 - r0, c1 - c0), dtype=np.float32)
        ys = np.empty((len(rows), r1 - r0, c1 - c0), dtype=np.int64)
        for i, row in enumerate(rows):
            sample = self.first + int(row)
            clean = self._fields(sample, rect, self.size)
            ys[i] = clean[0] + clean[1] * clean[2] > THRESHOLD
            for r in range(r0, r1):  # noise keyed by the global row: the same whatever the slab
                noise = np.random.default_rng((self.seed, sample, r, 1)).standard_normal((self.channels, self.size))
                clean[:, r - r0] += NOISE * noise[:, c0:c1]
            xs[i] = clean
        return xs, ys

    def class_frequencies(self, samples: int = 16, size: int = 64) -> np.ndarray:
        """Class frequencies from the first samples at a small size (the waves scale with the image)."""
        counts = np.zeros(2)
        for s in range(min(samples, self.count)):
            clean = self._fields(self.first + s, ((0, size), (0, size)), size)
            positive = float((clean[0] + clean[1] * clean[2] > THRESHOLD).mean())
            counts += (1 - positive, positive)
        return np.maximum(counts / counts.sum(), 1e-6)


def inverse_frequency_weights(frequencies: np.ndarray) -> np.ndarray:
    """1/frequency per class, normalised to sum to 1 (the climate run's weighting)."""
    w = 1.0 / np.asarray(frequencies, dtype=np.float64)
    return (w / w.sum()).astype(np.float32)


class MeshBatches:
    """The k-th micro-batch of a data-parallel replica, cut to this rank's slab."""

    def __init__(self, samples: MeshSamples, batch_size: int, seed: int, replica: int, replicas: int, rect: Rect):
        from hpcdl.errors import HpcdlError

        self.samples, self.batch_size, self.seed, self.replica, self.replicas = samples, batch_size, seed, replica, replicas
        self.rect = rect
        self.per_epoch = (len(samples) // replicas) // batch_size
        if self.per_epoch < 1:
            raise HpcdlError(f"batch_size: {batch_size} per replica x {replicas} replicas is more than the "
                             f"{len(samples)} training samples (data.synthetic_samples)")
        self._epoch, self._order = -1, None

    def get(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        epoch, slot = divmod(k, self.per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._order = epoch_order(len(self.samples), epoch, self.seed, self.replica, self.replicas)
        return self.samples.slab(self._order[slot * self.batch_size:(slot + 1) * self.batch_size], self.rect)
