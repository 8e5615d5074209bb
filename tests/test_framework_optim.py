"""The optimizer rules TensorFlow and MXNet share (hpcdl.train.update_rule), against updates
computed by hand and against the PyTorch optimizer (hpcdl.train.backends.pytorch.optim.CaffeSGD).

The framework checks train one step of a tiny linear classifier z = W x + b (3 classes,
2 inputs, 4 images) whose softmax cross-entropy gradient is written out here:
dL/dz = (softmax(z) - t) / N with t the (smoothed) one-hot target, g_W = dz^T x, g_b = sum dz.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
import torch
from conftest import RECIPES
from framework_tools import final_record, in_mxnet, mxnet_python, run

from hpcdl.train.backends.pytorch.optim import CaffeSGD, ParamSlot
from hpcdl.train.recipe import recipe_from_dict
from hpcdl.train.update_rule import SGDRule

X = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -0.7], [2.0, 1.0]])
Y = np.array([0, 2, 1, 2])
W0 = np.array([[0.5, -0.2], [0.1, 0.4], [-0.3, 0.6]])  # (classes, inputs), torch's layout
B0 = np.array([0.1, -0.1, 0.2])
LR, WD = 0.5, 0.01

RULE_CASES = {  # name: recipe fields
    "sgd": {},
    "lars": {"type": "LARS", "trust_coefficient": 0.001},
    "larc_clip": {"type": "LARC", "larc_mode": "clip"},
    "larc_scale": {"type": "LARC", "larc_mode": "scale"},
}


def recipe(**fields):
    return recipe_from_dict({"net": "cifar10_quick", "batch_size": 4, "base_lr": LR, "max_iter": 1, "momentum": 0.9,
                             "weight_decay": WD, "larc_eps": 0.0, **fields}, "test")


def hand_gradients(smoothing=0.0):
    z = X @ W0.T + B0
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    t = (1 - smoothing) * np.eye(3)[Y] + smoothing / 3
    dz = (p - t) / len(X)
    return dz.T @ X, dz.sum(0)


def hand_step(rule, smoothing=0.0, no_bias_decay=False, trust=None):
    """One step from zero velocity: w - rate * (g + wd * w), the rate by the rule (weights only)."""
    g_w, g_b = hand_gradients(smoothing)
    n_w, n_g = np.linalg.norm(W0), np.linalg.norm(g_w)
    trust = trust or {"sgd": 1.0, "lars": 0.001}.get(rule, 0.02)
    local = trust * n_w / (n_g + WD * n_w)  # You et al. / apex LARC (eps 0 here)
    rate = {"sgd": LR, "lars": LR * local, "larc_clip": min(LR, local), "larc_scale": LR * local}[rule]
    if rule == "larc_clip":
        assert local < LR  # so the clip really clips in this case
    bias_wd = 0.0 if no_bias_decay else WD
    return W0 - rate * (g_w + WD * W0), B0 - LR * (g_b + bias_wd * B0)  # the bias keeps the global rate


ADAM_FIELDS = {"type": "Adam", "larc_eps": 1e-8}  # larc_eps back at its default: Adam does not read it


def hand_adam_step():
    """Caffe's Adam from zero histories (t = 1): m = 0.1 d, v = 0.001 d^2, and the rate times
    sqrt(1 - 0.999) / (1 - 0.9) (AdamSolver's bias correction), d = g + wd * w."""
    out = []
    for w, g in zip((W0, B0), hand_gradients()):
        d = g + WD * w
        m, v = 0.1 * d, 0.001 * d * d
        out.append(w - LR * np.sqrt(0.001) / 0.1 * m / (np.sqrt(v) + 1e-8))
    return out


L1_FIELDS = {"regularization_type": "L1"}


def hand_l1_step():
    """Caffe's SGD with L1 decay from zero velocity: w - lr * (g + wd * sign(w))."""
    return tuple(w - LR * (g + WD * np.sign(w)) for w, g in zip((W0, B0), hand_gradients()))


# --- the shared rule itself -------------------------------------------------------------

def test_the_shared_rule_takes_the_same_steps_as_the_pytorch_optimizer_under_every_rule():
    rng = np.random.default_rng(0)
    shapes = [(4, 3, 2, 2), (4,), (5, 4), (5,)]
    for rule in ("sgd", "lars", "larc_clip", "larc_scale"):
        for extra in ({}, {"clip_gradients": 0.5, "momentum_correction": True}):
            weights = [rng.normal(size=s) for s in shapes]
            tensors = [torch.nn.Parameter(torch.tensor(w)) for w in weights]
            slots = [ParamSlot(f"p{i}", t) for i, t in enumerate(tensors)]
            ref = CaffeSGD(slots, 0.9, 0.01, rule, trust=0.02, eps=1e-8, **extra)
            mine = SGDRule(0.9, 0.01, rule, trust=0.02, eps=1e-8, **extra)
            for lr in (0.1, 0.05, 0.2):
                grads = [rng.normal(size=s) for s in shapes]
                for t, g in zip(tensors, grads):
                    t.grad = torch.tensor(g)
                ref.step(lr)
                weights = mine.step(weights, grads, lr)
            for w, t in zip(weights, tensors):
                np.testing.assert_allclose(w, t.detach().numpy(), rtol=1e-12, err_msg=f"{rule} {extra}")


def test_no_bias_decay_frees_one_dimensional_tensors_of_weight_decay_only():
    rule = SGDRule.from_recipe(recipe(no_bias_decay=True), [(3, 2), (3,)])
    assert rule.decay_mults == [1.0, 0.0]
    assert SGDRule.from_recipe(recipe(), [(3, 2), (3,)]).decay_mults == [1.0, 1.0]


def test_velocity_and_last_rate_survive_a_snapshot_round_trip():
    rule = SGDRule(0.9, 0.0, momentum_correction=True)
    rule.step([np.ones(2)], [np.ones(2)], 0.1)
    again = SGDRule(0.9, 0.0, momentum_correction=True)
    again.load_state(rule.state("v"), 1, "v")
    assert again.last_lr == 0.1 and np.array_equal(again.velocity[0], rule.velocity[0])


# --- TensorFlow -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tf_step():
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from hpcdl.train.backends.tensorflow.trainer import KerasTrainer
    from hpcdl.train.ranks import RankInfo

    def step(**fields):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
        model.set_weights([W0.T.astype(np.float32), B0.astype(np.float32)])  # Keras keeps (inputs, classes)
        trainer = KerasTrainer(tf, keras, tf.distribute.get_strategy(), model, recipe(**fields),
                               RankInfo(0, 1, 0, "none"), from_logits=True)
        trainer.train_step(X[None].astype(np.float32), Y[None].astype(np.int32), LR)
        kernel, bias = model.get_weights()
        return kernel.T, bias

    return step


@pytest.mark.parametrize("rule", RULE_CASES)
def test_tensorflow_takes_the_hand_computed_step_under_each_rule(tf_step, rule):
    w, b = tf_step(**RULE_CASES[rule])
    want_w, want_b = hand_step(rule)
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b, want_b, rtol=1e-5, atol=1e-7)


def test_tensorflow_label_smoothing_and_no_bias_decay_change_the_step_as_specified(tf_step):
    w, b = tf_step(label_smoothing=0.1)
    want_w, want_b = hand_step("sgd", smoothing=0.1)
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b, want_b, rtol=1e-5, atol=1e-7)
    assert not np.allclose(w, hand_step("sgd")[0], rtol=1e-4, atol=0)
    w, b = tf_step(no_bias_decay=True)
    want_w, want_b = hand_step("sgd", no_bias_decay=True)
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b, want_b, rtol=1e-5, atol=1e-7)
    assert not np.allclose(b, hand_step("sgd")[1], rtol=1e-6, atol=0)


@pytest.mark.parametrize("fields,hand", [(ADAM_FIELDS, hand_adam_step), (L1_FIELDS, hand_l1_step)],
                         ids=["adam", "sgd-l1"])
def test_tensorflow_takes_caffes_adam_and_l1_steps_on_the_host(tf_step, fields, hand):
    """Adam, and SGD with L1 decay, which the compiled update (SGD with wd * w) would take as L2."""
    w, b = tf_step(**fields)
    want_w, want_b = hand()
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b, want_b, rtol=1e-5, atol=1e-7)


# --- MXNet (its own venv) ---------------------------------------------------------------

GLUON_STEP = """
import json, sys
import numpy as np
import mxnet as mx
from mxnet.gluon import nn
from hpcdl.train.backends.mxnet.trainer import GluonTrainer
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import recipe_from_dict
payload = json.load(sys.stdin)
x, y = np.array(payload["x"], dtype=np.float32), np.array(payload["y"], dtype=np.float32)
out = {}
for name, fields in payload["cases"].items():
    net = nn.Dense(3, in_units=2)
    net.initialize()
    net.weight.set_data(mx.nd.array(payload["w"]))
    net.bias.set_data(mx.nd.array(payload["b"]))
    trainer = GluonTrainer(mx, net, recipe_from_dict({**payload["recipe"], **fields}, "test"), None,
                           RankInfo(0, 1, 0, "none"), from_logits=True)
    trainer.train_step(x[None], y[None], payload["lr"])
    out[name] = [net.weight.data().asnumpy().tolist(), net.bias.data().asnumpy().tolist()]
print(json.dumps(out))
"""

MX_CASES = {**RULE_CASES, "smoothing": {"label_smoothing": 0.1}, "no_bias_decay": {"no_bias_decay": True},
            "adam": ADAM_FIELDS, "sgd-l1": L1_FIELDS}


@pytest.fixture(scope="module")
def mxnet_steps():
    fields = recipe().model_dump(include={"net", "batch_size", "base_lr", "max_iter", "momentum", "weight_decay",
                                          "larc_eps"})
    return in_mxnet(GLUON_STEP, {"x": X.tolist(), "y": Y.tolist(), "w": W0.tolist(), "b": B0.tolist(), "lr": LR,
                                 "recipe": fields, "cases": MX_CASES})


@pytest.mark.parametrize("case", MX_CASES)
def test_mxnet_takes_the_hand_computed_step(mxnet_steps, case):
    w, b = (np.array(a) for a in mxnet_steps[case])
    want = {"smoothing": lambda: hand_step("sgd", smoothing=0.1),
            "no_bias_decay": lambda: hand_step("sgd", no_bias_decay=True),
            "adam": hand_adam_step, "sgd-l1": hand_l1_step}.get(case, lambda: hand_step(case))()
    # MXNet's float32 gradient is off the float64 hand one by up to 4e-7 in every case; where a step
    # lands near zero (L1 here) that is past rtol, and still 10,000 times under what L1 and L2 differ by
    np.testing.assert_allclose(w, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, want[1], rtol=1e-5, atol=1e-6)


# --- a LARC recipe trains the real net --------------------------------------------------

LARC_FIELDS = ("type: LARC\nlarc_mode: clip\nlabel_smoothing: 0.1\nno_bias_decay: true\nclip_gradients: 10\n"
               "momentum_correction: true\nwarmup_iter: 2\nwarmup_start_lr: 0.001\n")


def larc_recipe(tmp_path):
    path = tmp_path / "quick-larc.yaml"
    text = re.sub(r"(?m)^(max_iter|test_interval|display): .*$", "", (RECIPES / "digits-quick.yaml").read_text())
    path.write_text(text + "max_iter: 4\ndisplay: 2\n" + LARC_FIELDS)
    return path


@pytest.mark.slow
def test_a_larc_recipe_trains_cifar10_quick_with_tensorflow_and_with_mxnet(tmp_path):
    path = larc_recipe(tmp_path)
    for framework, python in (("tensorflow", sys.executable), ("mxnet", mxnet_python())):
        results = tmp_path / f"{framework}.jsonl"
        run([python, "-m", "hpcdl.train", path, "--framework", framework, "--results", results])
        final = final_record(results)
        steps = [json.loads(line) for line in results.read_text().splitlines() if '"step"' in line]
        assert final["framework"] == framework and final["iter"] == 4
        assert steps and all(np.isfinite(s["loss"]) for s in steps)
        assert steps[0]["lr"] < 0.01  # the warm-up's first rates
