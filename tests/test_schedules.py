"""Learning-rate policies against Caffe's formulas (sgd_solver.cpp), warm-up and linear scaling."""

from __future__ import annotations

import math

import pytest

from hpcdl.train.recipe import recipe_from_dict
from hpcdl.train.schedule import Schedule, learning_rate


def recipe(**solver):
    return recipe_from_dict({"net": "cifar10_quick", "batch_size": 8, "base_lr": 0.01, "max_iter": 1000, **solver}, "test")


# (solver fields, iteration, Caffe's value written out by hand from GetLearningRate)
CAFFE_CASES = [
    ({"lr_policy": "fixed"}, 0, 0.01),
    ({"lr_policy": "fixed"}, 999, 0.01),
    ({"lr_policy": "step", "gamma": 0.1, "stepsize": 100}, 99, 0.01),
    ({"lr_policy": "step", "gamma": 0.1, "stepsize": 100}, 100, 0.001),
    ({"lr_policy": "step", "gamma": 0.1, "stepsize": 100}, 250, 0.0001),
    ({"lr_policy": "multistep", "gamma": 0.5, "stepvalue": [10, 30]}, 9, 0.01),
    ({"lr_policy": "multistep", "gamma": 0.5, "stepvalue": [10, 30]}, 10, 0.005),
    ({"lr_policy": "multistep", "gamma": 0.5, "stepvalue": [10, 30]}, 30, 0.0025),
    ({"lr_policy": "exp", "gamma": 0.99}, 3, 0.01 * 0.99 * 0.99 * 0.99),
    ({"lr_policy": "inv", "gamma": 0.0001, "power": 0.75}, 500, 0.01 * (1 + 0.0001 * 500) ** -0.75),
    ({"lr_policy": "poly", "power": 0.5}, 750, 0.01 * math.sqrt(0.25)),
    ({"lr_policy": "poly", "power": 2.0}, 500, 0.01 * 0.25),
    ({"lr_policy": "sigmoid", "gamma": -0.05, "stepsize": 200}, 200, 0.005),
    ({"lr_policy": "sigmoid", "gamma": -0.05, "stepsize": 200}, 300, 0.01 / (1 + math.exp(0.05 * 100))),
    ({"lr_policy": "cosine"}, 500, 0.005),
    ({"lr_policy": "cosine"}, 1000, 0.0),
]


@pytest.mark.parametrize("solver,it,expected", CAFFE_CASES, ids=[f"{c[0]['lr_policy']}@{c[1]}" for c in CAFFE_CASES])
def test_every_lr_policy_gives_caffes_rate(solver, it, expected):
    assert learning_rate(recipe(**solver), it, 1000) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_every_policy_of_the_recipe_vocabulary_is_covered():
    from typing import get_args

    from hpcdl.train.recipe import Recipe

    policies = set(get_args(Recipe.model_fields["lr_policy"].annotation))
    assert policies == {c[0]["lr_policy"] for c in CAFFE_CASES}


def test_linear_scaling_multiplies_the_rate_by_global_over_reference_batch():
    # Goyal et al.: eta = 0.1 * kn / 256; 8192 images -> 3.2
    r = recipe(base_lr=0.1, reference_batch=256, lr_policy="step", stepsize=10_000)
    assert Schedule.from_recipe(r, 1000, global_batch=8192).rate(0) == pytest.approx(3.2)


def test_gradual_warmup_climbs_linearly_from_the_reference_rate_to_the_scaled_rate():
    # Goyal 2.2: start at eta, add a constant each iteration, reach k*eta after the warm-up
    r = recipe(base_lr=0.1, reference_batch=256, warmup_iter=100, lr_policy="multistep", stepvalue=[500])
    s = Schedule.from_recipe(r, 1000, global_batch=1024)   # k = 4
    assert s.rate(0) == pytest.approx(0.1)
    assert s.rate(50) == pytest.approx(0.1 + (0.4 - 0.1) * 0.5)
    assert s.rate(99) - s.rate(98) == pytest.approx(0.003)
    assert s.rate(100) == pytest.approx(0.4)
    assert s.rate(499) == pytest.approx(0.4)
    assert s.rate(500) == pytest.approx(0.04)


def test_warmup_in_epochs_counts_iterations_per_epoch():
    r = recipe(base_lr=1.0, warmup_epochs=2, warmup_start_lr=0.0)
    s = Schedule.from_recipe(r, 1000, global_batch=8, iters_per_epoch=25)
    assert s.warmup_iters == 50
    assert s.rate(25) == pytest.approx(0.5)


def test_lars_recipe_warmup_then_poly_power_2_as_you_et_al():
    r = recipe(base_lr=2.0, lr_policy="poly", power=2.0, warmup_iter=10, warmup_start_lr=0.0, type="LARS")
    s = Schedule.from_recipe(r, 100)
    assert s.rate(0) == 0.0
    assert s.rate(10) == pytest.approx(2.0 * (1 - 10 / 100) ** 2)
    assert s.rate(5) == pytest.approx(0.5 * s.rate(10))
