"""hpcdl validate / report / probe."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from hpcdl.cli import app
from hpcdl.cli.options import SiteOpt
from hpcdl.cli.output import checked_output, checked_submit_folder, write_atomically
from hpcdl.cli.output import console as make_console


@app.command()
def validate(
    site: str = SiteOpt,
    suite: str = typer.Option("quick", "--suite", help="quick (minutes) or full"),
    nodes: Optional[str] = typer.Option(None, "--nodes", "-N", help="node counts for scaling, e.g. 1,2,4"),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="results folder (default runs/validate-<site>-<time>)"),
    only: Optional[str] = typer.Option(None, "--checks", help="comma-separated subset: environment, collectives, "
                                       "threads, throughput, scaling, convergence"),
    references: Optional[Path] = typer.Option(None, "--references", help="references file (default: found for the site)"),
    max_jobs: Optional[int] = typer.Option(None, "--max-jobs", min=1, help="jobs in flight at once (local: 1)"),
    write_profile: Optional[Path] = typer.Option(None, "--write-profile",
                                                 help="write the thread sweep's best placement into this profile file"),
    list_jobs: bool = typer.Option(False, "--list", help="list the suite's jobs (check, ranks, nodes) and exit"),
    dry_run: bool = typer.Option(False, "--dry-run", help="write every job script under OUT/jobs/ and show how each "
                                 "would be submitted; submit nothing"),
    as_json: bool = typer.Option(False, "--json", help="print the verdicts (or, with --list/--dry-run, the jobs) as JSON "
                                 "on stdout; progress goes to stderr"),
    node_kind: Optional[str] = typer.Option(None, "--node-kind",
                                            help="the node kind (partition) to validate (default: the site's default)"),
    history: bool = typer.Option(True, "--history/--no-history",
                                 help="keep this run in the site's history ($HPCDL_HISTORY) and show the trend"),
    export_reframe: Optional[Path] = typer.Option(None, "--export-reframe", metavar="DIR",
                                                  help="write the suite as ReFrame tests into DIR and exit (runs nothing)"),
) -> None:
    """Run the validation suite on a site, print the summary and write an HTML report.

    Exits 0 when every check passes, 1 when one fails (the failing checks are named).
    """
    from hpcdl.report import build_report
    from hpcdl.validate.suite import build_context, parse_nodes, run_suite, select_checks, summary_table

    ctx = build_context(site, suite, parse_nodes(nodes), references, node_kind=node_kind)
    selected = select_checks(only)
    if export_reframe is not None:
        from hpcdl.validate.reframe import export_reframe as export

        written = export(ctx, selected, export_reframe, "hpcdl " + " ".join(sys.argv[1:]))
        typer.echo(f"wrote {len(written)} file{'s' if len(written) != 1 else ''} into {export_reframe}: {written[0].name} (the tests), "
                   f"settings.py (a ReFrame configuration), jobs/ (the job scripts)")
        typer.echo(f"run: reframe -C {export_reframe / 'settings.py'} -c {written[0]} -r")
        return
    checked_output(out, "-o")
    if list_jobs:
        _show_jobs(ctx, selected, None, as_json)
        return
    from hpcdl.files import claim_run_folder

    checked_submit_folder(ctx.site, out, "-o")  # the suite's jobs are submitted from folders under it
    out_dir = claim_run_folder(out, f"validate-{ctx.site.name}-{{time}}")  # unique, and not shared with a run going on
    if dry_run:
        _show_jobs(ctx, selected, out_dir, as_json)
        return
    console = make_console()
    if as_json:
        from rich.console import Console as _Console

        console = _Console(stderr=True, soft_wrap=True)
    console.print(f"validating {ctx.site.name} ({ctx.suite} suite; checks: {', '.join(c.name for c in selected)}; "
                  f"nodes {','.join(map(str, ctx.nodes))}; references: {ctx.references.source})", highlight=False)
    for warning in ctx.references.warnings:
        print(f"hpcdl validate: note: {warning}", file=sys.stderr)
    result = run_suite(ctx, selected, out_dir, max_jobs=max_jobs, console=console, keep_history=history)
    if as_json:
        typer.echo(json.dumps({"site": ctx.site.name, "suite": ctx.suite, "results": str(result.results),
                               "verdicts": [v.to_record() for v in result.verdicts]}))
    console.print(summary_table(result.verdicts, title=f"{ctx.site.name}: {ctx.suite} validation"))
    from hpcdl.validate.history import earlier_runs

    earlier = earlier_runs(ctx.site.name, ctx.node_kind_name, exclude=result.kept) if history else []
    report = build_report([result.results], out_dir / "report", history=earlier)
    console.print(f"results: {result.results}", highlight=False)
    console.print(f"perflogs (ReFrame format): {out_dir / 'perflogs'}", highlight=False)
    if result.kept:
        console.print(f"kept in the site's history: {result.kept.parent} ({len(earlier)} earlier run(s) in the trend)",
                      highlight=False)
    console.print(f"HTML report: {report / 'index.html'}", highlight=False)
    if write_profile:
        _write_profile(ctx, result, write_profile, console)
    if result.failed:
        names = ", ".join(v.name for v in result.failed)
        print(f"hpcdl validate: {len(result.failed)} check(s) failed: {names}", file=sys.stderr)
        raise typer.Exit(1)


def _show_jobs(ctx, selected, out_dir: Optional[Path], as_json: bool) -> None:
    """--list: the jobs the checks need; --dry-run: also their scripts, written, and the submit commands."""
    from hpcdl.executors import executor_for
    from hpcdl.plan import make_plan
    from hpcdl.shell import join, quote
    from hpcdl.validate.jobs import suite_jobs
    from hpcdl.validate.runner import _hhmmss, render_validation_job

    jobs = suite_jobs(ctx, selected)
    executor = executor_for(ctx.site.scheduler)
    rows = []
    for job in jobs:
        plan = make_plan(ctx.site, job.request)
        checks_of = [c.name for c in selected if any(j.key == job.key for j in c.jobs(ctx))]
        row = {"job": job.name, "kind": job.kind, "checks": checks_of, "nodes": plan.nodes,
               "ranks_per_node": plan.ranks_per_node, "threads_per_rank": plan.threads_per_rank,
               "framework": plan.framework}
        if out_dir is not None:
            job_dir = out_dir / "jobs" / job.key
            script = job_dir / "job.sh"
            write_atomically(script, render_validation_job(ctx.site, job, _hhmmss(ctx.settings.job_timeout_s)),
                             mode=0o755)
            command = join(executor.submit_command(script, job_dir))
            if executor.script_on_stdin:
                command += f" < {quote(str(script))}"
            row.update(script=str(script), command=command)
        rows.append(row)
    if as_json:
        typer.echo(json.dumps({"site": ctx.site.name, "suite": ctx.suite, "scheduler": ctx.site.scheduler,
                               "jobs": rows}, indent=2))
        return
    typer.echo(f"{ctx.site.name}: {ctx.suite} suite, {len(rows)} job(s) on {ctx.site.scheduler}")
    for row in rows:
        typer.echo(f"  {row['job']}: {', '.join(row['checks'])}; {row['nodes']} node(s) x {row['ranks_per_node']} "
                   f"rank(s) x {row['threads_per_rank']} thread(s), {row['framework']}")
        if "command" in row:
            typer.echo(f"    would run: {row['command']}")


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
    as_json: bool = typer.Option(False, "--json", help="print summary.json on stdout instead of the table"),
) -> None:
    """Summary table, plots (PNG), an HTML page and a JSON summary from validation results.

    Exits 0 when no check failed, 1 when one did (as validate does).
    """
    from hpcdl.report import build_report, load_results
    from hpcdl.validate.suite import summary_table

    folder = build_report(results, checked_output(out, "-o"))
    verdicts = load_results(results).verdicts
    if as_json:
        typer.echo((folder / "summary.json").read_text().rstrip("\n"))
    else:
        make_console().print(summary_table(verdicts, title="validation results"))
        typer.echo(f"HTML report: {folder / 'index.html'}")
    failed = [v for v in verdicts if v.result == "fail"]
    if failed:
        print(f"hpcdl report: {len(failed)} check(s) failed: {', '.join(v.name for v in failed)}", file=sys.stderr)
        raise typer.Exit(1)


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
