"""Entry point of one rank: find out who we are, apply the plan, train, write results."""

from __future__ import annotations

import argparse
import os
import sys

from hpcdl.errors import HpcdlError
from hpcdl.launch import PREEMPTED_EXIT
from hpcdl.train import checkpoint
from hpcdl.train.backends import backend_for
from hpcdl.train.binding import apply_plan, load_plan
from hpcdl.train.ranks import rank_info
from hpcdl.train.recipe import load_recipe
from hpcdl.train.results import ResultsWriter


def run_training(recipe_path: str, plan_path: str | None = None, results_path: str | None = None,
                 overrides: dict | None = None, exit_ranks: bool = True,
                 framework: str | None = None, dist: str | None = None, start_over: bool = False) -> dict:
    recipe = load_recipe(recipe_path)
    if overrides:
        from hpcdl.train.recipe import recipe_from_dict

        changed = {k: v for k, v in overrides.items() if v is not None}
        recipe = recipe_from_dict({**recipe.model_dump(), **changed}, f"{recipe_path} (with {', '.join(changed)})")
    me = rank_info()
    plan = load_plan(plan_path)
    applied = apply_plan(plan, me)  # before any framework starts its thread pool
    context = {
        "site": plan["site"] if plan else "none",
        "nodes": plan["nodes"] if plan else 1,
        "distributed": dist or (plan or {}).get("distributed"),
        "plan_summary": _plan_summary(plan),
        "binding": applied,
        "plan_spatial": (plan or {}).get("spatial"),
        "start_over": start_over,  # train from iteration 0 when every snapshot is unusable
    }
    framework = framework or (plan or {}).get("framework") or recipe.framework
    train = backend_for(framework, context["distributed"] or recipe.distributed)

    writer = ResultsWriter(results_path, enabled=me.rank == 0)
    try:
        # rank 0 writes the snapshots, so it alone holds the prefix (ranks may share one node)
        with checkpoint.prefix_locked(recipe.snapshot_prefix if me.rank == 0 else None):
            summary = train(recipe, me, writer, context)
    except RuntimeError as exc:
        if me.world_size == 1 or not _a_peer_is_gone(exc):
            raise
        # the rank that died says why; the survivors say so in one line, not gloo's stack of C++ frames
        raise PeerGone(f"rank {me.rank}: another rank is gone, ending this one too "
                       f"({_first_line(exc)})") from None
    finally:
        writer.close()
    status = int(summary.get("exit_status", 0))
    if status == PREEMPTED_EXIT and me.rank == 0 and os.environ.get("HPCDL_JOB_DIR"):
        # the job script turns a launcher's own status (mpirun says 1) back into 75 with this
        try:
            with open(os.path.join(os.environ["HPCDL_JOB_DIR"], PREEMPTED_MARK), "w") as f:
                f.write(f"{summary.get('iter', '')}\n")
        except OSError:
            pass
    if me.world_size > 1 and exit_ranks:
        exit_rank(status)
    return summary


class PeerGone(HpcdlError):
    """A collective failed because a peer rank died or stopped answering: the job has failed (1),
    it was not asked for anything impossible (2)."""

    exit_code = 1


def _a_peer_is_gone(exc: BaseException) -> bool:
    """torch.distributed's errors when a peer is gone: DistError and its kinds (NCCL, timeouts),
    and gloo's RuntimeError ("[.../gloo/transport/tcp/pair.cc:...] Connection closed by peer")."""
    module = type(exc).__module__ or ""
    text = str(exc)
    return module.startswith("torch.distributed") or "gloo" in text or "Connection closed by peer" in text \
        or "NCCL" in text


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


#: the file rank 0 leaves in $HPCDL_JOB_DIR then, for the job script (render/templates/_body.sh.j2)
PREEMPTED_MARK = ".hpcdl-preempted"


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
    keys = ("site", "node_kind", "nodes", "ranks_per_node", "threads_per_rank", "mode")
    return {k: plan[k] for k in keys if k in plan}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.train", description="Train a recipe (one rank).")
    parser.add_argument("recipe")
    parser.add_argument("--plan", help="plan.json written by hpcdl render")
    parser.add_argument("--results", help="JSON-lines results file (rank 0 writes it)")
    parser.add_argument("--max-iter", type=int, help="override the recipe's max_iter")
    parser.add_argument("--snapshot-prefix", help="override the recipe's snapshot_prefix (resumes from it)")
    parser.add_argument("--framework", choices=("pytorch", "tensorflow", "mxnet"),
                        help="backend (default: the plan's, else the recipe's)")
    parser.add_argument("--dist", help="distribution (default: the plan's): gloo, nccl, mpi or horovod (PyTorch); "
                        "mwms (TensorFlow); kvstore (MXNet)")
    parser.add_argument("--start-over", action="store_true",
                        help="train from iteration 0 when snapshots exist but none can be used (else: refuse)")
    args = parser.parse_args(argv)
    overrides = {"max_iter": args.max_iter, "snapshot_prefix": args.snapshot_prefix}
    try:
        summary = run_training(args.recipe, args.plan, args.results, overrides, framework=args.framework, dist=args.dist,
                               start_over=args.start_over)
    except HpcdlError as exc:
        print(f"hpcdl train: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return int(summary.get("exit_status", 0))
