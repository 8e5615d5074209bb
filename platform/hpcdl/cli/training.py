"""hpcdl train / launch / nets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from hpcdl.cli import app


@app.command()
def train(
    recipe: Path = typer.Argument(..., help="training recipe (YAML or JSON)"),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json from hpcdl render"),
    results: Optional[Path] = typer.Option(None, "--results", help="JSON-lines results (rank 0)"),
    max_iter: Optional[int] = typer.Option(None, "--max-iter", min=1, help="override the recipe's max_iter"),
    snapshot_prefix: Optional[str] = typer.Option(None, "--snapshot-prefix",
                                                  help="override snapshot_prefix; an existing snapshot is resumed"),
    framework: Optional[str] = typer.Option(None, "--framework", help="pytorch, tensorflow or mxnet (default: the plan's)"),
    dist: Optional[str] = typer.Option(None, "--dist", help="gloo, nccl, mpi, horovod (PyTorch); mwms (TF); kvstore (MXNet)"),
) -> None:
    """Train a recipe in this process (one rank; launchers start one per rank).

    Exits 75 (EX_TEMPFAIL) after SIGUSR1/SIGTERM once the snapshot is written, so a job
    script can requeue; the next run with the same snapshot_prefix resumes.
    """
    from hpcdl.train.main import run_training

    summary = run_training(str(recipe), str(plan) if plan else None, str(results) if results else None,
                           {"max_iter": max_iter, "snapshot_prefix": snapshot_prefix}, framework=framework, dist=dist)
    status = int(summary.get("exit_status", 0))
    if status:
        raise typer.Exit(status)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    nproc: int = typer.Option(..., "--nproc", "-n", min=1, help="processes (ranks) to start on this node"),
) -> None:
    """Start ranks on this node (hpcdl's own launcher): hpcdl launch -n 2 -- PROGRAM ARGS..."""
    from hpcdl.errors import HpcdlError
    from hpcdl.launch import launch as run_ranks

    argv = [a for a in ctx.args if a != "--"] if ctx.args[:1] == ["--"] else list(ctx.args)
    if not argv:
        raise HpcdlError("launch: give the program to start after --")
    raise typer.Exit(run_ranks(nproc, argv))


@app.command()
def nets(as_json: bool = typer.Option(False, "--json", help="machine-readable list")) -> None:
    """List the bundled networks with their parameter counts (no framework needed)."""
    from hpcdl.nets import list_nets, load_net

    rows = []
    for name in list_nets():
        spec = load_net(name)
        row = {"name": name, "parameters": spec.parameter_count, "input": list(spec.input_shape),
               "classes": spec.num_classes, "layers": len(spec.layers), "description": spec.description,
               "reference": spec.reference}
        with_aux = load_net(name, aux_heads=True)
        if with_aux.aux_outputs:
            row["parameters_with_aux_heads"] = with_aux.parameter_count
        rows.append(row)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        for r in rows:
            aux = f" ({r['parameters_with_aux_heads']:,} with aux heads)" if "parameters_with_aux_heads" in r else ""
            typer.echo(f"{r['name']:<16} {r['parameters']:>12,}  {r['description']}{aux}")
