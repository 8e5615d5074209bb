"""The standard BVLC layer types face-recognition (PReLU) and segmentation (Crop) nets use:
imported with caffe.proto's defaults, built alike in PyTorch, Keras and Gluon, exported back to
the same prototxt, and their learned blobs (PReLU's slopes, Bias's bias) through a .caffemodel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from caffe_prototxt import NEW_LAYERS, NEW_LAYERS_PARAMS
from hpcdl.caffe.nets import export_net, import_net
from hpcdl.errors import HpcdlError
from hpcdl.nets.spec import build_spec


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _spec(data: dict):
    inp = data["input"]
    return build_spec("new_layers", data, (inp["channels"], inp["size"], inp["size"]), data["classes"])


def _random_weights(model, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def test_new_layers_import_with_caffes_defaults_and_count(tmp_path):
    data, notes = import_net(_write(tmp_path, "new.prototxt", NEW_LAYERS))
    assert notes == []
    layers = {e["name"]: e for e in data["layers"]}
    # PReLU: filler constant 0.25 unless given; channel_shared only when set; its param multipliers kept
    assert layers["prelu1"]["filler"] == {"type": "constant", "value": 0.25}
    assert "channel_shared" not in layers["prelu1"]
    assert layers["prelu1"]["param"] == [{"lr_mult": 1.0, "decay_mult": 0.0}]
    assert layers["prelu2"]["channel_shared"] is True
    # in place in the file (top: "conv1"), its own blob here, read by the next layer
    assert "bottom" not in layers["prelu1"] and "bottom" not in layers["bias1"]  # each reads the layer before
    assert layers["pow1"] == {"type": "Power", "name": "pow1", "power": 2.0, "scale": 0.5, "shift": 1.0}
    assert layers["log1"]["base"] == 10.0 and layers["exp1"]["base"] == 2.0
    assert layers["crop"]["bottom"] == ["up", "data"] and layers["crop"]["offset"] == [7]
    assert layers["flat"]["shape"] == [0, -1]
    # a Slice with two tops: one layer per top, named after it
    assert layers["g1"] == {"type": "Slice", "name": "g1", "slice": "halves", "axis": 1,  # bottom: gate, the layer before
                                 "slice_point": [3], "count": 2, "index": 0}
    assert layers["g2"]["index"] == 1 and layers["swap"]["bottom"] == ["g2", "g1"]
    spec = _spec(data)
    assert spec.parameter_count == NEW_LAYERS_PARAMS
    shapes = {l.name: l.out_shape for l in spec.layers}
    assert shapes["g1"] == (3, 12, 12) and shapes["g2"] == (5, 12, 12)
    assert shapes["up"] == (4, 26, 26) and shapes["crop"] == (4, 12, 12) and shapes["flat"] == (576,)


def test_defaults_left_out_of_the_file_are_caffe_protos(tmp_path):
    text = NEW_LAYERS.replace(" elu_param { alpha: 0.5 }", "").replace(
        "power_param { power: 2 scale: 0.5 shift: 1 }", "").replace(" threshold_param { threshold: 1.2 }", "")
    layers = {e["name"]: e for e in import_net(_write(tmp_path, "d.prototxt", text))[0]["layers"]}
    assert layers["elu1"]["alpha"] == 1.0
    assert (layers["pow1"]["power"], layers["pow1"]["scale"], layers["pow1"]["shift"]) == (1.0, 1.0, 0.0)
    assert layers["thr1"]["threshold"] == 0.0


def test_export_and_reimport_is_the_same_net_with_prelu_back_in_place(tmp_path):
    data, _ = import_net(_write(tmp_path, "new.prototxt", NEW_LAYERS))
    text = export_net(_spec(data), data["caffe"])
    again, _ = import_net(_write(tmp_path, "again.prototxt", text))
    assert again == data
    from hpcdl.caffe.proto import message
    from google.protobuf import text_format

    net = text_format.Parse(text, message("NetParameter"))
    by_name = {l.name: l for l in net.layer}
    assert list(by_name["prelu1"].bottom) == list(by_name["prelu1"].top) == ["conv1"]
    assert by_name["prelu2"].prelu_param.channel_shared
    assert list(by_name["crop"].bottom) == ["up", "data"]
    assert list(by_name["halves"].top) == ["g1", "g2"] and list(by_name["halves"].slice_param.slice_point) == [3]


def test_a_slice_top_nothing_reads_is_left_out_and_exported_as_an_unused_top(tmp_path):
    text = NEW_LAYERS.replace('bottom: "g2" bottom: "g1" top: "swap"', 'bottom: "g1" bottom: "g1" top: "swap"')
    data, notes = import_net(_write(tmp_path, "s.prototxt", text))
    assert notes == ["left out 1 layer(s) that feed no loss or output: g2"]
    exported = export_net(_spec(data), data["caffe"])
    assert 'top: "g1"\n  top: "halves_unused1"' in exported
    again, _ = import_net(_write(tmp_path, "again.prototxt", exported))
    assert again == data


def _caffe_formulas(x):
    """Each elementwise layer as caffe's *_layer.cpp Forward_cpu writes it, in NumPy."""
    return {
        "AbsVal": np.abs(x),
        "ELU": np.where(x > 0, x, 0.5 * (np.exp(x) - 1)),
        "Power": (1.0 + 0.5 * x) ** 2,
        "BNLL": np.where(x > 0, x + np.log1p(np.exp(-x)), np.log1p(np.exp(x))),
        "Exp": 2.0 ** (0.5 * x),
        "Log": np.log10(np.abs(x) + 1.0),
        "Threshold": (x > 0.2).astype(np.float32),
    }


NEURON_PARAMS = {"ELU": {"alpha": 0.5}, "Power": {"power": 2.0, "scale": 0.5, "shift": 1.0},
                 "Exp": {"base": 2.0, "scale": 0.5}, "Log": {"base": 10.0, "shift": 1.0}, "Threshold": {"threshold": 0.2},
                 "AbsVal": {}, "BNLL": {}}


def test_elementwise_layers_and_prelu_follow_caffes_formulas():
    import torch

    from hpcdl.nets.torch_build import build_torch

    x = np.random.default_rng(1).standard_normal((2, 3, 5, 5)).astype(np.float32) * 3
    want = _caffe_formulas(x)
    for t, params in NEURON_PARAMS.items():
        layers = [{"type": "AbsVal", "name": "a"}] if t == "Log" else []  # log of |x| + 1
        layers.append({"type": t, "name": "n", **params})
        spec = build_spec("one", {"layers": layers}, (3, 5, 5), 10)
        got = build_torch(spec)(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(got, want[t], rtol=1e-5, atol=1e-6, err_msg=t)
    spec = build_spec("one", {"layers": [{"type": "PReLU", "name": "p"}]}, (3, 5, 5), 10)
    model = build_torch(spec)
    assert model.layers["p"].weight.tolist() == [0.25] * 3  # prelu_layer.cpp's default filler
    with torch.no_grad():
        model.layers["p"].weight.copy_(torch.tensor([0.1, -0.5, 2.0]))
    a = np.array([0.1, -0.5, 2.0], np.float32)[None, :, None, None]
    np.testing.assert_allclose(model(torch.from_numpy(x)).detach().numpy(), np.maximum(x, 0) + a * np.minimum(x, 0),
                               rtol=1e-6)
    # Caffe's BNLL never overflows
    spec = build_spec("one", {"layers": [{"type": "BNLL", "name": "b"}]}, (1,), 10)
    assert build_torch(spec)(torch.tensor([[1000.0]])).item() == 1000.0


GLUON_FORWARD = '''
import json, sys
import numpy as np, mxnet as mx
from hpcdl.nets import load_net
from hpcdl.nets.gluon_build import build_gluon, gluon_multipliers, trainable_parameter_count
from hpcdl.caffe.weights import read_caffemodel, to_gluon
p = json.load(sys.stdin)
spec = load_net(p["net"])
net = build_gluon(spec)
net.initialize()
loaded = to_gluon(net, spec, read_caffemodel(p["caffemodel"]))
learned = [q for q in net.collect_params().values() if q.grad_req != "null"]
mults = dict(zip([q.name for q in learned], gluon_multipliers(net, learned)))
print(json.dumps({"out": net(mx.nd.array(np.load(p["x"]))).asnumpy().tolist(), "loaded": loaded,
                  "count": trainable_parameter_count(net), "mults": mults}))
'''


def test_pytorch_keras_and_gluon_compute_the_same_from_one_caffemodel(tmp_path):
    """Weights written from PyTorch to a .caffemodel, read into all three builds: one output."""
    import torch

    from framework_tools import in_mxnet
    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_keras, to_torch, write_caffemodel
    from hpcdl.nets import load_net
    from hpcdl.nets.keras_build import build_keras, keras_multipliers, trainable_parameter_count
    from hpcdl.nets.torch_build import build_torch, parameter_multipliers

    data, _ = import_net(_write(tmp_path, "new.prototxt", NEW_LAYERS))
    net_file = _write(tmp_path, "new.yaml", yaml.safe_dump(data))
    spec = load_net(str(net_file))
    original = build_torch(spec)
    _random_weights(original, seed=3)
    path = tmp_path / "new.caffemodel"
    write_caffemodel(path, "NewLayers", from_torch(original))
    blobs = read_caffemodel(path)
    assert blobs["prelu1"][0].shape == (8,) and blobs["bias1"][0].shape == (8,)
    assert blobs["prelu2"][0].shape == ()  # channel_shared: Caffe's 0-axis blob
    assert blobs["prelu2"][0] == original.layers["prelu2"].weight.item()
    x = np.random.default_rng(5).standard_normal((2, 3, 12, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    torch_net = build_torch(spec)
    assert set(to_torch(torch_net, blobs)) == {"conv1", "prelu1", "bias1", "up", "prelu2", "fc"}
    torch_net.eval()
    want = torch_net(torch.from_numpy(x)).detach().numpy()
    write_caffemodel(tmp_path / "again.caffemodel", "NewLayers", from_torch(torch_net))
    assert (tmp_path / "again.caffemodel").read_bytes() == path.read_bytes()

    keras_net = build_keras(spec)
    assert trainable_parameter_count(keras_net) == NEW_LAYERS_PARAMS
    to_keras(keras_net, spec, blobs)
    got = np.asarray(keras_net(x, training=False))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

    res = in_mxnet(GLUON_FORWARD, {"net": str(net_file), "caffemodel": str(path), "x": str(tmp_path / "x.npy")})
    assert res["count"] == NEW_LAYERS_PARAMS
    np.testing.assert_allclose(np.array(res["out"]), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

    # PReLU's slope is a learned blob: its param { lr_mult decay_mult } reach every backend's optimizer
    torch_mults = {name: (lr, decay) for name, _, lr, decay in parameter_multipliers(torch_net)}
    assert torch_mults["prelu1.weight"] == (1.0, 0.0) and torch_mults["prelu2.weight"] == (1.0, 1.0)
    keras_mults = dict(zip([v.path for v in keras_net.trainable_variables], keras_multipliers(keras_net, spec)))
    assert [m for k, m in keras_mults.items() if k.startswith("prelu1/")] == [(1.0, 0.0)]
    assert [m for k, m in res["mults"].items() if "prelu1" in k] == [[1.0, 0.0]]


def test_keras_fills_the_slope_and_bias_with_caffes_defaults():
    from hpcdl.nets.keras_build import build_keras

    spec = build_spec("one", {"layers": [{"type": "PReLU", "name": "p"}, {"type": "Bias", "name": "b"}]}, (3, 4, 4), 10)
    model = build_keras(spec)
    assert model.get_layer("p").get_weights()[0].tolist() == [0.25] * 3
    assert model.get_layer("b").get_weights()[0].tolist() == [0.0] * 3


@pytest.mark.parametrize("old,new,message", [
    ('layer { name: "bias1" type: "Bias" bottom: "conv1" top: "bias1"',
     'layer { name: "bias1" type: "Bias" bottom: "conv1" bottom: "conv1" top: "bias1"',
     r"layer 'bias1' \(Bias\): Bias with 2 bottoms .*bias_param"),
    ("bias_param { filler", "bias_param { axis: 2 filler", r"layer 'bias1' \(Bias\): bias_param axis 2"),
    ("shape { dim: 0 dim: -1 }", "shape { dim: -1 }", r"layer flat: Reshape shape \[-1\] changes the batch axis"),
    ("shape { dim: 0 dim: -1 }", "shape { dim: 0 dim: 7 dim: -1 }", r"does not divide the bottom's 576 values"),
    ('bottom: "up" bottom: "data" top: "crop"', 'bottom: "up" top: "crop"', r"layer 'crop' \(Crop\): Crop takes two"),
    ("crop_param { axis: 2 offset: 7 }", "crop_param { axis: 2 offset: 20 }", r"Crop of axis 2: size 12 at offset 20"),
    ('layer { name: "abs1" type: "AbsVal" bottom: "pow1" top: "abs1" }',
     'layer { name: "abs1" type: "MVN" bottom: "pow1" top: "abs1" }', r"layer 'abs1' has type 'MVN'"),
    ("slice_param { axis: 1 slice_point: 3 }", "slice_param { axis: 1 slice_point: 3 slice_point: 5 }",
     r"Slice has 2 slice_point\(s\) for 2 tops; Caffe needs 1"),
    ("slice_param { axis: 1 slice_point: 3 }", "slice_param { axis: 1 slice_point: 8 }",
     r"Slice slice_point \[8\] must increase within 1..7"),
    ("slice_param { axis: 1 slice_point: 3 }", "slice_param { axis: 0 slice_point: 1 }", r"never the batch"),
    ('top: "g1" top: "g2"', 'top: "g1" top: "conv1"', r"top 'conv1' is also the name of another layer or blob"),
])
def test_refusals_name_the_layer_and_field(tmp_path, old, new, message):
    assert old in NEW_LAYERS
    path = _write(tmp_path, "bad.prototxt", NEW_LAYERS.replace(old, new))
    with pytest.raises(HpcdlError, match=message):
        _spec(import_net(path)[0])


def test_v1_power_absval_and_threshold_upgrade_with_their_parameters(tmp_path):
    """V1 files (`layers { type: POWER }`) keep power_param, threshold_param and exp_param through
    Caffe's upgrade, as upgrade_proto.cpp copies every *_param."""
    text = ('input: "data"\ninput_dim: 1\ninput_dim: 2\ninput_dim: 4\ninput_dim: 4\n'
            'layers { name: "pw" type: POWER bottom: "data" top: "pw" power_param { power: 3 scale: 2 shift: -1 } }\n'
            'layers { name: "ab" type: ABSVAL bottom: "pw" top: "ab" }\n'
            'layers { name: "ex" type: EXP bottom: "ab" top: "ex" exp_param { base: 3 } }\n'
            'layers { name: "bn" type: BNLL bottom: "ex" top: "bn" }\n'
            'layers { name: "th" type: THRESHOLD bottom: "bn" top: "th" threshold_param { threshold: 0.5 } }\n')
    layers = {e["name"]: e for e in import_net(_write(tmp_path, "v1.prototxt", text))[0]["layers"]}
    assert [e["type"] for e in layers.values()] == ["Power", "AbsVal", "Exp", "BNLL", "Threshold"]
    assert (layers["pw"]["power"], layers["pw"]["scale"], layers["pw"]["shift"]) == (3.0, 2.0, -1.0)
    assert layers["ex"]["base"] == 3.0 and layers["th"]["threshold"] == 0.5


def test_gradients_reach_every_learned_blob_through_the_new_layers(tmp_path):
    """PReLU slopes and Bias's bias are learned: the loss's gradient reaches them, and conv1's
    weights, through Power, ELU, AbsVal, Log, Exp, BNLL, Slice, Crop and Reshape."""
    import torch

    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "new.prototxt", NEW_LAYERS))
    model = build_torch(_spec(data))
    _random_weights(model, seed=2)
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((2, 3, 12, 12)).astype(np.float32))
    torch.nn.functional.cross_entropy(model(x), torch.tensor([1, 4])).backward()
    for name in ("conv1", "prelu1", "bias1", "prelu2", "fc"):
        grads = [p.grad for p in model.layers[name].parameters()]
        assert grads and all(g is not None and float(g.abs().sum()) > 0 for g in grads), name


def test_a_whole_net_refusal_does_not_read_as_a_line_number(tmp_path):
    """'FILE: 2 output blobs', not 'FILE:2 output blobs' (which reads as line 2)."""
    text = ('input: "data"\ninput_shape { dim: 1 dim: 4 dim: 8 dim: 8 }\n'
            'layer { name: "sl" type: "Slice" bottom: "data" top: "a" top: "b" }\n')
    with pytest.raises(HpcdlError, match=r"two\.prototxt: 2 output blobs \(a, b\) and no loss layer"):
        import_net(_write(tmp_path, "two.prototxt", text))


# Reshape of a (C, H, W) blob, Crop on axis 2 and 1 with per-axis offsets, a Slice along the
# width: index arithmetic each backend must do in Caffe's (C, H, W) order (Keras works in NHWC).
WINDOWS = {
    "input": {"channels": 4, "size": 10},
    "layers": [
        {"type": "Reshape", "name": "r", "shape": [0, 2, -1, 0]},                                   # (2, 20, 10)
        {"type": "Pooling", "name": "p", "pool": "MAX", "kernel_size": 2, "stride": 2},              # (2, 10, 5)
        {"type": "Crop", "name": "c", "bottom": ["r", "p"], "axis": 2, "offset": [3, 4]},            # (2, 10, 5)
        {"type": "Slice", "name": "s1", "slice": "s", "axis": 3, "slice_point": [2], "count": 2, "index": 0},
        {"type": "Slice", "name": "s2", "bottom": "c", "slice": "s", "axis": 3, "slice_point": [2], "count": 2,
         "index": 1},                                                                                 # (2, 10, 3)
        {"type": "Flatten", "name": "f1"},
        {"type": "Crop", "name": "c1", "bottom": ["r", "s1"], "axis": 1, "offset": [0, 5, 2]},       # (2, 10, 2)
        {"type": "Flatten", "name": "f2"},
        {"type": "Concat", "name": "out", "bottom": ["f1", "f2"]},
    ],
}

GLUON_WINDOWS = '''
import json, sys
import numpy as np, mxnet as mx
from hpcdl.nets.spec import build_spec
from hpcdl.nets.gluon_build import build_gluon
p = json.load(sys.stdin)
net = build_gluon(build_spec("w", p["data"], (4, 10, 10), 10))
net.initialize()
print(json.dumps({"out": net(mx.nd.array(np.load(p["x"]))).asnumpy().tolist()}))
'''


def test_reshape_crop_and_slice_pick_the_same_values_in_every_backend(tmp_path):
    import torch

    from framework_tools import in_mxnet
    from hpcdl.nets.keras_build import build_keras
    from hpcdl.nets.torch_build import build_torch

    spec = build_spec("w", WINDOWS, (4, 10, 10), 10)
    x = np.arange(2 * 400, dtype=np.float32).reshape(2, 4, 10, 10)
    r = x.reshape(2, 2, 20, 10)
    want = np.concatenate([r[:, :, 3:13, 4 + 2:4 + 5].reshape(2, -1), r[:, 0:2, 5:15, 2:4].reshape(2, -1)], axis=1)
    assert spec.layers[-1].out_shape == (100,)
    np.testing.assert_array_equal(build_torch(spec)(torch.from_numpy(x)).numpy(), want)
    np.testing.assert_array_equal(np.asarray(build_keras(spec)(x)), want)
    np.save(tmp_path / "x.npy", x)
    got = in_mxnet(GLUON_WINDOWS, {"data": WINDOWS, "x": str(tmp_path / "x.npy")})["out"]
    np.testing.assert_array_equal(np.array(got, np.float32), want)
