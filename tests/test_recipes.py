"""Shipped recipes read as Caffe solvers; a malformed recipe is refused naming the field."""

from __future__ import annotations

import pytest

from conftest import RECIPES, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.nets import load_net
from hpcdl.train.recipe import load_recipe, recipe_from_dict
from hpcdl.train.schedule import Schedule

SHIPPED = ["alexnet", "caffenet", "cifar10-quick", "digits-quick", "googlenet", "mesh-spatial", "resnet50", "resnet50-goyal-8k", "resnet50-lars-32k"]


def test_every_issue_recipe_ships():
    assert sorted(p.stem for p in RECIPES.glob("*.yaml")) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_recipe_loads_and_names_a_shipped_net(name):
    r = load_recipe(RECIPES / f"{name}.yaml")
    assert load_net(r.net).parameter_count > 0
    assert r.max_iter or r.epochs


def test_goyal_recipe_reaches_3_2_after_five_epochs_of_warmup_at_8k():
    r = load_recipe(RECIPES / "resnet50-goyal-8k.yaml")
    s = Schedule.from_recipe(r, r.max_iter, global_batch=8192, iters_per_epoch=156)
    assert s.rate(0) == pytest.approx(0.1)
    assert s.warmup_iters == 780
    assert s.rate(780) == pytest.approx(3.2)
    assert s.rate(r.stepvalue[0]) == pytest.approx(0.32)
    assert r.momentum_correction and r.no_bias_decay


def test_lars_recipe_uses_lars_with_the_papers_trust_and_poly_power_2():
    r = load_recipe(RECIPES / "resnet50-lars-32k.yaml")
    assert (r.type, r.rule, r.trust, r.lr_policy, r.power) == ("LARS", "lars", 0.001, "poly", 2.0)


BAD = [
    ({"base_lr": -1}, "base_lr"),
    ({"lr_policy": "triangular"}, "lr_policy"),
    ({"lr_policy": "step"}, "stepsize"),
    ({"lr_policy": "multistep"}, "stepvalue"),
    ({"momentum": 1.5}, "momentum"),
    ({"iter_size": 0}, "iter_size"),
    ({"type": "Adagrad"}, "type"),
    ({"larc_mode": "both"}, "larc_mode"),
    ({"data": {"source": "mnist"}}, "data.source"),
    ({"data": {"image_size": 32, "crop": 40}}, "crop"),
    ({"precision": "fp8"}, "precision"),
    ({"snapshot_every": 10}, "snapshot_every"),
    ({"max_iter": None}, "max_iter"),
    ({"warmup_iter": 5, "warmup_epochs": 1}, "warmup"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[b[1] for b in BAD])
def test_malformed_recipe_is_refused_naming_the_field(change, field):
    data = {"net": "cifar10_quick", "batch_size": 8, "base_lr": 0.01, "max_iter": 10, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(HpcdlError, match=field):
        recipe_from_dict(data, "bad.yaml")


def test_hpcdl_train_refuses_a_bad_recipe_with_one_line_and_status_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("net: cifar10_quick\nbatch_size: 8\nbase_lr: 0.01\nmax_iter: 10\nlr_policy: sometimes\n")
    proc = hpcdl("train", bad)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "lr_policy" in proc.stderr and "bad.yaml" in proc.stderr


def test_a_recipe_whose_data_path_names_an_unset_variable_says_so(tmp_path, monkeypatch):
    from hpcdl.train.data import load_dataset

    monkeypatch.delenv("IMAGENET_DIR", raising=False)
    r = load_recipe(RECIPES / "resnet50.yaml")
    with pytest.raises(HpcdlError, match="data.path"):
        load_dataset(r.data, (3, 224, 224), 1)
