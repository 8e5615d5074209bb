"""`hpcdl report RESULTS... -o DIR`: index.html, summary.json and the PNG plots in DIR.

Several results files can be combined (e.g. runs of the same suite at different node
counts); the page lists every suite run it was made from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from hpcdl.cli.output import write_atomically
from hpcdl.errors import HpcdlError
from hpcdl.report import plots
from hpcdl.validate.references import Verdict


@dataclass
class Results:
    suites: list[dict] = field(default_factory=list)
    measurements: list[dict] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

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
                out.measurements.append(rec)
            elif event == "verdict":
                fields = {k: v for k, v in rec.items() if k != "event"}
                fields["nodelist"] = tuple(fields.get("nodelist") or ())
                try:
                    out.verdicts.append(Verdict(**fields))
                except TypeError:
                    raise HpcdlError(f"{path}:{number}: not a verdict record hpcdl understands") from None
    if not out.suites:
        raise HpcdlError(f"{paths[0]}: no `suite` record: is this a results file from hpcdl validate?")
    return out


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("hpcdl.report", "templates"), autoescape=True, undefined=jinja2.StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)


def build_report(paths: list[Path], out_dir: Path) -> Path:
    results = load_results(paths)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = []
    for name, title, draw, series in (
        ("scaling.png", "Throughput and scaling efficiency against node (or rank) count", plots.scaling_plot, "scaling"),
        ("threads.png", "Thread sweep: ranks per node x OpenMP threads per rank", plots.thread_sweep_plot, "thread_sweep"),
        ("collectives.png", "Allreduce bandwidth and time against message size", plots.collectives_plot, "collective"),
        ("throughput.png", "Single-node throughput per net and framework", plots.throughput_plot, "throughput"),
    ):
        if draw(results.series(series), out_dir / name):
            figures.append({"file": name, "title": title})
    from hpcdl.validate.suite import format_value

    counts = {k: sum(v.result == k for v in results.verdicts) for k in ("pass", "fail", "info", "n/a")}
    summary = {
        "passed": counts["fail"] == 0,
        "counts": counts,
        "suites": [{k: v for k, v in s.items() if k not in ("event", "file")} for s in results.suites],
        "verdicts": [{k: v for k, v in vd.to_record().items() if k != "event"} for vd in results.verdicts],
        "plots": [f["file"] for f in figures],
        "predictions": [{k: m.get(k) for k in ("mode", "p", "unit", "images_per_sec", "predicted_images_per_sec",
                                                "prediction_error", "prediction_within", "cpu_share", "core_scaling")}
                        for m in results.series("scaling") if m.get("predicted_images_per_sec") is not None],
    }
    write_atomically(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n", mode=0o644)
    rows = [
        {**{k: getattr(v, k) for k in ("check", "name", "result", "message", "nodes")},
         "value": format_value(v.value, v.unit), "reference": format_value(v.reference, v.unit),
         "tolerance": f"{v.tolerance:+.0%}" if v.tolerance is not None else "",
         "bound": format_value(v.bound, v.unit), "nodelist": ", ".join(v.nodelist)}
        for v in results.verdicts
    ]
    predictions = _predictions(results.series("scaling"))
    html = _env.get_template("report.html.j2").render(summary=summary, rows=rows, figures=figures, suites=results.suites,
                                                      predictions=predictions, agreement=f"{_agreement():.0%}")
    write_atomically(out_dir / "index.html", html, mode=0o644)
    return out_dir


def _agreement() -> float:
    from hpcdl.predict.validation import AGREEMENT

    return AGREEMENT


def _predictions(points: list[dict]) -> list[dict]:
    """Scaling points with hpcdl predict's figure beside the measured one (hpcdl.predict.validation)."""
    def pct(x):
        return f"{x:+.0%}" if x is not None else "-"

    return [{"mode": m["mode"], "p": m["p"], "unit": m.get("unit", "node"), "measured": f"{m['images_per_sec']:,.0f}",
             "predicted": f"{m['predicted_images_per_sec']:,.0f}", "error": pct(m.get("prediction_error")),
             "measured_e": f"{m['efficiency']:.2f}" if m.get("efficiency") is not None else "-",
             "predicted_e": f"{m['predicted_efficiency']:.2f}" if m.get("predicted_efficiency") is not None else "-",
             "share": f"{m['cpu_share']:.2f}" if m.get("cpu_share") is not None else "1 (not shared)",
             "scaling": f"{m['core_scaling']:.2f}" if m.get("core_scaling") is not None else "-",
             "within": bool(m.get("prediction_within"))}
            for m in sorted(points, key=lambda m: (m["mode"], m["p"])) if m.get("predicted_images_per_sec") is not None]
