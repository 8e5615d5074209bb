"""Measured beside predicted: the scaling check's points (p > 1) predicted from its own p = 1 point.

The prediction for p ranks or nodes uses only: the one-rank (one-node) run's rate, the
collectives check's latency and bandwidth, and, on a host shared with other work, the share
of a core the job's threads could have while it ran (hpcdl.predict.host, sampled by
hpcdl.validate.runner from the other sessions' runnable threads). The measured throughput at
p > 1 is never an input, so the comparison tests the model.
"""

from __future__ import annotations

from dataclasses import replace

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.predict.calibration import calibrate
from hpcdl.predict.costs import net_cost
from hpcdl.predict.model import cpu_share, predict_iteration
from hpcdl.predict.scenario import Options, machine_for, workload_for
from hpcdl.nets import load_net
from hpcdl.sites.schema import Site

AGREEMENT = 0.15  # the bound on |predicted - measured| / measured for the validation runs


def with_predictions(site: Site, measurements: list[dict], collectives: list[dict]) -> list[dict]:
    """The scaling measurements, each p > 1 point with predicted_images_per_sec and prediction_error."""
    out = []
    try:
        cal = _calibration(site, measurements, collectives)
    except HpcdlError as exc:
        cal, why = None, str(exc)
    for mode in ("weak", "strong"):
        mine = [m for m in measurements if m.get("series") == "scaling" and m.get("mode") == mode]
        base = next((m for m in mine if m["p"] == 1), None)
        if base is None or cal is None or not all(_complete(m) for m in mine):
            # nothing to predict from (or with): the measurements stand alone
            out += [{**m, "prediction_note": why} for m in mine] if cal is None else mine
            continue
        base = _with_share(site, base)
        net = net_cost(load_net(base.get("net", "cifar10_quick")))
        for m in mine:
            if m["p"] == 1:
                out.append(base)
                continue
            try:
                out.append(_predicted(site, m, cal, net, steady(base)))
            except HpcdlError as exc:  # e.g. a GPU with no reference rate: the measurement still stands
                out.append({**m, "prediction_note": str(exc)})
    return out + [m for m in measurements if m.get("series") != "scaling"]


def _calibration(site: Site, measurements: list[dict], collectives: list[dict]):
    """Links from the collectives check; a rank's rate from every one-rank (one-node) run of the suite.

    The weak and the strong study each start with one: the same rank, two samples of its rate,
    so their mean halves the noise of a host shared with other work.
    """
    # a one-node job with several ranks already had its cores slow each other down: its rank's
    # rate over its effective share is one core's rate alone, as the p > 1 points need
    bases = [{**b, "cpu_share": _effective_share(b), "images_per_sec": steady(b)} for b in
             (_with_share(site, m) for m in measurements
              if m.get("series") == "scaling" and m.get("p") == 1 and _complete(m))]
    cal = calibrate([*collectives, *({**b, "mode": "weak"} for b in bases)], site.name, "this validation run")
    same = [c for c in cal.compute if c.threads_per_rank == cal.compute[0].threads_per_rank] if cal.compute else []
    if len(same) > 1:
        mean = sum(c.flops_per_s for c in same) / len(same)
        cal = replace(cal, compute=(replace(same[0], flops_per_s=mean,
                                            source=f"the mean of this run's {len(same)} one-rank jobs"),))
    return cal


def steady(m: dict) -> float:
    """The measured rate a prediction is held against and calibrated from: the job's steady state (the median
    of its display windows after the warm-up, hpcdl.validate.checks.steady_rate), as the model predicts an
    iteration in steady state over a link measured by its median window; the whole run's rate where the job
    had too few windows."""
    return m.get("steady_images_per_sec") or m["images_per_sec"]


def _complete(m: dict) -> bool:
    return all(m.get(k) for k in ("images_per_sec", "ranks", "ranks_per_node", "global_batch"))


def _with_share(site: Site, m: dict) -> dict:
    """The p = 1 point with the share of a core its threads had (measured, or from pretend-node sharing)."""
    if m.get("cpu_share") is not None:
        return m
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=m["ranks_per_node"],
                                      threads_per_rank=m.get("threads_per_rank")))
    machine = machine_for(site, plan, None, Options())
    nodes = m["ranks"] // max(1, m["ranks_per_node"])
    return {**m, "cpu_share": cpu_share(machine, nodes, m["ranks_per_node"])}


def _effective_share(m: dict) -> float | None:
    """The share of a core's one-thread rate each thread gets: other work's load times core scaling.

    `cpu_share` is what the other sessions left the job; `core_scaling` is what the host's
    cores do when all of them are busy at once against one alone (SMT siblings, memory
    bandwidth, clocks; hpcdl.predict.host.core_scaling). Runs recorded before core scaling was
    measured have none, and their cores count as independent.
    """
    share, scaling = m.get("cpu_share"), m.get("core_scaling")
    if scaling is None:
        return share
    return (1.0 if share is None else share) * scaling


def _predicted(site: Site, m: dict, cal, net, baseline: float) -> dict:
    rpn = m["ranks_per_node"]
    nodes = m["ranks"] // max(1, rpn)
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=rpn, threads_per_rank=m.get("threads_per_rank")))
    options = Options(cpu_share=_effective_share(_with_share(site, m)))
    machine = machine_for(site, plan, cal, options)
    work = workload_for(plan, net, max(1, m["global_batch"] // m["ranks"]), options)
    it = predict_iteration(machine, work, nodes, rpn)
    measured = steady(m)
    error = (it.images_per_sec - measured) / measured if measured else None
    return {**m, "predicted_images_per_sec": it.images_per_sec, "prediction_measured_images_per_sec": measured,
            "predicted_efficiency": it.images_per_sec / (m["p"] * baseline) if baseline else None,
            "predicted_compute_s": it.compute_s, "predicted_exposed_comm_s": it.exposed_comm_s,
            "predicted_algorithm": it.algorithm, "prediction_error": error,
            "prediction_within": abs(error) <= AGREEMENT if error is not None else None}


