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
from hpcdl.errors import HpcdlError
from hpcdl.files import write_atomically
from hpcdl.sites import load_site
from hpcdl.validate.checks import ORDER, checks
from hpcdl.validate.jobs import SUITES, SuiteContext, suite_jobs
from hpcdl.validate.references import Verdict, load_references
from hpcdl.validate.runner import run_jobs

def trainer_backends() -> dict[str, tuple[str, str]]:
    """framework -> (the module its trainer backend lives in, the module the framework imports as); the
    trainer's own tables say both, so a backend that moves is still found."""
    from hpcdl.train.backends import BACKENDS
    from hpcdl.train.preflight import FRAMEWORK_MODULES

    return {fw: (module, FRAMEWORK_MODULES[fw]) for (fw, dist), module in BACKENDS.items() if dist is None}


@dataclass
class SuiteResult:
    results: Path
    verdicts: list[Verdict]
    measurements: list[dict]
    outcomes: dict = None  # type: ignore[assignment]  # job key -> JobOutcome
    perflogs: list[Path] = None  # type: ignore[assignment]
    kept: Path | None = None  # the copy in the site's history (hpcdl.validate.history)

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.result == "fail"]


def frameworks_present() -> tuple[str, ...]:
    """Frameworks the trainer has a backend for and this environment can import."""
    found = []
    for fw, (backend, module) in trainer_backends().items():
        if importlib.util.find_spec(backend) is not None and importlib.util.find_spec(module) is not None:
            found.append(fw)
    return tuple(found)


def largest_whole_job(site, kind: str | None = None) -> int | None:
    """The most whole nodes of a kind (the default one unless named) one job may take, where the profile bounds it:
    the kind's count, its defaults' max_nodes, and its queues (partition_by_nodes), each bounded by nodes or by the
    GPUs a job holds (NeSI Mahuika's "6 GPUs occupied" a user: one node of four A100s); None where nothing bounds it.
    The validation suite, and the tests that render and submit each machine's jobs, ask no more."""
    name, node = site.node_kind(kind)
    defaults = site.job_defaults(name)
    bounds = [x for x in (node.count, defaults.max_nodes) if x]
    sizes = defaults.partition_by_nodes or ()

    def held(size):
        most = [size.max_nodes] if size.max_nodes else []
        if size.max_gpus and node.gpus:
            most.append(max(1, size.max_gpus // len(node.gpus)))
        return min(most) if most else None

    held_by = [held(size) for size in sizes]
    if held_by and all(held_by):
        bounds.append(max(held_by))
    return min(bounds) if bounds else None


def default_nodes(site, suite: str) -> tuple[int, ...]:
    most = min(x for x in (largest_whole_job(site), 2 if suite == "quick" else 8) if x)
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


def build_context(site_name: str, suite: str, nodes: tuple[int, ...] | None, references: Path | None = None,
                  node_kind: str | None = None) -> SuiteContext:
    if suite not in SUITES:
        raise HpcdlError(f"--suite: unknown suite {suite!r}; known: {', '.join(SUITES)}")
    site = load_site(site_name)
    if node_kind is not None:
        if node_kind not in site.node_kinds:
            raise HpcdlError(f"--node-kind: {node_kind!r} is not a node kind of site {site.name!r}; "
                             f"it has: {', '.join(sorted(site.node_kinds))}")
        # every job of the suite is planned for this kind: it becomes the site's default for the run
        site = site.model_copy(update={"default_node_kind": node_kind})
    kind, node = site.node_kind()
    nodes = nodes or default_nodes(site, suite)
    if node.count and max(nodes) > node.count:
        raise HpcdlError(f"--nodes: {max(nodes)} nodes asked for but site {site.name!r} has {node.count}")
    if site.defaults.max_nodes and max(nodes) > site.defaults.max_nodes:
        raise HpcdlError(f"--nodes: {max(nodes)} nodes asked for but site {site.name!r} takes at most "
                         f"{site.defaults.max_nodes} in one job (defaults.max_nodes)")
    refs = load_references(site.name, references, node_kind=kind, node=node)
    return SuiteContext(site, suite, nodes, refs, SUITES[suite], frameworks=frameworks_present() or ("pytorch",))


def image_facts(site) -> dict:
    """The image the jobs run (the site's default) and, where this host can read the file, its sha256."""
    import hashlib
    import os

    from hpcdl.render.jobscript import default_image

    try:
        image = site.defaults.image or default_image(site)
    except Exception:  # a site whose images cannot be listed here still validates
        image = None
    if not image:
        return {}
    path = Path(os.path.expandvars(str(image))).expanduser()
    facts = {"image": str(image), "image_sha256": None}
    if path.is_file():
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        facts["image_sha256"] = digest.hexdigest()
    return facts


def run_suite(
    ctx: SuiteContext, selected: list, out_dir: Path, *, max_jobs: int | None = None, console: Console | None = None,
    keep_history: bool = True,
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
    measurements += per_node_measurements(outcomes, verdicts)
    header = {
        "event": "suite", "site": ctx.site.name, "suite": ctx.suite, "nodes_requested": list(ctx.nodes),
        "checks": [c.name for c in selected], "scheduler": ctx.site.scheduler, "launcher": ctx.site.launcher,
        "node_kind": ctx.node_kind_name, "references": ctx.references.source, "hpcdl": __version__,
        "submitted_from": socket.gethostname(), "started": started.isoformat(timespec="seconds"),
        "frameworks": list(ctx.frameworks),
        "references_hardware": dict(ctx.references.hardware),
        "references_warnings": list(ctx.references.warnings),
        **image_facts(ctx.site),
    }
    end = {"event": "end", "passed": sum(v.result == "pass" for v in verdicts),
           "failed": sum(v.result == "fail" for v in verdicts),
           "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    lines = [header, *measurements, *(v.to_record() for v in verdicts), end]
    results = out_dir / "results.jsonl"
    write_atomically(results, "".join(json.dumps(r) + "\n" for r in lines), mode=0o644)
    from hpcdl.validate.reframe import write_perflogs

    perflogs = write_perflogs(ctx, selected, outcomes, verdicts, out_dir / "perflogs")
    kept = None
    if keep_history:
        from hpcdl.validate.history import history_root, keep_run

        kept = keep_run(ctx.site.name, ctx.node_kind_name, header["started"], results)
        write_perflogs(ctx, selected, outcomes, verdicts, history_root() / "perflogs")
    return SuiteResult(results, verdicts, measurements, outcomes, perflogs, kept)


def per_node_measurements(outcomes: dict, verdicts: list[Verdict]) -> list[dict]:
    """One record per node of each job that ran on several: its first rank's images/s (a slow node shows)."""
    out = []
    for key, outcome in sorted(outcomes.items()):
        if len(outcome.per_node) < 2:
            continue
        job = outcome.job.name
        check = next((v.check for v in verdicts if v.job == job), outcome.job.kind)
        for host, value in sorted(outcome.per_node.items()):
            out.append({"event": "measurement", "check": check, "series": "per_node", "job": job, "host": host,
                        "value": value, "unit": "images/s per rank", "nodes": len(outcome.per_node),
                        "nodelist": sorted(outcome.per_node)})
    return out


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
