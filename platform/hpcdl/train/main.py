"""Entry point of one rank: find out who we are, apply the plan, train, write results."""

from __future__ import annotations

import argparse
import os
import sys

from hpcdl.errors import HpcdlError
from hpcdl.train.binding import apply_plan, load_plan
from hpcdl.train.ranks import rank_info
from hpcdl.train.recipe import load_recipe
from hpcdl.train.results import ResultsWriter


def run_training(recipe_path: str, plan_path: str | None = None, results_path: str | None = None,
                 overrides: dict | None = None, framework: str | None = None, dist: str | None = None) -> dict:
    recipe = load_recipe(recipe_path)
    if overrides:
        recipe = recipe.model_copy(update=overrides)
    me = rank_info()
    plan = load_plan(plan_path)
    apply_plan(plan, me)  # before torch starts its thread pool
    context = {
        "site": plan["site"] if plan else "none",
        "nodes": plan["nodes"] if plan else 1,
        "distributed": dist or (plan or {}).get("distributed", "gloo"),
        "plan_summary": _plan_summary(plan),
    }
    train = backend_for(framework or (plan or {}).get("framework", "pytorch"), context["distributed"])

    writer = ResultsWriter(results_path, enabled=me.rank == 0)
    try:
        summary = train(recipe, me, writer, context)
    finally:
        writer.close()
    if me.world_size > 1:
        exit_rank(0)
    return summary


def backend_for(framework: str, distributed: str):
    """The backend's train(recipe, me, results, context), imported only when chosen."""
    if framework == "pytorch" and distributed == "horovod":
        from hpcdl.train.horovod_torch import train
    elif framework == "pytorch":
        from hpcdl.train.torch_backend import train
    elif framework == "tensorflow":
        from hpcdl.train.tf_backend import train
    elif framework == "mxnet":
        from hpcdl.train.mxnet_backend import train
    else:
        raise HpcdlError(f"framework: {framework!r} is not one of pytorch, tensorflow, mxnet")
    return train


def exit_rank(status: int) -> None:
    """Leave without running C++ static destructors.

    gloo's worker threads can still be joinable when the interpreter tears down, and
    std::terminate then aborts a rank whose training finished fine (seen here about one
    run in four with torch 2.13). Everything the rank owes is written and flushed first.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _plan_summary(plan: dict | None) -> dict | None:
    if not plan:
        return None
    return {k: plan[k] for k in ("site", "node_kind", "nodes", "ranks_per_node", "threads_per_rank", "mode")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.train", description="Train a recipe (one rank).")
    parser.add_argument("recipe")
    parser.add_argument("--plan", help="plan.json written by hpcdl render")
    parser.add_argument("--results", help="JSON-lines results file (rank 0 writes it)")
    parser.add_argument("--max-iter", type=int, help="override the recipe's max_iter")
    parser.add_argument("--framework", choices=("pytorch", "tensorflow", "mxnet"), help="backend (default: the plan's, else pytorch)")
    parser.add_argument("--dist", help="distribution (default: the plan's): gloo, nccl, mpi or horovod (PyTorch); "
                        "mwms (TensorFlow); kvstore (MXNet)")
    args = parser.parse_args(argv)
    overrides = {"max_iter": args.max_iter} if args.max_iter else None
    try:
        run_training(args.recipe, args.plan, args.results, overrides, args.framework, args.dist)
    except HpcdlError as exc:
        print(f"hpcdl train: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
