"""`hpcdl report RESULTS... -o DIR`: index.html, summary.json and the PNG plots in DIR.

Several results files can be combined (e.g. runs of the same suite at different node
counts); the page lists every suite run it was made from, and the summary table gets a run
column. Earlier runs of the site (hpcdl.validate.history) give each judged value's trend.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from hpcdl.errors import HpcdlError
from hpcdl.extras import installed
from hpcdl.files import write_atomically
from hpcdl.validate.references import Verdict


@dataclass
class Results:
    suites: list[dict] = field(default_factory=list)
    measurements: list[dict] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    verdict_runs: list[str] = field(default_factory=list)  # the run (its start time) each verdict came from
    verdict_files: list[Path] = field(default_factory=list)  # the results file each verdict came from

    def series(self, name: str) -> list[dict]:
        return [m for m in self.measurements if m.get("series") == name]


def load_results(paths: list[Path]) -> Results:
    out = Results()
    for path in paths:
        path = Path(path)
        if path.is_dir():
            path = path / "results.jsonl"
        if not path.is_file():
            raise HpcdlError(f"{path}: no such results file (hpcdl validate writes <out>/results.jsonl)")
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise HpcdlError(f"{path}:{number}: not a JSON record") from None
            event = rec.get("event") if isinstance(rec, dict) else None
            if event == "suite":
                out.suites.append({**rec, "file": str(path)})
            elif event == "measurement":
                out.measurements.append({**rec, "run": run_label(out.suites[-1]) if out.suites else ""})
            elif event == "verdict":
                fields = {k: v for k, v in rec.items() if k != "event"}
                fields["nodelist"] = tuple(fields.get("nodelist") or ())
                try:
                    out.verdicts.append(Verdict(**fields))
                except TypeError:
                    raise HpcdlError(f"{path}:{number}: not a verdict record hpcdl understands") from None
                out.verdict_runs.append(run_label(out.suites[-1]) if out.suites else "")
                out.verdict_files.append(path)
    if not out.suites:
        raise HpcdlError(f"{paths[0]}: no `suite` record: is this a results file from hpcdl validate?")
    return out


def run_label(suite: dict) -> str:
    return str(suite.get("started", "")).replace("T", " ").replace("+00:00", "")


def _job_log(results_file: Path, job: str | None, out_dir: Path) -> str | None:
    """The job's log beside its results (DIR/jobs/<job>/output.log), as a link from the report."""
    if not job:
        return None
    # the job folder is the job's key: `KEY-validate` now, `validate-KEY` in runs kept from before
    key = job.removesuffix("-validate").removeprefix("validate-")
    log = Path(results_file).resolve().parent / "jobs" / key / "output.log"
    if not log.is_file():
        return None
    return os.path.relpath(log, Path(out_dir).resolve())


def _system(results: Results) -> list[dict]:
    """What each node of each run ran on (the environment check's `system` records)."""
    rows = []
    for m in results.series("system"):
        rows.append({"run": m.get("run", ""), "node": m.get("host", ""), "cpu": m.get("cpu_model") or "-",
                     "gpus": ", ".join(m.get("gpus") or []) or "-", "driver": m.get("gpu_driver") or "-",
                     "kernel": m.get("kernel") or "-", "image": m.get("image") or "-"})
    for s in results.suites:
        if s.get("image"):
            rows.append({"run": run_label(s), "node": "(submit host)", "cpu": "-", "gpus": "-", "driver": "-",
                         "kernel": "-", "image": f"{s['image']} sha256:{s.get('image_sha256') or 'not readable here'}"})
    return rows


def _per_node(results: Results) -> list[dict]:
    """Rows of a check that ran on several nodes, one per node (the `per_node` series)."""
    return [{"run": m.get("run", ""), "check": m.get("check", ""), "job": m.get("job", ""), "node": m.get("host", ""),
             "value": m.get("value"), "unit": m.get("unit", "")}
            for m in results.series("per_node")]


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("hpcdl.report", "templates"), autoescape=True, undefined=jinja2.StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)


def _figures(results: Results, trend_runs: list, out_dir: Path) -> tuple[list[dict], bool]:
    """The plots, drawn where matplotlib (the `reports` extra) is installed; without it the
    report is its tables, and says how to get the plots."""
    if not installed("matplotlib"):
        return [], False
    from hpcdl.report import plots

    figures = []
    for name, title, draw, series in (
        ("scaling.png", "Throughput and scaling efficiency against node (or rank) count", plots.scaling_plot, "scaling"),
        ("threads.png", "Thread sweep: ranks per node x OpenMP threads per rank", plots.thread_sweep_plot, "thread_sweep"),
        ("collectives.png", "Allreduce bandwidth and time against message size", plots.collectives_plot, "collective"),
        ("throughput.png", "Single-node throughput per net and framework", plots.throughput_plot, "throughput"),
    ):
        if draw(results.series(series), out_dir / name, results.verdicts):
            figures.append({"file": name, "title": title})
    trend = plots.trend_plot(trend_runs, out_dir / "trend.png")
    if trend:
        figures.append({"file": "trend.png", "title": "Each judged value over the runs (reference and bound dashed)"})
    return figures, bool(trend)


def build_report(paths: list[Path], out_dir: Path, history: list[Path] = ()) -> Path:
    """The report of `paths`; `history` (earlier runs' results files) adds the trend of each judged value."""
    results = load_results(paths)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = Results()
    for old in history:
        try:
            one = load_results([old])
        except HpcdlError:
            continue  # a damaged file in the history does not stop the report
        earlier.suites += one.suites
        earlier.verdicts += one.verdicts
        earlier.verdict_runs += one.verdict_runs
    combined = len(results.suites) > 1
    trend_runs = [*zip(earlier.verdict_runs, earlier.verdicts), *zip(results.verdict_runs, results.verdicts)]
    figures, trend = _figures(results, trend_runs, out_dir)
    from hpcdl.validate.suite import format_value

    counts = {k: sum(v.result == k for v in results.verdicts) for k in ("pass", "fail", "info", "n/a")}
    summary = {
        "passed": counts["fail"] == 0,
        "counts": counts,
        "suites": [{k: v for k, v in s.items() if k not in ("event", "file")} for s in results.suites],
        "verdicts": [{k: v for k, v in vd.to_record().items() if k != "event"} for vd in results.verdicts],
        "plots": [f["file"] for f in figures],
        "runs": [run_label(s) for s in results.suites],
        "trend_runs": sorted({r for r, _ in trend_runs}) if trend else [],
        "system": _system(results),
        "per_node": _per_node(results),
        "predictions": [{k: m.get(k) for k in ("mode", "p", "unit", "images_per_sec", "prediction_measured_images_per_sec",
                                                "predicted_images_per_sec",
                                                "prediction_error", "prediction_within", "cpu_share", "core_scaling")}
                        for m in results.series("scaling") if m.get("predicted_images_per_sec") is not None],
    }
    write_atomically(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n", mode=0o644)
    rows = [
        {**{k: getattr(v, k) for k in ("check", "name", "result", "message", "nodes")},
         "value": format_value(v.value, v.unit), "reference": format_value(v.reference, v.unit),
         "tolerance": f"{v.tolerance:+.0%}" if v.tolerance is not None else "",
         "bound": format_value(v.bound, v.unit), "nodelist": ", ".join(v.nodelist), "run": run,
         "log": _job_log(file, v.job, out_dir)}
        for v, run, file in zip(results.verdicts, results.verdict_runs, results.verdict_files)
    ]
    predictions = _predictions(results.series("scaling"))
    html = _env.get_template("report.html.j2").render(summary=summary, rows=rows, figures=figures, suites=results.suites,
                                                      predictions=predictions, agreement=f"{_agreement():.0%}",
                                                      combined=combined, system=summary["system"],
                                                      per_node=summary["per_node"],
                                                      plots_installed=installed("matplotlib"))
    write_atomically(out_dir / "index.html", html, mode=0o644)
    return out_dir


def _agreement() -> float:
    from hpcdl.predict.validation import AGREEMENT

    return AGREEMENT


def _predictions(points: list[dict]) -> list[dict]:
    """Scaling points with hpcdl predict's figure beside the measured one (hpcdl.predict.validation)."""
    def pct(x):
        return f"{x:+.0%}" if x is not None else "-"

    return [{"mode": m["mode"], "p": m["p"], "unit": m.get("unit", "node"),
             # the steady state the prediction is held against, where the job had the windows for it
             "measured": f"{m.get('prediction_measured_images_per_sec') or m['images_per_sec']:,.0f}",
             "predicted": f"{m['predicted_images_per_sec']:,.0f}", "error": pct(m.get("prediction_error")),
             "measured_e": f"{m['efficiency']:.2f}" if m.get("efficiency") is not None else "-",
             "predicted_e": f"{m['predicted_efficiency']:.2f}" if m.get("predicted_efficiency") is not None else "-",
             "share": f"{m['cpu_share']:.2f}" if m.get("cpu_share") is not None else "1 (not shared)",
             "scaling": f"{m['core_scaling']:.2f}" if m.get("core_scaling") is not None else "-",
             "within": bool(m.get("prediction_within"))}
            for m in sorted(points, key=lambda m: (m["mode"], m["p"])) if m.get("predicted_images_per_sec") is not None]
