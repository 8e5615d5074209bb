"""hpcdl validate / report / probe."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from hpcdl.cli import app
from hpcdl.cli.output import console as make_console
from hpcdl.cli.jobs import SITE_HELP


@app.command()
def validate(
    site: str = typer.Option(..., "--site", "-s", envvar="HPCDL_SITE", show_envvar=False, help=SITE_HELP),
    suite: str = typer.Option("quick", "--suite", help="quick (minutes) or full"),
    nodes: Optional[str] = typer.Option(None, "--nodes", "-N", help="node counts for scaling, e.g. 1,2,4"),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="results folder (default runs/validate-<site>-<time>)"),
    only: Optional[str] = typer.Option(None, "--checks", help="comma-separated subset: environment, collectives, "
                                       "threads, throughput, scaling, convergence"),
    references: Optional[Path] = typer.Option(None, "--references", help="references file (default: found for the site)"),
    max_jobs: Optional[int] = typer.Option(None, "--max-jobs", min=1, help="jobs in flight at once (local: 1)"),
    write_profile: Optional[Path] = typer.Option(None, "--write-profile",
                                                 help="write the thread sweep's best placement into this profile file"),
) -> None:
    """Run the validation suite on a site, print the summary and write an HTML report.

    Exits 0 when every check passes, 1 when one fails (the failing checks are named).
    """
    from hpcdl.report import build_report
    from hpcdl.validate.suite import build_context, parse_nodes, run_suite, select_checks, summary_table

    ctx = build_context(site, suite, parse_nodes(nodes), references)
    selected = select_checks(only)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = (out or Path("runs") / f"validate-{ctx.site.name}-{stamp}").resolve()
    console = make_console()
    console.print(f"validating {ctx.site.name} ({ctx.suite} suite; checks: {', '.join(c.name for c in selected)}; "
                  f"nodes {','.join(map(str, ctx.nodes))}; references: {ctx.references.source})", highlight=False)
    result = run_suite(ctx, selected, out_dir, max_jobs=max_jobs, console=console)
    console.print(summary_table(result.verdicts, title=f"{ctx.site.name}: {ctx.suite} validation"))
    report = build_report([result.results], out_dir / "report")
    console.print(f"results: {result.results}", highlight=False)
    console.print(f"HTML report: {report / 'index.html'}", highlight=False)
    if write_profile:
        _write_profile(ctx, result, write_profile, console)
    if result.failed:
        names = ", ".join(v.name for v in result.failed)
        print(f"hpcdl validate: {len(result.failed)} check(s) failed: {names}", file=sys.stderr)
        raise typer.Exit(1)


def _write_profile(ctx, result, path: Path, console: Console) -> None:
    from hpcdl.errors import HpcdlError
    from hpcdl.validate.profile import best_placement, write_profile

    best = best_placement(result.measurements)
    if best is None:
        raise HpcdlError("--write-profile: the thread sweep measured nothing (run it with --checks threads)")
    notes = write_profile(path, ctx.site, ctx.node_kind_name, *best)
    console.print(f"wrote {best[0]} rank(s) x {best[1]} thread(s) per node into {path}", highlight=False)
    for note in notes:
        console.print(f"  note: {note}", highlight=False)


@app.command()
def report(
    results: List[Path] = typer.Argument(..., help="results.jsonl files written by hpcdl validate"),
    out: Path = typer.Option(Path("report"), "-o", "--out", help="folder for index.html, summary.json and the plots"),
) -> None:
    """Summary table, plots (PNG), an HTML page and a JSON summary from validation results."""
    from hpcdl.report import build_report, load_results
    from hpcdl.validate.suite import summary_table

    folder = build_report(results, out)
    verdicts = load_results(results).verdicts
    make_console().print(summary_table(verdicts, title="validation results"))
    typer.echo(f"HTML report: {folder / 'index.html'}")


@app.command(hidden=True)
def probe(
    kind: str = typer.Argument(..., help="environment, collectives or train"),
    params: Path = typer.Argument(..., help="recipe.json: the probe's settings or the recipe"),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json (train)"),
    results: Optional[Path] = typer.Option(None, "--results", help="JSON-lines results (rank 0)"),
) -> None:
    """What each rank of a validation job runs."""
    from hpcdl.errors import HpcdlError
    from hpcdl.validate import probes

    if kind == "train":
        probes.probe_train(str(params), str(plan) if plan else None, str(results) if results else None)
    elif kind in probes.PROBES:
        probes.run_probe(kind, str(params), str(results) if results else None)
    else:
        raise HpcdlError(f"probe: unknown kind {kind!r}; known: train, {', '.join(probes.PROBES)}")
