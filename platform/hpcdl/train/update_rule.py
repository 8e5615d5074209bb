"""Caffe's SGD update with LARS and LARC, on numpy arrays: the rule the TensorFlow and MXNet
backends share, so they cannot drift from each other or from the PyTorch optimizer.

The rules are those of hpcdl.train.optim.CaffeSGD (read its docstring for the sources):
Caffe's momentum convention ``v <- mu * v + lr * lr_mult * (g + wd * decay_mult * w)``,
``w <- w - v`` (BVLC/caffe sgd_solver.cpp); ``clip_gradients`` bounds the global L2 norm;
``momentum_correction`` scales ``v`` by ``lr_t / lr_{t-1}`` (Goyal et al. arXiv:1706.02677,
2.1); LARS multiplies a weight tensor's rate by ``trust * ||w|| / (||g|| + wd * ||w|| + eps)``
(You et al. arXiv:1708.03888); LARC (NVIDIA apex) takes ``min(rate, local)`` in clip mode
and ``rate * local`` in scale mode. Biases and other 1-D tensors keep the global rate, and
so does a tensor whose weight or gradient norm is zero.

The frameworks hand their gradients (already averaged over ranks and iter_size) over as
arrays and take the new weights back; the arithmetic is float64 on the host, which costs a
copy per step and makes the three backends agree to float tolerance. Torch is not imported:
the MXNet venv has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RULES = ("sgd", "lars", "larc_clip", "larc_scale")


@dataclass
class SGDRule:
    """Velocities and the last rate for one list of parameters, updated in place on arrays."""

    momentum: float
    weight_decay: float
    rule: str = "sgd"
    trust: float = 0.001
    eps: float = 0.0
    clip_gradients: float | None = None
    momentum_correction: bool = False
    lr_mults: list[float] = field(default_factory=list)
    decay_mults: list[float] = field(default_factory=list)
    velocity: list[np.ndarray] = field(default_factory=list)
    last_lr: float | None = None

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"optimizer rule {self.rule!r}; known: {', '.join(RULES)}")

    @classmethod
    def from_recipe(cls, recipe, shapes: list[tuple[int, ...]],
                    multipliers: list[tuple[float, float]] | None = None) -> "SGDRule":
        """One rule for parameters of these shapes, with the net's Caffe `param` multipliers
        ((lr_mult, decay_mult) per tensor, 1 and 1 where not given); `no_bias_decay` frees
        1-D tensors of decay."""
        mults = list(multipliers) if multipliers is not None else [(1.0, 1.0)] * len(shapes)
        if len(mults) != len(shapes):
            raise ValueError(f"{len(mults)} multipliers for {len(shapes)} parameter tensors")
        return cls(
            recipe.momentum, recipe.weight_decay, recipe.rule, trust=recipe.trust, eps=recipe.larc_eps,
            clip_gradients=caffe_clip_bound(recipe), momentum_correction=recipe.momentum_correction,
            lr_mults=[float(lr) for lr, _ in mults],
            decay_mults=[0.0 if recipe.no_bias_decay and len(s) <= 1 else float(d) for s, (_, d) in zip(shapes, mults)],
        )

    def step(self, weights: list[np.ndarray], grads: list[np.ndarray], lr: float) -> list[np.ndarray]:
        """The new weights (float64) after one step at rate `lr`."""
        n = len(weights)
        lr_mults = self.lr_mults or [1.0] * n
        decay_mults = self.decay_mults or [1.0] * n
        if not self.velocity:
            self.velocity = [np.zeros(np.shape(w), dtype=np.float64) for w in weights]
        ws = [np.asarray(w, dtype=np.float64) for w in weights]
        gs = [np.asarray(g, dtype=np.float64) for g in grads]
        if self.clip_gradients is not None and self.clip_gradients >= 0:
            # Caffe ClipGradients: scale all gradients so their global L2 norm is at most the bound
            norm = float(np.sqrt(sum(float((g * g).sum()) for g in gs)))
            if norm > self.clip_gradients > 0:
                gs = [g * (self.clip_gradients / norm) for g in gs]
        correction = lr / self.last_lr if self.momentum_correction and self.last_lr else 1.0
        out = []
        for i, (w, g) in enumerate(zip(ws, gs)):
            wd = self.weight_decay * decay_mults[i]
            rate = lr * lr_mults[i]
            rate *= self.layer_factor(w, g, wd, rate)
            v = self.velocity[i] * (self.momentum * correction) + rate * (g + wd * w if wd else g)
            self.velocity[i] = v
            out.append(w - v)
        self.last_lr = lr
        return out

    def layer_factor(self, w: np.ndarray, g: np.ndarray, wd: float, rate: float) -> float:
        if self.rule == "sgd" or w.ndim <= 1:
            return 1.0
        w_norm, g_norm = float(np.linalg.norm(w)), float(np.linalg.norm(g))
        if w_norm == 0.0 or g_norm == 0.0:
            return 1.0
        local = self.trust * w_norm / (g_norm + wd * w_norm + self.eps)
        if self.rule in ("lars", "larc_scale"):
            return local
        return min(local / rate, 1.0) if rate > 0 else 1.0  # larc_clip: the layer's rate is min(rate, local)

    def state(self, prefix: str = "v") -> dict[str, np.ndarray]:
        arrays = {f"{prefix}{i}": v for i, v in enumerate(self.velocity)}
        arrays[f"{prefix}_last_lr"] = np.float64(np.nan if self.last_lr is None else self.last_lr)
        return arrays

    def load_state(self, arrays: dict[str, np.ndarray], n: int, prefix: str = "v") -> None:
        if f"{prefix}0" in arrays:
            self.velocity = [np.asarray(arrays[f"{prefix}{i}"], dtype=np.float64) for i in range(n)]
        last = arrays.get(f"{prefix}_last_lr")
        self.last_lr = None if last is None or np.isnan(last) else float(last)


def caffe_clip_bound(recipe) -> float | None:
    """The bound on the *averaged* gradient's norm that is Caffe's `clip_gradients`.

    Caffe's SGDSolver::ApplyUpdate runs ClipGradients before Normalize: it clips the
    gradient summed over `iter_size` passes (already averaged over GPUs by P2PSync), then
    divides by iter_size. Clipping that sum at c is clipping the average at c / iter_size
    (the same factor c / ||sum|| scales both), which is what every backend here applies.
    """
    clip = getattr(recipe, "clip_gradients", None)
    if clip is None:
        return None
    return clip / getattr(recipe, "iter_size", 1)


def smoothed_cross_entropy(log_p: np.ndarray, labels: np.ndarray, smoothing: float) -> float:
    """The reference for label smoothing, as torch's cross_entropy: (1-e) * nll + e * mean(-log p)."""
    nll = -log_p[np.arange(len(labels)), labels]
    return float(((1 - smoothing) * nll - smoothing * log_p.mean(axis=1)).mean())
