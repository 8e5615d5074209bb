"""Caffe import and export: prototxt nets and solvers, .caffemodel weights (hpcdl.caffe)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from caffe_prototxt import (CIFAR10_QUICK, CIFAR10_QUICK_SOLVER, CIFAR10_QUICK_SOLVER_LR1, DEPLOY, EVERY_LAYER,
                            EVERY_LAYER_AUX, EVERY_LAYER_MAIN, V1_POOLED, V1_POOLED_PARAMS, V1_SMALL, V1_SMALL_NEW,
                            V1_SMALL_PARAMS)
from conftest import hpcdl
from hpcdl.caffe.nets import export_net, import_net
from hpcdl.caffe.solver import import_recipe
from hpcdl.errors import HpcdlError
from hpcdl.nets import list_nets, load_net
from hpcdl.nets.spec import build_spec

BUNDLED = [n for n in list_nets() if n != "mesh"] + ["mesh"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _spec(data: dict, aux: bool = True, name: str = "imported"):
    inp = data["input"]
    shape = (inp["channels"], inp.get("height", inp.get("size")), inp.get("width", inp.get("size")))
    return build_spec(name, data, shape, data["classes"], aux_heads=aux)


def _shapes(spec) -> dict:
    return {layer.name: layer.out_shape for layer in spec.layers}


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_nets_export_and_import_to_the_same_net(tmp_path, name):
    """Each bundled net, exported as a train_val prototxt, imports to the same layers, shapes and counts."""
    spec = load_net(name, aux_heads=True)
    proto = _write(tmp_path, f"{name}.prototxt", export_net(spec))
    data, _ = import_net(proto)
    back = _spec(data)
    assert back.parameter_count == spec.parameter_count
    assert _shapes(back) == _shapes(spec)
    assert [(l.name, l.type, l.bottom, l.parameter_count) for l in back.layers] == \
        [(l.name, l.type, l.bottom, l.parameter_count) for l in spec.layers]
    assert dict(back.aux_outputs) == dict(spec.aux_outputs)
    assert back.layers[-1].out_shape == spec.layers[-1].out_shape


def test_bundled_parameter_counts_through_prototxt(tmp_path):
    expected = {"cifar10_quick": 145_578, "alexnet": 60_965_224, "caffenet": 60_965_224,
                "googlenet": 13_378_280, "resnet50": 25_557_032}
    for name, count in expected.items():
        data, _ = import_net(_write(tmp_path, f"{name}.prototxt", export_net(load_net(name, aux_heads=True))))
        assert _spec(data).parameter_count == count, name
    main, _ = import_net(_write(tmp_path, "g.prototxt", export_net(load_net("googlenet", aux_heads=True), deploy=True)))
    assert _spec(main).parameter_count == 6_998_552


def test_cifar10_quick_train_test_as_caffe_writes_it(tmp_path):
    data, notes = import_net(_write(tmp_path, "cifar10_quick_train_test.prototxt", CIFAR10_QUICK), input_size=32)
    spec = _spec(data)
    assert spec.parameter_count == 145_578
    assert spec.output == "ip2" and spec.layers[-1].out_shape == (10,)
    assert _shapes(spec)["pool1"] == (32, 16, 16) and _shapes(spec)["pool3"] == (64, 4, 4)
    by_name = {l["name"]: l for l in data["layers"]}
    # in-place ReLUs get their own tops; later layers read them
    assert by_name["conv2"].get("bottom", "relu1") == "relu1"
    assert by_name["conv1"]["param"] == [{"lr_mult": 1.0, "decay_mult": 1.0}, {"lr_mult": 2.0, "decay_mult": 1.0}]
    assert by_name["conv1"]["weight_filler"] == {"type": "gaussian", "std": 0.0001}
    assert by_name["conv1"]["bias_filler"] == {"type": "constant", "value": 0.0}
    assert data["caffe"]["data"]["train"]["batch_size"] == 100
    assert data["caffe"]["metrics"] == [{"name": "accuracy", "bottom": "ip2", "top_k": 1}]
    with pytest.raises(HpcdlError, match="--input-size"):
        import_net(_write(tmp_path, "no_size.prototxt", CIFAR10_QUICK))


def test_every_supported_layer_type(tmp_path):
    data, _ = import_net(_write(tmp_path, "every.prototxt", EVERY_LAYER))
    spec = _spec(data)
    main = _spec(data, aux=False)
    assert main.parameter_count == EVERY_LAYER_MAIN
    assert spec.parameter_count == EVERY_LAYER_MAIN + EVERY_LAYER_AUX
    assert spec.aux_outputs == (("ip_aux", 0.3),)
    shapes = _shapes(spec)
    assert shapes["conv1"] == (16, 32, 32)        # kernel 3x5, pad 1x2
    assert shapes["pool1"] == (16, 16, 16)        # ceil rounding
    assert shapes["cat2"] == (48, 16, 16)
    assert shapes["deconv"] == (8, 32, 32)        # stride (in - 1) + kernel - 2 pad
    assert shapes["pool2"] == (8, 16, 16)         # round_mode FLOOR
    assert shapes["flat"] == (512,) and shapes["ip2"] == (10,) and shapes["pool_aux"] == (48, 1, 1)
    types = {l.type for l in spec.layers}
    assert types == {"Convolution", "BatchNorm", "Scale", "ReLU", "Pooling", "LRN", "Sigmoid", "TanH", "Concat",
                     "Eltwise", "Deconvolution", "Dropout", "Flatten", "InnerProduct"}
    by_name = {l["name"]: l for l in data["layers"]}
    assert by_name["bn1"]["moving_average_fraction"] == 0.999        # caffe.proto's default, written out
    assert by_name["scale1"]["bias_term"] is True
    assert by_name["norm1"]["alpha"] == 0.0001 and by_name["norm2"]["norm_region"] == "WITHIN_CHANNEL"
    assert by_name["relu1"]["negative_slope"] == 0.1
    assert by_name["sum"]["coeff"] == [0.5, 2.0] and by_name["max"]["operation"] == "MAX"
    assert by_name["conv2a"]["weight_filler"] == {"type": "msra", "variance_norm": "FAN_OUT"}
    assert by_name["conv1"]["weight_filler"] == {"type": "xavier", "variance_norm": "FAN_IN"}   # Caffe's default, explicit
    assert by_name["conv2b"]["bottom"] == "norm1" and "bottom" not in by_name["conv2a"]   # Split: both read norm1
    assert by_name["ip2"]["weight_filler"] == {"type": "gaussian", "std": 0.01}
    assert "split1" not in by_name and by_name["ip_aux"]["aux"] is True and by_name["pool_aux"]["aux"] is True
    assert data["caffe"]["data"]["train"] == {"type": "Data", "source": "train_lmdb", "batch_size": 8, "crop_size": 32,
                                              "mirror": True, "mean_value": [104.0, 117.0, 123.0], "scale": 0.0078125}
    assert data["caffe"]["metrics"][1] == {"name": "accuracy_top5", "bottom": "ip2", "top_k": 5}


def test_every_layer_builds_and_runs_in_pytorch(tmp_path):
    import torch

    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "every.prototxt", EVERY_LAYER))
    spec = _spec(data)
    model = build_torch(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.parameter_count
    model.train()
    main, aux = model(torch.randn(2, 3, 32, 32))
    assert main.shape == (2, 10) and aux[0].shape == (2, 10)
    model.eval()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_round_trip_import_export_import_is_identity(tmp_path):
    for name, text, size in (("cifar", CIFAR10_QUICK, 32), ("every", EVERY_LAYER, None), ("deploy", DEPLOY, None)):
        first, _ = import_net(_write(tmp_path, f"{name}.prototxt", text), input_size=size)
        net_file = tmp_path / f"{name}.yaml"
        net_file.write_text(yaml.safe_dump(first))
        again = export_net(load_net(str(net_file), aux_heads=True), first["caffe"])
        second, _ = import_net(_write(tmp_path, f"{name}_again.prototxt", again), input_size=size)
        assert second == first, name


def test_cli_import_export_round_trip(tmp_path):
    proto = _write(tmp_path, "every.prototxt", EVERY_LAYER)
    out = tmp_path / "every.yaml"
    proc = hpcdl("nets", "import", proto, "-o", out, check=True)
    assert f"{EVERY_LAYER_MAIN + EVERY_LAYER_AUX:,} parameters" in proc.stdout
    exported = tmp_path / "every_out.prototxt"
    hpcdl("nets", "export", out, "-o", exported, check=True)
    out2 = tmp_path / "every2.yaml"
    hpcdl("nets", "import", exported, "-o", out2, check=True)
    strip = lambda t: [l for l in t.splitlines() if not l.startswith("#")]  # noqa: E731
    assert strip(out2.read_text()) == strip(out.read_text())
    listed = json.loads(hpcdl("nets", "--json", check=True).stdout)
    assert {r["name"] for r in listed} >= {"cifar10_quick", "googlenet"}


def test_deploy_net_keeps_softmax_output(tmp_path):
    data, _ = import_net(_write(tmp_path, "deploy.prototxt", DEPLOY))
    spec = _spec(data)
    assert spec.output == "prob" and spec.input_shape == (3, 24, 24)
    assert _shapes(spec)["conv1"] == (8, 11, 11) and spec.parameter_count == 8 * 27 + 8 + 8 * 5 + 5
    by_name = {l["name"]: l for l in data["layers"]}
    # no filler in a deploy file: caffe.proto's default, constant 0
    assert by_name["conv1"]["weight_filler"] == {"type": "constant", "value": 0.0}


@pytest.mark.parametrize("text, message", [
    ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }\n'
     'layer { name: "p" type: "MVN" bottom: "data" top: "p" }\n', r"every\.prototxt:2: layer 'p' has type 'MVN'"),
    ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
     'layers { layer { name: "c" type: "conv" num_output: 3 kernelsize: 3 } bottom: "data" top: "c" }\n',
     r"every\.prototxt:6: layer 'c' is in the V0 format"),
    ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
     'layers { name: "c" type: CONVOLUTION bottom: "data" top: "c" convolution_param { num_output: 3 kernel_size: 3 } }\n'
     'layers { name: "pw" type: MVN bottom: "c" top: "pw" mvn_param { across_channels: true } }\n',
     r"every\.prototxt:7: layer 'pw' has type 'MVN'"),
    ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
     'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }\nlayers { name: "s" type: SIGMOID bottom: "r" top: "s" }\n',
     "both `layer` and V1 `layers`"),
    ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
     'layers { name: "c" type: CONVOLUTION bottom: "data" top: "c" convolution_param { num_output: 3 kernel_size: 3 } }\n'
     'layers {\n  bottom: "c"\n  type: PRELU\n  name: "pr"\n}\n',
     r"every\.prototxt:7: layer 'pr' has type PRELU, which is not a layer type of Caffe's V1 format"),
    ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
     'layers { name: "c" type: CONVOLUTION bottom: "data" top: "c" param: "w" convolution_param { num_output: 3 kernel_size: 3 } }\n',
     "weight sharing"),
    ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
     'layer { name: "c" type: "Convolution" bottom: "data" top: "c"\n convolution_param { num_ouput: 3 } }\n',
     r"every\.prototxt:7:.*num_ouput"),
    ('input: "data"\ninput_shape { dim: 1 dim: 3 dim: 8 dim: 8 }\n'
     'layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 3 kernel_size: 3 dilation: 2 } }\n',
     r"every\.prototxt:3: layer 'c' \(Convolution\): dilation"),
    ('input: "data"\ninput_shape { dim: 1 dim: 3 dim: 8 dim: 8 }\n'
     'layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param { pool: STOCHASTIC kernel_size: 2 } }\n',
     "STOCHASTIC"),
    ('input: "data"\ninput_shape { dim: 1 dim: 3 dim: 8 dim: 8 }\n'
     'layer { name: "c" type: "Convolution" bottom: "data" top: "c" param { name: "shared" } '
     'convolution_param { num_output: 3 kernel_size: 3 } }\n', "weight sharing"),
])
def test_refusals_name_the_layer_and_line(tmp_path, text, message):
    with pytest.raises(HpcdlError, match=message):
        import_net(_write(tmp_path, "every.prototxt", text))


def test_v1_net_is_upgraded_as_caffe_does(tmp_path):
    """A V1 file (type enums, blobs_lr/weight_decay, data_param crop/mirror/mean) imports as its upgraded self."""
    data, notes = import_net(_write(tmp_path, "v1.prototxt", V1_SMALL))
    new, _ = import_net(_write(tmp_path, "new.prototxt", V1_SMALL_NEW))
    assert data == new and notes == []
    by_name = {l["name"]: l for l in data["layers"]}
    assert [l["type"] for l in data["layers"]] == ["Convolution", "ReLU", "Pooling", "LRN", "InnerProduct", "ReLU",
                                                   "Dropout", "InnerProduct"]
    assert by_name["conv1"]["param"] == [{"lr_mult": 1.0, "decay_mult": 1.0}, {"lr_mult": 2.0, "decay_mult": 0.0}]
    # weight_decay left out: ParamSpec's decay_mult default, 1
    assert by_name["fc1"]["param"] == [{"lr_mult": 1.0, "decay_mult": 1.0}, {"lr_mult": 2.0, "decay_mult": 1.0}]
    assert by_name["drop1"]["dropout_ratio"] == 0.4 and by_name["conv1"]["bias_filler"] == {"type": "constant", "value": 0.1}
    assert data["caffe"]["data"]["train"] == {"type": "Data", "source": "train_lmdb", "batch_size": 16, "crop_size": 24,
                                              "mirror": True, "mean_file": "mean.binaryproto"}
    assert data["caffe"]["data"]["test"]["batch_size"] == 8
    assert data["caffe"]["metrics"] == [{"name": "accuracy", "bottom": "fc2", "top_k": 1}]
    assert data["input"] == {"channels": 3, "size": 24} and data["classes"] == 10


def _through_v1_caffemodel(tmp_path, spec, original, x, name: str = "", typed: bool = False, reverse: bool = False):
    """`original`'s weights written as a V1 .caffemodel (the `layers` field, 4-D legacy blobs
    (1, 1, out, in) and (1, 1, 1, out); layer type enums if `typed`, last layer first if `reverse`)
    and loaded into a fresh net of `spec`: (original(x), copy(x))."""
    from hpcdl.caffe.proto import message
    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_torch
    from hpcdl.nets.torch_build import build_torch

    enum = message("V1LayerParameter").DESCRIPTOR.fields_by_name["type"].enum_type.values_by_name
    v1_type = {"Convolution": "CONVOLUTION", "InnerProduct": "INNER_PRODUCT"}
    net = message("NetParameter")
    net.name = name
    layers = from_torch(original)
    for lname, ltype, arrs in (reversed(layers) if reverse else layers):
        layer = net.layers.add(name=lname, type=enum[v1_type[ltype]].number) if typed else net.layers.add(name=lname)
        for a in arrs:
            blob = layer.blobs.add()
            blob.num, blob.channels, blob.height, blob.width = (1,) * (4 - a.ndim) + a.shape
            blob.data.extend(a.ravel().tolist())
    path = tmp_path / "v1.caffemodel"
    path.write_bytes(net.SerializeToString())
    copy = build_torch(spec)
    to_torch(copy, read_caffemodel(path))
    original.eval(), copy.eval()
    return original(x), copy(x)


def test_v1_net_builds_runs_and_loads_v1_weights_by_name(tmp_path):
    """A V1 net and a V1 .caffemodel of it (layers with type enums, 4-D legacy blobs) give the same forward."""
    import torch

    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "v1.prototxt", V1_SMALL))
    spec = _spec(data)
    assert spec.parameter_count == V1_SMALL_PARAMS
    original = build_torch(spec)
    assert sum(p.numel() for p in original.parameters()) == V1_SMALL_PARAMS
    _random_weights(original, seed=5)
    # file order does not matter: layers are matched by name
    want, out = _through_v1_caffemodel(tmp_path, spec, original, torch.randn(2, 3, 24, 24), "SmallV1",
                                        typed=True, reverse=True)
    assert out.shape == (2, 10) and torch.equal(want, out)


def test_pooled_class_maps_are_the_logits(tmp_path):
    """NIN/SqueezeNet-style: the classifier is the 1x1 convolution before the last pooling; the
    (C, 1, 1) output is given as (N, C), so the loss reads it as Caffe's SoftmaxWithLoss does."""
    import torch
    import torch.nn.functional as F

    from hpcdl.caffe.weights import from_torch, to_keras
    from hpcdl.nets.keras_build import build_keras
    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "pooled.prototxt", V1_POOLED))
    assert data["classes"] == 6 and {l["name"]: l for l in data["layers"]}["cccp2"]["num_output"] == "classes"
    spec = _spec(data, aux=False)
    assert spec.parameter_count == V1_POOLED_PARAMS and spec.layers[-1].out_shape == (6, 1, 1)
    net = build_torch(spec)
    _random_weights(net, seed=4)
    net.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    out = net(torch.from_numpy(x))
    assert out.shape == (2, 6)
    F.cross_entropy(out, torch.tensor([0, 5]))  # the trainers' loss takes it
    keras_net = build_keras(spec)
    to_keras(keras_net, spec, {name: arrs for name, _, arrs in from_torch(net)})
    got = np.asarray(keras_net(x, training=False))
    want = out.detach().numpy()
    assert got.shape == (2, 6) and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    assert _spec(data | {"classes": 3}, aux=False).layers[-1].out_shape == (3, 1, 1)  # a recipe's num_classes


def test_cli_imports_a_v1_net_and_a_solver_naming_one(tmp_path):
    _write(tmp_path, "v1.prototxt", V1_SMALL)
    hpcdl("nets", "import", "v1.prototxt", "-o", "v1.yaml", check=True, cwd=tmp_path)
    assert load_net(str(tmp_path / "v1.yaml")).parameter_count == V1_SMALL_PARAMS
    _write(tmp_path, "solver.prototxt", 'net: "v1.prototxt"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 10\n'
           'momentum: 0.9\n')
    hpcdl("recipes", "import", "solver.prototxt", "-o", "r.yaml", check=True, cwd=tmp_path)
    recipe = yaml.safe_load((tmp_path / "r.yaml").read_text())
    assert recipe["batch_size"] == 16 and recipe["test_batch_size"] == 8 and recipe["data"]["crop"] == 24
    assert load_net(str(tmp_path / recipe["net"])).parameter_count == V1_SMALL_PARAMS


def test_cli_refusal_is_one_line_and_writes_nothing(tmp_path):
    proto = _write(tmp_path, "bad.prototxt", 'input: "data"\ninput_shape { dim: 1 dim: 3 dim: 8 dim: 8 }\n'
                   'layer { name: "mvn" type: "MVN" bottom: "data" top: "a" }\n')
    out = tmp_path / "bad.yaml"
    proc = hpcdl("nets", "import", proto, "-o", out)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr
    assert "layer 'mvn' has type 'MVN'" in lines[0] and "bad.prototxt:3" in lines[0]
    assert not out.exists()


# ---------------------------------------------------------------- solvers

def test_cifar10_quick_solver_chain_is_one_schedule(tmp_path):
    from hpcdl.train.recipe import recipe_from_dict
    from hpcdl.train.schedule import Schedule

    s1 = _write(tmp_path, "cifar10_quick_solver.prototxt", CIFAR10_QUICK_SOLVER)
    s2 = _write(tmp_path, "cifar10_quick_solver_lr1.prototxt", CIFAR10_QUICK_SOLVER_LR1)
    fields, notes, net_file = import_recipe([s1, s2], net="cifar10_quick")
    assert fields["lr_policy"] == "multistep" and fields["stepvalue"] == [4000] and fields["max_iter"] == 5000
    assert fields["base_lr"] == 0.001 and fields["gamma"] == 0.1
    assert fields["momentum"] == 0.9 and fields["weight_decay"] == 0.004
    assert fields["test_iter"] == 100 and fields["test_interval"] == 500 and fields["display"] == 100
    assert net_file.endswith("cifar10_quick_train_test.prototxt")
    assert any("solver_mode" in n for n in notes) and any("snapshot_format" in n for n in notes)
    recipe = recipe_from_dict({**fields, "batch_size": 100}, "test")
    sched = Schedule.from_recipe(recipe, recipe.max_iter, 100, 500)
    caffe = lambda it: 0.001 if it < 4000 else 0.0001  # noqa: E731  (solver, then solver_lr1 resumed at 4000)
    for it in (0, 1, 3999, 4000, 4001, 4999):
        assert sched.rate(it) == pytest.approx(caffe(it), rel=1e-6)


def test_cli_recipe_import_takes_the_net_and_batch(tmp_path):
    """docs/caffe.md's chain, on Caffe's files as they ship: the net reads LMDB with no crop_size
    and no Input shape, so the input size is given with --input-size."""
    ex = tmp_path / "examples" / "cifar10"
    ex.mkdir(parents=True)
    _write(ex, "cifar10_quick_train_test.prototxt", CIFAR10_QUICK)
    s1 = _write(ex, "cifar10_quick_solver.prototxt", CIFAR10_QUICK_SOLVER)
    s2 = _write(ex, "cifar10_quick_solver_lr1.prototxt", CIFAR10_QUICK_SOLVER_LR1)
    out = tmp_path / "cifar10_quick.yaml"
    hpcdl("recipes", "import", s1, s2, "--input-size", "32", "-o", out, check=True, cwd=tmp_path)
    recipe = yaml.safe_load(out.read_text())
    assert recipe["batch_size"] == 100 and recipe["test_batch_size"] == 100
    assert recipe["data"] == {"source": "synthetic"}  # no crop, no mirror in Caffe's file
    assert recipe["stepvalue"] == [4000] and recipe["max_iter"] == 5000
    net = load_net(recipe["net"] if Path(recipe["net"]).is_absolute() else str(tmp_path / recipe["net"]))
    assert net.parameter_count == 145_578


@pytest.mark.parametrize("line, message", [
    ('type: "Adagrad"', "type: 'Adagrad' is not a Caffe solver type"),
    ('type: "Adam"\nsolver_type: ADAM', "solver_type and type are both set"),
    ('regularization_type: "L3"', "regularization_type: 'L3'"),
    ('type: "RMSProp"\nmomentum: 0.9', "momentum: 0.9 cannot be used with type RMSProp"),
    ("clip_gradients: 0", "clip_gradients: 0 scales every gradient to zero"),
    ('lr_policy: "plateau"', "plateau"),
    ("momentun: 0.9", r":\d+:\d+:.*momentun"),
])
def test_solver_refusals(tmp_path, line, message):
    text = 'base_lr: 0.01\nmax_iter: 10\n' + ('' if "lr_policy" in line else 'lr_policy: "fixed"\n') + line + "\n"
    with pytest.raises(HpcdlError, match=message):
        import_recipe([_write(tmp_path, "solver.prototxt", text)], net="cifar10_quick")


def test_solver_defaults_are_caffes(tmp_path):
    fields, _, _ = import_recipe([_write(tmp_path, "s.prototxt", 'base_lr: 0.01\nlr_policy: "inv"\nmax_iter: 10\n')],
                                 net="cifar10_quick")
    assert fields["momentum"] == 0.0 and fields["gamma"] == 0.0 and fields["power"] == 0.0
    with pytest.raises(HpcdlError, match="lr_policy is not set"):
        import_recipe([_write(tmp_path, "s2.prototxt", "base_lr: 0.01\nmax_iter: 10\n")], net="cifar10_quick")


# ---------------------------------------------------------------- weights

def _random_weights(model, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)


def test_caffemodel_round_trip_and_forward(tmp_path):
    import torch

    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_torch, write_caffemodel
    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "every.prototxt", EVERY_LAYER))
    spec = _spec(data)
    original = build_torch(spec)
    _random_weights(original)
    path = tmp_path / "every.caffemodel"
    write_caffemodel(path, "EveryLayer", from_torch(original))
    blobs = read_caffemodel(path)
    assert blobs["conv1"][0].shape == (16, 3, 3, 5) and blobs["deconv"][0].shape == (48, 8, 4, 4)
    assert [b.shape for b in blobs["bn1"]] == [(16,), (16,), (1,)]
    copy = build_torch(spec)
    loaded = to_torch(copy, blobs)
    assert set(loaded) == {"conv1", "bn1", "scale1", "conv2a", "conv2b", "deconv", "ip1", "ip2", "ip_aux"}
    x = torch.randn(2, 3, 32, 32)
    original.eval(), copy.eval()
    assert torch.equal(original(x), copy(x))
    write_caffemodel(tmp_path / "again.caffemodel", "EveryLayer", from_torch(copy))
    assert (tmp_path / "again.caffemodel").read_bytes() == path.read_bytes()


def test_v1_caffemodel_with_legacy_blob_shapes_loads(tmp_path):
    """2014-era BVLC files: layers in the V1 `layers` field, blobs shaped num/channels/height/width."""
    import torch

    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "cifar.prototxt", CIFAR10_QUICK), input_size=32)
    spec = _spec(data)
    original = build_torch(spec)
    _random_weights(original, seed=3)
    want, out = _through_v1_caffemodel(tmp_path, spec, original, torch.randn(3, 3, 32, 32))
    assert torch.equal(want, out)


def test_mismatched_caffemodel_is_refused(tmp_path):
    from hpcdl.caffe.weights import conform

    data, _ = import_net(_write(tmp_path, "cifar.prototxt", CIFAR10_QUICK), input_size=32)
    spec = _spec(data)
    with pytest.raises(HpcdlError, match=r"layer 'conv1' blob 0 has shape \(3, 3\)"):
        conform(spec, {"conv1": [np.zeros((3, 3), np.float32), np.zeros(32, np.float32)]})


def test_bvlc_shaped_weights_load_into_keras_as_in_pytorch(tmp_path):
    """AlexNet-shaped (grouped convolutions, LRN, fc over a flattened map) weights, one forward in both."""
    import torch

    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_keras, to_torch, write_caffemodel
    from hpcdl.nets.keras_build import build_keras
    from hpcdl.nets.torch_build import build_torch

    text = export_net(load_net("alexnet", num_classes=10, image_size=67))
    data, _ = import_net(_write(tmp_path, "alexnet_small.prototxt", text))
    spec = _spec(data)
    original = build_torch(spec)
    _random_weights(original, seed=5)
    path = tmp_path / "alexnet_small.caffemodel"
    write_caffemodel(path, "AlexNet", from_torch(original))
    blobs = read_caffemodel(path)
    torch_net = build_torch(spec)
    to_torch(torch_net, blobs)
    torch_net.eval()
    keras_net = build_keras(spec)
    to_keras(keras_net, spec, blobs)
    x = np.random.default_rng(0).standard_normal((2, 3, 67, 67)).astype(np.float32) * 50
    want = torch_net(torch.from_numpy(x)).detach().numpy()
    got = np.asarray(keras_net(x, training=False))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


GLUON_CODE = '''
import json, sys
import numpy as np, mxnet as mx
from hpcdl.nets import load_net
from hpcdl.nets.gluon_build import build_gluon
from hpcdl.caffe.weights import to_gluon
p = json.load(sys.stdin)
outs = []
for case in p["cases"]:
    spec = load_net(case["net"])
    net = build_gluon(spec)
    net.initialize()
    z = np.load(case["blobs"])
    blobs = {}
    for key in sorted(z.files, key=lambda k: int(k.split("|")[1])):
        blobs.setdefault(key.split("|")[0], []).append(z[key])
    to_gluon(net, spec, blobs)
    outs.append(net(mx.nd.array(np.load(case["x"]))).asnumpy().tolist())
print(json.dumps({"outs": outs}))
'''


@pytest.mark.slow
def test_bvlc_shaped_weights_load_into_gluon(tmp_path):
    """AlexNet-shaped weights from a .caffemodel, and the net with every layer type."""
    import torch

    from framework_tools import in_mxnet
    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_torch, write_caffemodel
    from hpcdl.nets.torch_build import build_torch

    nets = {"alexnet_small": (export_net(load_net("alexnet", num_classes=10, image_size=67)), 67),
            "every": (EVERY_LAYER, 32)}
    cases, wants = [], []
    for i, (name, (text, size)) in enumerate(nets.items()):
        data, _ = import_net(_write(tmp_path, f"{name}.prototxt", text))
        net_file = tmp_path / f"{name}.yaml"
        net_file.write_text(yaml.safe_dump(data))
        spec = load_net(str(net_file))
        original = build_torch(spec)
        _random_weights(original, seed=7 + i)
        write_caffemodel(tmp_path / f"{name}.caffemodel", name, from_torch(original))
        blobs = read_caffemodel(tmp_path / f"{name}.caffemodel")  # MXNet's venv gets the blobs as arrays
        np.savez(tmp_path / f"{name}.npz", **{f"{k}|{j}": a for k, arrs in blobs.items() for j, a in enumerate(arrs)})
        x = np.random.default_rng(i).standard_normal((2, 3, size, size)).astype(np.float32) * 50
        np.save(tmp_path / f"{name}_x.npy", x)
        to_torch(original, blobs)
        original.eval()
        wants.append(original(torch.from_numpy(x)).detach().numpy())
        cases.append({"net": str(net_file), "blobs": str(tmp_path / f"{name}.npz"), "x": str(tmp_path / f"{name}_x.npy")})
    outs = in_mxnet(GLUON_CODE, {"cases": cases})["outs"]
    for want, got in zip(wants, outs):
        got = np.array(got)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_trained_snapshot_exports_as_caffemodel(tmp_path):
    import torch

    from hpcdl.caffe.weights import read_caffemodel
    from hpcdl.nets.torch_build import build_torch
    from hpcdl.train import checkpoint

    model = build_torch(load_net("cifar10_quick"))
    _random_weights(model, seed=11)
    snap = checkpoint.save({"iter": 5, "model": model.state_dict()}, tmp_path / "q_iter_5.ckpt")
    out = tmp_path / "q.caffemodel"
    hpcdl("nets", "export", "cifar10_quick", "--weights", snap, "--caffemodel", out, "-o", tmp_path / "q.prototxt",
          check=True)
    blobs = read_caffemodel(out)
    assert np.array_equal(blobs["conv1"][0], model.layers["conv1"].weight.detach().numpy())
    assert np.array_equal(blobs["ip2"][1], model.layers["ip2"][1].bias.detach().numpy())
    assert "conv1" in (tmp_path / "q.prototxt").read_text()
    assert torch.is_tensor(model.layers["conv1"].weight)


# ---------------------------------------------------------------- the new layer types against Caffe's formulas

def _caffe_deconv(x, w, b, stride, pad):
    """DeconvolutionLayer::Forward_cpu: the convolution's backward (col2im of W^T x), group 1."""
    c_in, h, wd = x.shape
    _, c_out, k, _ = w.shape
    out_h, out_w = stride * (h - 1) + k - 2 * pad, stride * (wd - 1) + k - 2 * pad
    full = np.zeros((c_out, stride * (h - 1) + k, stride * (wd - 1) + k))
    for i in range(h):
        for j in range(wd):
            full[:, i * stride:i * stride + k, j * stride:j * stride + k] += np.einsum("c,cokl->okl", x[:, i, j], w)
    return full[:, pad:pad + out_h, pad:pad + out_w] + b[:, None, None]


def _caffe_within_channel_lrn(x, size, alpha, beta):
    """LRNLayer WITHIN_CHANNEL: x (1 + alpha * AVE-pool(x^2, size, pad (size-1)/2))^-beta; pool_size = size^2."""
    pad = (size - 1) // 2
    sq = np.pad(x * x, ((0, 0), (pad, pad), (pad, pad)))
    c, h, w = x.shape
    acc = np.zeros_like(x)
    for i in range(h):
        for j in range(w):
            acc[:, i, j] = sq[:, i:i + size, j:j + size].sum(axis=(1, 2)) / (size * size)
    return x * (1 + alpha * acc) ** (-beta)


def _caffe_ave_pool(x, k, s, pad, out):
    """PoolingLayer AVE: the divisor is the window clipped to H + pad, before clipping to the image."""
    c, h, w = x.shape
    res = np.zeros((c, out[0], out[1]))
    for ph in range(out[0]):
        for pw in range(out[1]):
            hs, ws = ph * s - pad, pw * s - pad
            he, we = min(hs + k, h + pad), min(ws + k, w + pad)
            size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            res[:, ph, pw] = x[:, hs:he, ws:we].sum(axis=(1, 2)) / size
    return res


def test_new_layer_types_follow_caffes_formulas():
    import torch

    from hpcdl.nets.torch_build import build_torch

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 7, 7)).astype(np.float32)

    def run(layers, shape=(4, 7, 7)):
        spec = build_spec("one", {"layers": layers}, shape, 10)
        model = build_torch(spec).eval()
        return spec, model, model(torch.from_numpy(x)).detach().numpy()[0]

    spec, model, got = run([{"type": "Deconvolution", "name": "d", "num_output": 3, "kernel_size": 4, "stride": 2,
                             "pad": 1, "weight_filler": {"type": "gaussian", "std": 1.0},
                             "bias_filler": {"type": "constant", "value": 0.5}}])
    conv = model.layers["d"]
    want = _caffe_deconv(x[0], conv.weight.detach().numpy(), conv.bias.detach().numpy(), 2, 1)
    assert got.shape == spec.layers[0].out_shape == (3, 14, 14)
    assert np.abs(got - want).max() < 1e-5
    _, _, got = run([{"type": "LRN", "name": "n", "local_size": 3, "alpha": 2.0, "beta": 0.75, "norm_region": "WITHIN_CHANNEL"}])
    assert np.abs(got - _caffe_within_channel_lrn(x[0], 3, 2.0, 0.75)).max() < 1e-5
    spec, _, got = run([{"type": "Pooling", "name": "p", "pool": "AVE", "kernel_size": 3, "stride": 2, "pad": 1,
                         "round_mode": "FLOOR"}])
    assert got.shape == spec.layers[0].out_shape == (4, 4, 4)
    assert np.abs(got - _caffe_ave_pool(x[0], 3, 2, 1, (4, 4))).max() < 1e-6
    _, _, got = run([{"type": "ReLU", "name": "r", "negative_slope": 0.1}])
    assert np.allclose(got, np.where(x[0] > 0, x[0], 0.1 * x[0]))
    _, _, got = run([{"type": "Sigmoid", "name": "s"}, {"type": "TanH", "name": "t", "bottom": "data"},
                     {"type": "Eltwise", "name": "e", "bottom": ["s", "t"], "operation": "SUM", "coeff": [0.5, -2.0]},
                     {"type": "Eltwise", "name": "m", "bottom": ["e", "s"], "operation": "MAX"}])
    sig, tanh = 1 / (1 + np.exp(-x[0])), np.tanh(x[0])
    assert np.abs(got - np.maximum(0.5 * sig - 2.0 * tanh, sig)).max() < 1e-6


def test_keras_says_which_layer_it_cannot_build(tmp_path):
    from hpcdl.nets.keras_build import build_keras

    data, _ = import_net(_write(tmp_path, "every.prototxt", EVERY_LAYER.replace(
        "num_output: 8\n    kernel_size: 4", "num_output: 8\n    group: 2\n    kernel_size: 4")))
    with pytest.raises(ValueError, match="layer deconv: grouped Deconvolution has no Keras builder"):
        build_keras(_spec(data))


def test_every_layer_agrees_in_keras_and_pytorch(tmp_path):
    import torch

    from hpcdl.caffe.weights import from_torch, to_keras
    from hpcdl.nets.keras_build import build_keras
    from hpcdl.nets.torch_build import build_torch

    data, _ = import_net(_write(tmp_path, "every.prototxt", EVERY_LAYER))
    spec = _spec(data, aux=False)
    original = build_torch(spec)
    _random_weights(original, seed=9)
    original.eval()
    keras_net = build_keras(spec)
    to_keras(keras_net, spec, {name: arrs for name, _, arrs in from_torch(original)})
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = original(torch.from_numpy(x)).detach().numpy()
    got = np.asarray(keras_net(x, training=False))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.slow
def test_an_imported_solver_and_net_train(tmp_path):
    """The every-layer net and a solver naming it import to a recipe that trains (aux head on)."""
    from framework_tools import final_record

    _write(tmp_path, "every.prototxt", EVERY_LAYER)
    solver = _write(tmp_path, "solver.prototxt", 'net: "every.prototxt"\nbase_lr: 0.01\nlr_policy: "step"\n'
                    'stepsize: 10\ngamma: 0.1\nmomentum: 0.9\nweight_decay: 0.0005\nmax_iter: 20\n'
                    'test_iter: 1\ntest_interval: 2\nsolver_mode: CPU\n')
    proc = hpcdl("recipes", "import", solver, "-o", "every_recipe.yaml", check=True, cwd=tmp_path)
    assert "solver_mode: CPU is ignored" in proc.stderr
    recipe = yaml.safe_load((tmp_path / "every_recipe.yaml").read_text())
    assert recipe["aux_heads"] is True and recipe["batch_size"] == 8 and recipe["test_batch_size"] == 4
    assert recipe["data"] == {"source": "synthetic", "crop": 32, "mirror": True}
    assert recipe["gamma"] == 0.1 and recipe["weight_decay"] == 0.0005 and recipe["net"] == "every_recipe.net.yaml"
    hpcdl("train", "every_recipe.yaml", "--max-iter", "2", "--results", "r.jsonl", "--framework", "pytorch",
          check=True, cwd=tmp_path)
    final = final_record(tmp_path / "r.jsonl")
    assert final["event"] == "final"


def test_use_global_stats_keeps_the_stored_statistics_in_training(tmp_path):
    """KaimingHe's ResNet files say batch_norm_param { use_global_stats: true }: Caffe normalises with the
    stored mean and variance (divided by the stored factor) even in the TRAIN phase."""
    import torch

    from hpcdl.caffe.weights import to_keras, to_torch
    from hpcdl.nets.keras_build import build_keras
    from hpcdl.nets.torch_build import build_torch

    text = ('input: "data"\ninput_dim: 2\ninput_dim: 3\ninput_dim: 6\ninput_dim: 6\n'
            'layer { name: "bn" type: "BatchNorm" bottom: "data" top: "data" batch_norm_param { use_global_stats: true } }\n'
            'layer { name: "sc" type: "Scale" bottom: "data" top: "data" scale_param { bias_term: true } }\n')
    data, _ = import_net(_write(tmp_path, "bn.prototxt", text))
    spec = _spec(data)
    mean, var, factor = np.array([1.0, -2.0, 0.5]), np.array([4.0, 0.25, 1.0]), np.array([2.0])
    gamma, beta = np.array([0.5, 2.0, -1.0]), np.array([0.1, 0.2, 0.3])
    blobs = {"bn": [(mean * 2).astype(np.float32), (var * 2).astype(np.float32), factor.astype(np.float32)],
             "sc": [gamma.astype(np.float32), beta.astype(np.float32)]}
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 6)).astype(np.float32)
    want = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * gamma[:, None, None] + beta[:, None, None]
    model = build_torch(spec)
    to_torch(model, blobs)
    model.train()
    assert np.abs(model(torch.from_numpy(x)).detach().numpy() - want).max() < 1e-5
    keras_net = build_keras(spec)
    to_keras(keras_net, spec, blobs)
    got = np.asarray(keras_net(x, training=True)).transpose(0, 3, 1, 2)  # Keras keeps NHWC inside
    assert np.abs(got - want).max() < 1e-5


@pytest.mark.parametrize("name, size", [("cifar10_quick", 32), ("googlenet", 224), ("resnet50", 224)])
def test_bundled_net_through_prototxt_and_caffemodel_gives_the_same_forward(tmp_path, name, size):
    """A bundled net and its weights, exported and imported again, compute what the original computes."""
    import torch

    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_torch, write_caffemodel
    from hpcdl.nets.torch_build import build_torch

    spec = load_net(name, image_size=size, aux_heads=True)
    original = build_torch(spec)
    _random_weights(original, seed=13)
    write_caffemodel(tmp_path / "w.caffemodel", name, from_torch(original))
    data, _ = import_net(_write(tmp_path, f"{name}.prototxt", export_net(spec)))
    copy = build_torch(_spec(data))
    loaded = to_torch(copy, read_caffemodel(tmp_path / "w.caffemodel"))
    assert len(loaded) == sum(1 for p in from_torch(original))
    x = torch.randn(1, 3, size, size)
    original.eval(), copy.eval()
    with torch.no_grad():
        assert torch.equal(original(x), copy(x))


def test_imported_fillers_are_caffes():
    """XavierFiller U(+-sqrt(3/fan_in)), MSRAFiller N(0, 2/fan_out) with FAN_OUT, on Caffe's blob layout."""
    import torch

    from hpcdl.nets.torch_build import caffe_fill

    torch.manual_seed(0)
    w = torch.empty(64, 32, 3, 3)
    caffe_fill(w, {"type": "xavier", "variance_norm": "FAN_IN"})
    bound = (3 / (32 * 9)) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
    caffe_fill(w, {"type": "msra", "variance_norm": "FAN_OUT"})
    assert w.std().item() == pytest.approx((2 / (64 * 9)) ** 0.5, rel=0.03)
    caffe_fill(w, {"type": "uniform", "min": -0.5, "max": 0.25})
    assert w.min() >= -0.5 and w.max() <= 0.25


@pytest.mark.slow
def test_training_starts_from_caffemodel_weights(tmp_path):
    """Caffe's `caffe train --weights`: the recipe's `weights` are the first iteration's weights."""
    from hpcdl.caffe.weights import from_torch, write_caffemodel
    from hpcdl.nets.torch_build import build_torch
    from hpcdl.train import checkpoint

    spec = load_net("cifar10_quick")
    pretrained = build_torch(spec)
    _random_weights(pretrained, seed=21)
    write_caffemodel(tmp_path / "pre.caffemodel", "CIFAR10_quick", from_torch(pretrained))
    solver = _write(tmp_path, "solver.prototxt", 'base_lr: 0.000000001\nlr_policy: "fixed"\nmax_iter: 1\n'
                    'snapshot: 1\nsnapshot_prefix: "ft"\nweights: "pre.caffemodel"\n')
    hpcdl("recipes", "import", solver, "--net", "cifar10_quick", "--batch-size", "4", "-o", "ft.yaml", check=True,
          cwd=tmp_path)
    recipe = yaml.safe_load((tmp_path / "ft.yaml").read_text())
    assert recipe["weights"] == "pre.caffemodel"
    recipe["data"] = {"source": "synthetic", "image_size": 32, "num_classes": 10}
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump(recipe))
    hpcdl("train", "ft.yaml", "--framework", "pytorch", check=True, cwd=tmp_path)
    state = checkpoint.load(checkpoint.snapshot_path(tmp_path / "ft", 1))["model"]
    for key in ("layers.conv1.weight", "layers.ip2.1.weight"):
        start = dict(pretrained.state_dict())[key]
        assert (state[key] - start).abs().max().item() < 1e-6, key
