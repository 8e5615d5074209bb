"""Caffe's SGD update, with LARS and LARC as per-layer rate rules on top of it.

One optimizer, three rate rules, because the seed runs used them on the same solver:

- ``sgd``: Caffe's SGDSolver (BVLC/caffe src/caffe/solvers/sgd_solver.cpp). For each
  parameter blob, after the gradients are averaged over ranks and ``iter_size``:
  clip to ``clip_gradients`` (global L2 norm), add ``weight_decay * decay_mult * w``,
  then ``v <- momentum * v + rate * g`` and ``w <- w - v`` with ``rate = lr * lr_mult``.
  The rate sits inside the velocity (Caffe's convention; PyTorch puts it outside). The
  two differ only right after a rate change; ``momentum_correction`` scales ``v`` by
  ``lr_t / lr_{t-1}`` so a warm-up behaves as Goyal et al. (arXiv:1706.02677, 2.1) ask.
- ``lars`` (You, Gitman, Ginsburg, arXiv:1708.03888): each layer's rate is multiplied by
  ``trust * ||w|| / (||g|| + wd * ||w||)``, the gradient including weight decay.
- ``larc_clip`` / ``larc_scale`` (NVIDIA apex LARC, used in the 2018 Summit climate run,
  Kurth et al. arXiv:1810.01993): local rate ``trust * ||w|| / (||g|| + wd * ||w|| + eps)``;
  clip mode uses ``min(lr, local)`` as the layer's rate, scale mode ``lr * local``.

LARS and LARC adapt the rate of weight tensors (convolution and inner-product weights,
``ndim > 1``); biases and batch-norm parameters keep the global rate, as in the
LARS paper's per-layer treatment of weights. A tensor whose norm or gradient norm is
zero keeps the global rate too (the ratio is undefined there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RULES = ("sgd", "lars", "larc_clip", "larc_scale")


@dataclass
class ParamSlot:
    name: str
    tensor: torch.nn.Parameter
    lr_mult: float = 1.0
    decay_mult: float = 1.0


class CaffeSGD:
    """SGD with Caffe's momentum convention and per-blob lr_mult / decay_mult."""

    def __init__(self, slots: list[ParamSlot], momentum: float, weight_decay: float, rule: str = "sgd",
                 trust: float = 0.001, eps: float = 0.0, clip_gradients: float | None = None,
                 momentum_correction: bool = False):
        if rule not in RULES:
            raise ValueError(f"optimizer rule {rule!r}; known: {', '.join(RULES)}")
        self.slots = [s for s in slots if s.tensor.requires_grad]
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.rule = rule
        self.trust = trust
        self.eps = eps
        self.clip_gradients = clip_gradients
        self.momentum_correction = momentum_correction
        self.velocity = [torch.zeros_like(s.tensor, memory_format=torch.preserve_format) for s in self.slots]
        self.last_lr: float | None = None

    def zero_grad(self) -> None:
        for s in self.slots:
            s.tensor.grad = None

    @torch.no_grad()
    def step(self, lr: float) -> None:
        grads = [s.tensor.grad if s.tensor.grad is not None else torch.zeros_like(s.tensor) for s in self.slots]
        if self.clip_gradients is not None and self.clip_gradients >= 0:
            # Caffe ClipGradients: scale all gradients so their global L2 norm is at most the bound
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
            if norm > self.clip_gradients > 0:
                grads = [g * (self.clip_gradients / norm) for g in grads]
        correction = 1.0
        if self.momentum_correction and self.last_lr:
            correction = lr / self.last_lr
        if self.rule == "sgd":
            self._sgd_step(lr, grads, correction)
        else:
            for slot, g, v in zip(self.slots, grads, self.velocity):
                w = slot.tensor
                wd = self.weight_decay * slot.decay_mult
                rate = lr * slot.lr_mult * self._layer_factor(w, g, wd, lr * slot.lr_mult)
                d = g.add(w, alpha=wd) if wd else g
                v.mul_(self.momentum * correction).add_(d, alpha=rate)
                w.sub_(v)
        self.last_lr = lr

    def _sgd_step(self, lr: float, grads: list, correction: float) -> None:
        """The same update as the loop above, as one fused call per (lr_mult, decay_mult) group."""
        for (lr_mult, decay_mult), members in self._groups().items():
            ws = [self.slots[i].tensor for i in members]
            vs = [self.velocity[i] for i in members]
            gs = [grads[i] for i in members]
            wd = self.weight_decay * decay_mult
            ds = torch._foreach_add(gs, ws, alpha=wd) if wd else gs
            torch._foreach_mul_(vs, self.momentum * correction)
            torch._foreach_add_(vs, ds, alpha=lr * lr_mult)
            torch._foreach_sub_(ws, vs)

    def _groups(self) -> dict:
        if not hasattr(self, "_group_index"):
            groups: dict[tuple[float, float], list[int]] = {}
            for i, s in enumerate(self.slots):
                groups.setdefault((s.lr_mult, s.decay_mult), []).append(i)
            self._group_index = groups
        return self._group_index

    def _layer_factor(self, w: torch.Tensor, g: torch.Tensor, wd: float, rate: float) -> float:
        if self.rule == "sgd" or w.dim() <= 1:
            return 1.0
        w_norm, g_norm = float(w.norm()), float(g.norm())
        if w_norm == 0.0 or g_norm == 0.0:
            return 1.0
        local = self.trust * w_norm / (g_norm + wd * w_norm + self.eps)
        if self.rule == "lars":
            return local
        if self.rule == "larc_scale":
            return local
        # larc_clip: the layer's rate is min(rate, local); as a factor on rate:
        return min(local / rate, 1.0) if rate > 0 else 1.0

    def state_dict(self) -> dict:
        return {"velocity": {s.name: v for s, v in zip(self.slots, self.velocity)}, "last_lr": self.last_lr}

    def load_state_dict(self, state: dict) -> None:
        saved = state["velocity"]
        for s, v in zip(self.slots, self.velocity):
            if s.name in saved:
                v.copy_(saved[s.name])
        self.last_lr = state.get("last_lr")
