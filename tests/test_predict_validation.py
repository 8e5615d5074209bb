"""The validation suite's scaling points, measured beside predicted (hpcdl.predict.validation).

The prediction for p > 1 is made from the same run's p = 1 point and collectives check only.
The stored run (tests/fixtures/predict/) is a real `hpcdl validate --site local --checks
collectives,scaling` on the 2-core development machine while other sessions loaded it; the
slow test below reads a live one (the session's local quick suite, conftest). How close the
prediction comes on a quiet machine is a speed figure, measured by `make bench` and written
into docs/performance.md.
"""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURE_SITES, ROOT
from hpcdl.predict.calibration import calibrate, fit_link
from hpcdl.predict.validation import AGREEMENT, with_predictions
from hpcdl.sites import load_site
from hpcdl.sites.registry import load_site_file

RUN = ROOT / "tests" / "fixtures" / "predict" / "local-collectives-scaling.jsonl"


def _records():
    return [json.loads(line) for line in RUN.read_text().splitlines()]


def _weak_two_rank_prediction(points: list[dict]) -> float:
    """The stored run's weak p = 2 point predicted from `points` (its scaling records, doctored)."""
    _, collectives = _split(_records())
    return next(m["predicted_images_per_sec"] for m in with_predictions(load_site("local"), points, collectives)
                if m["mode"] == "weak" and m["p"] == 2)


def _split(records):
    scaling = [r for r in records if r.get("series") == "scaling"]
    collectives = [r for r in records if r.get("series") == "collective"]
    return scaling, collectives


def test_every_point_beyond_the_first_gets_a_prediction_and_its_error():
    scaling, collectives = _split(_records())
    out = with_predictions(load_site("local"), scaling, collectives)
    later = [m for m in out if m["series"] == "scaling" and m["p"] > 1]
    assert later and all(m["predicted_images_per_sec"] > 0 for m in later)
    for m in later:
        assert m["prediction_error"] == pytest.approx((m["predicted_images_per_sec"] - m["images_per_sec"])
                                                      / m["images_per_sec"])
        assert m["prediction_within"] == (abs(m["prediction_error"]) <= AGREEMENT)


def test_the_measured_throughput_at_p_above_1_is_never_an_input_to_its_prediction():
    scaling, collectives = _split(_records())
    site = load_site("local")
    before = {(m["mode"], m["p"]): m.get("predicted_images_per_sec") for m in with_predictions(site, scaling, collectives)}
    doctored = [{**m, "images_per_sec": m["images_per_sec"] * 10, "steady_images_per_sec": m["images_per_sec"] * 9}
                if m["p"] > 1 else m for m in scaling]
    after = {(m["mode"], m["p"]): m.get("predicted_images_per_sec") for m in with_predictions(site, doctored, collectives)}
    assert before == after


def test_a_prediction_is_held_against_the_jobs_steady_state_and_calibrated_from_the_one_rank_jobs_own():
    """The model gives an iteration in steady state: a job's windows after the warm-up (their median,
    steady_images_per_sec) are what a point is held against, and what the one-rank jobs calibrate the rank
    from; the whole run's rate only where a job had too few windows (the stored run's records predate it)."""
    scaling, collectives = _split(_records())
    site = load_site("local")
    steadier = [{**m, "steady_images_per_sec": m["images_per_sec"] * 1.1} if m["p"] > 1 else m for m in scaling]
    for m in (m for m in with_predictions(site, steadier, collectives) if m["series"] == "scaling" and m["p"] > 1):
        measured = m["images_per_sec"] * 1.1
        assert m["prediction_measured_images_per_sec"] == pytest.approx(measured)
        assert m["prediction_error"] == pytest.approx((m["predicted_images_per_sec"] - measured) / measured)
    faster = [{**m, "steady_images_per_sec": m["images_per_sec"] * 1.2} if m["p"] == 1 else m for m in scaling]
    assert _weak_two_rank_prediction(faster) > _weak_two_rank_prediction(scaling)


def test_the_steady_state_is_the_median_of_the_full_windows_after_the_warm_up():
    from hpcdl.validate.checks import steady_rate

    def steps(*windows):
        out, at = [], 0
        for n, rate in windows:
            at += n
            out.append({"event": "step", "iter": at, "images_per_sec_total": rate})
        return out

    # a 2-node job's windows on a shaped 1 Gbit/s link (one real run): warm-up, four of 37, two left over
    run = steps((37, 1489), (37, 1383), (37, 1708), (37, 1581), (2, 1777))
    assert steady_rate(run) == 1581  # median of 1383, 1708, 1581: not the warm-up, not the 2-iteration stub
    assert steady_rate(steps((37, 1000), (37, 1200), (37, 1300))) == 1250
    assert steady_rate(steps((37, 1000), (37, 1200))) is None  # one window after the warm-up is no median
    assert steady_rate([]) is None


def test_a_busier_host_during_the_p_2_job_predicts_less_and_a_slower_p_1_rank_predicts_less():
    scaling, _ = _split(_records())

    base = _weak_two_rank_prediction(scaling)
    busier = [{**m, "cpu_share": m["cpu_share"] / 2} if m["p"] == 2 else m for m in scaling]
    slower = [{**m, "images_per_sec": m["images_per_sec"] / 2} if m["p"] == 1 else m for m in scaling]
    assert _weak_two_rank_prediction(busier) < base and _weak_two_rank_prediction(slower) < base


def test_the_collectives_sweep_calibrates_alpha_and_beta_through_the_ring_cost():
    points = [{"backend": "gloo", "scope": "intra-node", "ranks": 2, "bytes": n, "time_us": 100 + n / 1e3}
              for n in (8, 1024, 1 << 20)]  # 100 us + 1 GB/s
    link = fit_link(points)
    assert link.latency_us == pytest.approx(100.5 / 2, rel=0.01)  # 2(p-1) alpha = the small-message time
    assert link.gbyte_s == pytest.approx(1.0, rel=0.01)  # 2(p-1)/p n / (t - small) with p = 2
    cal = calibrate(_records(), "local", str(RUN))
    assert {(m.library, m.scope) for m in cal.links} == {("gloo", "intra-node"), ("mpi", "intra-node")}
    assert cal.compute and cal.compute[0].flops_per_s > 0


def test_pretend_nodes_on_one_host_share_its_cores():
    from hpcdl.plan import JobRequest, make_plan
    from hpcdl.predict.model import cpu_share
    from hpcdl.predict.scenario import machine_for

    site = load_site_file(FIXTURE_SITES / "ci-slurm.yaml")
    machine = machine_for(site, make_plan(site, JobRequest(nodes=1)))
    assert cpu_share(machine, nodes=1, ranks_per_node=2) == 1.0  # 2 ranks on the host's 2 cores
    assert cpu_share(machine, nodes=2, ranks_per_node=2) == 0.5  # 4 ranks, 2 pretend nodes, the same 2 cores


@pytest.mark.slow
def test_a_live_two_rank_run_reports_measured_beside_predicted_with_its_error(local_quick_validation):
    # How close the prediction comes on this machine is a speed figure: `make bench` measures it
    # (docs/performance.md, "Predicted vs measured"), never a timed test. Here: a real run makes
    # a prediction for every p > 1 point from its own p = 1 point and says whether it is within.
    # The run is the session's local quick suite (conftest), whose collectives and scaling checks
    # are the ones `--checks collectives,scaling` would run on their own.
    proc, out, records, _ = local_quick_validation
    later = [r for r in records if r.get("series") == "scaling" and r["p"] > 1]
    assert later, proc.stdout[-3000:] + proc.stderr
    for r in later:
        assert r["predicted_images_per_sec"] > 0 and 0 < r["core_scaling"] <= 1
        assert r["prediction_within"] == (abs(r["prediction_error"]) <= AGREEMENT)
    html = (out / "report" / "index.html").read_text()
    assert "Measured and predicted" in html and f"{AGREEMENT:.0%}" in html


def test_cores_that_slow_each_other_down_predict_less_and_one_rank_is_unaffected():
    scaling, _ = _split(_records())

    base = _weak_two_rank_prediction(scaling)
    shared = [{**m, "core_scaling": 0.75 if m["p"] == 2 else 1.0} for m in scaling]
    assert _weak_two_rank_prediction(shared) == pytest.approx(base * 0.75, rel=0.05)  # compute-bound: nearly in proportion
    assert _weak_two_rank_prediction([{**m, "core_scaling": 1.0} for m in scaling]) == pytest.approx(base)


def test_core_scaling_that_the_one_node_job_already_had_cancels_out():
    # two pretend nodes on one host: the 1-node job's 2 ranks already kept both cores busy
    run = ROOT / "tests" / "fixtures" / "predict" / "ci-slurm-collectives-scaling.jsonl"
    scaling, collectives = _split([json.loads(line) for line in run.read_text().splitlines()])
    site = load_site_file(FIXTURE_SITES / "ci-slurm.yaml")

    def two_nodes(points):
        return [m["predicted_images_per_sec"] for m in with_predictions(site, points, collectives)
                if m["series"] == "scaling" and m["p"] == 2]

    both = [{**m, "core_scaling": 0.7} for m in scaling]
    assert two_nodes(both) == pytest.approx(two_nodes(scaling))


def test_core_scaling_takes_the_other_sessions_load_out_of_both_windows():
    from hpcdl.predict.host import core_scaling, scaling_from

    assert scaling_from(100.0, 1.0, [75.0, 75.0], 1.0) == pytest.approx(0.75)  # quiet host, shared cores
    assert scaling_from(50.0, 0.5, [25.0, 25.0], 0.25) == pytest.approx(1.0)  # busy host, independent cores
    assert scaling_from(100.0, 1.0, [], 1.0) == 1.0  # nothing measured: independent
    assert core_scaling(1) == 1.0
    measured = core_scaling(2, window_s=0.3, pairs=1)  # a real probe on this host's cores
    assert measured is None or 0 < measured <= 1


def test_core_scaling_is_the_median_of_its_pairs_so_one_disturbed_pair_does_not_decide_it(monkeypatch):
    from hpcdl.predict import host

    # solo then together, three times: 1.0, 0.96, and the last pair disturbed (0.80)
    rates = iter([[100.0], [100.0, 100.0], [100.0], [96.0, 96.0], [100.0], [80.0, 80.0]])
    monkeypatch.setattr(host, "_probe_rates", lambda processes, window_s: next(rates))
    monkeypatch.setattr(host, "share_of_core", lambda threads: 1.0)
    assert host.core_scaling(2) == pytest.approx(0.96)


def test_the_stored_two_pretend_node_run_is_predicted_within_the_stated_bound():
    # a real `hpcdl validate --site ci-slurm --suite quick --nodes 1,2` (tests/test_validate_slurm.py) on
    # this machine under load: 2 ranks on one pretend node, then 4 on two that share the same 2 cores
    run = ROOT / "tests" / "fixtures" / "predict" / "ci-slurm-collectives-scaling.jsonl"
    scaling, collectives = _split([json.loads(line) for line in run.read_text().splitlines()])
    site = load_site_file(FIXTURE_SITES / "ci-slurm.yaml")
    two = [m for m in with_predictions(site, scaling, collectives) if m["series"] == "scaling" and m["p"] == 2]
    assert len(two) == 2 and all(m["prediction_within"] for m in two), two
