"""The TensorFlow and MXNet trainers take the shared rule's step inside their own kernels
(tf_update.CompiledUpdate, mxnet_update.FusedUpdate): several steps under every rule, with
clipping, momentum correction, lr_mult and decay_mult, equal the numpy rule's to float32."""

from __future__ import annotations

import numpy as np
import pytest
from framework_tools import in_mxnet

from hpcdl.train.update_rule import SGDRule

SHAPES = [(4, 3, 2, 2), (4,), (5, 4), (5,)]
RATES = (0.1, 0.05, 0.2)
CASES = {f"{rule}{'+clip' if extra else ''}": (rule, extra) for rule in ("sgd", "lars", "larc_clip", "larc_scale")
         for extra in (False, True)}


def rule_for(rule: str, extra: bool) -> SGDRule:
    return SGDRule(0.9, 0.01, rule, trust=0.02, eps=1e-8, clip_gradients=0.5 if extra else None,
                   momentum_correction=extra, lr_mults=[1.0, 2.0, 1.0, 2.0], decay_mults=[1.0, 0.0, 1.0, 0.0])


def problem(seed=0):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    grads = [[rng.normal(size=s).astype(np.float32) for s in SHAPES] for _ in RATES]
    return weights, grads


def numpy_steps(rule: str, extra: bool, images: int = 1) -> list[np.ndarray]:
    weights, grads = problem()
    mine = rule_for(rule, extra)
    ws = [w.astype(np.float64) for w in weights]
    for lr, gs in zip(RATES, grads):
        ws = mine.step(ws, [g.astype(np.float64) / images for g in gs], lr)
    return ws


@pytest.mark.parametrize("case", CASES)
def test_the_compiled_tensorflow_update_takes_the_numpy_rules_steps(case):
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from hpcdl.train.backends.tensorflow.update import CompiledUpdate

    rule, extra = CASES[case]
    weights, grads = problem()
    variables = [tf.Variable(w) for w in weights]
    r = rule_for(rule, extra)
    update = CompiledUpdate(tf, r, variables)
    apply = tf.function(lambda gs, lr, c: update.apply(gs, tf.constant(1.0), lr, c))
    for lr, gs in zip(RATES, grads):
        apply([tf.constant(g) for g in gs], tf.constant(lr, tf.float32), tf.constant(update.correction(lr), tf.float32))
        r.last_lr = lr
    for got, want in zip(variables, numpy_steps(rule, extra)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-6, err_msg=case)
    update.to_rule()
    assert len(r.velocity) == len(SHAPES) and r.velocity[0].dtype == np.float64


MX_CODE = """
import json, sys
import numpy as np
import mxnet as mx
from hpcdl.train.backends.mxnet.update import FusedUpdate
from hpcdl.train.update_rule import SGDRule
p = json.load(sys.stdin)

class Param:  # the two verbs FusedUpdate reads from a Gluon Parameter
    def __init__(self, w):
        self.w, self.g = mx.nd.array(w), mx.nd.zeros(np.shape(w))
        self.shape, self.dtype = self.w.shape, self.w.dtype
    def data(self):
        return self.w
    def grad(self):
        return self.g

out = {}
for name, (rule, extra) in p["cases"].items():
    params = [Param(w) for w in p["weights"]]
    r = SGDRule(0.9, 0.01, rule, trust=0.02, eps=1e-8, clip_gradients=0.5 if extra else None,
                momentum_correction=extra, lr_mults=[1.0, 2.0, 1.0, 2.0], decay_mults=[1.0, 0.0, 1.0, 0.0])
    update = FusedUpdate(mx, r, params)
    for lr, gs in zip(p["rates"], p["grads"]):
        for q, g in zip(params, gs):
            q.g[:] = mx.nd.array(g) * p["images"]  # summed over the batch, as the trainer hands them
        update.step(1.0 / p["images"], lr)
    out[name] = [q.w.asnumpy().tolist() for q in params]
print(json.dumps(out))
"""


def test_the_fused_mxnet_update_takes_the_numpy_rules_steps_under_every_rule():
    weights, grads = problem()
    got = in_mxnet(MX_CODE, {"weights": [w.tolist() for w in weights], "grads": [[g.tolist() for g in gs] for gs in grads],
                             "rates": list(RATES), "images": 8, "cases": CASES})
    for case, (rule, extra) in CASES.items():
        for g, want in zip(got[case], numpy_steps(rule, extra)):
            np.testing.assert_allclose(np.array(g), want, rtol=2e-5, atol=1e-6, err_msg=case)
