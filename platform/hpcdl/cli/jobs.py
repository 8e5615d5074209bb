"""hpcdl plan / render / run / submit / status / cancel."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from hpcdl.cli import app
from hpcdl.cli.output import write_atomically
from hpcdl.executors import executor_for
from hpcdl.plan import JobRequest, Plan, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.render.jobscript import _ranges, slug
from hpcdl.sites import load_site
from hpcdl.train.recipe import load_recipe

SiteOpt = typer.Option(..., "--site", "-s", help="site profile name (see `hpcdl sites`)")
NodesOpt = typer.Option(1, "--nodes", "-N", min=1, help="number of nodes")
FrameworkOpt = typer.Option("pytorch", "--framework", "-f", help="pytorch, tensorflow or mxnet")
RpnOpt = typer.Option(None, "--ranks-per-node", "-r", min=1, help="ranks per node (default: from the mode)")
ThreadsOpt = typer.Option(None, "--threads-per-rank", "-t", min=1, help="OpenMP threads per rank")
ModeOpt = typer.Option("auto", "--mode", "-m", help="auto, per-gpu, per-nic, per-socket, per-node or per-core")
KindOpt = typer.Option(None, "--node-kind", help="node kind (default: the site's default)")
DistOpt = typer.Option("auto", "--dist", help="auto, gloo, nccl, mpi or horovod")


def build_plan(site_name, nodes, framework, ranks_per_node, threads, mode, node_kind, dist,
               use_gpus=None, precision="fp32") -> tuple:
    from pydantic import ValidationError

    from hpcdl.errors import HpcdlError, validation_message

    site = load_site(site_name)
    try:
        request = JobRequest(
            nodes=nodes, framework=framework, ranks_per_node=ranks_per_node, threads_per_rank=threads,
            mode=mode, node_kind=node_kind, distributed=dist, use_gpus=use_gpus, precision=precision,
        )
    except ValidationError as exc:
        raise HpcdlError(validation_message(exc, "request")) from None
    return site, make_plan(site, request)


def print_node_map(plan: Plan, console: Console | None = None) -> None:
    console = console or Console(width=160)
    table = Table(
        "rank", "node", "socket", "cores", "GPU", "NIC", "threads",
        title=f"{plan.site}: {plan.nodes} node(s) x {plan.ranks_per_node} rank(s) ({plan.mode}, {plan.distributed})",
    )
    for r in plan.local_ranks():
        table.add_row(str(r.rank), str(r.node), str(r.socket), _ranges(r.cores),
                      ",".join(map(str, r.gpus)) or "-", r.nic or "-", str(r.omp_num_threads))
    console.print(table)
    if plan.nodes > 1:
        console.print(f"(nodes 1..{plan.nodes - 1} repeat this layout: ranks n*{plan.ranks_per_node} + local rank)")


@app.command()
def plan(
    site: str = SiteOpt, nodes: int = NodesOpt, framework: str = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    gpus: Optional[bool] = typer.Option(None, "--gpus/--no-gpus", help="use the GPUs (default: when the node has them)"),
    precision: str = typer.Option("fp32", "--precision", help="fp32, bf16 or fp16"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    picture: Optional[Path] = typer.Option(None, "--picture", help="draw one node's layout to this PNG"),
) -> None:
    """Show where every rank runs: node map, environment and launch line (before anything is submitted)."""
    s, p = build_plan(site, nodes, framework, ranks_per_node, threads_per_rank, mode, node_kind, dist,
                      use_gpus=gpus, precision=precision)
    if picture:
        # drawn first, so a bad path fails before anything is printed; written atomically
        from hpcdl.plan.picture import draw_node

        draw_node(s, p, picture)
    if as_json:
        typer.echo(json.dumps(p.to_dict(), indent=2))
        return
    console = Console(width=160)
    print_node_map(p, console)
    console.print("environment (every rank):", highlight=False)
    for name, value in sorted(p.env.items()):
        console.print(f"  {name}={value}", highlight=False)
    per_rank = _per_rank_env_lines(p)
    if per_rank:
        console.print("environment (per local rank, applied by each rank from plan.json):", highlight=False)
        for line in per_rank:
            console.print(f"  {line}", highlight=False)
    console.print("launch: " + " ".join(p.launcher_argv), highlight=False)
    for note in p.notes:
        console.print(f"  - {note}", highlight=False)
    if picture:
        console.print(f"picture: {picture}", highlight=False)


def _per_rank_env_lines(p: Plan) -> list[str]:
    return [
        f"rank {r.local_rank}: " + " ".join(f"{k}={v}" for k, v in sorted(r.env.items()))
        for r in p.local_ranks() if r.env
    ]


def _render(site, nodes, recipe, framework, ranks_per_node, threads, mode, node_kind, dist, image, time, account,
            partition, name, scheduler=None) -> tuple:
    r = load_recipe(recipe)
    s, p = build_plan(site, nodes, framework, ranks_per_node, threads, mode, node_kind, dist)
    options = JobOptions(name=name or r.name, time=time, account=account, partition=partition, image=image)
    text = render_job_script(s, p, r.model_dump(mode="json"), options, scheduler=scheduler)
    return s, p, r, text


@app.command()
def render(
    recipe: Path = typer.Argument(..., help="training recipe (YAML)"),
    site: str = SiteOpt, nodes: int = NodesOpt, framework: str = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    image: Optional[str] = typer.Option(None, "--image", help="container image"),
    time: Optional[str] = typer.Option(None, "--time", help="wall-clock limit, HH:MM:SS"),
    account: Optional[str] = typer.Option(None, "--account", help="account/project to charge"),
    partition: Optional[str] = typer.Option(None, "--partition", help="partition or queue"),
    name: Optional[str] = typer.Option(None, "--name", help="job name"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write the script here"),
) -> None:
    """Render the job script for a recipe on a site (printed, or written with -o)."""
    *_, text = _render(site, nodes, recipe, framework, ranks_per_node, threads_per_rank, mode, node_kind, dist,
                       image, time, account, partition, name)
    if output:
        write_atomically(output, text, mode=0o755)
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(text, nl=False)


@app.command()
def run(
    recipe: Path = typer.Argument(..., help="training recipe (YAML)"),
    site: str = SiteOpt, nodes: int = NodesOpt, framework: str = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    name: Optional[str] = typer.Option(None, "--name", help="job name"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="run folder (default runs/<time>-<name>)"),
) -> None:
    """Plan, render and run a job with the site's executor, here and now (local sites)."""
    s, p, r, text = _render(site, nodes, recipe, framework, ranks_per_node, threads_per_rank, mode, node_kind,
                            dist, None, None, None, None, name)
    if s.scheduler != "local":
        from hpcdl.errors import HpcdlError

        raise HpcdlError(f"site {s.name!r} uses {s.scheduler}; use `hpcdl submit` there, `hpcdl run` is for local sites")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    job_dir = (out_dir or Path("runs") / f"{stamp}-{slug(name or r.name)}").resolve()
    script = job_dir / "job.sh"
    write_atomically(script, text, mode=0o755)
    console = Console(width=160)
    print_node_map(p, console)
    console.print(f"job script: {script}", highlight=False)
    status = executor_for("local").run(script, job_dir)
    final = _final_record(job_dir / "results.jsonl")
    if status != 0 or final is None:
        console.print(f"[red]job failed with status {status}[/red]; output in {job_dir / 'output.log'}")
        raise typer.Exit(status or 1)
    console.print(
        f"done: {final['images_per_sec_total']:.1f} images/s total, held-out accuracy {final['accuracy']:.4f}; "
        f"results and script in {job_dir}", highlight=False,
    )


def _final_record(path: Path) -> dict | None:
    if not path.exists():
        return None
    finals = [json.loads(line) for line in path.read_text().splitlines() if '"final"' in line]
    return finals[-1] if finals else None
