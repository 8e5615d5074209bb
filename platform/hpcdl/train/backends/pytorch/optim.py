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

Caffe's other solver types (BVLC/caffe src/caffe/solvers/*_solver.cpp; Caffe's solver
tutorial) share SGD's ApplyUpdate: clip, then Regularize adds ``wd * decay_mult * w`` (L2)
or ``wd * decay_mult * sign(w)`` (L1) to the gradient ``g``, then each computes the value
``u`` subtracted from the weight, with ``rate = lr * lr_mult`` and ``delta`` as epsilon:

- ``Nesterov``: ``v' = mu * v + rate * g``, ``u = (1 + mu) * v' - mu * v``.
- ``AdaGrad``: ``h += g^2``, ``u = rate * g / (sqrt(h) + delta)``.
- ``RMSProp``: ``h = rms_decay * h + (1 - rms_decay) * g^2``, ``u = rate * g / (sqrt(h) + delta)``.
- ``AdaDelta`` (``momentum`` is its decay): ``h = mu * h + (1 - mu) * g^2``,
  ``s = g * sqrt((h2 + delta) / (h + delta))``, ``h2 = mu * h2 + (1 - mu) * s^2``, ``u = rate * s``
  (the history of updates holds them before the rate).
- ``Adam`` (``momentum`` is beta1, ``momentum2`` beta2): ``m = b1 * m + (1 - b1) * g``,
  ``v = b2 * v + (1 - b2) * g^2``, ``u = rate * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + delta)``
  with ``t`` the step number from 1 (Caffe's ``iter_ + 1``).

LARS and LARC adapt the rate of weight tensors (convolution and inner-product weights,
``ndim > 1``); biases and batch-norm parameters keep the global rate, as in the
LARS paper's per-layer treatment of weights. A tensor whose norm or gradient norm is
zero keeps the global rate too (the ratio is undefined there).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hpcdl.caffe.solver_types import SOLVERS

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
                 momentum_correction: bool = False, solver: str = "SGD", momentum2: float = 0.999,
                 delta: float = 1e-8, rms_decay: float = 0.99, regularization: str = "L2", fused: bool = False):
        if rule not in RULES:
            raise ValueError(f"optimizer rule {rule!r}; known: {', '.join(RULES)}")
        if solver not in SOLVERS:
            raise ValueError(f"solver type {solver!r}; known: {', '.join(SOLVERS)}")
        if rule != "sgd" and solver != "SGD":
            raise ValueError(f"rule {rule} is SGD's, not {solver}'s")
        self.solver, self.momentum2, self.delta, self.rms_decay = solver, momentum2, delta, rms_decay
        self.regularization = regularization
        self.slots = [s for s in slots if s.tensor.requires_grad]
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.rule = rule
        self.trust = trust
        self.eps = eps
        self.clip_gradients = clip_gradients
        self.momentum_correction = momentum_correction
        self.velocity = [torch.zeros_like(s.tensor, memory_format=torch.preserve_format) for s in self.slots]
        # AdaDelta's history of updates and Adam's of squared gradients (velocity holds the first history)
        self.history2 = ([torch.zeros_like(s.tensor, memory_format=torch.preserve_format) for s in self.slots]
                         if solver in ("AdaDelta", "Adam") else [])
        self.t = 0  # steps taken: Adam's bias correction
        self.last_lr: float | None = None
        self.lag = None  # a GradientLag whose pending gradients belong in the snapshot
        # Caffe's plain SGD step as one fused kernel per group (torch._fused_sgd_ with lr 1 and
        # dampening 1 - rate is v <- mu v + rate (g + wd w), w <- w - v), which can also skip itself
        # on the device when fp16's gradients overflowed: no host synchronisation a step. The other
        # rules, solvers, L1, clipping and momentum correction keep the multi-tensor path below
        self.fused = (fused and solver == "SGD" and rule == "sgd" and regularization == "L2"
                      and not clip_gradients and not momentum_correction)

    def zero_grad(self) -> None:
        for s in self.slots:
            s.tensor.grad = None

    @torch.no_grad()
    def step(self, lr: float, skip_if: torch.Tensor | None = None) -> None:
        """One update at rate `lr`, all on the parameters' device.

        Nothing is read back to the host: the norms LARS, LARC and clipping need stay
        tensors (one fused `_foreach_norm` per group), and the choices they make are
        `torch.where`s, so a GPU step queues its kernels without waiting for any of them.
        `skip_if` (fused steps only): a 1-element flag on the device; where it is non-zero the
        step leaves weights and velocities as they were.
        """
        grads = [s.tensor.grad if s.tensor.grad is not None else torch.zeros_like(s.tensor) for s in self.slots]
        if skip_if is not None and not self.fused:
            raise ValueError("CaffeSGD: only a fused step skips itself on the device")
        if self.fused:
            self.t += 1
            for (lr_mult, decay_mult), (plain, _) in self._groups().items():
                self._fused_update(plain, grads, self.weight_decay * decay_mult, lr * lr_mult, skip_if)
            self.last_lr = lr
            return
        if self.clip_gradients:
            grads = self._clip(grads, self.clip_gradients)
        correction = 1.0
        if self.momentum_correction and self.last_lr:
            correction = lr / self.last_lr
        self.t += 1
        if self.solver != "SGD":
            self._adaptive(grads, lr, correction)
            self.last_lr = lr
            return
        for (lr_mult, decay_mult), (plain, adapted) in self._groups().items():
            wd = self.weight_decay * decay_mult
            rate = lr * lr_mult
            # tensors that keep the global rate: v <- mu v + rate (g + wd w), w <- w - v
            self._update(plain, grads, wd, correction, rate)
            if adapted:
                ws = [self.slots[i].tensor for i in adapted]
                factors = self._layer_factors(ws, [grads[i] for i in adapted], wd, rate)
                self._update(adapted, grads, wd, correction, list((factors * rate).unbind()))
        self.last_lr = lr

    def _update(self, members: list[int], grads: list, wd: float, correction: float, rate) -> None:
        """Caffe's step for these slots, one fused call per operation; `rate` a number or one 0-d tensor each."""
        if not members:
            return
        ws = [self.slots[i].tensor for i in members]
        vs = [self.velocity[i] for i in members]
        gs = [grads[i] for i in members]
        if wd and self.regularization == "L1":
            ds = torch._foreach_add(gs, [torch.sign(w) for w in ws], alpha=wd)
        else:
            ds = torch._foreach_add(gs, ws, alpha=wd) if wd else gs
        torch._foreach_mul_(vs, self.momentum * correction)
        if isinstance(rate, list):
            torch._foreach_add_(vs, torch._foreach_mul(ds, rate))
        else:
            torch._foreach_add_(vs, ds, alpha=rate)
        torch._foreach_sub_(ws, vs)

    def _fused_update(self, members: list[int], grads: list, wd: float, rate: float, skip_if) -> None:
        """Caffe's step for these slots in one kernel per device and dtype: PyTorch's fused SGD computes
        d = g + wd w, buf <- mu buf + (1 - dampening) d, w <- w - lr buf; with lr 1 and dampening
        1 - rate that is Caffe's v <- mu v + rate d, w <- w - v (the velocity starts at zero, so the
        first step is not PyTorch's buf = d)."""
        by_kind: dict = {}
        for i in members:
            by_kind.setdefault((self.slots[i].tensor.device, self.slots[i].tensor.dtype), []).append(i)
        for idx in by_kind.values():
            torch._fused_sgd_([self.slots[i].tensor for i in idx], [grads[i] for i in idx],
                              [self.velocity[i] for i in idx], weight_decay=wd, momentum=self.momentum, lr=1.0,
                              dampening=1.0 - rate, nesterov=False, maximize=False, is_first_step=False,
                              found_inf=skip_if)

    def _adaptive(self, grads: list, lr: float, correction: float) -> None:
        """Caffe's Nesterov, AdaGrad, RMSProp, AdaDelta or Adam step, tensor by tensor (the docstring's rules)."""
        mu, delta = self.momentum, self.delta
        for i, s in enumerate(self.slots):
            w, h = s.tensor, self.velocity[i]
            g = grads[i]
            wd = self.weight_decay * s.decay_mult
            if wd:
                g = g + wd * (torch.sign(w) if self.regularization == "L1" else w)
            rate = lr * s.lr_mult
            if self.solver == "Nesterov":
                old = h * correction
                h.mul_(mu * correction).add_(g, alpha=rate)
                w.sub_(h * (1.0 + mu) - old * mu)
            elif self.solver == "AdaGrad":
                h.addcmul_(g, g)
                w.sub_(g / (h.sqrt() + delta), alpha=rate)
            elif self.solver == "RMSProp":
                h.mul_(self.rms_decay).addcmul_(g, g, value=1.0 - self.rms_decay)
                w.sub_(g / (h.sqrt() + delta), alpha=rate)
            elif self.solver == "AdaDelta":
                h2 = self.history2[i]
                h.mul_(mu).addcmul_(g, g, value=1.0 - mu)
                step = g * ((h2 + delta) / (h + delta)).sqrt()
                h2.mul_(mu).addcmul_(step, step, value=1.0 - mu)
                w.sub_(step, alpha=rate)
            else:  # Adam
                h2 = self.history2[i]
                h.mul_(mu).add_(g, alpha=1.0 - mu)
                h2.mul_(self.momentum2).addcmul_(g, g, value=1.0 - self.momentum2)
                corrected = rate * (1.0 - self.momentum2 ** self.t) ** 0.5 / (1.0 - mu ** self.t)
                w.sub_(h / (h2.sqrt() + delta), alpha=corrected)

    @staticmethod
    def _clip(grads: list, bound: float) -> list:
        """Caffe ClipGradients: scale all gradients so their global L2 norm is at most the bound."""
        norm = torch.linalg.vector_norm(torch.stack([n.double() for n in torch._foreach_norm(grads)]))
        scale = torch.where(norm > bound, bound / norm, torch.ones_like(norm))
        return torch._foreach_mul(grads, [scale.to(g.dtype) for g in grads])

    def _groups(self) -> dict:
        """(lr_mult, decay_mult) -> (slots at the global rate, weight tensors whose rate LARS/LARC adapt)."""
        if not hasattr(self, "_group_index"):
            groups: dict[tuple[float, float], tuple[list[int], list[int]]] = {}
            for i, s in enumerate(self.slots):
                plain, adapted = groups.setdefault((s.lr_mult, s.decay_mult), ([], []))
                (adapted if self.rule != "sgd" and s.tensor.dim() > 1 else plain).append(i)
            self._group_index = groups
        return self._group_index

    def _layer_factors(self, ws: list, gs: list, wd: float, rate: float) -> torch.Tensor:
        """Each weight tensor's factor on `rate` (a 1-D tensor on the device)."""
        w_norm = torch.stack([n.to(ws[0].dtype) for n in torch._foreach_norm(ws)])
        g_norm = torch.stack([n.to(ws[0].dtype) for n in torch._foreach_norm(gs)])
        local = self.trust * w_norm / (g_norm + wd * w_norm + self.eps)
        if self.rule == "larc_clip":
            # the layer's rate is min(rate, local); as a factor on rate:
            factor = torch.clamp(local / rate, max=1.0) if rate > 0 else torch.ones_like(local)
        else:  # lars, larc_scale
            factor = local
        undefined = (w_norm == 0) | (g_norm == 0)
        return torch.where(undefined, torch.ones_like(factor), factor)

    def state_dict(self) -> dict:
        state = {"velocity": {s.name: v for s, v in zip(self.slots, self.velocity)}, "last_lr": self.last_lr,
                 "type": self.solver, "t": self.t}
        if self.history2:
            state["history2"] = {s.name: h for s, h in zip(self.slots, self.history2)}
        if getattr(self, "lag", None) is not None:  # hpcdl.train.backends.pytorch.gradients.GradientLag
            state["lag"] = self.lag.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        saved = state["velocity"]
        for s, v in zip(self.slots, self.velocity):
            if s.name in saved:
                v.copy_(saved[s.name])
        self.last_lr = state.get("last_lr")
        self.t = int(state.get("t", 0))
        saved2 = state.get("history2") or {}
        for s, h in zip(self.slots, self.history2):
            if s.name in saved2:
                h.copy_(saved2[s.name])
        if getattr(self, "lag", None) is not None:
            self.lag.load_state_dict(state.get("lag"))
