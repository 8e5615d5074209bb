"""A validation suite from start to end: choose the jobs, run them, judge them, write the results.

The results file (JSON lines) holds a `suite` record, one `measurement` record per data
point behind a plot, one `verdict` per judged value and an `end` record; `hpcdl report`
reads one or more of them.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import socket
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hpcdl import __version__
from hpcdl.cli.output import write_atomically
from hpcdl.errors import HpcdlError
from hpcdl.sites import load_site
from hpcdl.validate.checks import ORDER, checks
from hpcdl.validate.jobs import SUITES, SuiteContext, ValidationJob
from hpcdl.validate.references import Verdict, load_references
from hpcdl.validate.runner import run_jobs

# framework -> (module the trainer's backend lives in, module the framework imports as)
TRAINER_BACKENDS = {"pytorch": ("hpcdl.train.torch_backend", "torch"),
                    "tensorflow": ("hpcdl.train.tensorflow_backend", "tensorflow"),
                    "mxnet": ("hpcdl.train.mxnet_backend", "mxnet")}


@dataclass
class SuiteResult:
    results: Path
    verdicts: list[Verdict]
    measurements: list[dict]

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.result == "fail"]


def frameworks_present() -> tuple[str, ...]:
    """Frameworks the trainer has a backend for and this environment can import."""
    found = []
    for fw, (backend, module) in TRAINER_BACKENDS.items():
        if importlib.util.find_spec(backend) is not None and importlib.util.find_spec(module) is not None:
            found.append(fw)
    return tuple(found)


def default_nodes(site, suite: str) -> tuple[int, ...]:
    _, node = site.node_kind()
    most = min(x for x in (node.count, site.defaults.max_nodes, 2 if suite == "quick" else 8) if x)
    return tuple(p for p in (1, 2, 4, 8) if p <= most)


def parse_nodes(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        nodes = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise HpcdlError(f"--nodes: {text!r} is not a comma-separated list of node counts, e.g. 1,2,4") from None
    if not nodes or nodes[0] < 1:
        raise HpcdlError(f"--nodes: {text!r}: node counts start at 1")
    return nodes


def select_checks(names: str | None) -> list:
    chosen = [n.strip() for n in names.split(",") if n.strip()] if names else list(ORDER)
    for n in chosen:
        if n not in checks.names():
            raise HpcdlError(f"--checks: unknown check {n!r}; known: {', '.join(ORDER)}")
    return [checks.get(n) for n in ORDER if n in chosen]


def build_context(site_name: str, suite: str, nodes: tuple[int, ...] | None, references: Path | None = None) -> SuiteContext:
    if suite not in SUITES:
        raise HpcdlError(f"--suite: unknown suite {suite!r}; known: {', '.join(SUITES)}")
    site = load_site(site_name)
    _, node = site.node_kind()
    nodes = nodes or default_nodes(site, suite)
    if node.count and max(nodes) > node.count:
        raise HpcdlError(f"--nodes: {max(nodes)} nodes asked for but site {site.name!r} has {node.count}")
    refs = load_references(site.name, references)
    return SuiteContext(site, suite, nodes, refs, SUITES[suite], frameworks=frameworks_present() or ("pytorch",))


def suite_jobs(ctx: SuiteContext, selected: list) -> list[ValidationJob]:
    """The jobs all selected checks need, each once (checks share identical jobs)."""
    jobs: dict[str, ValidationJob] = {}
    for check in selected:
        for job in check.jobs(ctx):
            jobs.setdefault(job.key, job)
    return list(jobs.values())


def run_suite(
    ctx: SuiteContext, selected: list, out_dir: Path, *, max_jobs: int | None = None, console: Console | None = None,
) -> SuiteResult:
    console = console or Console()
    jobs = suite_jobs(ctx, selected)
    started = _dt.datetime.now(_dt.timezone.utc)
    outcomes = run_jobs(ctx.site, jobs, out_dir, timeout_s=ctx.settings.job_timeout_s, max_jobs=max_jobs, console=console)
    measurements, verdicts = [], []
    for check in selected:
        m, v = check.evaluate(ctx, outcomes)
        measurements += m
        verdicts += v
    header = {
        "event": "suite", "site": ctx.site.name, "suite": ctx.suite, "nodes_requested": list(ctx.nodes),
        "checks": [c.name for c in selected], "scheduler": ctx.site.scheduler, "launcher": ctx.site.launcher,
        "node_kind": ctx.node_kind_name, "references": ctx.references.source, "hpcdl": __version__,
        "submitted_from": socket.gethostname(), "started": started.isoformat(timespec="seconds"),
        "frameworks": list(ctx.frameworks),
    }
    end = {"event": "end", "passed": sum(v.result == "pass" for v in verdicts),
           "failed": sum(v.result == "fail" for v in verdicts),
           "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    lines = [header, *measurements, *(v.to_record() for v in verdicts), end]
    results = out_dir / "results.jsonl"
    write_atomically(results, "".join(json.dumps(r) + "\n" for r in lines), mode=0o644)
    return SuiteResult(results, verdicts, measurements)


def summary_table(verdicts: list[Verdict], title: str = "validation") -> Table:
    table = Table("check", "measurement", "result", "value", "reference", "tolerance", "nodes", "note", title=title)
    colour = {"pass": "green", "fail": "bold red", "info": "cyan", "n/a": "dim"}
    for v in verdicts:
        table.add_row(
            v.check, v.name, f"[{colour[v.result]}]{v.result.upper()}[/]", format_value(v.value, v.unit),
            format_value(v.reference, v.unit), f"{v.tolerance:+.0%}" if v.tolerance is not None else "",
            str(v.nodes or ""), v.message,
        )
    return table


def format_value(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
        return f"{text} {unit}".strip()
    return str(value)
