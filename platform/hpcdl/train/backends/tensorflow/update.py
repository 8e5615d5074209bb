"""hpcdl.train.update_rule's step as TensorFlow ops, compiled into the training step.

The numpy rule on the host cost the TensorFlow trainer about a fifth of its speed (two
copies of every weight and gradient per step, docs/performance.md before this module).
Here the same arithmetic runs inside the `tf.function` that computes the gradients, on
the variables' device: Caffe's momentum convention, lr_mult/decay_mult, LARS/LARC with
`tf.where` for the zero-norm cases, clipping to a global norm, and the fp16 loss scale's
unscale-and-skip. The `SGDRule` stays the one description of the rule (its fields, its
velocity arrays in snapshots); this class only carries it out.
"""

from __future__ import annotations

import numpy as np

from hpcdl.train.update_rule import SGDRule


class CompiledUpdate:
    """Velocities as TensorFlow variables and `apply()`, to be called inside a tf.function."""

    def __init__(self, tf, rule: SGDRule, variables: list, loss_scaling: bool = False):
        self.tf, self.rule, self.variables, self.loss_scaling = tf, rule, variables, loss_scaling
        n = len(variables)
        self.lr_mults = list(rule.lr_mults or [1.0] * n)
        self.decay_mults = list(rule.decay_mults or [1.0] * n)
        self.velocity = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in variables]

    def apply(self, grads: list, scale, lr, correction):
        """Unscale, check, clip and step; returns whether the gradients were finite (else no step)."""
        tf = self.tf
        grads = [tf.cast(g, v.dtype) for g, v in zip(grads, self.variables)]
        if not self.loss_scaling:  # fp32 and bf16: nothing to unscale, no overflow to look for
            self._step(grads, lr, correction)
            return tf.constant(True)
        grads = [g / tf.cast(scale, g.dtype) for g in grads]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

        def step():
            self._step(grads, lr, correction)
            return tf.constant(True)

        return tf.cond(finite, step, lambda: tf.constant(False))

    def _step(self, gs: list, lr, correction) -> None:
        tf, rule = self.tf, self.rule
        if rule.clip_gradients:  # Caffe ClipGradients: bound the global L2 norm
            norm = tf.linalg.global_norm(gs)
            gs = [g * tf.cast(tf.where(norm > rule.clip_gradients, rule.clip_gradients / norm, 1.0), g.dtype)
                  for g in gs]
        for i, (w, g, v) in enumerate(zip(self.variables, gs, self.velocity)):
            wd = rule.weight_decay * self.decay_mults[i]
            rate = tf.cast(lr * self.lr_mults[i], w.dtype)
            if rule.rule != "sgd" and len(w.shape) > 1:
                rate = rate * self._layer_factor(w, g, wd, rate)
            d = g + wd * w if wd else g
            v.assign(v * tf.cast(rule.momentum * correction, w.dtype) + rate * d)
            w.assign_sub(v)

    def _layer_factor(self, w, g, wd: float, rate):
        tf, rule = self.tf, self.rule
        w_norm, g_norm = tf.norm(w), tf.norm(g)
        local = rule.trust * w_norm / (g_norm + wd * w_norm + rule.eps)
        if rule.rule == "larc_clip":  # the layer's rate is min(rate, local), as a factor on rate
            factor = tf.where(rate > 0, tf.minimum(local / rate, 1.0), 1.0)
        else:  # lars, larc_scale
            factor = local
        return tf.where((w_norm == 0) | (g_norm == 0), tf.ones_like(factor), factor)

    def correction(self, lr: float) -> float:
        rule = self.rule
        return lr / rule.last_lr if rule.momentum_correction and rule.last_lr else 1.0

    def to_rule(self) -> None:
        """Copy the velocities into the rule's arrays (for its snapshot format)."""
        self.rule.velocity = [np.asarray(v.numpy(), dtype=np.float64) for v in self.velocity]

    def from_rule(self) -> None:
        for v, a in zip(self.velocity, self.rule.velocity):
            v.assign(np.asarray(a).astype(v.dtype.as_numpy_dtype))
