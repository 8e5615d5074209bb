"""The quick suite runs for real through the local executor, and a broken stack is caught."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import hpcdl


@pytest.fixture(scope="module")
def quick_run(local_quick_validation):
    """`hpcdl validate --site local --suite quick` (what `make run` does), run once per session (conftest)."""
    return local_quick_validation


@pytest.mark.slow
def test_the_quick_suite_passes_here_and_prints_the_table_and_the_report_path(quick_run):
    proc, out, records, _ = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "validation" in proc.stdout and "PASS" in proc.stdout and "FAIL" not in proc.stdout
    assert f"HTML report: {out / 'report' / 'index.html'}" in proc.stdout
    checks = {r["check"] for r in records if r["event"] == "verdict"}
    assert checks == {"environment", "collectives", "threads", "throughput", "scaling", "convergence"}


@pytest.mark.slow
def test_every_measurement_and_verdict_names_its_node_count_and_node_list(quick_run):
    _, _, records, _ = quick_run
    measured = [r for r in records if r["event"] in ("measurement", "verdict")]
    assert measured
    for r in measured:
        assert r["nodes"] == 1 and len(r["nodelist"]) == 1, r


@pytest.mark.slow
def test_scaling_efficiency_uses_the_measured_aggregate_against_the_one_rank_baseline(quick_run):
    _, _, records, _ = quick_run
    points = {(r["mode"], r["p"]): r for r in records if r.get("series") == "scaling"}
    for mode in ("weak", "strong"):
        one, two = points[(mode, 1)], points[(mode, 2)]
        assert one["efficiency"] == pytest.approx(1.0)
        assert two["efficiency"] == pytest.approx(two["images_per_sec"] / (2 * one["images_per_sec"]))
        assert two["baseline_from"] == "measured in this run" and two["time_to_solution_s"] > 0


@pytest.mark.slow
def test_the_collective_sweep_reports_algbw_and_busbw_as_nccl_tests_defines_them(quick_run):
    _, _, records, _ = quick_run
    points = [r for r in records if r.get("series") == "collective"]
    assert {r["backend"] for r in points} == {"gloo", "mpi"}
    for r in points:
        n = r["ranks"]
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (n - 1) / n)
        assert r["windows"] == 5
    assert len({r["bytes"] for r in points}) >= 8


@pytest.mark.slow
def test_the_report_has_its_plots_page_and_summary(quick_run):
    _, out, _, _ = quick_run
    report = out / "report"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["passed"] is True
    assert set(summary["plots"]) == {"scaling.png", "threads.png", "collectives.png", "throughput.png"}
    html = (report / "index.html").read_text()
    for png in summary["plots"]:
        assert f'src="{png}"' in html and (report / png).stat().st_size > 10_000


@pytest.mark.slow
def test_the_best_thread_placement_is_written_back_into_a_profile(quick_run):
    _, _, records, profile = quick_run
    best = next(r for r in records if r.get("series") == "thread_sweep" and r["best"])
    node = next(iter(yaml.safe_load(profile.read_text())["node_kinds"].values()))
    assert node["default_threads_per_rank"] == best["threads_per_rank"]


def broken_references(tmp_path, text: str):
    (tmp_path / "sites" / "references").mkdir(parents=True)
    (tmp_path / "sites" / "references" / "local.yaml").write_text(text)
    return {"HPCDL_SITE_PATH": str(tmp_path / "sites"), "HPCDL_LOCAL_JOBS": str(tmp_path / "jobs")}


@pytest.mark.slow
def test_a_throughput_far_below_its_reference_fails_the_suite_and_says_by_how_much(tmp_path):
    env = broken_references(tmp_path, "references:\n  throughput/cifar10_quick/pytorch/images_per_sec: "
                                      "{value: 1.0e+9, tolerance: -0.1}\n")
    proc = hpcdl("validate", "--site", "local", "--checks", "throughput", "-o", tmp_path / "out", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 check(s) failed: throughput/cifar10_quick/pytorch/images_per_sec" in proc.stderr
    assert "FAIL" in proc.stdout and "below the bound" in proc.stdout
    summary = json.loads((tmp_path / "out" / "report" / "summary.json").read_text())
    assert summary["passed"] is False and summary["counts"]["fail"] == 1


@pytest.mark.slow
def test_a_framework_missing_from_the_environment_fails_the_environment_check(tmp_path):
    env = broken_references(tmp_path, "expect:\n  frameworks: {pytorch: '2.13.0', mxnet: '1.9.1'}\n")
    proc = hpcdl("validate", "--site", "local", "--checks", "environment", "-o", tmp_path / "out", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "check(s) failed: environment/mxnet" in proc.stderr
    verdicts = {r["name"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())
                if r["event"] == "verdict"}
    assert verdicts["environment/mxnet"]["result"] == "fail" and "is not installed where the job ran" in verdicts["environment/mxnet"]["message"]
    assert verdicts["environment/pytorch"]["result"] == "pass"
    assert verdicts["environment/launcher"]["result"] == "pass"


def test_a_stall_in_one_window_does_not_decide_the_collective_time(tmp_path, monkeypatch):
    """Each size is timed in 5 windows and the median window counts: CI once saw MPI's 4 MiB
    allreduce 10 x slow on the 2-core host, where another process ran during the one 16 ms window."""
    from hpcdl.train.ranks import RankInfo
    from hpcdl.validate import probes

    windows = iter([0.002, 0.200, 0.002, 0.0021, 0.0019])  # one 100 x stall
    calls = []

    def timer(size, iters, warmup):
        calls.append(warmup)
        return next(windows)

    monkeypatch.setattr(probes, "rank_info", lambda: RankInfo(0, 1, 0, "local"))
    monkeypatch.setattr(probes, "_init_torch_distributed", lambda me, backend: None)
    monkeypatch.setattr(probes, "_hosts", lambda dist, me: ["n1", "n1"])
    monkeypatch.setattr(probes, "_torch_allreduce", lambda dist, me, gpu: timer)
    monkeypatch.setattr(probes, "_slowest", lambda dist, seconds: seconds)
    monkeypatch.setattr(probes, "_finish", lambda dist, me: None)
    out = tmp_path / "results.jsonl"
    probes.probe_collectives({"sizes": [4 << 20], "iters": 10, "warmup": 2, "backends": ["torch"]}, str(out))
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert calls == [2, 0, 0, 0, 0]  # warm-up before the first window only
    assert record["windows"] == 5 and record["time_us"] == pytest.approx(2000)
