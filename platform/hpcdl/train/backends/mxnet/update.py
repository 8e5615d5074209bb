"""hpcdl.train.update_rule's step with MXNet's fused multi-tensor SGD kernels.

MXNet's `sgd_mom_update` family computes ``mom <- mu * mom - lr * (rescale * g + wd * w)``,
``w <- w + mom``: Caffe's convention (the rate inside the velocity) with ``mom = -v``. So
`multi_sgd_mom_update` takes Caffe's step for up to `CHUNK` tensors in one call, on the
engine's own threads, with no copy to numpy (the numpy rule cost the MXNet trainer about a
fifth of its speed). Per-layer LARS/LARC rates are computed on the device from
`multi_sum_sq` and fed to `preloaded_multi_sgd_mom_update`, which reads its rates and
weight decays from arrays. The `SGDRule` stays the one description of the rule and the
snapshot format; its velocity arrays are ``-mom``.
"""

from __future__ import annotations

import numpy as np

from hpcdl.train.update_rule import SGDRule

CHUNK = 32  # tensors per fused call (MXNet's own optimizer aggregates up to 60)


class FusedUpdate:
    def __init__(self, mx, rule: SGDRule, params: list):
        self.mx, self.rule, self.params = mx, rule, params
        n = len(params)
        self.lr_mults = list(rule.lr_mults or [1.0] * n)
        self.wds = [rule.weight_decay * d for d in (rule.decay_mults or [1.0] * n)]
        self.mom = [mx.nd.zeros(p.shape, dtype=p.dtype) for p in params]
        self.adapted = [rule.rule != "sgd" and len(p.shape) > 1 for p in params]

    def step(self, rescale: float, lr: float) -> None:
        """One step with the summed gradients times `rescale` (1 / global batch), at rate `lr`."""
        mx, rule = self.mx, self.rule
        ws = [p.data() for p in self.params]
        gs = [p.grad() for p in self.params]
        correction = lr / rule.last_lr if rule.momentum_correction and rule.last_lr else 1.0
        momentum = rule.momentum * correction
        if rule.clip_gradients:
            gs = self._clip(gs, rescale, rule.clip_gradients)
        n = len(ws)
        if any(self.adapted):
            lrs = self._layer_rates(ws, gs, rescale, lr)
            wds = mx.nd.array(self.wds, dtype="float32")
            for a in range(0, n, CHUNK):
                b = min(n, a + CHUNK)
                mx.nd.preloaded_multi_sgd_mom_update(
                    *self._triples(ws, gs, a, b), lrs[a:b], wds[a:b], out=ws[a:b], momentum=momentum,
                    rescale_grad=rescale, num_weights=b - a)
        else:
            for a in range(0, n, CHUNK):
                b = min(n, a + CHUNK)
                mx.nd.multi_sgd_mom_update(
                    *self._triples(ws, gs, a, b), out=ws[a:b], momentum=momentum, rescale_grad=rescale,
                    lrs=tuple(lr * m for m in self.lr_mults[a:b]), wds=tuple(self.wds[a:b]), num_weights=b - a)
        rule.last_lr = lr

    def _triples(self, ws, gs, a, b) -> list:
        return [t for i in range(a, b) for t in (ws[i], gs[i], self.mom[i])]

    def _clip(self, gs: list, rescale: float, bound: float) -> list:
        """Caffe ClipGradients on the device: scale all gradients so their global L2 norm is at most the bound."""
        mx = self.mx
        norm = mx.nd.sqrt(mx.nd.sum(mx.nd.multi_sum_sq(*gs, num_arrays=len(gs)))) * rescale
        scale = mx.nd.where(norm > bound, bound / mx.nd.maximum(norm, 1e-30), mx.nd.ones_like(norm))
        return [mx.nd.broadcast_mul(g, scale) for g in gs]

    def _layer_rates(self, ws: list, gs: list, rescale: float, lr: float):
        """Each tensor's rate: lr * lr_mult, times the LARS/LARC factor for weight tensors."""
        mx, rule = self.mx, self.rule
        n = len(ws)
        w_norm = mx.nd.sqrt(mx.nd.multi_sum_sq(*ws, num_arrays=n))
        g_norm = mx.nd.sqrt(mx.nd.multi_sum_sq(*gs, num_arrays=n)) * rescale
        rates = mx.nd.array([lr * m for m in self.lr_mults], dtype="float32")
        wds = mx.nd.array(self.wds, dtype="float32")
        local = rule.trust * w_norm / (g_norm + wds * w_norm + rule.eps)
        if rule.rule == "larc_clip":  # the layer's rate is min(rate, local), as a factor on rate
            factor = mx.nd.where(rates > 0, mx.nd.minimum(local / mx.nd.maximum(rates, 1e-30), 1.0), mx.nd.ones_like(rates))
        else:  # lars, larc_scale
            factor = local
        keep = (w_norm == 0) + (g_norm == 0) + mx.nd.array([0.0 if a else 1.0 for a in self.adapted]) > 0
        return rates * mx.nd.where(keep, mx.nd.ones_like(factor), factor)

    def to_rule(self) -> None:
        self.rule.velocity = [-m.asnumpy().astype(np.float64) for m in self.mom]

    def from_rule(self) -> None:
        for m, v in zip(self.mom, self.rule.velocity):
            m[:] = self.mx.nd.array(-np.asarray(v), dtype=m.dtype)
