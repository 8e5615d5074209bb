"""hpcdl predict: images/s, efficiency and the parts of an iteration at each node count, before submitting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from hpcdl.cli import app
from hpcdl.cli.options import SiteOpt
from hpcdl.cli.output import console as make_console


def parse_node_counts(text: str) -> list[int]:
    from hpcdl.errors import HpcdlError

    try:
        nodes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise HpcdlError(f"--nodes: {text!r} is not a comma-separated list of node counts, e.g. 1,2,4,8") from None
    if not nodes or nodes[0] < 1:
        raise HpcdlError(f"--nodes: {text!r}: node counts start at 1")
    return nodes


def prediction_table(prediction, title: str | None = None) -> Table:
    table = Table("nodes", "ranks", "batch/rank", "images/s", "efficiency", "time/iter (ms)", "compute", "comm",
                  "exposed comm", "data", "algorithm", title=title or f"{prediction.site}: {prediction.net}, "
                  f"{prediction.mode} scaling (predicted)")
    for r in prediction.rows:
        table.add_row(str(r.nodes), str(r.ranks), str(r.batch_per_rank), f"{r.images_per_sec:,.0f}",
                      f"{r.efficiency:.1%}", f"{r.time_per_iter_s * 1e3:.1f}", f"{r.compute_s * 1e3:.1f}",
                      f"{r.comm_s * 1e3:.1f}", f"{r.exposed_comm_s * 1e3:.1f}", f"{r.data_s * 1e3:.1f}", r.algorithm)
    return table


@app.command()
def predict(
    recipe: Path = typer.Argument(..., help="training recipe, a YAML file or a shipped recipe's name: its net, batch per rank, precision, framework"),
    site: str = SiteOpt,
    nodes: str = typer.Option("1,2,4,8,16,32,64", "--nodes", "-N", help="node counts, e.g. 1,2,4,...,1024"),
    scaling: str = typer.Option("weak", "--scaling", help="weak (batch per rank fixed) or strong (global batch fixed)"),
    ranks_per_node: Optional[int] = typer.Option(None, "--ranks-per-node", "-r", min=1, help="ranks per node"),
    mode: str = typer.Option("auto", "--mode", "-m", help="auto, per-gpu, per-nic, per-socket, per-node or per-core"),
    dist: str = typer.Option("auto", "--dist", help="auto, gloo, nccl, mpi or horovod"),
    node_kind: Optional[str] = typer.Option(None, "--node-kind", help="node kind (default: the site's default)"),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", min=1,
                                               help="strong scaling: the fixed global batch (default: at the first count)"),
    bucket_mb: Optional[float] = typer.Option(None, "--bucket-mb", min=0,
                                              help="gradient bucket / fusion buffer in MiB (0: per layer)"),
    fp16_allreduce: bool = typer.Option(False, "--fp16-allreduce", help="fp16 gradient compression on the wire"),
    no_overlap: bool = typer.Option(False, "--no-overlap", help="allreduce only after backward ends"),
    calibration: Optional[Path] = typer.Option(None, "--calibration",
                                               help="a calibration file or a validate results.jsonl (default: found "
                                                    "beside the site's references)"),
    save: bool = typer.Option(False, "--save-calibration",
                              help="write the calibration from --calibration RESULTS.jsonl beside the references"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list, one object per node count"),
    picture: Optional[Path] = typer.Option(None, "--picture", help="draw throughput, efficiency and time parts to this PNG"),
) -> None:
    """Predict images/s, scaling efficiency and time per iteration (compute, communication, data) per node count."""
    from pydantic import ValidationError

    from hpcdl.errors import HpcdlError, validation_message
    from hpcdl.plan import JobRequest
    from hpcdl.predict import Options
    from hpcdl.predict import predict as run_prediction
    from hpcdl.predict.calibration import load_calibration
    from hpcdl.sites import load_site
    from hpcdl.train.recipe import load_recipe

    if scaling not in ("weak", "strong"):
        raise HpcdlError(f"--scaling: {scaling!r}; use weak or strong")
    counts = parse_node_counts(nodes)
    r = load_recipe(recipe)
    s = load_site(site)
    try:
        request = JobRequest(framework=r.framework, ranks_per_node=ranks_per_node, mode=mode, node_kind=node_kind,
                             distributed=dist if dist != "auto" else r.distributed, precision=r.precision)
    except ValidationError as exc:
        raise HpcdlError(validation_message(exc, "request")) from None
    cal = load_calibration(s.name, calibration)
    if save:
        _save(s.name, cal, calibration)
    ways = r.spatial.ways if getattr(r, "spatial", None) else 1
    notes = ()
    if ways > 1:
        # the ranks of a spatial group share each sample, one slab each: a rank does 1/ways of the
        # group's work, at the rate a device reaches with that much, plus the halo exchange between slabs
        notes = (f"spatial parallelism: {ways} ranks share each sample, one slab each; batch/rank is the batch of "
                 "its group; each slab's halo rows travel on the node's link forward and backward (halo_s, counted "
                 "in full: the overlap with the interior is not credited)",)
    options = Options(bucket_mb=bucket_mb, fp16_allreduce=fp16_allreduce, overlap=not no_overlap, notes=notes,
                      spatial_ways=ways)
    result = run_prediction(s, r.net, r.batch_size * r.iter_size, counts, scaling, request, cal, options, global_batch)
    if picture:
        from hpcdl.predict.picture import draw_prediction

        draw_prediction(result, picture)
    if as_json:
        typer.echo(json.dumps(result.to_list(), indent=2))
        return
    console = make_console()
    console.print(prediction_table(result))
    for note in result.notes:
        console.print(f"  - {note}", highlight=False)
    if picture:
        console.print(f"picture: {picture}", highlight=False)


def _save(site: str, cal, source: Optional[Path]) -> None:
    from hpcdl.errors import HpcdlError
    from hpcdl.files import write_atomically
    from hpcdl.validate.references import find_references, references_search_path

    if cal is None or source is None or not (str(source).endswith(".jsonl") or Path(source).is_dir()):
        raise HpcdlError("--save-calibration: give --calibration RESULTS.jsonl from hpcdl validate")
    # beside the site's references file, where `hpcdl predict` looks first; else the user's folder
    references = find_references(site)
    folder = references.parent if references else references_search_path()[-2]
    path = folder / f"{site}.calibration.yaml"
    try:
        write_atomically(path, cal.to_yaml(), mode=0o644)
    except OSError as exc:
        raise HpcdlError(f"--save-calibration: cannot write {path}: {exc.strerror}; put a references folder "
                         "on HPCDL_SITE_PATH you can write to") from None
    typer.echo(f"wrote {path}", err=True)
