"""Learning rates: Caffe's lr_policy formulas, linear scaling and gradual warm-up.

Caffe's policies (BVLC/caffe src/caffe/solvers/sgd_solver.cpp, GetLearningRate), with
`it` the iteration about to run, counted from 0:

    fixed      base_lr
    step       base_lr * gamma ^ floor(it / stepsize)
    exp        base_lr * gamma ^ it
    inv        base_lr * (1 + gamma * it) ^ (-power)
    multistep  base_lr * gamma ^ current_step, where current_step advances by at most one
               stepvalue per iteration (Caffe's counter: a repeated value [100, 100]
               gives gamma at 100 and gamma^2 at 101)
    poly       base_lr * (1 - it / max_iter) ^ power
    sigmoid    base_lr * 1 / (1 + exp(-gamma * (it - stepsize)))
    cosine     base_lr * (1 + cos(pi * it / max_iter)) / 2      (not in Caffe; SGDR, DLE RN50)

Linear scaling (Goyal et al., arXiv:1706.02677, 2.1): with `reference_batch` set, base_lr
is the rate for that global batch and is multiplied by global_batch / reference_batch.
Gradual warm-up (Goyal 2.2): for the first W iterations the rate climbs linearly from
`warmup_start_lr` (default: the unscaled base_lr, as in the paper) to the policy's rate
at iteration W, then follows the policy.

The functions are pure Python so every framework backend uses the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpcdl.train.recipe import Recipe


def multistep_count(stepvalue, it: int) -> int:
    """Caffe's `current_step_` at iteration `it`.

    GetLearningRate runs once per iteration and moves on to the next step value only if
    `iter_ >= stepvalue(current_step_)`: one step value per iteration at most. Step k is
    therefore taken at t_k = max(stepvalue[k], t_{k-1} + 1), and current_step at `it` is
    the number of t_k <= it (no state to carry, so a resumed run gets the same rate).
    """
    count, taken = 0, -1
    for value in stepvalue:
        taken = max(int(value), taken + 1)
        if taken > it:
            break
        count += 1
    return count


def policy_rate(recipe: Recipe, base: float, it: int, max_iter: int) -> float:
    r = recipe
    if r.lr_policy == "fixed":
        return base
    if r.lr_policy == "step":
        return base * r.gamma ** (it // r.stepsize)
    if r.lr_policy == "multistep":
        return base * r.gamma ** multistep_count(r.stepvalue, it)
    if r.lr_policy == "exp":
        return base * r.gamma**it
    if r.lr_policy == "inv":
        return base * (1 + r.gamma * it) ** (-r.power)
    if r.lr_policy == "poly":
        return base * (1 - min(it, max_iter) / max_iter) ** r.power
    if r.lr_policy == "sigmoid":
        return base * (1.0 / (1 + math.exp(-r.gamma * (it - r.stepsize))))
    if r.lr_policy == "cosine":
        return base * 0.5 * (1 + math.cos(math.pi * min(it, max_iter) / max_iter))
    raise ValueError(r.lr_policy)


@dataclass(frozen=True)
class Schedule:
    recipe: Recipe
    max_iter: int
    base_lr: float         # after linear scaling
    warmup_iters: int
    warmup_start_lr: float

    @classmethod
    def from_recipe(cls, recipe: Recipe, max_iter: int, global_batch: int | None = None,
                    iters_per_epoch: int | None = None) -> "Schedule":
        base = recipe.base_lr
        if recipe.reference_batch and global_batch:
            base = recipe.base_lr * global_batch / recipe.reference_batch
        warmup = recipe.warmup_iter or 0
        if recipe.warmup_epochs:
            warmup = int(round(recipe.warmup_epochs * (iters_per_epoch or 1)))
        start = recipe.warmup_start_lr if recipe.warmup_start_lr is not None else recipe.base_lr
        return cls(recipe, max_iter, base, warmup, start)

    def rate(self, it: int) -> float:
        if it < self.warmup_iters:
            target = policy_rate(self.recipe, self.base_lr, self.warmup_iters, self.max_iter)
            return self.warmup_start_lr + (target - self.warmup_start_lr) * it / self.warmup_iters
        return policy_rate(self.recipe, self.base_lr, it, self.max_iter)


def learning_rate(recipe: Recipe, it: int, max_iter: int, global_batch: int | None = None,
                  iters_per_epoch: int | None = None) -> float:
    """The rate at iteration `it` (the foundation's function, now with scaling and warm-up)."""
    return Schedule.from_recipe(recipe, max_iter, global_batch, iters_per_epoch).rate(it)
