"""Runs kept per site, trends across runs, a run column, bounds on plots, per-node rows, system facts, job logs."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, hpcdl
from hpcdl.report import build_report
from hpcdl.validate.history import earlier_runs, keep_run

EXAMPLE = ROOT / "docs" / "validation-example" / "results.jsonl"


def a_run(folder: Path, started: str, scale: float = 1.0, extra: list[dict] = ()) -> Path:
    """The example run, started at another time, its measured values times `scale`."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for line in EXAMPLE.read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == "suite":
            rec["started"] = started
        if rec["event"] == "verdict" and isinstance(rec.get("value"), float):
            rec["value"] *= scale
        out.append(rec)
    out[1:1] = list(extra)
    path = folder / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


def test_combined_runs_get_a_run_column_and_a_trend_plot_with_reference_and_bound(tmp_path):
    one = a_run(tmp_path / "a", "2026-11-20T10:00:00+00:00")
    two = a_run(tmp_path / "b", "2026-11-21T10:00:00+00:00", scale=0.9)
    proc = hpcdl("report", one, two, "-o", tmp_path / "r")
    assert "HTML report:" in proc.stdout
    html = (tmp_path / "r" / "index.html").read_text()
    assert "<th>run (started, UTC)</th>" in html
    assert "<td>2026-11-20 10:00:00</td>" in html and "<td>2026-11-21 10:00:00</td>" in html
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert "trend.png" in summary["plots"] and len(summary["trend_runs"]) == 2
    assert (tmp_path / "r" / "trend.png").stat().st_size > 10_000


def test_a_single_run_has_no_run_column_and_no_trend(tmp_path):
    out = build_report([a_run(tmp_path / "a", "2026-11-20T10:00:00+00:00")], tmp_path / "r")
    html = (out / "index.html").read_text()
    assert "run (started, UTC)" not in html and "trend.png" not in html


def test_validate_keeps_each_run_per_site_and_the_report_draws_the_trend_from_the_history(tmp_path):
    root = tmp_path / "history"
    first = keep_run("local", "node", "2026-11-20T10:00:00+00:00", a_run(tmp_path / "a", "2026-11-20T10:00:00+00:00"),
                     root=root)
    again = keep_run("local", "node", "2026-11-20T10:00:00+00:00", first, root=root)  # same start: its own folder
    assert first != again and first.parent.parent == again.parent.parent == root / "local" / "node"
    now = a_run(tmp_path / "now", "2026-11-22T10:00:00+00:00", scale=1.1)
    history = earlier_runs("local", "node", root=root)
    assert history == sorted([first, again])
    assert earlier_runs("local", "other-kind", root=root) == []
    out = build_report([now], tmp_path / "r", history=history)
    summary = json.loads((out / "summary.json").read_text())
    assert "trend.png" in summary["plots"] and summary["runs"] == ["2026-11-22 10:00:00"]


def test_each_row_links_to_its_jobs_log(tmp_path):
    run = a_run(tmp_path / "run", "2026-11-20T10:00:00+00:00")
    verdict = next(json.loads(line) for line in run.read_text().splitlines() if '"verdict"' in line
                   and json.loads(line).get("job"))
    key = verdict["job"].removesuffix("-validate").removeprefix("validate-")
    log = tmp_path / "run" / "jobs" / key / "output.log"
    log.parent.mkdir(parents=True)
    log.write_text("trained\n")
    html = (build_report([run], tmp_path / "run" / "report") / "index.html").read_text()
    assert f'<a href="../jobs/{key}/output.log">output.log</a>' in html


def test_system_facts_and_the_per_node_breakdown_are_shown(tmp_path):
    extra = [
        {"event": "measurement", "check": "environment", "series": "system", "host": "n1",
         "cpu_model": "AMD EPYC 7763 64-Core Processor", "kernel": "6.1.0", "gpus": ["NVIDIA A100-SXM4-40GB"] * 4,
         "gpu_driver": "550.54.15", "image": "/sw/images/ampere-cuda.sif"},
        {"event": "measurement", "check": "scaling", "series": "per_node", "job": "validate-train-x-2n",
         "host": "n1", "value": 410.5, "unit": "images/s per rank"},
        {"event": "measurement", "check": "scaling", "series": "per_node", "job": "validate-train-x-2n",
         "host": "n2", "value": 205.0, "unit": "images/s per rank"},
    ]
    run = a_run(tmp_path / "run", "2026-11-20T10:00:00+00:00", extra=extra)
    suite = json.loads(run.read_text().splitlines()[0])
    lines = run.read_text().splitlines()
    suite.update(image="/sw/images/ampere-cuda.sif", image_sha256="ab" * 32)
    run.write_text("\n".join([json.dumps(suite), *lines[1:]]) + "\n")
    out = build_report([run], tmp_path / "r")
    html = (out / "index.html").read_text()
    assert "AMD EPYC 7763 64-Core Processor" in html and "550.54.15" in html and "NVIDIA A100-SXM4-40GB" in html
    assert "sha256:" + "ab" * 32 in html
    assert "<h2>Per node</h2>" in html and "<td>n2</td>" in html and "205" in html
    summary = json.loads((out / "summary.json").read_text())
    assert {n["node"] for n in summary["per_node"]} == {"n1", "n2"}


def test_hpcdl_perflogs_append_one_line_per_run_and_rotate_when_the_columns_change(tmp_path):
    from hpcdl.validate.reframe import perflog_header, perflog_line

    # the writer's own pieces: one header, then one line per run, as ReFrame's filelog handler does
    header = perflog_header(["images_per_sec"])
    line = perflog_line(1_700_000_000, "hpcdl_t", "local", "node", 2, ("vm",), "pass",
                        [("images_per_sec", 768.0, "images/s", 2000.0, -0.8, None)])
    fields = line.split("|")
    assert len(fields) == len(header.split("|"))
    assert fields[1:9] == ["hpcdl_t", "local", "node", "hpcdl", "2", "vm", "pass", "images_per_sec=768.0"]
    assert fields[9:] == ["images/s", "2000.0", "-0.8", "None"]


def test_write_perflogs_appends_per_run_and_moves_an_old_header_aside(tmp_path):
    from hpcdl.validate.checks import JobOutcome
    from hpcdl.validate.reframe import exported_tests, write_perflogs
    from hpcdl.validate.suite import build_context, select_checks

    ctx = build_context("local", "quick", (1,))
    selected = select_checks("throughput")
    (test,) = exported_tests(ctx, selected)
    (job,) = test.variants
    final = {"event": "final", "time": 1_700_000_000.0, "images_per_sec_total": 800.0}
    outcomes = {job.key: JobOutcome(None, "COMPLETED", 0, [final], ("vm",))}  # type: ignore[arg-type]
    log = tmp_path / "local" / ctx.node_kind_name / f"{test.name}.log"
    log.parent.mkdir(parents=True)
    log.write_text("an|older|header\nold line\n")
    write_perflogs(ctx, selected, outcomes, [], tmp_path)
    write_perflogs(ctx, selected, outcomes, [], tmp_path)
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("job_completion_time|") and "images_per_sec=800.0" in lines[1]
    assert (log.parent / f"{log.name}.h0").read_text() == "an|older|header\nold line\n"


def test_a_note_about_the_references_hardware_is_shown_with_the_run(tmp_path):
    run = a_run(tmp_path / "a", "2026-11-20T10:00:00+00:00")
    lines = run.read_text().splitlines()
    suite = json.loads(lines[0])
    suite["references_warnings"] = ["local.yaml was measured on 'AMD EPYC'; this node kind is 'Intel Xeon'"]
    run.write_text("\n".join([json.dumps(suite), *lines[1:]]) + "\n")
    html = (build_report([run], tmp_path / "r") / "index.html").read_text()
    assert "<strong>note:</strong> local.yaml was measured on &#39;AMD EPYC&#39;" in html
