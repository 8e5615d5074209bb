"""Caffe's SGD update with LARS and LARC, on numpy arrays: the rule the TensorFlow and MXNet
backends share, so they cannot drift from each other or from the PyTorch optimizer.

The rules are those of hpcdl.train.backends.pytorch.optim.CaffeSGD (read its docstring for the sources):
Caffe's momentum convention ``v <- mu * v + lr * lr_mult * (g + wd * decay_mult * w)``,
``w <- w - v`` (BVLC/caffe sgd_solver.cpp); ``clip_gradients`` bounds the global L2 norm;
``momentum_correction`` scales ``v`` by ``lr_t / lr_{t-1}`` (Goyal et al. arXiv:1706.02677,
2.1); LARS multiplies a weight tensor's rate by ``trust * ||w|| / (||g|| + wd * ||w|| + eps)``
(You et al. arXiv:1708.03888); LARC (NVIDIA apex) takes ``min(rate, local)`` in clip mode
and ``rate * local`` in scale mode. Biases and other 1-D tensors keep the global rate, and
so does a tensor whose weight or gradient norm is zero.

The other Caffe solver types (Nesterov, AdaGrad, RMSProp, AdaDelta, Adam) and L1
regularisation follow hpcdl.train.backends.pytorch.optim's docstring too: `adaptive_update` is their step on
one tensor. TensorFlow's compiled update and MXNet's fused kernels carry out SGD (with
LARS/LARC) with L2 decay only; for the other types and for L1 both backends take this rule's
step on the host (`SGDRule.on_host`).

The frameworks hand their gradients (already averaged over ranks and iter_size) over as
arrays and take the new weights back; the arithmetic is float64 on the host, which costs a
copy per step and makes the three backends agree to float tolerance. Torch is not imported:
the MXNet venv has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcdl.caffe.solver_types import SOLVERS

RULES = ("sgd", "lars", "larc_clip", "larc_scale")


def adaptive_update(solver: str, g: np.ndarray, h: np.ndarray, h2: np.ndarray | None, rate: float, t: int,
                    momentum: float, momentum2: float, delta: float, rms_decay: float) -> np.ndarray:
    """The value Caffe subtracts from a weight for one of its solver types other than SGD.

    `g` already holds the weight decay; `h` (and `h2` for AdaDelta and Adam) are the
    histories, updated in place; `rate` is lr * lr_mult; `t` counts steps from 1 (Caffe's
    iter_ + 1, Adam's bias correction).
    """
    if solver == "Nesterov":
        old = h.copy()
        h *= momentum
        h += rate * g
        return (1.0 + momentum) * h - momentum * old
    if solver == "AdaGrad":
        h += g * g
        return rate * g / (np.sqrt(h) + delta)
    if solver == "RMSProp":
        h *= rms_decay
        h += (1.0 - rms_decay) * g * g
        return rate * g / (np.sqrt(h) + delta)
    if solver == "AdaDelta":
        h *= momentum
        h += (1.0 - momentum) * g * g
        step = g * np.sqrt((h2 + delta) / (h + delta))
        h2 *= momentum
        h2 += (1.0 - momentum) * step * step
        return rate * step
    if solver == "Adam":
        h *= momentum
        h += (1.0 - momentum) * g
        h2 *= momentum2
        h2 += (1.0 - momentum2) * g * g
        corrected = rate * np.sqrt(1.0 - momentum2 ** t) / (1.0 - momentum ** t)
        return corrected * h / (np.sqrt(h2) + delta)
    raise ValueError(f"solver type {solver!r}; known: {', '.join(SOLVERS)}")


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
    solver: str = "SGD"
    momentum2: float = 0.999
    delta: float = 1e-8
    rms_decay: float = 0.99
    regularization: str = "L2"
    history2: list[np.ndarray] = field(default_factory=list)  # AdaDelta's update and Adam's squared-gradient history
    t: int = 0  # steps taken (Adam's bias correction)

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"optimizer rule {self.rule!r}; known: {', '.join(RULES)}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver type {self.solver!r}; known: {', '.join(SOLVERS)}")
        if self.rule != "sgd" and self.solver != "SGD":
            raise ValueError(f"rule {self.rule} is SGD's, not {self.solver}'s")

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
            solver=recipe.solver, momentum2=recipe.momentum2, delta=recipe.delta, rms_decay=recipe.rms_decay,
            regularization=recipe.regularization_type,
        )

    @property
    def on_host(self) -> bool:
        """Whether only this rule's own step carries the update out: TensorFlow's compiled update
        and MXNet's fused kernels are SGD with L2 decay (wd * w), so another solver type or L1
        (wd * sign(w)) takes this step on the host instead."""
        return self.solver != "SGD" or self.regularization != "L2"

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
        if self.solver in ("AdaDelta", "Adam") and not self.history2:
            self.history2 = [np.zeros(np.shape(w), dtype=np.float64) for w in weights]
        self.t += 1
        out = []
        for i, (w, g) in enumerate(zip(ws, gs)):
            wd = self.weight_decay * decay_mults[i]
            rate = lr * lr_mults[i]
            rate *= self.layer_factor(w, g, wd, rate)
            if wd:  # Caffe's Regularize, before the solver's own update
                g = g + wd * (np.sign(w) if self.regularization == "L1" else w)
            if self.solver == "SGD":
                v = self.velocity[i] * (self.momentum * correction) + rate * g
                self.velocity[i] = v
            else:
                if correction != 1.0 and self.solver == "Nesterov":
                    self.velocity[i] = self.velocity[i] * correction
                h2 = self.history2[i] if self.history2 else None
                v = adaptive_update(self.solver, g, self.velocity[i], h2, rate, self.t, self.momentum,
                                    self.momentum2, self.delta, self.rms_decay)
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
        arrays.update({f"{prefix}_h2_{i}": h for i, h in enumerate(self.history2)})
        arrays[f"{prefix}_t"] = np.int64(self.t)
        return arrays

    def load_state(self, arrays: dict[str, np.ndarray], n: int, prefix: str = "v") -> None:
        if f"{prefix}0" in arrays:
            self.velocity = [np.array(arrays[f"{prefix}{i}"], dtype=np.float64) for i in range(n)]
        last = arrays.get(f"{prefix}_last_lr")
        self.last_lr = None if last is None or np.isnan(last) else float(last)
        if f"{prefix}_h2_0" in arrays:
            self.history2 = [np.array(arrays[f"{prefix}_h2_{i}"], dtype=np.float64) for i in range(n)]
        self.t = int(arrays.get(f"{prefix}_t", self.t))


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
