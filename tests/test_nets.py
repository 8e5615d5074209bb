"""Networks defined once: published parameter counts, block expansion, forward passes at small size."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import hpcdl

from hpcdl.errors import HpcdlError
from hpcdl.nets import list_nets, load_net
from hpcdl.nets.spec import build_spec
from hpcdl.nets.torch_build import build_torch, parameter_multipliers

# Published counts with 1000 classes (10 for cifar10_quick):
PUBLISHED = {
    "resnet50": 25_557_032,       # ResNet-50 v1.5 (torchvision / NVIDIA DLE)
    "cifar10_quick": 145_578,     # Caffe examples/cifar10
    "caffenet": 60_965_224,       # BVLC reference CaffeNet
    "alexnet": 60_965_224,        # BVLC AlexNet: CaffeNet's tensors, LRN/pool order swapped
    "googlenet": 6_998_552,       # BVLC GoogLeNet main tower (loss3 classifier only)
}
# Nets in a published shape whose layer stack is ours, counted by hand (2 classes):
# mesh: 18*64*25+64 + 4*(64*64*9+64) + 64*32*9+32 + 32*2+2
OURS = {"mesh": 195_106}
GOOGLENET_WITH_AUX_HEADS = 13_378_280  # + loss1 and loss2 heads (6,379,728) as trained in Caffe


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_the_published_one(name):
    assert load_net(name).parameter_count == PUBLISHED[name]


def test_every_shipped_net_has_a_published_count_to_check():
    assert set(list_nets()) == set(PUBLISHED) | set(OURS)


def test_our_nets_have_the_hand_counted_parameters():
    for name, count in OURS.items():
        assert load_net(name).parameter_count == count


def test_googlenet_aux_heads_are_built_only_when_asked_and_carry_caffes_loss_weight():
    spec = load_net("googlenet", aux_heads=True)
    assert spec.parameter_count == GOOGLENET_WITH_AUX_HEADS
    assert spec.aux_outputs == (("loss1/classifier", 0.3), ("loss2/classifier", 0.3))
    assert spec.output == "loss3/classifier"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_pytorch_build_has_exactly_the_specs_parameters(name):
    spec = load_net(name, image_size=64 if name != "cifar10_quick" else None)
    assert sum(p.numel() for p in build_torch(spec).parameters()) == spec.parameter_count


@pytest.mark.parametrize("name,size", [("cifar10_quick", 32), ("resnet50", 32), ("googlenet", 64), ("alexnet", 67), ("caffenet", 67)])
def test_forward_pass_at_small_size_gives_one_score_per_class(name, size):
    torch.set_num_threads(1)
    spec = load_net(name, num_classes=7, image_size=size)
    model = build_torch(spec).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, size, size))
    assert out.shape == (2, 7)
    assert spec.layers[-1].out_shape == (7,)


def test_resnet50_is_v1_5_with_the_stride_on_the_3x3_convolution():
    layers = {layer.name: layer for layer in load_net("resnet50").layers}
    assert layers["res3a_branch2a"].params["stride"] == 1
    assert layers["res3a_branch2b"].params["stride"] == 2
    assert layers["res3a_branch1"].params["stride"] == 2
    assert layers["res3b_branch2b"].params["stride"] == 1
    assert [name for name in layers if name.startswith("res") and name[4:] in "abcdef" and len(name) == 5] == [
        "res2a", "res2b", "res2c", "res3a", "res3b", "res3c", "res3d",
        "res4a", "res4b", "res4c", "res4d", "res4e", "res4f", "res5a", "res5b", "res5c"]


def test_blocks_expand_to_a_flat_list_with_shortcuts_to_the_block_input():
    data = {
        "input": {"channels": 3, "size": 8},
        "blocks": {
            "res": [
                {"type": "Convolution", "name": "{p}_conv", "num_output": "{c}", "kernel_size": 3, "pad": 1},
                {"type": "Eltwise", "name": "{p}", "bottom": ["{input}", "{p}_conv"]},
            ],
        },
        "layers": [
            {"type": "Convolution", "name": "stem", "num_output": 4, "kernel_size": 1},
            {"repeat": "res", "times": 3, "p": "r", "c": 4},
            {"type": "InnerProduct", "name": "fc", "num_output": "classes"},
        ],
    }
    spec = build_spec("toy", data, (3, 8, 8), 5)
    assert [l.name for l in spec.layers] == ["stem", "ra_conv", "ra", "rb_conv", "rb", "rc_conv", "rc", "fc"]
    assert spec.layers[2].bottom == ("stem", "ra_conv")
    assert spec.layers[4].bottom == ("ra", "rb_conv")
    assert spec.layers[1].params["num_output"] == 4  # "{c}" keeps the int type
    assert all("use" not in l.params and "repeat" not in l.params for l in spec.layers)


def test_a_block_variable_left_out_is_named_in_the_error():
    data = {"blocks": {"b": [{"type": "ReLU", "name": "{missing}_relu"}]}, "layers": [{"use": "b"}]}
    with pytest.raises(HpcdlError, match="'missing'"):
        build_spec("toy", data, (3, 8, 8), 5)


def test_caffe_lr_and_decay_multipliers_reach_each_parameter():
    mults = {name: (lr, decay) for name, _, lr, decay in parameter_multipliers(build_torch(load_net("caffenet", image_size=67)))}
    assert mults["conv1.weight"] == (1.0, 1.0)
    assert mults["conv1.bias"] == (2.0, 0.0)
    assert mults["fc8.bias"] == (2.0, 0.0)


def test_caffe_pooling_rounds_up():
    # 32 -> conv 5 pad 2 -> 32 -> pool 3/2: floor gives 15, Caffe's ceil gives 16
    assert load_net("cifar10_quick").layers[1].out_shape == (32, 16, 16)


def test_hpcdl_nets_json_lists_every_net_with_its_parameter_count():
    proc = hpcdl("nets", "--json", check=True)
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {name: r["parameters"] for name, r in rows.items()} == {**PUBLISHED, **OURS}
    assert rows["googlenet"]["parameters_with_aux_heads"] == GOOGLENET_WITH_AUX_HEADS
    assert rows["resnet50"]["input"] == [3, 224, 224] and rows["resnet50"]["classes"] == 1000


def test_googlenet_trains_its_aux_heads_with_loss_weight_and_tests_on_the_main_head():
    from hpcdl.train.backends.pytorch.steps import criterion
    from hpcdl.train.recipe import recipe_from_dict

    torch.set_num_threads(1)
    spec = load_net("googlenet", num_classes=5, image_size=64, aux_heads=True)
    model = build_torch(spec)
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([1, 3])
    main, aux = model.train()(x)
    assert main.shape == (2, 5) and [a.shape for a in aux] == [(2, 5), (2, 5)]
    r = recipe_from_dict({"net": "googlenet", "batch_size": 2, "base_lr": 0.01, "max_iter": 1}, "t")
    expected = sum(w * torch.nn.functional.cross_entropy(o, y) for w, o in zip((1.0, 0.3, 0.3), (main, *aux)))
    assert torch.allclose(criterion((main, aux), y, spec, r), expected)
    with torch.no_grad():
        assert model.eval()(x).shape == (2, 5)


def _bn_scale_net(scale_top: str, extra_reader: bool):
    """conv -> BatchNorm -> Scale (in place or not) -> InnerProduct; optionally a second reader of the BatchNorm."""
    layers = [
        {"type": "Convolution", "name": "conv", "num_output": 4, "kernel_size": 3, "pad": 1, "bias_term": False},
        {"type": "BatchNorm", "name": "bn", "bottom": "conv", "top": "conv" if scale_top == "conv" else "bn"},
        {"type": "Scale", "name": "scale", "bottom": "conv" if scale_top == "conv" else "bn", "top": scale_top},
    ]
    if extra_reader:  # the statistics-only output read again: the pair must not be fused
        layers += [{"type": "Eltwise", "name": "sum", "bottom": ["bn", scale_top], "operation": "SUM"}]
    layers += [{"type": "InnerProduct", "name": "fc", "num_output": 3}]
    return build_spec("bnscale", {"layers": layers}, (2, 6, 6), 3)


def _layer_by_layer(net, x):
    """The net's layers run one by one, each its own module (no BatchNorm+Scale fusion)."""
    from hpcdl.nets.spec import eltwise

    blobs = {"data": x}
    for layer in net.spec.layers:
        ins = [blobs[b] for b in layer.bottom]
        blobs[layer.top] = (eltwise(layer, ins, torch.maximum) if layer.type == "Eltwise"
                            else net.layers[layer.name](ins[0]))
    return blobs[net.spec.output]


@pytest.mark.parametrize("scale_top,extra_reader,fused", [("conv", False, 1), ("scaled", False, 1), ("scaled", True, 0)])
def test_a_batchnorm_and_its_scale_run_as_one_batch_norm_with_the_same_results(scale_top, extra_reader, fused):
    """Caffe's BatchNorm (statistics) + Scale (gamma, beta) as one affine batch_norm: same outputs, running
    statistics and gradients, the Scale still owning its parameters; not where another layer reads the
    statistics-only blob."""
    from hpcdl.nets.torch_build import _batchnorm_scale_pairs

    spec = _bn_scale_net(scale_top, extra_reader)
    assert len(_batchnorm_scale_pairs(spec)) == fused
    torch.manual_seed(0)
    a = build_torch(spec)
    with torch.no_grad():
        a.layers["scale"].weight.uniform_(0.5, 2.0)
        a.layers["scale"].bias.uniform_(-1.0, 1.0)
    b = build_torch(spec)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 2, 6, 6)
    for mode in ("train", "eval"):
        a.train(mode == "train")
        b.train(mode == "train")
        ya, yb = a(x), _layer_by_layer(b, x)
        torch.testing.assert_close(ya, yb, rtol=1e-5, atol=1e-6)
        if mode == "train":
            ya.square().sum().backward()
            yb.square().sum().backward()
            for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
                torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-4, atol=1e-5, msg=name)
    for key, value in a.state_dict().items():
        torch.testing.assert_close(value, b.state_dict()[key], msg=key)
    assert {"layers.scale.weight", "layers.scale.bias"} <= dict(a.named_parameters()).keys()
