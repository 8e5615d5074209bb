"""Caffe's SGD update, LARS and LARC against updates computed by hand on a tiny model.

The model is one weight row w = [3, 4] (norm 5) and one bias b = [1], with gradients
g_w = [0.6, 0.8] (norm 1) and g_b = [0.5]; momentum 0.9, weight decay 0.01.
"""

from __future__ import annotations

import pytest
import torch

from hpcdl.train.backends.pytorch.optim import CaffeSGD, ParamSlot
from hpcdl.train.recipe import recipe_from_dict
from hpcdl.train.schedule import Schedule


def tiny(rule="sgd", **kw):
    w = torch.nn.Parameter(torch.tensor([[3.0, 4.0]], dtype=torch.float64))
    b = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    # Caffe's usual multipliers: weights lr 1 decay 1, biases lr 2 decay 0
    slots = [ParamSlot("ip.weight", w, 1.0, 1.0), ParamSlot("ip.bias", b, 2.0, 0.0)]
    opt = CaffeSGD(slots, momentum=0.9, weight_decay=0.01, rule=rule, **kw)
    return w, b, opt


def set_grads(w, b):
    w.grad = torch.tensor([[0.6, 0.8]], dtype=torch.float64)
    b.grad = torch.tensor([0.5], dtype=torch.float64)


def test_caffe_sgd_puts_the_rate_inside_the_velocity_with_lr_and_decay_multipliers():
    w, b, opt = tiny()
    set_grads(w, b)
    opt.step(lr=0.1)
    # d = g + 0.01 w = [0.63, 0.84]; v = 0.1 d; w = w - v
    assert w.flatten().tolist() == pytest.approx([2.937, 3.916])
    # bias: lr_mult 2, decay_mult 0: v = 0.2 * 0.5
    assert b.tolist() == pytest.approx([0.9])
    set_grads(w, b)
    opt.step(lr=0.05)
    # d = [0.6 + 0.02937, 0.8 + 0.03916]; v = 0.9 [0.063, 0.084] + 0.05 d
    assert w.flatten().tolist() == pytest.approx([2.937 - 0.0881685, 3.916 - 0.117558])
    assert b.tolist() == pytest.approx([0.9 - (0.9 * 0.1 + 0.1 * 0.5)])


def test_momentum_correction_scales_the_velocity_by_the_rate_ratio():
    w, b, opt = tiny(momentum_correction=True)
    set_grads(w, b)
    opt.step(lr=0.1)
    set_grads(w, b)
    opt.step(lr=0.05)
    # v = 0.9 * (0.05 / 0.1) * [0.063, 0.084] + 0.05 d  (Goyal et al. 2.1)
    assert w.flatten().tolist() == pytest.approx([2.937 - 0.0598185, 3.916 - 0.079758])


def test_caffe_and_pytorch_momentum_agree_at_a_constant_rate_and_differ_after_a_change():
    w, b, opt = tiny()
    w2 = torch.nn.Parameter(w.detach().clone())
    ref = torch.optim.SGD([w2], lr=0.1, momentum=0.9, weight_decay=0.01)
    for lr in (0.1, 0.1, 0.1):
        set_grads(w, b)
        opt.step(lr)
        w2.grad = torch.tensor([[0.6, 0.8]], dtype=torch.float64)
        ref.step()
    assert torch.allclose(w, w2)
    set_grads(w, b)
    opt.step(0.01)
    for group in ref.param_groups:
        group["lr"] = 0.01
    w2.grad = torch.tensor([[0.6, 0.8]], dtype=torch.float64)
    ref.step()
    assert not torch.allclose(w, w2)


def test_lars_scales_each_weight_tensor_by_trust_times_weight_over_gradient_norm():
    w, b, opt = tiny("lars", trust=0.001)
    set_grads(w, b)
    opt.step(lr=0.1)
    local = 0.001 * 5 / (1 + 0.01 * 5)       # You et al.: eta ||w|| / (||g|| + beta ||w||)
    assert w.flatten().tolist() == pytest.approx([3 - 0.1 * local * 0.63, 4 - 0.1 * local * 0.84])
    assert b.tolist() == pytest.approx([0.9])  # a bias keeps the global rate


def test_larc_clip_takes_the_smaller_of_global_and_local_rate():
    local = 0.02 * 5 / (1 + 0.01 * 5 + 0.0)  # apex LARC: trust ||w|| / (||g|| + wd ||w|| + eps) = 0.0952
    w, b, opt = tiny("larc_clip", trust=0.02)
    set_grads(w, b)
    opt.step(lr=0.1)                          # 0.1 > local: clipped to the local rate
    assert w.flatten().tolist() == pytest.approx([3 - local * 0.63, 4 - local * 0.84])
    w, b, opt = tiny("larc_clip", trust=0.02)
    set_grads(w, b)
    opt.step(lr=0.05)                         # 0.05 < local: the global rate stands
    assert w.flatten().tolist() == pytest.approx([3 - 0.05 * 0.63, 4 - 0.05 * 0.84])


def test_larc_scale_multiplies_global_and_local_rate():
    local = 0.02 * 5 / 1.05
    w, b, opt = tiny("larc_scale", trust=0.02)
    set_grads(w, b)
    opt.step(lr=0.1)
    assert w.flatten().tolist() == pytest.approx([3 - 0.1 * local * 0.63, 4 - 0.1 * local * 0.84])


def test_warmup_with_larc_on_the_tiny_model_follows_the_hand_computed_rates():
    r = recipe_from_dict({"net": "cifar10_quick", "batch_size": 1, "base_lr": 0.2, "max_iter": 10, "warmup_iter": 4,
                          "warmup_start_lr": 0.0, "type": "LARC"}, "test")
    schedule = Schedule.from_recipe(r, 10)
    w, b, opt = tiny(r.rule, trust=r.trust)
    expected_w = [3.0, 4.0]
    v = [0.0, 0.0]
    for it in range(3):
        lr = schedule.rate(it)                 # 0, 0.05, 0.1
        assert lr == pytest.approx(0.05 * it)
        norm_w = (expected_w[0] ** 2 + expected_w[1] ** 2) ** 0.5
        rate = min(lr, 0.02 * norm_w / (1 + 0.01 * norm_w))
        d = [0.6 + 0.01 * expected_w[0], 0.8 + 0.01 * expected_w[1]]
        v = [0.9 * v[i] + rate * d[i] for i in range(2)]
        expected_w = [expected_w[i] - v[i] for i in range(2)]
        set_grads(w, b)
        opt.step(lr)
        assert w.flatten().tolist() == pytest.approx(expected_w)


def test_clip_gradients_bounds_the_global_norm_as_caffe():
    w, b, opt = tiny(clip_gradients=0.5)
    w.data.zero_()
    set_grads(w, b)
    opt.step(lr=1.0)
    scale = 0.5 / (1.0**2 + 0.5**2) ** 0.5
    assert (-w).flatten().tolist() == pytest.approx([0.6 * scale, 0.8 * scale])


def test_velocity_survives_a_state_dict_round_trip():
    w, b, opt = tiny()
    set_grads(w, b)
    opt.step(0.1)
    state = opt.state_dict()
    w2, b2, opt2 = tiny()
    opt2.load_state_dict(state)
    assert torch.equal(opt2.velocity[0], opt.velocity[0]) and opt2.last_lr == 0.1


def _forbid_host_reads(monkeypatch):
    """Reading a tensor's value on the host is what synchronises a GPU stream: make it an error."""
    def refuse(*_a, **_k):
        raise AssertionError("the optimizer step read a tensor back to the host")

    for name in ("item", "tolist", "__float__", "__bool__", "__int__", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("rule", ["sgd", "lars", "larc_clip", "larc_scale"])
def test_a_step_reads_nothing_back_to_the_host_under_every_rule_with_clipping(monkeypatch, rule):
    w, b, opt = tiny(rule, trust=0.02, clip_gradients=0.5, momentum_correction=True)
    set_grads(w, b)
    opt.step(0.1)
    expected_w = w.detach().clone()
    w, b, opt = tiny(rule, trust=0.02, clip_gradients=0.5, momentum_correction=True)
    set_grads(w, b)
    _forbid_host_reads(monkeypatch)
    opt.step(0.1)
    monkeypatch.undo()
    assert torch.equal(w.detach(), expected_w)


def test_a_weight_with_zero_norm_keeps_the_global_rate_under_lars():
    w, b, opt = tiny("lars", trust=0.001)
    w.data.zero_()
    set_grads(w, b)
    opt.step(lr=0.1)
    assert w.flatten().tolist() == pytest.approx([-0.06, -0.08])


@pytest.mark.gpu
@pytest.mark.parametrize("rule", ["lars", "larc_clip"])
def test_on_a_gpu_a_larc_step_never_synchronises_and_equals_the_cpu_step(rule):
    w, b, opt = tiny(rule, trust=0.02, clip_gradients=0.5)
    set_grads(w, b)
    opt.step(0.1)
    wc = torch.nn.Parameter(torch.tensor([[3.0, 4.0]], dtype=torch.float64, device="cuda"))
    bc = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64, device="cuda"))
    gpu = CaffeSGD([ParamSlot("ip.weight", wc, 1.0, 1.0), ParamSlot("ip.bias", bc, 2.0, 0.0)],
                   momentum=0.9, weight_decay=0.01, rule=rule, trust=0.02, clip_gradients=0.5)
    wc.grad = torch.tensor([[0.6, 0.8]], dtype=torch.float64, device="cuda")
    bc.grad = torch.tensor([0.5], dtype=torch.float64, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any device-to-host wait raises
    try:
        gpu.step(0.1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.allclose(wc.detach().cpu(), w.detach())


# --- the fused step a compiled run takes (`compile:`) ---------------------------------------

def tiny32(fused, **kw):
    """The tiny model in float32 (PyTorch's fused SGD kernel runs on float32 tensors here)."""
    w = torch.nn.Parameter(torch.tensor([[3.0, 4.0]]))
    b = torch.nn.Parameter(torch.tensor([1.0]))
    opt = CaffeSGD([ParamSlot("ip.weight", w, 1.0, 1.0), ParamSlot("ip.bias", b, 2.0, 0.0)],
                   momentum=0.9, weight_decay=0.01, fused=fused, **kw)
    return w, b, opt


def set_grads32(w, b):
    w.grad = torch.tensor([[0.6, 0.8]])
    b.grad = torch.tensor([0.5])


def test_the_fused_step_is_caffes_step_by_hand_and_the_multi_tensor_one_through_rate_changes():
    w, b, opt = tiny32(fused=True)
    assert opt.fused
    set_grads32(w, b)
    opt.step(lr=0.1)
    # the hand-computed values of test_caffe_sgd_puts_the_rate_inside_the_velocity...: Caffe's velocity
    # starts at zero, so the first step is 0.1 d (PyTorch's own first step would be buf = d)
    assert w.flatten().tolist() == pytest.approx([2.937, 3.916], rel=1e-6)
    assert b.tolist() == pytest.approx([0.9], rel=1e-6)
    set_grads32(w, b)
    opt.step(lr=0.05)
    assert w.flatten().tolist() == pytest.approx([2.937 - 0.0881685, 3.916 - 0.117558], rel=1e-6)
    assert b.tolist() == pytest.approx([0.9 - (0.9 * 0.1 + 0.1 * 0.5)], rel=1e-6)
    w2, b2, fused2 = tiny32(fused=True)
    w3, b3, plain3 = tiny32(fused=False)
    for lr in (0.1, 0.05, 0.0, 0.3, 1.5):
        set_grads32(w2, b2)
        set_grads32(w3, b3)
        fused2.step(lr)
        plain3.step(lr)
        assert torch.allclose(w2, w3, rtol=1e-6, atol=1e-7) and torch.allclose(b2, b3, rtol=1e-6, atol=1e-7)
        assert all(torch.allclose(u, v, rtol=1e-6, atol=1e-7) for u, v in zip(fused2.velocity, plain3.velocity))


def test_a_fused_step_flagged_as_overflowed_leaves_weights_and_velocities_exactly_as_they_were():
    w, b, opt = tiny32(fused=True)
    set_grads32(w, b)
    opt.step(lr=0.1)
    before = [t.detach().clone() for t in (w, b, *opt.velocity)]
    w.grad = torch.tensor([[float("inf"), float("nan")]])
    b.grad = torch.tensor([float("inf")])
    opt.step(lr=0.1, skip_if=torch.ones(1))
    assert all(torch.equal(x, y) for x, y in zip(before, (w.detach(), b.detach(), *opt.velocity)))
    set_grads32(w, b)
    opt.step(lr=0.1, skip_if=torch.zeros(1))
    assert not torch.equal(before[0], w.detach())


@pytest.mark.parametrize("kw", [{"rule": "lars"}, {"regularization": "L1"}, {"clip_gradients": 1.0},
                                {"momentum_correction": True}, {"solver": "Adam"}])
def test_only_plain_l2_sgd_is_fused_and_the_others_refuse_to_skip_on_the_device(kw):
    w, b, opt = tiny32(fused=True, **kw)
    assert not opt.fused
    set_grads32(w, b)
    with pytest.raises(ValueError, match="only a fused step skips"):
        opt.step(0.1, skip_if=torch.zeros(1))


def test_a_fused_fp16_step_settles_the_loss_scale_on_the_device_and_reads_nothing_back(monkeypatch):
    from hpcdl.train.backends.pytorch.steps import Precision, take_step

    r = recipe_from_dict({"net": "cifar10_quick", "batch_size": 1, "base_lr": 0.1, "max_iter": 1,
                          "precision": "fp16"}, "t")
    p = Precision(r, torch.device("cpu"), on_device=True)
    w, b, opt = tiny32(fused=True)
    scale = p.scale
    w.grad, b.grad = torch.tensor([[float("inf"), 1.0]]), torch.tensor([1.0])
    _forbid_host_reads(monkeypatch)
    take_step(opt, p, None, 0.1)  # overflowed: skipped, scale halved, on the device
    w.grad, b.grad = torch.tensor([[0.6, 0.8]]) * scale / 2, torch.tensor([0.5]) * scale / 2
    take_step(opt, p, None, 0.1)  # clean: unscaled by the halved scale and taken
    monkeypatch.undo()
    assert p.state_dict() == {"scale": scale / 2, "good_steps": 1, "skipped": 1}
    assert w.flatten().tolist() == pytest.approx([2.937, 3.916], rel=1e-6)
    # the clean step that completes NVIDIA's 2000 doubles it, as the host rule does
    p.load_state_dict({"scale": 1024.0, "good_steps": 1999, "skipped": 1})
    w.grad, b.grad = torch.tensor([[0.6, 0.8]]) * 1024, torch.tensor([0.5]) * 1024
    take_step(opt, p, None, 0.1)
    assert p.state_dict() == {"scale": 2048.0, "good_steps": 0, "skipped": 1}
    host = Precision(r, torch.device("cpu"))
    host.load_state_dict({"scale": 1024.0, "good_steps": 1999, "skipped": 1})
    hw, hb, hopt = tiny32(fused=False)
    hw.grad, hb.grad = torch.tensor([[0.6, 0.8]]) * 1024, torch.tensor([0.5]) * 1024
    assert host.unscale_and_check(hopt) and host.scale == 2048.0


@pytest.mark.gpu
def test_on_a_gpu_a_fused_fp16_step_with_its_loss_scale_never_synchronises():
    from hpcdl.train.backends.pytorch.steps import Precision, take_step

    r = recipe_from_dict({"net": "cifar10_quick", "batch_size": 1, "base_lr": 0.1, "max_iter": 1,
                          "precision": "fp16"}, "t")
    p = Precision(r, torch.device("cuda"), on_device=True)
    w = torch.nn.Parameter(torch.tensor([[3.0, 4.0]], device="cuda"))
    b = torch.nn.Parameter(torch.tensor([1.0], device="cuda"))
    opt = CaffeSGD([ParamSlot("ip.weight", w, 1.0, 1.0), ParamSlot("ip.bias", b, 2.0, 0.0)],
                   momentum=0.9, weight_decay=0.01, fused=True)
    w.grad = torch.tensor([[0.6, 0.8]], device="cuda") * p.scale
    b.grad = torch.tensor([0.5], device="cuda") * p.scale
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any device-to-host wait raises
    try:
        take_step(opt, p, None, 0.1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert w.detach().cpu().flatten().tolist() == pytest.approx([2.937, 3.916], rel=1e-6)
