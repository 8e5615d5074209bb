"""The checks: one small registered class each, with two verbs.

`jobs(ctx)` says which jobs the check needs (as data); `evaluate(ctx, outcomes)` turns
their results into measurements (the data behind the plots) and verdicts (pass or fail
against the site's references). Adding a check is one class; nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcdl.plan import JobRequest
from hpcdl.registry import Registry
from hpcdl.validate.jobs import (
    SuiteContext, ValidationJob, convergence_target, scaling_job, scaling_points, thread_sweep_configs, train_job,
)
from hpcdl.validate.references import Reference, Verdict, judge


@dataclass
class JobOutcome:
    """What came back from one job: its state, its records and where it ran."""

    job: ValidationJob
    state: str
    exit_code: int | None
    records: list[dict] = field(default_factory=list)
    nodelist: tuple[str, ...] = ()
    job_dir: str = ""
    output: str = ""
    host_cpu_share: float | None = None  # share of a core per thread on a shared host while it ran (runner.py)
    host_core_scaling: float | None = None  # each busy core's rate over one alone, on this host (runner.py)
    per_node: dict = field(default_factory=dict)  # node -> its first rank's images/s (train jobs)

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and bool(self.records)

    def final(self) -> dict | None:
        return next((r for r in reversed(self.records) if r.get("event") == "final"), None)

    def failure(self) -> str:
        how = f"ended {self.state}" + (f" with status {self.exit_code}" if self.exit_code not in (None, 0) else "")
        if self.state == "COMPLETED" and not self.records:
            how = "wrote no results"
        return f"job {self.job.name} {how}; output in {self.output or self.job_dir}"


class Check:
    name = "base"

    def jobs(self, ctx: SuiteContext) -> list[ValidationJob]:
        raise NotImplementedError

    def evaluate(self, ctx: SuiteContext, outcomes: dict[str, JobOutcome]) -> tuple[list[dict], list[Verdict]]:
        raise NotImplementedError

    def failed_job(self, outcome: JobOutcome, what: str) -> Verdict:
        return Verdict(self.name, what, "fail", None, message=outcome.failure(), job=outcome.job.name)


checks: Registry[Check] = Registry("check")
ORDER = ("environment", "collectives", "threads", "throughput", "scaling", "convergence")


def _where(outcome: JobOutcome, record: dict | None = None) -> dict:
    nodelist = tuple(record.get("nodelist", ())) if record else ()
    nodelist = nodelist or outcome.nodelist
    nodes = (record or {}).get("nodes") or len(nodelist) or outcome.job.request.nodes
    return {"nodes": nodes, "nodelist": nodelist, "job": outcome.job.name}


def window_jitter(records: list[dict]) -> float | None:
    """The spread of one rank's time per image between the trainer's display windows (standard deviation
    over mean), the first window (warm-up) left out; None with fewer than 3 windows. Windows average
    `display` iterations, so this is a lower bound of the spread of a single iteration's time."""
    import statistics

    rates = [r["images_per_sec_rank"] for r in records if r.get("event") == "step" and r.get("images_per_sec_rank")]
    times = [1.0 / x for x in rates[1:] if x > 0]
    if len(times) < 3:
        return None
    return statistics.stdev(times) / statistics.mean(times)


def steady_rate(records: list[dict]) -> float | None:
    """The job's steady-state rate: the median of its display windows' aggregate images/s, the first window
    (warm-up) and a shorter last one (the iterations left over) left out; None with fewer than two such
    windows. What hpcdl predict's model gives is an iteration in steady state, and the link it is given is
    the collectives check's median window (hpcdl.predict.calibration.fit_link): a shaped link's bursts move
    one window of a 2-node job by 10 % or more either way (1,383 to 1,777 images/s in one run), and the
    job's whole-run rate by as much, with the luck of where they fell."""
    import statistics

    steps = [r for r in records if r.get("event") == "step" and r.get("images_per_sec_total")]
    sizes = [r["iter"] - before for r, before in zip(steps, [0] + [r["iter"] for r in steps[:-1]])]
    display = max(set(sizes), key=sizes.count) if sizes else 0  # the recipe's display interval
    full = [r["images_per_sec_total"] for r, n in zip(steps, sizes) if n == display]
    return statistics.median(full[1:]) if len(full) > 2 else None


def iteration_jitter(records: list[dict]) -> float | None:
    """The spread of one rank's single iterations (the trainer's `iteration_cv` per display window), the
    median over the windows after the first (warm-up); None where the trainer recorded none (fewer than
    3 iterations a window, or an older trainer). On a GPU the loop times the host's queueing, not the
    step: the scaling record keeps it, and predict reads it for CPU ranks only."""
    import statistics

    cvs = [r["iteration_cv"] for r in records if r.get("event") == "step" and r.get("iteration_cv") is not None]
    return statistics.median(cvs[1:]) if len(cvs) > 1 else None


def _measurement(check: str, series: str, outcome: JobOutcome, record: dict | None = None, **fields) -> dict:
    where = _where(outcome, record)
    return {"event": "measurement", "check": check, "series": series, **fields,
            "nodes": where["nodes"], "nodelist": list(where["nodelist"]), "job": where["job"]}


@checks.register("environment")
class EnvironmentCheck(Check):
    """Frameworks import at the expected versions; oneDNN (CPU) or CUDA/cuDNN/NCCL (GPU); MPI agrees with the launcher."""

    def jobs(self, ctx):
        frameworks = sorted(ctx.references.expect.get("frameworks") or {"pytorch": ""})
        rpn = min(2, ctx.default_plan.ranks_per_node if ctx.uses_gpus else ctx.usable_cores)
        counts = ctx.site.defaults.partial_gpu_counts
        if ctx.uses_gpus and counts and rpn not in counts:
            # two ranks, each its GPU, where the site takes a node's GPUs only in some counts (SciNet Trillium: 1 or
            # the node's 4, defaults.partial_gpu_counts): the fewest of at least two it takes, the whole node at most
            rpn = min([c for c in counts if rpn <= c] + [ctx.default_plan.ranks_per_node])
        request = JobRequest(nodes=1, ranks_per_node=rpn, threads_per_rank=1 if not ctx.uses_gpus else None)
        payload = {"name": "validate-environment", "probe": {"frameworks": frameworks, "launcher": ctx.site.launcher}}
        return [ValidationJob(f"1n{rpn}r-environment", "environment", request, payload)]

    def evaluate(self, ctx, outcomes):
        (outcome,) = [outcomes[j.key] for j in self.jobs(ctx)]
        if not outcome.ok:
            return [], [self.failed_job(outcome, "environment/job")]
        rec = next(r for r in outcome.records if r["event"] == "environment")
        where = _where(outcome, rec)
        ranks = rec["ranks_info"]
        first = ranks[0]
        verdicts = []
        expected = ctx.references.expect.get("frameworks") or {"pytorch": ""}
        for fw, want in sorted(expected.items()):
            got = first["frameworks"].get(fw, {})
            name = f"environment/{fw}"
            if "version" not in got:
                error = got.get("error", "not tried")
                what = "is not installed where the job ran" if error.startswith("ModuleNotFoundError") else "does not import"
                verdicts.append(Verdict(self.name, name, "fail", None, message=f"{fw} {what}: {error}", **where))
            elif want and not got["version"].startswith(want):
                verdicts.append(Verdict(self.name, name, "fail", got["version"], message=f"version {got['version']}, the image should have {want}", **where))
            else:
                verdicts.append(Verdict(self.name, name, "pass", got["version"], message=f"expected {want or 'any version'}", **where))
        math = first.get("math", {})
        if ctx.uses_gpus:
            gpus = math.get("gpus", 0)
            for lib in ("cuda", "cudnn", "nccl"):
                value = math.get(lib)
                ok = bool(value) and gpus > 0 and not str(value).startswith("error")
                verdicts.append(Verdict(self.name, f"environment/{lib}", "pass" if ok else "fail", str(value) if value else None,
                                        message="" if ok else f"{lib} not usable on a GPU node ({gpus} GPU(s) visible)", **where))
        else:
            onednn = math.get("pytorch_onednn")
            if onednn is not None:
                verdicts.append(Verdict(self.name, "environment/onednn", "pass" if onednn else "fail", str(onednn),
                                        message="PyTorch built with oneDNN (MKL-DNN)" if onednn else "PyTorch has no oneDNN: CPU training will be slow", **where))
            for lib in ("cuda", "cudnn", "nccl"):
                verdicts.append(Verdict(self.name, f"environment/{lib}", "n/a", None, message="not applicable on a CPU node", **where))
        verdicts.append(self._agreement(ctx, ranks, outcome.job.request.ranks_per_node or 1, where))
        system, seen = [], set()
        for r in ranks:  # one record per node: what it is (CPU, GPUs, driver, kernel, image)
            if r.get("host") in seen or "system" not in r:
                continue
            seen.add(r.get("host"))
            system.append(_measurement(self.name, "system", outcome, rec, host=r.get("host"), **r["system"]))
        return system, verdicts

    def _agreement(self, ctx, ranks: list[dict], expected: int, where: dict) -> Verdict:
        n = len(ranks)
        total = n * (n + 1) / 2
        problems = []
        if isinstance(ranks[0]["torch_allreduce"], str):  # the probe could not import torch
            return Verdict(self.name, "environment/launcher", "fail", None, "ranks",
                           message=f"not judged: {ranks[0]['torch_allreduce']}", **where)
        if n != expected:
            problems.append(f"{n} rank(s) started, {expected} asked for")
        for r in ranks:
            if r["world_size"] != n:
                problems.append(f"rank {r['rank']} sees world size {r['world_size']}")
            if r["torch_allreduce"] != total:
                problems.append(f"torch.distributed allreduce on rank {r['rank']} gave {r['torch_allreduce']}, not {total}")
            mpi = r.get("mpi")
            if mpi is None:
                continue
            if "error" in mpi:
                problems.append(f"MPI on rank {r['rank']}: {mpi['error']}")
            elif (mpi["rank"], mpi["size"]) != (r["rank"], r["world_size"]):
                problems.append(f"MPI says rank {mpi['rank']} of {mpi['size']}, the launcher says {r['rank']} of {r['world_size']}")
            elif mpi["allreduce"] != total:
                problems.append(f"MPI allreduce gave {mpi['allreduce']}, not {total}")
        mpi_used = any(r.get("mpi") for r in ranks)
        what = f"{ctx.site.launcher} started {n} ranks; " + ("MPI and " if mpi_used else "") + "torch.distributed agree"
        if problems:
            return Verdict(self.name, "environment/launcher", "fail", n, "ranks", message="; ".join(problems[:3]), **where)
        library = next((r["mpi"].get("library") for r in ranks if r.get("mpi")), None)
        return Verdict(self.name, "environment/launcher", "pass", n, "ranks",
                       message=what + (f" ({library})" if library else ""), **where)


@checks.register("collectives")
class CollectivesCheck(Check):
    """Allreduce latency and bandwidth over message sizes, inside a node and across nodes."""

    def jobs(self, ctx):
        s = ctx.settings
        probe = {"sizes": list(s.collective_sizes), "iters": s.collective_iters, "warmup": s.collective_warmup,
                 "backends": ["torch", "mpi"], "launcher": ctx.site.launcher, "gpu": ctx.uses_gpus}
        rpn = ctx.default_plan.ranks_per_node
        jobs = []
        if rpn > 1:
            jobs.append(ValidationJob(f"1n{rpn}r-collectives", "collectives", JobRequest(nodes=1),
                                      {"name": "validate-collectives", "probe": {**probe, "scope": "intra-node"}}))
        if max(ctx.nodes) > 1:
            across = JobRequest(nodes=2, ranks_per_node=1)
            if ctx.uses_gpus and (ctx.site.defaults.max_nodes_partial or 2) < 2:
                # the site takes a node GPU by GPU only in one-node jobs (defaults.max_nodes_partial, CSD3: "must be
                # 4 if nodes>1"): each node's one rank holds the node's GPUs, as such a job must ask them
                across = JobRequest(nodes=2, ranks_per_node=1, mode="per-node")
            jobs.append(ValidationJob("2n1r-collectives", "collectives", across,
                                      {"name": "validate-collectives", "probe": {**probe, "scope": "inter-node"}}))
        return jobs

    def evaluate(self, ctx, outcomes):
        measurements, verdicts = [], []
        for job in self.jobs(ctx):
            outcome = outcomes[job.key]
            scope = job.payload["probe"]["scope"]
            if not outcome.ok:
                verdicts.append(self.failed_job(outcome, f"collectives/{scope}"))
                continue
            points = [r for r in outcome.records if r["event"] == "collective"]
            spread = _spread(self.name, f"collectives/{scope}/nodes", outcome, job.request.nodes,
                             points[0] if points else None)
            if spread:
                verdicts.append(spread)  # an "inter-node" time measured inside one node is not one
            for r in points:
                fields = {k: r[k] for k in ("op", "backend", "scope", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "ranks")}
                fields.update({k: r[k] for k in ("iters", "windows", "time_us_mean") if k in r})  # how it was taken
                measurements.append(_measurement(self.name, "collective", outcome, r, **fields))
            for backend in sorted({r["backend"] for r in points}):
                mine = sorted((r for r in points if r["backend"] == backend), key=lambda r: r["bytes"])
                small, large = mine[0], mine[-1]
                verdicts.append(judge(self.name, f"collectives/{backend}/{scope}/latency_us", small["time_us"], "us",
                                      "lower", ctx.references, **_verdict_where(outcome, small)))
                verdicts.append(judge(self.name, f"collectives/{backend}/{scope}/busbw_GBps", large["busbw_GBps"], "GB/s",
                                      "higher", ctx.references, **_verdict_where(outcome, large)))
        return measurements, verdicts


def _spread(check: str, name: str, outcome: JobOutcome, asked: int, record: dict | None = None) -> Verdict | None:
    """A failure when the ranks ran on fewer (or more) nodes than the job asked for, as measured."""
    where = _verdict_where(outcome, record)
    if not where["nodelist"] or len(where["nodelist"]) == asked:
        return None
    return Verdict(check, name, "fail", len(where["nodelist"]), "nodes",
                   message=f"asked for {asked} node(s), the ranks ran on {len(where['nodelist'])}: "
                           f"{', '.join(where['nodelist'])}", **where)


def _verdict_where(outcome: JobOutcome, record: dict | None = None) -> dict:
    w = _where(outcome, record)
    return {"nodes": w["nodes"], "nodelist": tuple(w["nodelist"]), "job": w["job"]}


@checks.register("threads")
class ThreadSweepCheck(Check):
    """Ranks per node x OpenMP threads per rank on one node; the best is reported (and can be written back)."""

    def jobs(self, ctx):
        return [train_job(ctx, ranks_per_node=r, threads=t) for r, t in thread_sweep_configs(ctx)]

    def evaluate(self, ctx, outcomes):
        measurements, verdicts, points = [], [], []
        for job, (r, t) in zip(self.jobs(ctx), thread_sweep_configs(ctx)):
            outcome = outcomes[job.key]
            final = outcome.final() if outcome.ok else None
            if final is None:
                verdicts.append(self.failed_job(outcome, f"threads/{r}x{t}"))
                continue
            points.append((final["images_per_sec_total"], r, t, outcome))
        best = max(points, key=lambda p: p[0]) if points else None
        for x, r, t, outcome in points:
            measurements.append(_measurement(self.name, "thread_sweep", outcome, None, ranks_per_node=r,
                                             threads_per_rank=t, images_per_sec=x, best=(r, t) == best[1:3]))
        if best:
            x, r, t, outcome = best
            v = judge(self.name, "threads/best/images_per_sec", x, "images/s", "higher", ctx.references,
                      **_verdict_where(outcome))
            verdicts.append(_with_message(v, f"best: {r} rank(s) x {t} thread(s) per node"))
        return measurements, verdicts


def _with_message(v: Verdict, extra: str) -> Verdict:
    from dataclasses import replace

    return replace(v, message=f"{extra}; {v.message}" if v.message else extra)


@checks.register("throughput")
class ThroughputCheck(Check):
    """Training images/s on one node with the site's default placement, per net and framework present
    (the quick suite: its first framework, pytorch where torch imports)."""

    def nets(self, ctx) -> list[str]:
        from hpcdl.nets import list_nets

        return list_nets() if ctx.settings.all_nets else ["cifar10_quick"]

    def frameworks(self, ctx) -> tuple[str, ...]:
        """The quick suite: the first framework present. The full suite: each further one too where
        the site runs it (its image holds it, or the centre's own environment), so an image without
        TensorFlow leaves TensorFlow out rather than refusing the whole suite."""
        if not ctx.settings.all_frameworks:
            return ctx.frameworks[:1]
        from hpcdl.plan import JobRequest, make_plan

        def runs(fw):
            runtime = make_plan(ctx.site, JobRequest(nodes=1, framework=fw)).runtime
            return runtime is None or not runtime.refusal

        return tuple(fw for i, fw in enumerate(ctx.frameworks) if i == 0 or runs(fw))

    def jobs(self, ctx):
        return [train_job(ctx, net=net, framework=fw) for net in self.nets(ctx) for fw in self.frameworks(ctx)]

    def evaluate(self, ctx, outcomes):
        measurements, verdicts = [], []
        for job in self.jobs(ctx):
            outcome = outcomes[job.key]
            net, fw = job.payload["net"], job.request.framework
            final = outcome.final() if outcome.ok else None
            if final is None:
                verdicts.append(self.failed_job(outcome, f"throughput/{net}/{fw}"))
                continue
            x = final["images_per_sec_total"]
            measurements.append(_measurement(self.name, "throughput", outcome, None, net=net, framework=fw,
                                             ranks=final["ranks"], images_per_sec=x))
            verdicts.append(judge(self.name, f"throughput/{net}/{fw}/images_per_sec", x, "images/s", "higher",
                                  ctx.references, **_verdict_where(outcome)))
        return measurements, verdicts


@checks.register("scaling")
class ScalingCheck(Check):
    """Weak and strong scaling: time to solution and E(p) = X(p) / (p X(1)) against the one-node baseline."""

    def plan(self, ctx):
        unit, points = scaling_points(ctx)
        top = max(p for p, _, _ in points)
        return unit, [(mode, p, n, r, scaling_job(ctx, mode, unit, p, n, r, top))
                      for mode in ("weak", "strong") for p, n, r in points]

    def jobs(self, ctx):
        return [job for *_, job in self.plan(ctx)[1]]

    def evaluate(self, ctx, outcomes):
        unit, plan = self.plan(ctx)
        measurements, verdicts = [], []
        for mode in ("weak", "strong"):
            finals = {}
            for m, p, n, r, job in plan:
                if m != mode:
                    continue
                outcome = outcomes[job.key]
                final = outcome.final() if outcome.ok else None
                if final is None:
                    verdicts.append(self.failed_job(outcome, f"scaling/{mode}/{p}"))
                    continue
                finals[p] = (final, outcome, job)
            baseline, where_from = self._baseline(ctx, mode, finals)
            for p, (final, outcome, job) in sorted(finals.items()):
                x = final["images_per_sec_total"]  # the trainer's measured aggregate, never rank 0 x world
                efficiency = x / (p * baseline) if baseline else None
                measurements.append(_measurement(
                    self.name, "scaling", outcome, None, mode=mode, unit=unit, p=p, ranks=final["ranks"],
                    ranks_per_node=job.request.ranks_per_node, threads_per_rank=job.request.threads_per_rank,
                    cpu_share=outcome.host_cpu_share, core_scaling=outcome.host_core_scaling, global_batch=final.get("global_batch"),
                    images_per_sec=x, time_to_solution_s=final["time_to_solution_s"], efficiency=efficiency,
                    baseline_images_per_sec=baseline, baseline_from=where_from,
                    net=job.payload.get("net"), precision=job.request.precision,
                    window_jitter=window_jitter(outcome.records), iteration_jitter=iteration_jitter(outcome.records),
                    steady_images_per_sec=steady_rate(outcome.records),
                ))
                if unit == "node" and (spread := _spread(self.name, f"scaling/{mode}/{p}/nodes", outcome,
                                                         job.request.nodes)):
                    verdicts.append(spread)
                if p == 1:
                    continue
                v = judge(self.name, f"scaling/{mode}/{p}/efficiency", efficiency, "", "higher", ctx.references,
                          **_verdict_where(outcome))
                verdicts.append(_with_message(v, f"{p} {unit}s: {x:,.0f} images/s, {final['time_to_solution_s']:.1f} s "
                                                 f"(baseline {where_from})"))
        return self._predicted(ctx, outcomes, measurements), verdicts

    def _predicted(self, ctx, outcomes, measurements: list[dict]) -> list[dict]:
        """hpcdl predict's figure beside each measured point, from the p = 1 run and the collectives check."""
        from hpcdl.predict.validation import with_predictions

        collectives = [_measurement("collectives", "collective", o, r, **{k: r[k] for k in (
            "op", "backend", "scope", "bytes", "time_us", "time_us_mean", "algbw_GBps", "busbw_GBps", "ranks")
            if k in r})
            for o in outcomes.values() if o.ok and o.job.kind == "collectives"
            for r in o.records if r.get("event") == "collective"]
        return with_predictions(ctx.site, measurements, collectives)

    def _baseline(self, ctx, mode: str, finals: dict) -> tuple[float | None, str]:
        if 1 in finals:
            return finals[1][0]["images_per_sec_total"], "measured in this run"
        stored = ctx.references.lookup(f"scaling/{mode}/1/images_per_sec")
        if stored:
            return stored.value, f"stored in {stored.source}"
        return None, "missing: run with 1 in --nodes or store scaling/<mode>/1/images_per_sec"


@checks.register("convergence")
class ConvergenceCheck(Check):
    """cifar10_quick reaches the stated accuracy within the stated iterations and time."""

    def jobs(self, ctx):
        target = convergence_target()
        recipe = target["recipe"]
        return [train_job(ctx, batch=recipe["batch_size"], iters=recipe["max_iter"], recipe=recipe, tag="converge")]

    def evaluate(self, ctx, outcomes):
        target = convergence_target()["target"]
        (job,) = self.jobs(ctx)
        outcome = outcomes[job.key]
        final = outcome.final() if outcome.ok else None
        if final is None:
            return [], [self.failed_job(outcome, "convergence/cifar10_quick")]
        where = _verdict_where(outcome)
        tests = [r for r in outcome.records if r.get("event") == "test"]
        measurements = [_measurement(self.name, "convergence", outcome, None, iter=r["iter"], accuracy=r["accuracy"])
                        for r in tests]
        iters = final.get("iter", job.payload["max_iter"])
        acc = judge(self.name, "convergence/cifar10_quick/accuracy", final["accuracy"], "", "higher", ctx.references,
                    default=Reference(target["accuracy"], target["accuracy_tolerance"], "the suite's stated target"), **where)
        tts = judge(self.name, "convergence/cifar10_quick/time_to_solution_s", final["time_to_solution_s"], "s", "lower",
                    ctx.references, default=Reference(target["time_to_solution_s"], target["time_tolerance"], "the suite's stated budget"), **where)
        return measurements, [_with_message(acc, f"within {iters} iterations"), tts]
