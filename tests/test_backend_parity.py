"""One net definition, three builds: PyTorch, Keras (TensorFlow) and Gluon (MXNet) agree.

Parameter counts must equal the spec's (and so each other's) for every shipped net and for
small specs that use every layer type; every blob must have the shape the spec infers,
which is where Caffe's rounded-up pooling differs from the frameworks' defaults.
"""

from __future__ import annotations

import numpy as np
import pytest

from framework_tools import in_mxnet
from hpcdl.nets import list_nets, load_net
from hpcdl.nets.spec import LAYER_TYPES, build_spec

EVERY_LAYER = {
    "input": {"channels": 3, "size": 19},
    "layers": [
        {"type": "Convolution", "name": "conv1", "num_output": 8, "kernel_size": 3, "stride": 2, "pad": 1},
        {"type": "BatchNorm", "name": "bn1"},
        {"type": "Scale", "name": "scale1"},
        {"type": "ReLU", "name": "relu1"},
        {"type": "Pooling", "name": "pool1", "pool": "MAX", "kernel_size": 3, "stride": 2},  # 10 -> 5 (floor: 4)
        {"type": "LRN", "name": "norm1", "local_size": 5, "alpha": 1e-4, "beta": 0.75},
        {"type": "Convolution", "name": "conv2a", "bottom": "norm1", "num_output": 8, "kernel_size": 1, "group": 2},
        {"type": "Convolution", "name": "conv2b", "bottom": "norm1", "num_output": 4, "kernel_size": 3, "pad": 1,
         "weight_filler": {"type": "xavier"}},
        {"type": "Concat", "name": "cat", "bottom": ["conv2a", "conv2b"]},
        {"type": "BatchNorm", "name": "bn2", "affine": True},
        {"type": "Convolution", "name": "conv3", "num_output": 12, "kernel_size": 3, "pad": 1, "bias_term": False,
         "weight_filler": {"type": "gaussian", "std": 0.01}},
        {"type": "Scale", "name": "scale3", "bias_term": False},
        {"type": "Eltwise", "name": "sum", "bottom": ["bn2", "scale3"], "operation": "SUM"},
        {"type": "Eltwise", "name": "prod", "bottom": ["sum", "cat"], "operation": "PROD"},
        {"type": "Pooling", "name": "pool2", "pool": "AVE", "kernel_size": 3, "stride": 2, "pad": 1},
        {"type": "Pooling", "name": "pool3", "pool": "MAX", "global_pooling": True},
        {"type": "Flatten", "name": "flat"},
        {"type": "InnerProduct", "name": "ip1", "num_output": 16, "bias_filler": {"value": 0.1}},
        {"type": "Dropout", "name": "drop1", "dropout_ratio": 0.3},
        {"type": "InnerProduct", "name": "ip2", "num_output": "classes"},
        {"type": "Softmax", "name": "prob"},
    ],
}

# Caffe's AlexNet-style stem on an odd size: grouped conv, LRN, overlapping ceil-mode pools,
# and an InnerProduct straight from a 4-D blob.
TOWERS = {
    "input": {"channels": 3, "size": 27},
    "layers": [
        {"type": "Convolution", "name": "conv1", "num_output": 12, "kernel_size": 5, "stride": 2},
        {"type": "ReLU", "name": "relu1"},
        {"type": "LRN", "name": "norm1", "local_size": 3, "alpha": 1e-3, "beta": 0.75, "k": 2.0},
        {"type": "Pooling", "name": "pool1", "pool": "MAX", "kernel_size": 3, "stride": 2},
        {"type": "Convolution", "name": "conv2", "num_output": 16, "kernel_size": 3, "pad": 1, "group": 4},
        {"type": "Pooling", "name": "pool2", "pool": "AVE", "kernel_size": 2, "stride": 2},
        {"type": "InnerProduct", "name": "fc", "num_output": "classes"},
    ],
}

# The layer types and options imported Caffe nets add (hpcdl.caffe): Deconvolution, Sigmoid,
# TanH, leaky ReLU, Eltwise MAX and SUM with coefficients, FLOOR pooling, WITHIN_CHANNEL LRN.
CAFFE_EXTRAS = {
    "input": {"channels": 3, "size": 9},
    "layers": [
        {"type": "Convolution", "name": "conv1", "num_output": 6, "kernel_size": [3, 5], "pad": [1, 2]},
        {"type": "ReLU", "name": "leaky", "negative_slope": 0.1},
        {"type": "Sigmoid", "name": "sig"},
        {"type": "TanH", "name": "tanh", "bottom": "leaky"},
        {"type": "Eltwise", "name": "wsum", "bottom": ["sig", "tanh"], "operation": "SUM", "coeff": [0.5, -2.0]},
        {"type": "Eltwise", "name": "max", "bottom": ["wsum", "sig"], "operation": "MAX"},
        {"type": "LRN", "name": "wnorm", "local_size": 3, "alpha": 0.5, "beta": 0.75, "norm_region": "WITHIN_CHANNEL"},
        {"type": "Deconvolution", "name": "up", "num_output": 4, "kernel_size": 4, "stride": 2, "pad": 1,
         "weight_filler": {"type": "gaussian", "std": 0.1}},                                   # 9 -> 18
        {"type": "Pooling", "name": "fpool", "pool": "AVE", "kernel_size": 3, "stride": 2, "pad": 1,
         "round_mode": "FLOOR"},                                                                # 18 -> 9
        {"type": "InnerProduct", "name": "fc", "num_output": "classes"},
    ],
}

# Face-recognition and FCN layer types: PReLU (per channel and shared), Bias, the elementwise
# layers, a two-top Slice, Deconvolution + Crop back to the input size, Reshape to features.
FACE_FCN = {
    "input": {"channels": 3, "size": 10},
    "layers": [
        {"type": "Convolution", "name": "conv1", "num_output": 6, "kernel_size": 3, "pad": 1},
        {"type": "PReLU", "name": "prelu1"},
        {"type": "Bias", "name": "bias1"},
        {"type": "ELU", "name": "elu1", "alpha": 0.5},
        {"type": "AbsVal", "name": "abs1"},
        {"type": "Power", "name": "pow1", "power": 0.5, "shift": 1.0},
        {"type": "Log", "name": "log1"},
        {"type": "Exp", "name": "exp1", "base": 2.0},
        {"type": "BNLL", "name": "bnll1"},
        {"type": "Threshold", "name": "thr1", "threshold": 1.0},
        {"type": "Slice", "name": "s1", "slice": "s", "axis": 1, "slice_point": [2], "count": 2, "index": 0},
        {"type": "Slice", "name": "s2", "bottom": "thr1", "slice": "s", "axis": 1, "slice_point": [2], "count": 2,
         "index": 1},
        {"type": "Concat", "name": "swap", "bottom": ["s2", "s1"]},
        {"type": "Deconvolution", "name": "up", "num_output": 4, "kernel_size": 4, "stride": 2},   # 10 -> 22
        {"type": "Crop", "name": "crop", "bottom": ["up", "data"], "axis": 2, "offset": [5]},    # -> 10
        {"type": "PReLU", "name": "prelu2", "channel_shared": True},
        {"type": "Reshape", "name": "feat", "shape": [0, -1]},
        {"type": "InnerProduct", "name": "fc", "num_output": "classes"},
    ],
}

SYNTHETIC = {"every_layer": EVERY_LAYER, "towers": TOWERS, "caffe_extras": CAFFE_EXTRAS, "face_fcn": FACE_FCN}

GLUON_PROBE = """
import json, sys
import mxnet as mx
from hpcdl.nets import load_net
from hpcdl.nets.spec import build_spec
from hpcdl.nets.gluon_build import build_gluon, trainable_parameter_count
payload = json.load(sys.stdin)
out = {}
for key, item in payload.items():
    spec = load_net(item["net"]) if "net" in item else build_spec(key, item["data"], tuple(item["shape"]), item["classes"])
    net = build_gluon(spec)
    net.initialize()
    blobs = net.route(mx.nd, mx.nd.zeros((2, *spec.input_shape))) if item["shapes"] else {}
    out[key] = {"parameters": trainable_parameter_count(net),
                "shapes": {k: list(v.shape[1:]) for k, v in blobs.items() if k != "data"}}
print(json.dumps(out))
"""


def synthetic_spec(name: str, classes: int = 7):
    data = SYNTHETIC[name]
    size = data["input"]["size"]
    return build_spec(name, data, (data["input"]["channels"], size, size), classes)


def torch_parameters(spec) -> int:
    from hpcdl.nets.torch_build import build_torch

    return sum(p.numel() for p in build_torch(spec).parameters())


def keras_model(spec):
    from hpcdl.nets.keras_build import build_keras

    return build_keras(spec)


def keras_shapes(model, spec) -> dict[str, tuple[int, ...]]:
    from hpcdl.nets.keras_build import nchw_shape

    return {layer.top: nchw_shape(model.get_layer(layer.name).output.shape[1:]) for layer in spec.layers}


@pytest.fixture(scope="module")
def gluon_results():
    payload = {f"net:{n}": {"net": n, "shapes": n == "cifar10_quick"} for n in list_nets()}
    for name, data in SYNTHETIC.items():
        size = data["input"]["size"]
        payload[name] = {"data": data, "shape": [data["input"]["channels"], size, size], "classes": 7, "shapes": True}
    return in_mxnet(GLUON_PROBE, payload)


def test_the_synthetic_specs_use_every_layer_type():
    used = {layer.type for name in SYNTHETIC for layer in synthetic_spec(name).layers}
    assert used == set(LAYER_TYPES)


@pytest.mark.parametrize("net", list_nets())
def test_every_shipped_net_has_the_same_parameter_count_in_all_three_backends(net, gluon_results):
    from hpcdl.nets.keras_build import trainable_parameter_count

    spec = load_net(net)
    assert torch_parameters(spec) == spec.parameter_count
    assert trainable_parameter_count(keras_model(spec)) == spec.parameter_count
    assert gluon_results[f"net:{net}"]["parameters"] == spec.parameter_count


def test_cifar10_quick_has_caffes_published_145578_parameters_in_every_backend(gluon_results):
    from hpcdl.nets.keras_build import trainable_parameter_count

    spec = load_net("cifar10_quick")
    assert spec.parameter_count == 145_578
    assert trainable_parameter_count(keras_model(spec)) == 145_578
    assert gluon_results["net:cifar10_quick"]["parameters"] == 145_578


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_specs_count_the_same_parameters_in_all_three_backends(name, gluon_results):
    from hpcdl.nets.keras_build import trainable_parameter_count

    spec = synthetic_spec(name)
    assert spec.parameter_count > 0
    assert torch_parameters(spec) == spec.parameter_count
    assert trainable_parameter_count(keras_model(spec)) == spec.parameter_count
    assert gluon_results[name]["parameters"] == spec.parameter_count


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_every_blob_has_the_shape_the_spec_infers_in_keras_and_gluon(name, gluon_results):
    spec = synthetic_spec(name)
    expected = {layer.top: tuple(layer.out_shape) for layer in spec.layers}
    assert keras_shapes(keras_model(spec), spec) == expected
    assert {k: tuple(v) for k, v in gluon_results[name]["shapes"].items()} == expected


def test_cifar10_quick_pools_round_up_as_caffe_does_in_every_backend(gluon_results):
    spec = load_net("cifar10_quick")
    pools = [layer for layer in spec.layers if layer.type == "Pooling"]
    # 32 -> 16 -> 8 -> 4 with kernel 3, stride 2: Caffe's ceil; floor would give 15, 7, 3
    assert [layer.out_shape[1] for layer in pools] == [16, 8, 4]
    shapes = keras_shapes(keras_model(spec), spec)
    assert [shapes[layer.top] for layer in pools] == [layer.out_shape for layer in pools]
    assert [tuple(gluon_results["net:cifar10_quick"]["shapes"][layer.top]) for layer in pools] == [
        layer.out_shape for layer in pools
    ]


@pytest.mark.parametrize("pool,pad", [("MAX", 0), ("AVE", 0), ("AVE", 1), ("MAX", 1)])
def test_keras_caffe_pooling_computes_what_pytorch_ceil_mode_pooling_computes(pool, pad):
    """Same windows and, for AVE, Caffe's divisor (padding counted, round-up cells not)."""
    import torch

    from hpcdl.nets.keras_build import CaffePooling
    from hpcdl.nets.spec import _out_shape

    x = np.random.default_rng(0).standard_normal((2, 3, 10, 10)).astype(np.float32) - 0.5
    out = _out_shape("Pooling", {"kernel_size": 3, "stride": 2, "pad": pad}, [(3, 10, 10)], "test")
    keras_out = CaffePooling(pool, (3, 3), (2, 2), (pad, pad), (10, 10), out[1:])(np.transpose(x, (0, 2, 3, 1)))
    if pool == "MAX":
        ref = torch.nn.MaxPool2d(3, 2, pad, ceil_mode=True)(torch.from_numpy(x))
    else:
        ref = torch.nn.AvgPool2d(3, 2, pad, ceil_mode=True, count_include_pad=True)(torch.from_numpy(x))
    np.testing.assert_allclose(np.transpose(np.asarray(keras_out), (0, 3, 1, 2)), ref.numpy(), rtol=1e-5, atol=1e-6)
