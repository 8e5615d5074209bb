"""Caffe's solver and data semantics in every backend, against Caffe's own formulas.

The reference for an update is Caffe's SGDSolver (BVLC/caffe src/caffe/solvers/sgd_solver.cpp):
``V <- momentum V + rate lr_mult (g + weight_decay decay_mult W)``, ``W <- W - V``, which the
PyTorch optimizer (hpcdl.train.backends.pytorch.optim.CaffeSGD) is tested to follow in tests/test_optim.py; the
first step is also written out here by hand from the autograd gradient.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from framework_tools import in_mxnet, records, require_horovod, run

from hpcdl.errors import HpcdlError
from hpcdl.nets.spec import build_spec, load_net
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.backends.pytorch.optim import CaffeSGD
from hpcdl.train.backends.pytorch.steps import param_slots
from hpcdl.train.recipe import recipe_from_dict

# A conv and an inner product with Caffe's usual bias multipliers (lr_mult 2, decay_mult 0)
TINY = {"input": {"channels": 2, "size": 3}, "layers": [
    {"type": "Convolution", "name": "conv", "num_output": 2, "kernel_size": 2, "weight_filler": {"type": "gaussian", "std": 0.5},
     "bias_filler": {"type": "constant", "value": 0.2}, "param": [{"lr_mult": 1, "decay_mult": 1}, {"lr_mult": 2, "decay_mult": 0}]},
    {"type": "ReLU", "name": "relu"},
    {"type": "InnerProduct", "name": "ip", "num_output": 3, "weight_filler": {"type": "gaussian", "std": 0.5},
     "bias_filler": {"type": "constant", "value": 0.3}, "param": [{"lr_mult": 1, "decay_mult": 1}, {"lr_mult": 2, "decay_mult": 0}]},
]}
SHAPE = (2, 3, 3)
RATES = (0.1, 0.05)  # a rate change at the second step: the momentum conventions differ there
WD, MOMENTUM = 0.01, 0.9
RNG = np.random.default_rng(3)
XS = RNG.normal(size=(2, 1, 4, *SHAPE)).astype(np.float32)  # 2 iterations x iter_size 1 x 4 images
YS = RNG.integers(0, 3, size=(2, 1, 4)).astype(np.int64)


def tiny_recipe(**fields):
    return recipe_from_dict({"net": "cifar10_quick", "batch_size": 4, "base_lr": RATES[0], "max_iter": 2,
                             "momentum": MOMENTUM, "weight_decay": WD, **fields}, "test")


def tiny_torch():
    torch.manual_seed(0)
    return build_torch(build_spec("tiny", TINY, SHAPE, 3))


def initial_weights() -> dict[str, np.ndarray]:
    """torch layout: conv (out, in, kh, kw), ip (out, in)."""
    return {k: v.detach().numpy().astype(np.float64) for k, v in tiny_torch().state_dict().items()}


def caffe_reference() -> dict[str, np.ndarray]:
    """Two Caffe iterations; the first written out by hand, the second by CaffeSGD."""
    net = tiny_torch()
    opt = CaffeSGD(param_slots(net, tiny_recipe()), MOMENTUM, WD)
    names = [s.name for s in opt.slots]
    assert [(s.lr_mult, s.decay_mult) for s in opt.slots] == [(1, 1), (2, 0), (1, 1), (2, 0)]
    for it, lr in enumerate(RATES):
        before = [s.tensor.detach().clone().double() for s in opt.slots]
        opt.zero_grad()
        F.cross_entropy(net(torch.from_numpy(XS[it, 0])), torch.from_numpy(YS[it, 0])).backward()
        grads = [s.tensor.grad.detach().double() for s in opt.slots]
        opt.step(lr)
        if it == 0:  # V = rate lr_mult (g + wd decay_mult W), W -= V, from zero history
            for s, w, g in zip(opt.slots, before, grads):
                want = w - lr * s.lr_mult * (g + WD * s.decay_mult * w)
                np.testing.assert_allclose(s.tensor.detach().double().numpy(), want.numpy(), rtol=1e-6, atol=1e-8)
    return {n.replace("conv.", "layers.conv.").replace("ip.", "layers.ip.1."): s.tensor.detach().numpy().astype(np.float64)
            for n, s in zip(names, opt.slots)}


@pytest.fixture(scope="module")
def reference():
    return caffe_reference()


def assert_matches(got: dict, want: dict, what: str):
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=2e-5, atol=1e-6, err_msg=f"{what}: {key}")


# --- item 2: lr_mult / decay_mult, and Caffe's momentum convention, in every backend ------------

def test_tensorflow_takes_caffes_steps_with_the_nets_lr_mult_and_decay_mult(reference):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from hpcdl.nets.keras_build import build_keras, keras_multipliers
    from hpcdl.train.backends.tensorflow.trainer import KerasTrainer
    from hpcdl.train.ranks import RankInfo

    spec = build_spec("tiny", TINY, SHAPE, 3)
    model = build_keras(spec)
    w = initial_weights()
    model.get_layer("conv").set_weights([w["layers.conv.weight"].transpose(2, 3, 1, 0), w["layers.conv.bias"]])
    model.get_layer("ip").set_weights([w["layers.ip.1.weight"].T, w["layers.ip.1.bias"]])
    assert keras_multipliers(model, spec) == [(1, 1), (2, 0), (1, 1), (2, 0)]
    trainer = KerasTrainer(tf, keras, tf.distribute.get_strategy(), model, tiny_recipe(), RankInfo(0, 1, 0, "none"),
                           from_logits=True, multipliers=keras_multipliers(model, spec))
    for it, lr in enumerate(RATES):
        trainer.train_step(XS[it], YS[it].astype(np.int32), lr)
    conv_w, conv_b = model.get_layer("conv").get_weights()
    ip_w, ip_b = model.get_layer("ip").get_weights()
    got = {"layers.conv.weight": conv_w.transpose(3, 2, 0, 1), "layers.conv.bias": conv_b,
           "layers.ip.1.weight": ip_w.T, "layers.ip.1.bias": ip_b}
    assert_matches(got, reference, "tensorflow")


def test_every_alexnet_bias_gets_caffes_lr_mult_2_decay_mult_0_in_keras():
    """AlexNet's grouped convolutions are one Keras Conv2D per group: each takes its layer's entries."""
    from hpcdl.nets.keras_build import build_keras, keras_multipliers

    spec = load_net("alexnet", image_size=67)  # every layer, with a 1 x 1 pool5 (fc6 small)
    model = build_keras(spec)
    mults = keras_multipliers(model, spec)
    kinds = ["bias" if v.name.split("/")[-1] == "bias" else "weight" for v in model.trainable_variables]
    assert {m for m, k in zip(mults, kinds) if k == "bias"} == {(2.0, 0.0)}
    assert {m for m, k in zip(mults, kinds) if k == "weight"} == {(1.0, 1.0)}
    assert kinds.count("bias") == 8 + 3  # 8 layers, conv2/4/5 split into 2 groups each


GLUON_STEPS = """
import json, sys
import numpy as np
import mxnet as mx
from hpcdl.nets.gluon_build import build_gluon, gluon_multipliers
from hpcdl.nets.spec import build_spec
from hpcdl.train.backends.mxnet.trainer import GluonTrainer
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import recipe_from_dict
p = json.load(sys.stdin)
spec = build_spec("tiny", p["net"], tuple(p["shape"]), 3)
net = build_gluon(spec)
net.initialize()
for key, value in p["weights"].items():
    layer, blob = key.replace("layers.", "").replace("ip.1.", "ip.").split(".")
    net.blocks[layer].collect_params()[f"tiny_{layer}_{blob}"].set_data(mx.nd.array(value))
trainer = GluonTrainer(mx, net, recipe_from_dict(p["recipe"], "test"), None, RankInfo(0, 1, 0, "none"),
                       from_logits=True, multipliers=True)
mults = gluon_multipliers(net, trainer.learned)
for it, lr in enumerate(p["rates"]):
    trainer.train_step(np.array(p["xs"][it], dtype=np.float32), np.array(p["ys"][it], dtype=np.float32), lr)
out = {}
for key in p["weights"]:
    layer, blob = key.replace("layers.", "").replace("ip.1.", "ip.").split(".")
    out[key] = net.blocks[layer].collect_params()[f"tiny_{layer}_{blob}"].data().asnumpy().tolist()
print(json.dumps({"weights": out, "mults": mults}))
"""


def test_mxnet_takes_caffes_steps_with_the_nets_lr_mult_and_decay_mult(reference):
    fields = tiny_recipe().model_dump(include={"net", "batch_size", "base_lr", "max_iter", "momentum", "weight_decay"})
    got = in_mxnet(GLUON_STEPS, {"net": TINY, "shape": SHAPE, "recipe": fields, "rates": RATES, "xs": XS.tolist(),
                                 "ys": YS.tolist(), "weights": {k: v.tolist() for k, v in initial_weights().items()}})
    assert [tuple(m) for m in got["mults"]] == [(1, 1), (2, 0), (1, 1), (2, 0)]
    assert_matches({k: np.array(v) for k, v in got["weights"].items()}, reference, "mxnet")


# --- items 2 and 3: Horovod, which also must not touch the weights before training ------------

HOROVOD_STEPS = """
import json, sys
import numpy as np
import torch
import horovod.torch as hvd
from hpcdl.nets.spec import build_spec
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.backends.horovod.trainer import HorovodTrainer
from hpcdl.train.recipe import recipe_from_dict
p = json.load(sys.stdin)
hvd.init()
net = build_torch(build_spec("tiny", p["net"], tuple(p["shape"]), 3))
net.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in p["weights"].items()})
trainer = HorovodTrainer(hvd, net, recipe_from_dict(p["recipe"], "test"), False)
untouched = all(np.allclose(v.detach().numpy(), np.array(p["weights"][k]), rtol=0, atol=0) for k, v in net.state_dict().items())
for it, lr in enumerate(p["rates"]):
    trainer.train_step(np.array(p["xs"][it], dtype=np.float32), np.array(p["ys"][it], dtype=np.int64), lr)
print(json.dumps({"untouched": bool(untouched), "weights": {k: v.detach().numpy().tolist() for k, v in net.state_dict().items()}}))
hvd.shutdown()
"""


def test_horovod_takes_caffes_steps_and_leaves_the_weights_alone_until_training(reference):
    require_horovod()
    fields = tiny_recipe().model_dump(include={"net", "batch_size", "base_lr", "max_iter", "momentum", "weight_decay"})
    payload = {"net": TINY, "shape": SHAPE, "recipe": fields, "rates": RATES, "xs": XS.tolist(), "ys": YS.tolist(),
               "weights": {k: v.tolist() for k, v in initial_weights().items()}}
    import subprocess

    proc = subprocess.run([sys.executable, "-c", HOROVOD_STEPS], input=json.dumps(payload), capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["untouched"], "setting up Horovod changed the weights before the first iteration"
    assert_matches({k: np.array(v) for k, v in got["weights"].items()}, reference, "horovod")


# --- item 6: clip_gradients -------------------------------------------------------------------

def caffe_clipped_step(w, grads_per_pass, clip, lr, wd):
    """One Caffe iteration: diffs summed over iter_size passes, ClipGradients, Normalize, Regularize, update."""
    total = sum(grads_per_pass)
    norm = np.sqrt((total * total).sum())
    if norm > clip:
        total = total * (clip / norm)
    diff = total / len(grads_per_pass) + wd * w
    return w - lr * diff


def test_clip_gradients_bounds_the_sum_over_iter_size_as_caffe_does():
    from hpcdl.train.update_rule import SGDRule

    w0 = np.array([1.0, -2.0, 0.5])
    passes = [np.array([0.3, 0.4, -0.2]), np.array([0.1, 0.5, 0.2])]
    clip, lr = 0.8, 0.1  # the sum's norm (1.06) is over the bound, the mean's (0.53) is not
    want = caffe_clipped_step(w0, passes, clip, lr, WD)
    mean = sum(passes) / 2
    recipe = tiny_recipe(clip_gradients=clip, iter_size=2, momentum=0.0)
    rule = SGDRule.from_recipe(recipe, [w0.shape])
    np.testing.assert_allclose(rule.step([w0], [mean], lr)[0], want, rtol=1e-12)
    tensor = torch.nn.Parameter(torch.tensor(w0))
    from hpcdl.train.backends.pytorch.optim import ParamSlot
    from hpcdl.train.update_rule import caffe_clip_bound

    opt = CaffeSGD([ParamSlot("w", tensor)], 0.0, WD, clip_gradients=caffe_clip_bound(recipe))
    tensor.grad = torch.tensor(mean)
    opt.step(lr)
    np.testing.assert_allclose(tensor.detach().numpy(), want, rtol=1e-12)


def test_clip_gradients_zero_is_refused_because_caffe_would_zero_every_gradient():
    with pytest.raises(HpcdlError, match="clip_gradients: 0 would zero every gradient"):
        tiny_recipe(clip_gradients=0)


# --- item 1: crop and mirror in TensorFlow, MXNet and Horovod ---------------------------------

CROP_RECIPE = """name: crop
net: cifar10_quick
data: {source: synthetic, image_size: 40, crop: 32, mirror: true, synthetic_samples: 64}
batch_size: 8
base_lr: 0.001
max_iter: 2
test_interval: 2
"""
CIFAR10_QUICK_PARAMETERS = 145_578  # BVLC cifar10_quick_train_test.prototxt at 32 x 32
ALEXNET_PARAMETERS = 60_965_224     # BVLC bvlc_alexnet/train_val.prototxt at crop 227


def test_every_backend_builds_the_net_at_the_crop_size_as_caffe_does():
    from conftest import RECIPES

    from hpcdl.train.data import net_input_size
    from hpcdl.train.recipe import load_recipe

    alexnet = load_recipe(RECIPES / "alexnet.yaml")
    assert (alexnet.data.image_size, alexnet.data.crop) == (256, 227)
    assert load_net("alexnet", image_size=net_input_size(alexnet.data, 227)).parameter_count == ALEXNET_PARAMETERS


def test_tensorflow_trains_cifar10_quick_on_32_pixel_crops_of_40_pixel_images(tmp_path):
    from hpcdl.train.main import run_training

    recipe = tmp_path / "crop.yaml"
    recipe.write_text(CROP_RECIPE)
    out = tmp_path / "tf.jsonl"
    run_training(str(recipe), None, str(out), framework="tensorflow")
    start = records(out)[0]
    assert start["parameters"] == CIFAR10_QUICK_PARAMETERS


def test_mxnet_trains_cifar10_quick_on_32_pixel_crops_of_40_pixel_images(tmp_path):
    from framework_tools import mxnet_python

    recipe = tmp_path / "crop.yaml"
    recipe.write_text(CROP_RECIPE)
    out = tmp_path / "mx.jsonl"
    run([mxnet_python(), "-m", "hpcdl.train", recipe, "--framework", "mxnet", "--results", out])
    assert records(out)[0]["parameters"] == CIFAR10_QUICK_PARAMETERS


def test_horovod_trains_cifar10_quick_on_32_pixel_crops_of_40_pixel_images(tmp_path):
    require_horovod()
    recipe = tmp_path / "crop.yaml"
    recipe.write_text(CROP_RECIPE)
    out = tmp_path / "hvd.jsonl"
    run([sys.executable, "-m", "hpcdl.train", recipe, "--dist", "horovod", "--results", out])
    assert records(out)[0]["parameters"] == CIFAR10_QUICK_PARAMETERS


# --- item 4: Caffe's xavier filler is fan-in, not Glorot's ----------------------------------

# GoogLeNet's conv1/7x7_s2: fan_in 3 x 7 x 7 = 147, fan_out 64 x 7 x 7 = 3136; Glorot's
# bound sqrt(6 / (147 + 3136)) is 0.30x Caffe's sqrt(3 / 147)
XAVIER = {"input": {"channels": 3, "size": 16}, "layers": [
    {"type": "Convolution", "name": "conv", "num_output": 64, "kernel_size": 7, "weight_filler": {"type": "xavier"}},
    {"type": "Convolution", "name": "avg", "num_output": 64, "kernel_size": 7,
     "weight_filler": {"type": "xavier", "variance_norm": "AVERAGE"}},
]}
CAFFE_BOUND = np.sqrt(3.0 / 147)
GLOROT_BOUND = np.sqrt(3.0 / ((147 + 64 * 49) / 2))  # variance_norm AVERAGE on the second conv: (3, 7, 7) in


def xavier_spec():
    return build_spec("xavier", XAVIER, (3, 16, 16), 2)


def assert_uniform_with_bound(w: np.ndarray, bound: float, what: str):
    assert np.abs(w).max() <= bound * (1 + 1e-6), what
    assert np.abs(w).max() > 0.98 * bound, what
    assert abs(w.std() / (bound / np.sqrt(3)) - 1) < 0.05, f"{what}: std {w.std()} for bound {bound}"


def test_torch_and_keras_fill_xavier_weights_as_caffes_fan_in_xavier_filler():
    from hpcdl.nets.keras_build import build_keras

    spec = xavier_spec()
    avg_bound = np.sqrt(3.0 / ((64 * 49 + 64 * 49) / 2))  # second conv: 64 in, 64 out
    torch_net = build_torch(spec)
    assert_uniform_with_bound(torch_net.layers["conv"].weight.detach().numpy(), CAFFE_BOUND, "torch FAN_IN")
    assert_uniform_with_bound(torch_net.layers["avg"].weight.detach().numpy(), avg_bound, "torch AVERAGE")
    model = build_keras(spec)
    assert_uniform_with_bound(model.get_layer("conv").get_weights()[0], CAFFE_BOUND, "keras FAN_IN")
    assert_uniform_with_bound(model.get_layer("avg").get_weights()[0], avg_bound, "keras AVERAGE")


GLUON_XAVIER = """
import json, sys
import mxnet as mx
from hpcdl.nets.gluon_build import build_gluon
from hpcdl.nets.spec import build_spec
p = json.load(sys.stdin)
net = build_gluon(build_spec("xavier", p["net"], (3, 16, 16), 2))
net.initialize()
w = net.blocks["conv"].weight.data().asnumpy()
print(json.dumps({"max": float(abs(w).max()), "std": float(w.std())}))
"""


def test_gluon_fills_xavier_weights_as_caffes_fan_in_xavier_filler():
    got = in_mxnet(GLUON_XAVIER, {"net": XAVIER})
    assert got["max"] <= CAFFE_BOUND * (1 + 1e-6) and got["max"] > 0.98 * CAFFE_BOUND
    assert abs(got["std"] / (CAFFE_BOUND / np.sqrt(3)) - 1) < 0.05


# --- item 7: GoogLeNet's auxiliary heads train in TensorFlow and MXNet -----------------------

GOOGLENET_WITH_AUX_HEADS = 13_378_280  # BVLC bvlc_googlenet/train_val.prototxt, loss1 and loss2 included

AUX = {"input": {"channels": 2, "size": 4}, "layers": [
    {"type": "Convolution", "name": "conv", "num_output": 3, "kernel_size": 3, "weight_filler": {"type": "gaussian", "std": 0.5}},
    {"type": "InnerProduct", "name": "side", "bottom": "conv", "num_output": "classes", "aux": True, "loss_weight": 0.3,
     "weight_filler": {"type": "gaussian", "std": 0.5}},
    {"type": "InnerProduct", "name": "main", "bottom": "conv", "num_output": "classes", "weight_filler": {"type": "gaussian", "std": 0.5}},
]}


def ce(logits: np.ndarray, labels: np.ndarray) -> float:
    z = logits - logits.max(1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels].mean())


def test_keras_builds_googlenets_auxiliary_heads():
    from hpcdl.nets.keras_build import build_keras, trainable_parameter_count

    assert trainable_parameter_count(build_keras(load_net("googlenet", aux_heads=True))) == GOOGLENET_WITH_AUX_HEADS


def test_tensorflow_trains_with_caffes_weighted_auxiliary_loss(tmp_path):
    import keras
    import tensorflow as tf

    from hpcdl.nets.keras_build import build_keras
    from hpcdl.train.backends.tensorflow.trainer import KerasTrainer
    from hpcdl.train.framework_loop import refuse_unsupported
    from hpcdl.train.ranks import RankInfo

    refuse_unsupported(tiny_recipe(aux_heads=True), "tensorflow")  # no longer refused
    spec = build_spec("aux", AUX, (2, 4, 4), 3, aux_heads=True)
    model = build_keras(spec)
    x, y = RNG.normal(size=(4, 2, 4, 4)).astype(np.float32), YS[0, 0]
    main, side = (np.asarray(o) for o in model(x, training=False))
    want = ce(main, y) + 0.3 * ce(side, y)
    trainer = KerasTrainer(tf, keras, tf.distribute.get_strategy(), model, tiny_recipe(aux_heads=True),
                           RankInfo(0, 1, 0, "none"), from_logits=True, aux_weights=(0.3,))
    loss = trainer.train_step(x[None], y[None].astype(np.int32), 0.0)
    assert loss == pytest.approx(want, rel=1e-5)
    assert trainer.predict(x).shape == (4, 3)


GLUON_AUX = """
import json, sys
import numpy as np
import mxnet as mx
from hpcdl.nets import load_net
from hpcdl.nets.gluon_build import build_gluon, trainable_parameter_count
from hpcdl.nets.spec import build_spec
from hpcdl.train.backends.mxnet.trainer import GluonTrainer
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import recipe_from_dict
p = json.load(sys.stdin)
google = build_gluon(load_net("googlenet", aux_heads=True))
net = build_gluon(build_spec("aux", p["net"], (2, 4, 4), 3, aux_heads=True))
net.initialize()
x, y = np.array(p["x"], dtype=np.float32), np.array(p["y"], dtype=np.float32)
main, side = (o.asnumpy() for o in net(mx.nd.array(x)))
trainer = GluonTrainer(mx, net, recipe_from_dict(p["recipe"], "test"), None, RankInfo(0, 1, 0, "none"), from_logits=True)
loss = trainer.train_step(x[None], y[None], 0.0)
print(json.dumps({"google": trainable_parameter_count(google), "main": main.tolist(), "side": side.tolist(),
                  "loss": loss, "predict": list(trainer.predict(x).shape)}))
"""


def test_mxnet_trains_with_caffes_weighted_auxiliary_loss():
    fields = tiny_recipe(aux_heads=True).model_dump(include={"net", "batch_size", "base_lr", "max_iter", "aux_heads"})
    x = RNG.normal(size=(4, 2, 4, 4))
    y = YS[0, 0]
    got = in_mxnet(GLUON_AUX, {"net": AUX, "x": x.tolist(), "y": y.tolist(), "recipe": fields})
    assert got["google"] == GOOGLENET_WITH_AUX_HEADS
    want = ce(np.array(got["main"]), y) + 0.3 * ce(np.array(got["side"]), y)
    assert got["loss"] == pytest.approx(want, rel=1e-5)
    assert got["predict"] == [4, 3]


# --- item 8: multistep with a repeated step value; Gluon's last pooling window ---------------

def test_multistep_advances_one_step_value_per_iteration_as_caffe_does():
    from hpcdl.train.schedule import learning_rate

    r = tiny_recipe(base_lr=1.0, lr_policy="multistep", stepvalue=[100, 100, 100, 200], gamma=0.5, max_iter=300)
    rates = {it: learning_rate(r, it, 300) for it in (99, 100, 101, 102, 103, 199, 200)}
    # Caffe's GetLearningRate: current_step_ moves on once per iteration while iter_ >= stepvalue(current_step_)
    assert rates == {99: 1.0, 100: 0.5, 101: 0.25, 102: 0.125, 103: 0.125, 199: 0.125, 200: 0.0625}
    plain = tiny_recipe(base_lr=1.0, lr_policy="multistep", stepvalue=[5000, 7000], gamma=0.1, max_iter=9000)
    assert [learning_rate(plain, it, 9000) for it in (4999, 5000, 6999, 7000)] == pytest.approx([1.0, 0.1, 0.1, 0.01])


GLUON_POOL = """
import json, sys
import numpy as np
import mxnet as mx
from hpcdl.nets.gluon_build import build_gluon
from hpcdl.nets.spec import build_spec
p = json.load(sys.stdin)
out = {}
for pool in ("MAX", "AVE"):
    spec = build_spec("pool", {"layers": [{"type": "Pooling", "name": "pool", "pool": pool, "kernel_size": 3, "stride": 3,
                                           "pad": 1}]}, (1, 5, 5), 2)
    net = build_gluon(spec)
    net.initialize()
    out[pool] = {"spec": list(spec.layers[0].out_shape), "got": net(mx.nd.array(p["x"])).asnumpy().tolist()}
print(json.dumps(out))
"""


def test_gluon_pooling_drops_a_last_window_that_starts_in_the_padding():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    got = in_mxnet(GLUON_POOL, {"x": x.tolist()})
    for pool in ("MAX", "AVE"):
        spec = build_spec("pool", {"layers": [{"type": "Pooling", "name": "pool", "pool": pool, "kernel_size": 3,
                                               "stride": 3, "pad": 1}]}, (1, 5, 5), 2)
        want = build_torch(spec)(torch.from_numpy(x)).detach().numpy()  # Caffe's 2 x 2 (tests/test_nets.py)
        assert got[pool]["spec"] == [1, 2, 2] and want.shape == (1, 1, 2, 2)
        np.testing.assert_allclose(np.array(got[pool]["got"]), want, rtol=1e-6, err_msg=pool)


# --- item 9: a recipe named after a Caffe solver is that solver ------------------------------

def test_the_cifar10_quick_recipe_is_caffes_quick_solver_pair():
    from conftest import RECIPES

    from hpcdl.train.data import resolve_transform
    from hpcdl.train.recipe import load_recipe
    from hpcdl.train.schedule import Schedule

    r = load_recipe(RECIPES / "cifar10-quick.yaml")
    # cifar10_quick_solver.prototxt then cifar10_quick_solver_lr1.prototxt (train_quick.sh)
    assert (r.net, r.momentum, r.weight_decay, r.max_iter, r.batch_size, r.reference_batch) == (
        "cifar10_quick", 0.9, 0.004, 5000, 100, None)
    assert (r.test_interval, r.test_iter * r.test_batch_size, r.display) == (500, 10_000, 100)
    s = Schedule.from_recipe(r, r.max_iter, global_batch=100)
    assert [s.rate(it) for it in (0, 1, 3999)] == [0.001] * 3
    assert [s.rate(it) for it in (4000, 4999)] == pytest.approx([0.0001] * 2, rel=1e-12)
    assert r.data.source == "cifar10" and resolve_transform(r.data, r.net).transform == "caffe"
    digits = load_recipe(RECIPES / "digits-quick.yaml")
    assert digits.name == "digits-quick" and digits.data.source == "digits"


# --- item 5: Caffe's input transform (0-255, BGR for image files, minus the mean, times scale) --

def test_caffe_defined_nets_on_real_images_default_to_caffes_transform():
    from hpcdl.train.data import resolve_transform
    from hpcdl.train.recipe import DataSpec

    images = DataSpec(source="imagefolder", path="/x")
    google = resolve_transform(images, "googlenet")
    assert (google.transform, google.mean_value) == ("caffe", (104.0, 117.0, 123.0))  # its train_val's mean_value
    assert resolve_transform(DataSpec(source="cifar10", path="/x"), "cifar10_quick").transform == "caffe"
    assert resolve_transform(images, "resnet50").transform == "normalise"  # v1.5, not a Caffe net
    assert resolve_transform(DataSpec(source="digits"), "cifar10_quick").transform == "normalise"
    assert resolve_transform(DataSpec(source="imagefolder", path="/x", transform="normalise"), "alexnet").transform == "normalise"
    with pytest.raises(HpcdlError, match="mean_value"):
        recipe_from_dict({"net": "alexnet", "batch_size": 1, "base_lr": 0.1, "max_iter": 1,
                          "data": {"transform": "normalise", "mean_value": [1, 2, 3]}}, "test")


def test_cifar10_under_caffes_transform_is_pixels_minus_the_training_mean_image(tmp_path):
    from hpcdl.train.data import load_dataset
    from hpcdl.train.recipe import DataSpec

    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, size=(6, 3073), dtype=np.uint8)
    train[:, 0] = np.arange(6) % 10
    test = rng.integers(0, 256, size=(2, 3073), dtype=np.uint8)
    test[:, 0] = 1
    train.tofile(tmp_path / "data_batch_1.bin")
    test.tofile(tmp_path / "test_batch.bin")
    pixels = train[:, 1:].reshape(6, 3, 32, 32).astype(np.float64)
    mean = pixels.mean(axis=0)  # compute_image_mean's mean.binaryproto
    data = load_dataset(DataSpec(source="cifar10", path=str(tmp_path), scale=0.5), (3, 32, 32), 1, net="cifar10_quick")
    np.testing.assert_allclose(data.train.images, (pixels - mean) * 0.5, atol=1e-4)
    np.testing.assert_allclose(data.test.images, (test[:, 1:].reshape(2, 3, 32, 32) - mean) * 0.5, atol=1e-4)
    plain = load_dataset(DataSpec(source="cifar10", path=str(tmp_path)), (3, 32, 32), 1, net="resnet50")
    assert abs(float(plain.train.images.std()) - 1) < 0.3  # hpcdl's normalisation: about unit spread


def test_image_files_under_caffes_transform_are_bgr_pixels_minus_mean_value(tmp_path):
    from PIL import Image

    from hpcdl.train.data import load_dataset
    from hpcdl.train.recipe import DataSpec

    for cls, rgb in (("a", (200, 100, 50)), ("b", (10, 20, 30))):
        (tmp_path / cls).mkdir()
        for i in range(2):
            Image.new("RGB", (8, 8), rgb).save(tmp_path / cls / f"{i}.png")
    data = load_dataset(DataSpec(source="imagefolder", path=str(tmp_path), image_size=8, holdout_fraction=0.25),
                        (3, 8, 8), 1, net="googlenet")
    x = np.concatenate([data.train.take(np.arange(len(data.train))), data.test.take(np.arange(len(data.test)))])
    labels = np.concatenate([data.train.labels, data.test.labels])
    for label, (r, g, b) in enumerate(((200, 100, 50), (10, 20, 30))):
        want = np.array([b - 104.0, g - 117.0, r - 123.0])  # BGR, minus GoogLeNet's mean_value
        np.testing.assert_allclose(x[labels == label][:, :, 0, 0], np.tile(want, ((labels == label).sum(), 1)), atol=1e-4)


def test_the_defaults_that_differ_from_caffe_proto_are_stated_in_the_trainer_docs():
    from conftest import ROOT

    from hpcdl.train.recipe import Recipe

    text = (ROOT / "docs" / "trainer.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3:
            rows[cells[0]] = cells[1:]
    for field in ("momentum", "gamma", "power", "lr_policy", "random_seed"):
        assert field in rows, field
        assert rows[field][0] == str(Recipe.model_fields[field].default), field
    assert rows["momentum"][1] == "0" and rows["Scale `bias_term"][1] == "false"
