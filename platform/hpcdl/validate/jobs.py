"""The validation jobs as data: what to run, on how many nodes and ranks, with which settings.

Checks ask for jobs; jobs with the same key are run once and shared (the thread sweep's
1-rank point is also the scaling study's p = 1 point), which keeps the quick suite short.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hpcdl.plan import JobRequest, Plan, make_plan
from hpcdl.sites.schema import NodeKind, Site
from hpcdl.validate.references import References

RECIPES = Path(__file__).parent / "recipes"


@dataclass(frozen=True)
class SuiteSettings:
    """How much each check measures: the quick suite fits a few minutes on a 2-core node."""

    train_iters: int
    batch_size: int
    collective_sizes: tuple[int, ...]
    collective_iters: int
    collective_warmup: int
    all_nets: bool
    job_timeout_s: int
    # throughput per framework present (full), or the first present only (quick): a TensorFlow
    # job adds about half a minute on a 2-core node, to `make run` and every test that runs the suite
    all_frameworks: bool


def _sizes(first: int, last: int, factor: int) -> tuple[int, ...]:
    # nccl-tests sweeps -b 8 -e 128M -f 2 by default (doc/PERFORMANCE.md); quick takes every 4th
    out, s = [], first
    while s <= last:
        out.append(s)
        s *= factor
    return tuple(out)


SUITES = {
    "quick": SuiteSettings(150, 32, _sizes(8, 4 << 20, 4), 10, 2, False, 300, False),
    "full": SuiteSettings(200, 32, _sizes(8, 64 << 20, 2), 50, 5, True, 3600, True),
}


def job_name(key: str) -> str:
    """The scheduler's name of a validation job: its shape and check first, since squeue's NAME
    column shows 8 characters (`1n2r-env`, `1n4x16-b`, `2n1r-col`), and what made it last."""
    return f"{key}-validate"


@dataclass(frozen=True)
class ValidationJob:
    key: str
    kind: str  # "environment", "collectives" (probes) or "train"
    request: JobRequest
    payload: dict  # the recipe (train) or the probe's settings; written to recipe.json in the job

    @property
    def name(self) -> str:
        return job_name(self.key)

    def program(self) -> list[str]:
        argv = ["hpcdl", "probe", self.kind, "recipe.json", "--results", "results.jsonl"]
        if self.kind == "train":
            argv[4:4] = ["--plan", "plan.json"]
        return argv


@dataclass
class SuiteContext:
    site: Site
    suite: str
    nodes: tuple[int, ...]
    references: References
    settings: SuiteSettings
    frameworks: tuple[str, ...] = ("pytorch",)
    node_kind_name: str = ""
    node: NodeKind = field(default=None)  # type: ignore[assignment]
    default_plan: Plan = field(default=None)  # type: ignore[assignment]

    def __post_init__(self):
        self.node_kind_name, self.node = self.site.node_kind()
        self.default_plan = make_plan(self.site, JobRequest(nodes=1))

    @property
    def uses_gpus(self) -> bool:
        return self.default_plan.mode == "per-gpu" or any(r.gpus for r in self.default_plan.ranks)

    @property
    def usable_cores(self) -> int:
        return self.node.sockets * self.node.usable_cores_per_socket


@functools.cache
def _convergence_file() -> dict:
    return yaml.safe_load((RECIPES / "convergence.yaml").read_text())


def convergence_target() -> dict:
    # parsed once (every train job of a suite starts from it), handed out as a copy to change freely
    return copy.deepcopy(_convergence_file())


def base_recipe() -> dict:
    return dict(convergence_target()["recipe"])


def train_job(
    ctx: SuiteContext, *, nodes: int = 1, ranks_per_node: int | None = None, threads: int | None = None,
    batch: int | None = None, iters: int | None = None, net: str = "cifar10_quick", framework: str = "pytorch",
    recipe: dict | None = None, tag: str = "train",
) -> ValidationJob:
    rpn = ranks_per_node or ctx.default_plan.ranks_per_node
    threads = threads or (ctx.default_plan.threads_per_rank if rpn == ctx.default_plan.ranks_per_node else None)
    # at most the cores a rank of this size gets: a cap on a job's CPUs (node_kinds.<kind>.defaults.max_job_cpus,
    # UAB Cheaha's 64) leaves each rank of a larger job fewer cores than the one-node baseline's
    free = make_plan(ctx.site, JobRequest(nodes=nodes, ranks_per_node=rpn, framework=framework)).threads_per_rank
    threads = min(threads, free) if threads else free
    request = JobRequest(nodes=nodes, ranks_per_node=rpn, threads_per_rank=threads, framework=framework)
    recipe = dict(recipe or base_recipe())
    batch = batch or ctx.settings.batch_size
    iters = iters or ctx.settings.train_iters
    # eight display windows: the steady state a scaling point is judged by is the median of those after the
    # first (hpcdl.validate.checks.steady_rate), and seven windows outvote a burst that slows two of them
    recipe.update(batch_size=batch, max_iter=iters, test_interval=iters, display=max(1, iters // 8))
    if net != recipe["net"]:
        # other nets measure speed on synthetic images at their own input size
        recipe.update(net=net, data={"source": "synthetic", "synthetic_samples": max(256, 4 * batch)})
    key = f"{nodes}n{rpn}x{threads}-b{batch}-i{iters}-{net}-{framework}-{tag}"
    recipe["name"] = job_name(key)
    return ValidationJob(key, "train", request, recipe)


def thread_sweep_configs(ctx: SuiteContext) -> list[tuple[int, int]]:
    """(ranks per node, OpenMP threads per rank) pairs worth trying on one node.

    Ranks: one per node, one per socket and the profile's default. Threads per rank: half,
    all and twice the rank's cores (the last only where cores have hardware threads), the
    three points the TACC study swept on 68-core KNL (32, 64 and 128 OpenMP threads).
    """
    node = ctx.node
    ranks = sorted({1, node.sockets, ctx.default_plan.ranks_per_node})
    pairs = []
    for r in ranks:
        if r > ctx.usable_cores:
            continue
        # the planner decides how many cores each of r ranks gets; ask it
        cores = len(make_plan(ctx.site, JobRequest(nodes=1, ranks_per_node=r)).ranks[0].cores)
        for t in sorted({max(1, cores // 2), cores, cores * 2}):
            if t <= cores * node.cpus_per_core:  # the hardware threads the scheduler gives a rank
                pairs.append((r, t))
    return pairs


def scaling_points(ctx: SuiteContext) -> tuple[str, list[tuple[int, int, int]]]:
    """The unit scaled over and the (p, nodes, ranks per node) points.

    Over nodes when several node counts are asked for; on a one-node run, over ranks of
    that node (1, 2, 4 ... up to the site's default), so a workstation still shows whether
    its second core adds throughput.
    """
    if len(ctx.nodes) > 1 or ctx.nodes[0] > 1:
        return "node", [(p, p, ctx.default_plan.ranks_per_node) for p in ctx.nodes]
    top = ctx.default_plan.ranks_per_node
    ps = [1 << i for i in range(int(math.log2(top)) + 1)]
    if ps[-1] != top:
        ps.append(top)
    return "rank", [(p, 1, p) for p in ps]


def scaling_job(ctx: SuiteContext, mode: str, unit: str, p: int, nodes: int, rpn: int, top: int) -> ValidationJob:
    b = ctx.settings.batch_size
    per_rank_threads = ctx.default_plan.threads_per_rank if unit == "rank" else None
    if mode == "weak":
        batch = b
    else:
        # strong scaling: the global batch of the largest run, split over the ranks of this one
        global_batch = b * top * (ctx.default_plan.ranks_per_node if unit == "node" else 1)
        batch = max(1, global_batch // (nodes * rpn))
    return train_job(ctx, nodes=nodes, ranks_per_node=rpn, threads=per_rank_threads, batch=batch)


def suite_jobs(ctx: SuiteContext, selected: list) -> list[ValidationJob]:
    """The jobs all selected checks need, each once (checks share identical jobs)."""
    jobs: dict[str, ValidationJob] = {}
    for check in selected:
        for job in check.jobs(ctx):
            jobs.setdefault(job.key, job)
    return list(jobs.values())
