"""Caffe users' own files: BVLC's example solvers and nets imported exactly as Caffe ships them.

The texts are in caffe_bvlc.py, written out here under Caffe's own folder layout (the
solvers name their nets as `examples/cifar10/...`, relative to Caffe's root, where
`caffe train` runs), and never edited.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import caffe_bvlc as bvlc
from conftest import hpcdl
from hpcdl.caffe.nets import export_net, import_net
from hpcdl.caffe.proto import message
from hpcdl.errors import HpcdlError
from hpcdl.nets import load_net
from hpcdl.nets.spec import build_spec


def _caffe_root(tmp_path: Path, files: dict[str, str]) -> Path:
    """A Caffe checkout's examples, as `caffe train` sees them from its root."""
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _spec(data: dict):
    inp = data["input"]
    return build_spec("imported", data, (inp["channels"], inp["size"], inp["size"]), data["classes"], aux_heads=True)


CIFAR_QUICK = {"examples/cifar10/cifar10_quick_train_test.prototxt": bvlc.CIFAR10_QUICK_TRAIN_TEST,
               "examples/cifar10/cifar10_quick_solver.prototxt": bvlc.CIFAR10_QUICK_SOLVER,
               "examples/cifar10/cifar10_quick_solver_lr1.prototxt": bvlc.CIFAR10_QUICK_SOLVER_LR1}
LENET = {"examples/mnist/lenet_train_test.prototxt": bvlc.LENET_TRAIN_TEST,
         "examples/mnist/lenet_solver.prototxt": bvlc.LENET_SOLVER,
         "examples/mnist/lenet_solver_adam.prototxt": bvlc.LENET_SOLVER_ADAM,
         "examples/mnist/lenet_solver_rmsprop.prototxt": bvlc.LENET_SOLVER_RMSPROP,
         "examples/mnist/lenet_adadelta_solver.prototxt": bvlc.LENET_ADADELTA_SOLVER}
SIGMOID_BN = {"examples/cifar10/cifar10_full_sigmoid_train_test_bn.prototxt": bvlc.CIFAR10_FULL_SIGMOID_TRAIN_TEST_BN,
              "examples/cifar10/cifar10_full_sigmoid_solver_bn.prototxt": bvlc.CIFAR10_FULL_SIGMOID_SOLVER_BN}


@pytest.mark.parametrize("files, solvers, size_args, parameters, expected", [
    (CIFAR_QUICK, ["examples/cifar10/cifar10_quick_solver.prototxt", "examples/cifar10/cifar10_quick_solver_lr1.prototxt"],
     ["--input-size", "32"], 145_578,
     {"batch_size": 100, "test_batch_size": 100, "lr_policy": "multistep", "stepvalue": [4000], "max_iter": 5000}),
    (LENET, ["examples/mnist/lenet_solver.prototxt"], ["--input-size", "28", "--channels", "1"], bvlc.LENET_PARAMETERS,
     {"batch_size": 64, "test_batch_size": 100, "lr_policy": "inv", "gamma": 0.0001, "power": 0.75}),
    (SIGMOID_BN, ["examples/cifar10/cifar10_full_sigmoid_solver_bn.prototxt"], ["--input-size", "32"],
     bvlc.CIFAR10_FULL_SIGMOID_BN_PARAMETERS,
     {"batch_size": 100, "test_batch_size": 1000, "lr_policy": "step", "stepsize": 5000, "gamma": 1.0}),
], ids=["cifar10_quick_chain", "lenet", "cifar10_full_sigmoid_bn"])
def test_caffes_example_solvers_import_as_shipped(tmp_path, files, solvers, size_args, parameters, expected):
    """`recipes import` takes Caffe's own example solvers, whose nets read LMDB with no crop_size
    and no Input shape: the input size is the one option the file cannot give."""
    root = _caffe_root(tmp_path, files)
    hpcdl("recipes", "import", *solvers, *size_args, "-o", "recipe.yaml", check=True, cwd=root)
    recipe = yaml.safe_load((root / "recipe.yaml").read_text())
    assert {k: recipe.get(k) for k in expected} == expected
    assert load_net(str(root / recipe["net"])).parameter_count == parameters


@pytest.mark.parametrize("solver, expected", [
    ("examples/mnist/lenet_solver_adam.prototxt", {"type": "Adam", "momentum": 0.9, "momentum2": 0.999}),
    ("examples/mnist/lenet_solver_rmsprop.prototxt", {"type": "RMSProp", "rms_decay": 0.98, "momentum": 0.0}),
    ("examples/mnist/lenet_adadelta_solver.prototxt", {"type": "AdaDelta", "delta": 1e-6, "momentum": 0.95}),
])
def test_lenets_other_solver_types_import_as_shipped(tmp_path, solver, expected):
    """The same net under Caffe's Adam, RMSProp and AdaDelta example solvers (in this process:
    the command line around it is the one the test above runs)."""
    from hpcdl.caffe.solver import import_recipe
    from hpcdl.train.recipe import recipe_from_dict

    root = _caffe_root(tmp_path, LENET)
    fields, _, net_file = import_recipe([root / solver])
    assert {k: fields.get(k) for k in expected} == expected
    data, _ = import_net(net_file, input_size=28, channels=1)
    assert _spec(data).parameter_count == bvlc.LENET_PARAMETERS
    recipe_from_dict({**fields, "net": "cifar10_quick", "batch_size": 64}, "imported")


def test_an_lmdb_net_without_input_size_is_refused_naming_the_options_recipes_import_takes(tmp_path):
    root = _caffe_root(tmp_path, LENET)
    proc = hpcdl("recipes", "import", "examples/mnist/lenet_solver.prototxt", "-o", "recipe.yaml", cwd=root)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--input-size" in lines[0] and "--channels" in lines[0] and "mnist_train_lmdb" in lines[0]
    assert not (root / "recipe.yaml").exists() and not (root / "recipe.net.yaml").exists()
    # the option it names is one `recipes import` takes: asked for, the same command works
    proc = hpcdl("recipes", "import", "examples/mnist/lenet_solver.prototxt", "--input-size", "28", "--channels", "1",
                 "-o", "recipe.yaml", cwd=root)
    assert proc.returncode == 0, proc.stderr


def test_recipe_from_an_imported_net_file_keeps_its_batches_crop_and_mirror(tmp_path):
    """`recipes import --net NET.yaml`: the net file `nets import` wrote keeps Caffe's data
    layers under caffe.data, and the recipe takes its batch sizes, crop and mirror from them."""
    _caffe_root(tmp_path, {"googlenet_bn.prototxt": bvlc.GOOGLENET_BN_TAIL,
                           "solver.prototxt": 'net: "googlenet_bn.prototxt"\nbase_lr: 0.045\nlr_policy: "step"\n'
                                              'stepsize: 6400\ngamma: 0.96\nmomentum: 0.9\nmax_iter: 100\n'})
    hpcdl("nets", "import", "googlenet_bn.prototxt", "-o", "net.yaml", check=True, cwd=tmp_path)
    hpcdl("recipes", "import", "solver.prototxt", "--net", "net.yaml", "-o", "with_net.yaml", check=True, cwd=tmp_path)
    with_net = yaml.safe_load((tmp_path / "with_net.yaml").read_text())
    assert with_net["net"] == "net.yaml"
    # the TRAIN and TEST data layers' batch_size, crop_size and mirror, as importing the solver's own net gives
    assert with_net["batch_size"] == 32 and with_net["test_batch_size"] == 50
    assert with_net["data"] == {"source": "synthetic", "crop": 32, "mirror": True}
    # --input-size shapes the solver's own net only
    proc = hpcdl("recipes", "import", "solver.prototxt", "--net", "net.yaml", "--input-size", "32", cwd=tmp_path)
    assert proc.returncode == 2 and "--input-size" in proc.stderr and "Traceback" not in proc.stderr


def test_a_test_only_accuracy_reading_a_test_only_softmax_imports(tmp_path):
    """GoogLeNet-BN's TEST net adds `loss3/prob` (Softmax) and reads both accuracies from it;
    Caffe builds both phases. A Softmax keeps each example's order of classes, so the
    metrics read the classifier."""
    path = tmp_path / "googlenet_bn.prototxt"
    path.write_text(bvlc.GOOGLENET_BN_TAIL)
    data, notes = import_net(path)
    assert data["caffe"]["metrics"] == [{"name": "loss3/top-1", "bottom": "loss3/classifier", "top_k": 1},
                                        {"name": "loss3/top-5", "bottom": "loss3/classifier", "top_k": 5}]
    assert _spec(data).output == "loss3/classifier" and notes == []
    # a TEST-only layer that changes the scores is refused, naming it and not blaming the TRAIN phase
    changed = bvlc.GOOGLENET_BN_TAIL.replace('  name: "loss3/prob"\n  type: "Softmax"',
                                             '  name: "loss3/prob"\n  type: "Power"\n  power_param { scale: -1 }')
    path.write_text(changed)
    with pytest.raises(HpcdlError) as err:
        import_net(path)
    assert "'loss3/prob' (Power)" in str(err.value) and "TRAIN-phase" not in str(err.value)


def test_deploy_export_ends_in_the_softmax_prob_zoo_deploy_files_have(tmp_path):
    """BVLC's deploy files end in `layer { name: "prob" type: "Softmax" }`; so does `--deploy`."""
    for net in ("googlenet", "cifar10_quick"):
        proc = hpcdl("nets", "export", net, "--deploy", "-o", f"{net}.prototxt", check=True, cwd=tmp_path)
        assert proc.returncode == 0
        parsed = message("NetParameter")
        from google.protobuf import text_format

        text_format.Parse((tmp_path / f"{net}.prototxt").read_text(), parsed)
        last = parsed.layer[-1]
        classifier = load_net(net).output
        assert (last.name, last.type, list(last.bottom), list(last.top)) == ("prob", "Softmax", [classifier], ["prob"])
        assert not any(layer.type == "SoftmaxWithLoss" for layer in parsed.layer)
        # imported again, the class scores are unchanged and the output is the probabilities
        data, _ = import_net(tmp_path / f"{net}.prototxt")
        back = _spec(data)
        assert back.output == "prob" and back.parameter_count == load_net(net).parameter_count
    # a net that already ends in its Softmax gets no second one
    path = tmp_path / "deploy_in.prototxt"
    from caffe_prototxt import DEPLOY

    path.write_text(DEPLOY)
    data, _ = import_net(path)
    text = export_net(_spec(data), data.get("caffe"), deploy=True)
    assert text.count('type: "Softmax"') == 1


def test_a_solvers_separate_test_net_is_said_in_one_note_and_gives_the_test_batch(tmp_path):
    """BVLC's 2014 cifar10_full_solver names `train_net` and `test_net` files; the test net's
    data layer gives test_batch_size, and the note says its layers are not imported."""
    root = _caffe_root(tmp_path, {"cifar10_full_solver.prototxt": bvlc.CIFAR10_FULL_SOLVER_2014,
                                  "cifar10_full_train.prototxt": bvlc.CIFAR10_FULL_TRAIN_2014,
                                  "cifar10_full_test.prototxt": bvlc.CIFAR10_FULL_TEST_2014})
    proc = hpcdl("recipes", "import", "cifar10_full_solver.prototxt", "--input-size", "32", "-o", "full.yaml",
                 check=True, cwd=root)
    notes = [line for line in proc.stderr.splitlines() if "test_net" in line]
    assert len(notes) == 1 and "cifar10_full_test.prototxt" in notes[0], proc.stderr
    recipe = yaml.safe_load((root / "full.yaml").read_text())
    assert recipe["batch_size"] == 100 and recipe["test_batch_size"] == 100
    assert load_net(str(root / recipe["net"])).parameter_count == bvlc.CIFAR10_FULL_PARAMETERS


@pytest.mark.parametrize("state, refused", [
    ('test_state { stage: "val" }', True),
    ("train_state { level: 1 }", True),
    ("test_state { phase: TEST }", False),
])
def test_a_net_state_is_refused_only_when_it_picks_other_layers(tmp_path, state, refused):
    from hpcdl.caffe.solver import import_recipe

    path = tmp_path / "solver.prototxt"
    path.write_text(f'base_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 10\n{state}\n')
    if not refused:
        import_recipe([path], net="cifar10_quick")
        return
    with pytest.raises(HpcdlError) as err:
        import_recipe([path], net="cifar10_quick")
    message_text = str(err.value)
    assert "NetState" in message_text and "level 0, no stage" in message_text
    assert "`net:`" not in message_text  # the old hint: naming the net in a file changes nothing here


# ---------------------------------------------------------------- depthwise convolutions in Keras

MOBILE = '''name: "MobileLike"
input: "data"
input_shape { dim: 2 dim: 3 dim: 16 dim: 16 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 bias_term: false weight_filler { type: "msra" } } }
layer { name: "conv1/relu" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2_1/dw" type: "Convolution" bottom: "conv1" top: "conv2_1/dw"
  convolution_param { num_output: 8 group: 8 kernel_size: 3 pad: 1 stride: 1 bias_term: false weight_filler { type: "msra" } } }
layer { name: "conv2_1/sep" type: "Convolution" bottom: "conv2_1/dw" top: "conv2_1/sep"
  convolution_param { num_output: 16 kernel_size: 1 weight_filler { type: "msra" } } }
layer { name: "conv2_2/dw" type: "Convolution" bottom: "conv2_1/sep" top: "conv2_2/dw"
  convolution_param { num_output: 32 group: 16 kernel_size: 3 pad: 1 stride: 2 weight_filler { type: "msra" } } }
layer { name: "conv3/g2" type: "Convolution" bottom: "conv2_2/dw" top: "conv3/g2"
  convolution_param { num_output: 16 group: 2 kernel_size: 3 pad: 1 weight_filler { type: "msra" } } }
layer { name: "pool6" type: "Pooling" bottom: "conv3/g2" top: "pool6" pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc7" type: "Convolution" bottom: "pool6" top: "fc7"
  convolution_param { num_output: 5 kernel_size: 1 weight_filler { type: "msra" } } }
layer { name: "prob" type: "Softmax" bottom: "fc7" top: "prob" }
'''


def test_keras_builds_depthwise_convolutions_with_its_depthwise_operator_and_the_same_weights(tmp_path):
    """MobileNet's `group == channels` convolutions (and a channel multiplier of 2) are one
    DepthwiseConv2D each in Keras, not one Conv2D per channel; one .caffemodel gives the
    PyTorch build's output; a grouped (not depthwise) convolution keeps its per-group Conv2Ds."""
    import torch
    from tensorflow import keras

    from hpcdl.caffe.weights import from_torch, read_caffemodel, to_keras, write_caffemodel
    from hpcdl.nets.keras_build import GroupedConv2D, build_keras
    from hpcdl.nets.torch_build import build_torch

    path = tmp_path / "mobile.prototxt"
    path.write_text(MOBILE)
    data, _ = import_net(path)
    spec = _spec(data)
    model = build_torch(spec)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.2)
    model.eval()
    write_caffemodel(tmp_path / "mobile.caffemodel", "MobileLike", from_torch(model))
    knet = build_keras(spec)
    kinds = {layer.name: type(layer) for layer in knet.layers}
    assert kinds["conv2_1__dw"] is keras.layers.DepthwiseConv2D and kinds["conv2_2__dw"] is keras.layers.DepthwiseConv2D
    assert kinds["conv3__g2"] is GroupedConv2D
    assert knet.get_layer("conv2_2__dw").get_weights()[0].shape == (3, 3, 16, 2)
    assert sum(int(np.prod(w.shape)) for w in knet.trainable_weights) == spec.parameter_count
    to_keras(knet, spec, read_caffemodel(tmp_path / "mobile.caffemodel"))
    x = np.random.default_rng(4).standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy()
    got = np.asarray(knet(x, training=False))
    assert got.shape == want.shape == (2, 5)
    assert np.abs(got - want).max() <= 1e-5


def test_keras_fills_a_depthwise_kernel_with_caffes_fans():
    """Caffe's blob for a depthwise layer is (C*k, 1, kh, kw): msra FAN_IN is N(0, 2 / (kh*kw)),
    not Keras' own fan of a (kh, kw, C, k) kernel, C*kh*kw."""
    from hpcdl.nets.keras_build import build_keras

    text = ('input: "data"\ninput_shape { dim: 1 dim: 256 dim: 8 dim: 8 }\n'
            'layer { name: "dw" type: "Convolution" bottom: "data" top: "dw" convolution_param { num_output: 256 '
            'group: 256 kernel_size: 3 bias_term: false weight_filler { type: "msra" } } }\n'
            'layer { name: "fc" type: "InnerProduct" bottom: "dw" top: "fc" inner_product_param { num_output: 2 } }\n')
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "dw.prototxt"
        path.write_text(text)
        data, _ = import_net(path)
    kernel = build_keras(_spec(data)).get_layer("dw").get_weights()[0]
    assert kernel.std() == pytest.approx(np.sqrt(2.0 / 9), rel=0.05)
