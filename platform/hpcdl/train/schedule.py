"""Learning-rate policies with Caffe's formulas (BVLC/caffe src/caffe/solvers/sgd_solver.cpp)."""

from __future__ import annotations

import math

from hpcdl.train.recipe import Recipe


def learning_rate(recipe: Recipe, it: int, max_iter: int) -> float:
    r, base = recipe, recipe.base_lr
    if r.lr_policy == "fixed":
        return base
    if r.lr_policy == "step":
        return base * r.gamma ** (it // r.stepsize)
    if r.lr_policy == "multistep":
        return base * r.gamma ** sum(1 for s in r.stepvalue if it >= s)
    if r.lr_policy == "exp":
        return base * r.gamma**it
    if r.lr_policy == "inv":
        return base * (1 + r.gamma * it) ** (-r.power)
    if r.lr_policy == "poly":
        return base * (1 - it / max_iter) ** r.power
    if r.lr_policy == "sigmoid":
        return base / (1 + math.exp(-r.gamma * (it - r.stepsize)))
    if r.lr_policy == "cosine":
        return base * 0.5 * (1 + math.cos(math.pi * it / max_iter))
    raise ValueError(r.lr_policy)
