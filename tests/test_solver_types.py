"""Caffe's solver types other than SGD, and L1 regularisation, against references written out here.

Each reference follows the update its Caffe solver computes (BVLC/caffe
src/caffe/solvers/*_solver.cpp, Caffe's solver tutorial), written element by element in
plain float64 numpy: weight decay joins the gradient first (Regularize), then the type's
own update is subtracted. The PyTorch optimizer (hpcdl.train.backends.pytorch.optim) and the numpy rule
that TensorFlow and MXNet share (hpcdl.train.update_rule) must both follow it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hpcdl.errors import HpcdlError
from hpcdl.train.backends.pytorch.optim import CaffeSGD, ParamSlot
from hpcdl.train.recipe import recipe_from_dict
from hpcdl.train.update_rule import SGDRule

W0 = [np.array([[0.5, -1.5, 2.0], [-0.25, 0.0, 1.0]]), np.array([0.3, -0.2])]
GRADS = [[np.array([[0.1, -0.4, 0.2], [0.05, 0.3, -0.6]]), np.array([0.5, -0.1])],
         [np.array([[-0.2, 0.1, 0.3], [0.4, -0.3, 0.1]]), np.array([-0.25, 0.2])],
         [np.array([[0.3, 0.3, -0.1], [-0.1, 0.2, 0.2]]), np.array([0.1, 0.4])]]
LR_MULT, DECAY_MULT = [1.0, 2.0], [1.0, 0.0]  # Caffe's usual weights / biases multipliers
LRS = [0.1, 0.1, 0.05]
MU, MU2, DELTA, RMS, WD = 0.9, 0.999, 1e-8, 0.99, 0.01


def reference(solver: str, regularization: str = "L2", momentum: float = MU) -> list[np.ndarray]:
    """Three steps of Caffe's update, scalar by scalar."""
    ws = [w.copy() for w in W0]
    hist = [np.zeros_like(w) for w in W0]
    hist2 = [np.zeros_like(w) for w in W0]
    for t, (grads, lr) in enumerate(zip(GRADS, LRS), start=1):
        for p in range(len(ws)):
            w, h, h2 = ws[p].reshape(-1), hist[p].reshape(-1), hist2[p].reshape(-1)
            rate = lr * LR_MULT[p]
            wd = WD * DECAY_MULT[p]
            for k in range(w.size):
                g = grads[p].reshape(-1)[k]
                g += wd * (math.copysign(1.0, w[k]) if w[k] != 0 else 0.0) if regularization == "L1" else wd * w[k]
                if solver == "SGD":
                    h[k] = momentum * h[k] + rate * g
                    u = h[k]
                elif solver == "Nesterov":
                    before = h[k]
                    h[k] = momentum * h[k] + rate * g
                    u = (1 + momentum) * h[k] - momentum * before
                elif solver == "AdaGrad":
                    h[k] += g * g
                    u = rate * g / (math.sqrt(h[k]) + DELTA)
                elif solver == "RMSProp":
                    h[k] = RMS * h[k] + (1 - RMS) * g * g
                    u = rate * g / (math.sqrt(h[k]) + DELTA)
                elif solver == "AdaDelta":
                    h[k] = momentum * h[k] + (1 - momentum) * g * g
                    s = g * math.sqrt((h2[k] + DELTA) / (h[k] + DELTA))
                    h2[k] = momentum * h2[k] + (1 - momentum) * s * s
                    u = rate * s
                else:  # Adam, bias correction folded into the rate
                    h[k] = momentum * h[k] + (1 - momentum) * g
                    h2[k] = MU2 * h2[k] + (1 - MU2) * g * g
                    u = rate * math.sqrt(1 - MU2 ** t) / (1 - momentum ** t) * h[k] / (math.sqrt(h2[k]) + DELTA)
                w[k] -= u
    return ws


def torch_steps(solver: str, regularization: str = "L2", momentum: float = MU) -> list[np.ndarray]:
    params = [torch.nn.Parameter(torch.tensor(w)) for w in W0]
    slots = [ParamSlot(f"p{i}", p, LR_MULT[i], DECAY_MULT[i]) for i, p in enumerate(params)]
    opt = CaffeSGD(slots, momentum, WD, solver=solver, momentum2=MU2, delta=DELTA, rms_decay=RMS,
                   regularization=regularization)
    for grads, lr in zip(GRADS, LRS):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g)
        opt.step(lr)
    return [p.detach().numpy() for p in params]


def numpy_steps(solver: str, regularization: str = "L2", momentum: float = MU) -> list[np.ndarray]:
    rule = SGDRule(momentum, WD, lr_mults=LR_MULT, decay_mults=DECAY_MULT, solver=solver, momentum2=MU2,
                   delta=DELTA, rms_decay=RMS, regularization=regularization)
    ws = [w.copy() for w in W0]
    for grads, lr in zip(GRADS, LRS):
        ws = rule.step(ws, grads, lr)
    return ws


CASES = [("SGD", "L2", MU), ("SGD", "L1", MU), ("Nesterov", "L2", MU), ("Nesterov", "L1", MU),
         ("AdaGrad", "L2", 0.0), ("RMSProp", "L2", 0.0), ("AdaDelta", "L2", 0.95), ("Adam", "L2", MU),
         ("Adam", "L1", MU)]


@pytest.mark.parametrize("solver,regularization,momentum", CASES)
def test_pytorch_and_numpy_rules_take_caffes_steps(solver, regularization, momentum):
    want = reference(solver, regularization, momentum)
    for got in (torch_steps(solver, regularization, momentum), numpy_steps(solver, regularization, momentum)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_adams_first_step_moves_each_weight_by_about_the_rate():
    # with the bias correction, step 1 is rate * g / (|g| + delta): the sign of the gradient times the rate
    got = torch_steps("Adam")  # three steps, but the first one alone is checked through the reference
    assert all(np.isfinite(g).all() for g in got)
    rule = SGDRule(MU, 0.0, solver="Adam", momentum2=MU2, delta=DELTA)
    (w,) = rule.step([np.array([1.0, 1.0])], [np.array([0.3, -2.0])], 0.001)
    np.testing.assert_allclose(w, [0.999, 1.001], rtol=1e-7)


def test_the_histories_survive_a_state_round_trip_bit_exact():
    for solver in ("Adam", "AdaDelta", "RMSProp"):
        momentum = 0.0 if solver == "RMSProp" else MU
        whole = numpy_steps(solver, momentum=momentum)
        rule = SGDRule(momentum, WD, lr_mults=LR_MULT, decay_mults=DECAY_MULT, solver=solver, momentum2=MU2,
                       delta=DELTA, rms_decay=RMS)
        ws = rule.step([w.copy() for w in W0], GRADS[0], LRS[0])
        saved = rule.state("m:")
        again = SGDRule(momentum, WD, lr_mults=LR_MULT, decay_mults=DECAY_MULT, solver=solver, momentum2=MU2,
                        delta=DELTA, rms_decay=RMS)
        again.load_state(saved, len(ws), "m:")
        for grads, lr in zip(GRADS[1:], LRS[1:]):
            ws = again.step(ws, grads, lr)
        for g, w in zip(ws, whole):
            assert np.array_equal(g, w), solver

        params = [torch.nn.Parameter(torch.tensor(w)) for w in W0]
        slots = [ParamSlot(f"p{i}", p, LR_MULT[i], DECAY_MULT[i]) for i, p in enumerate(params)]
        opt = CaffeSGD(slots, momentum, WD, solver=solver, momentum2=MU2, delta=DELTA, rms_decay=RMS)
        for p, g in zip(params, GRADS[0]):
            p.grad = torch.tensor(g)
        opt.step(LRS[0])
        state = {k: (dict(v) if isinstance(v, dict) else v) for k, v in opt.state_dict().items()}
        opt2 = CaffeSGD(slots, momentum, WD, solver=solver, momentum2=MU2, delta=DELTA, rms_decay=RMS)
        opt2.load_state_dict(state)
        assert opt2.t == 1
        for grads, lr in zip(GRADS[1:], LRS[1:]):
            for p, g in zip(params, grads):
                p.grad = torch.tensor(g)
            opt2.step(lr)
        for p, w in zip(params, torch_steps(solver, momentum=momentum)):
            assert np.array_equal(p.detach().numpy(), w), solver


def recipe(**fields):
    base = {"net": "cifar10_quick", "batch_size": 4, "base_lr": 0.001, "max_iter": 3}
    base.update(fields)
    return recipe_from_dict(base, "r.yaml")


@pytest.mark.parametrize("fields,named", [
    ({"type": "Adam", "trust_coefficient": 0.02}, "trust_coefficient"),
    ({"type": "AdaGrad", "larc_mode": "scale"}, "larc_mode"),
    ({"type": "SGD", "momentum2": 0.99}, "momentum2"),
    ({"type": "Adam", "rms_decay": 0.9}, "rms_decay"),
    ({"type": "Nesterov", "delta": 1e-6}, "delta"),
    ({"type": "Adam", "momentum_correction": True}, "momentum_correction"),
    ({"type": "LARS", "regularization_type": "L1"}, "regularization_type"),
    ({"type": "ADAM"}, "type"),
    ({"type": "Adam", "regularization_type": "L3"}, "regularization_type"),
])
def test_a_field_the_solver_type_does_not_read_is_refused_by_name(fields, named):
    with pytest.raises(HpcdlError, match=named):
        recipe(**fields)


def test_the_recipe_carries_the_type_to_both_rules():
    r = recipe(type="Adam", momentum=0.9, momentum2=0.99, delta=1e-6, regularization_type="L1")
    assert (r.solver, r.rule) == ("Adam", "sgd")
    rule = SGDRule.from_recipe(r, [(2, 3)])
    assert (rule.solver, rule.momentum2, rule.delta, rule.regularization) == ("Adam", 0.99, 1e-6, "L1")
    assert recipe(type="LARS").solver == "SGD"
    assert recipe(type="RMSProp", momentum=0).rms_decay == 0.99


# ---------------------------------------------------------------- Caffe solver files

ADAM_SOLVER = """# a LeNet-style Adam solver, as Caffe's mnist examples set Adam up
net: "lenet_train_test.prototxt"
type: "Adam"
base_lr: 0.001
momentum: 0.9
momentum2: 0.999
delta: 1e-8
lr_policy: "fixed"
weight_decay: 0.0005
regularization_type: "L1"
max_iter: 300
display: 50
solver_mode: CPU
"""

OLD_NESTEROV_SOLVER = """# a solver from before `type` replaced the solver_type enum
base_lr: 0.01
lr_policy: "step"
gamma: 0.1
stepsize: 100
momentum: 0.95
rms_decay: 0.98
weight_decay: 0.0005
max_iter: 200
solver_type: NESTEROV
"""


def test_an_adam_solver_file_imports_with_its_fields(tmp_path):
    from hpcdl.caffe.solver import import_recipe

    path = tmp_path / "adam_solver.prototxt"
    path.write_text(ADAM_SOLVER)
    fields, notes, _ = import_recipe([path], net="cifar10_quick")
    assert fields["type"] == "Adam" and fields["momentum"] == 0.9 and fields["momentum2"] == 0.999
    assert fields["delta"] == 1e-8 and fields["regularization_type"] == "L1" and "rms_decay" not in fields
    r = recipe_from_dict({**fields, "batch_size": 8}, "adam")
    assert (r.solver, r.base_lr, r.regularization_type) == ("Adam", 0.001, "L1")


def test_an_old_solver_type_enum_imports_as_the_type(tmp_path):
    from hpcdl.caffe.solver import import_recipe

    path = tmp_path / "nesterov_solver.prototxt"
    path.write_text(OLD_NESTEROV_SOLVER)
    fields, notes, _ = import_recipe([path], net="cifar10_quick")
    assert fields["type"] == "Nesterov" and fields["momentum"] == 0.95 and "delta" not in fields
    assert any("rms_decay" in n and "ignored" in n for n in notes)  # Nesterov does not read it
    assert recipe_from_dict({**fields, "batch_size": 8}, "nesterov").solver == "Nesterov"


# ---------------------------------------------------------------- training with them

def test_adam_at_lenets_rate_trains_digits(tmp_path):
    """Caffe's mnist Adam solver's settings (base_lr 0.001, momentum 0.9, momentum2 0.999, fixed rate)
    on the digits: the loss falls well below its start in 120 iterations of the smallest net."""
    from test_train import records, train_here, write_recipe

    path = write_recipe(tmp_path, "adam", type="Adam", base_lr=0.001, momentum=0.9, momentum2=0.999,
                        weight_decay=0.0005, lr_policy="fixed", max_iter=120, display=10, batch_size=32,
                        data={"source": "digits", "image_size": 16})
    train_here(path, tmp_path / "r.jsonl")
    losses = [r["loss"] for r in records(tmp_path / "r.jsonl") if r["event"] == "step"]
    assert len(losses) >= 10
    assert max(losses[-3:]) < 0.5 * losses[0], losses


def test_an_adam_run_resumed_from_its_snapshot_takes_the_uninterrupted_runs_steps(tmp_path):
    """Adam's two histories and its step count go into the snapshot: the resumed run is the same run."""
    from test_train import final_weights, records, train_here, write_recipe

    common = {"type": "Adam", "base_lr": 0.001, "momentum": 0.9, "snapshot": 3, "batch_size": 8}
    whole = write_recipe(tmp_path, "whole", max_iter=6, snapshot_prefix=str(tmp_path / "whole" / "w"), **common)
    train_here(whole, tmp_path / "whole.jsonl")
    prefix = str(tmp_path / "part" / "w")
    train_here(write_recipe(tmp_path, "part", max_iter=3, snapshot_prefix=prefix, **common), tmp_path / "part.jsonl")
    train_here(write_recipe(tmp_path, "part", max_iter=6, snapshot_prefix=prefix, **common), tmp_path / "part.jsonl")
    assert [r["iter"] for r in records(tmp_path / "part.jsonl") if r["event"] == "resume"] == [3]
    steps = lambda p: {r["iter"]: r["loss"] for r in records(p) if r["event"] == "step"}  # noqa: E731
    assert steps(tmp_path / "part.jsonl") == steps(tmp_path / "whole.jsonl")
    a, b = final_weights(tmp_path / "whole" / "w"), final_weights(tmp_path / "part" / "w")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_horovod_resumes_an_adam_run_from_its_snapshot_as_the_uninterrupted_run(tmp_path):
    """--dist horovod steps with the same CaffeSGD: Adam's histories and step count go into its
    snapshot arrays too (one rank, hvd.init without horovodrun). Two Horovod starts, not three:
    the uninterrupted run's snapshot at 2 is where the second run resumes, once its snapshot at 4
    is moved aside to compare with."""
    import sys

    import numpy as np
    import yaml
    from framework_tools import records, require_horovod, run

    require_horovod()
    path = tmp_path / "hvd.yaml"
    path.write_text(yaml.safe_dump({
        "name": "hvd", "net": "cifar10_quick", "batch_size": 8, "base_lr": 0.001, "max_iter": 4,
        "display": 1, "type": "Adam", "momentum": 0.9, "snapshot": 2, "snapshot_prefix": str(tmp_path / "s"),
        "data": {"source": "synthetic", "synthetic_samples": 64, "image_size": 32, "num_classes": 10}}))

    def train(results):
        run([sys.executable, "-m", "hpcdl.train", path, "--dist", "horovod", "--results", tmp_path / results])
        return tmp_path / results

    whole = train("whole.jsonl")
    last = tmp_path / "s_pytorch_iter_4.npz"
    last.rename(tmp_path / "whole_iter_4.npz")
    part = train("part.jsonl")
    assert [r.get("resumed_from") for r in records(part) if r["event"] == "start"] == [2]
    steps = lambda p, first: {r["iter"]: r["loss"] for r in records(p) if r["event"] == "step" and r["iter"] > first}  # noqa: E731
    assert steps(part, 2) == steps(whole, 2) and steps(part, 2)
    with np.load(tmp_path / "whole_iter_4.npz") as a, np.load(last) as b:
        assert a.files == b.files and {"m_t", "m_h2_0"} <= set(a.files)
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_a_snapshot_of_another_solver_type_does_not_fit():
    """An SGD run does not resume from an Adam run's snapshot (its velocity would be Adam's first moment)."""
    from hpcdl.train import checkpoint

    net = torch.nn.Linear(2, 1)
    slots = lambda: [ParamSlot(n, p) for n, p in net.named_parameters()]  # noqa: E731
    adam = CaffeSGD(slots(), 0.9, 0.0, solver="Adam")
    state = {"iter": 3, "model": net.state_dict(), "optimizer": adam.state_dict()}
    assert checkpoint.state_fits(state, net, CaffeSGD(slots(), 0.9, 0.0, solver="Adam")) is None
    assert "solver type Adam" in checkpoint.state_fits(state, net, CaffeSGD(slots(), 0.9, 0.0))
    old = {"iter": 3, "model": net.state_dict(), "optimizer": CaffeSGD(slots(), 0.9, 0.0).state_dict()}
    del old["optimizer"]["type"]  # a snapshot from before the solver types: SGD's
    assert checkpoint.state_fits(old, net, CaffeSGD(slots(), 0.9, 0.0)) is None


def test_a_framework_snapshot_of_another_solver_type_is_skipped(tmp_path):
    """TensorFlow, MXNet and Horovod snapshots say their solver type; another type's is not loaded."""
    from types import SimpleNamespace

    from hpcdl.train.framework_loop import restore_snapshot, write_snapshot
    from hpcdl.train.ranks import RankInfo

    loaded = []
    trainer = SimpleNamespace(framework="tensorflow", state=lambda: {"w0": np.ones(2), "v0": np.zeros(2)},
                              load_state=loaded.append)
    adam = recipe(type="Adam", snapshot=1, snapshot_prefix=str(tmp_path / "s"))
    write_snapshot(adam, trainer, RankInfo(0, 1, 0, "none"), 1, 0, 8)
    assert restore_snapshot(adam, trainer) == (1, 0, 8) and len(loaded) == 1
    with pytest.raises(HpcdlError, match="solver type Adam, not SGD"):
        restore_snapshot(recipe(snapshot=1, snapshot_prefix=str(tmp_path / "s")), trainer)
    assert len(loaded) == 1
