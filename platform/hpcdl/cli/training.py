"""hpcdl train / launch / nets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from hpcdl.cli import app


@app.command()
def train(
    recipe: Path = typer.Argument(..., help="training recipe: a YAML or JSON file, or a shipped recipe's name"),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json from hpcdl render"),
    results: Optional[Path] = typer.Option(None, "--results", help="JSON-lines results (rank 0)"),
    max_iter: Optional[int] = typer.Option(None, "--max-iter", min=1, help="override the recipe's max_iter"),
    snapshot_prefix: Optional[str] = typer.Option(None, "--snapshot-prefix",
                                                  help="override snapshot_prefix; an existing snapshot is resumed"),
    framework: Optional[str] = typer.Option(None, "--framework", help="pytorch, tensorflow or mxnet (default: the plan's)"),
    dist: Optional[str] = typer.Option(None, "--dist", help="gloo, nccl, mpi, horovod (PyTorch); mwms (TF); kvstore (MXNet)"),
    start_over: bool = typer.Option(False, "--start-over",
                                    help="train from iteration 0 when snapshots exist but none can be used (else: refuse)"),
) -> None:
    """Train a recipe in this process (one rank; launchers start one per rank).

    Exits 75 (EX_TEMPFAIL) after SIGUSR1/SIGTERM once the snapshot is written, so a job
    script can requeue; the next run with the same snapshot_prefix resumes.
    """
    from hpcdl.train.main import run_training

    summary = run_training(str(recipe), str(plan) if plan else None, str(results) if results else None,
                           {"max_iter": max_iter, "snapshot_prefix": snapshot_prefix}, framework=framework, dist=dist, start_over=start_over)
    status = int(summary.get("exit_status", 0))
    if status:
        raise typer.Exit(status)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    nproc: int = typer.Option(..., "--nproc", "-n", min=1, help="processes (ranks) to start on this node"),
    oversubscribe: bool = typer.Option(False, "--oversubscribe",
                                       help="start more ranks than the cores this process may use"),
    nnodes: int = typer.Option(1, "--nnodes", min=1,
                               help="nodes each running one hpcdl launch (under srun: this node's from SLURM_NODEID)"),
) -> None:
    """Start ranks on this node (hpcdl's own launcher): hpcdl launch -n 2 -- PROGRAM ARGS..."""
    from hpcdl.errors import HpcdlError
    from hpcdl.launch import launch as run_ranks, usable_cores

    argv = [a for a in ctx.args if a != "--"] if ctx.args[:1] == ["--"] else list(ctx.args)
    if not argv:
        raise HpcdlError("launch: give the program to start after --")
    # Open MPI's mpirun: as many slots as cores unless told to oversubscribe; one typo (-n 100000)
    # on a login node would otherwise start a hundred thousand processes
    if nproc > usable_cores() and not oversubscribe:
        raise HpcdlError(f"--nproc: {nproc} ranks, more than the {usable_cores()} core(s) this process may use on "
                         f"{os.uname().nodename}; ask for fewer, or pass --oversubscribe")
    raise typer.Exit(run_ranks(nproc, argv, nnodes=nnodes))


nets_app = typer.Typer(help="The bundled networks; Caffe prototxt import and export.", add_completion=False)
app.add_typer(nets_app, name="nets")
from hpcdl.cli.recipes import recipes_app  # noqa: E402  (one `recipes` group: list, show, copy and import)


@nets_app.callback(invoke_without_command=True)
def nets(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="machine-readable list")) -> None:
    """List the bundled networks with their parameter counts (no framework needed)."""
    if ctx.invoked_subcommand is not None:
        return
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


@nets_app.command("import")
def nets_import(
    prototxt: Path = typer.Argument(..., help="Caffe net: train_val.prototxt or deploy.prototxt"),
    output: Optional[Path] = typer.Option(None, "-o", "--out", help="net YAML to write (default: print it)"),
    output_alias: Optional[Path] = typer.Option(None, "--output", hidden=True),  # the name before 0.1.0
    input_size: Optional[int] = typer.Option(None, "--input-size", min=1, help="input side when the file has no crop_size or Input shape"),
    channels: Optional[int] = typer.Option(None, "--channels", min=1, help="input channels (default: from the file, else 3)"),
) -> None:
    """Turn a Caffe prototxt into an hpcdl net definition (a YAML net file)."""
    output = output or output_alias
    from hpcdl.caffe.nets import import_net
    from hpcdl.caffe.yamlout import net_yaml
    from hpcdl.files import write_atomically
    from hpcdl.nets.spec import build_spec

    data, notes = import_net(prototxt, input_size=input_size, channels=channels)
    inp = data["input"]
    shape = (inp["channels"], inp.get("height", inp.get("size")), inp.get("width", inp.get("size")))
    spec = build_spec(prototxt.stem, data, shape, data["classes"], aux_heads=True)  # checks every shape now
    text = net_yaml(data, source=prototxt.name)
    for note in notes:
        typer.echo(f"hpcdl: note: {note}", err=True)
    if output is None:
        typer.echo(text, nl=False)
        return
    write_atomically(output, text)
    typer.echo(f"{output}: {len(spec.layers)} layers, {spec.parameter_count:,} parameters"
               f"{' (with aux heads)' if spec.aux_outputs else ''}, output {spec.output} {spec.layers[-1].out_shape}")


@nets_app.command("export")
def nets_export(
    net: str = typer.Argument(..., help="a bundled net's name or a net YAML file"),
    output: Optional[Path] = typer.Option(None, "-o", "--out", help="prototxt to write (default: print it)"),
    output_alias: Optional[Path] = typer.Option(None, "--output", hidden=True),  # the name before 0.1.0
    deploy: bool = typer.Option(False, "--deploy", help="deploy form: an Input layer, no losses, no auxiliary heads"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="a trained snapshot (PyTorch) whose weights to export"),
    caffemodel: Optional[Path] = typer.Option(None, "--caffemodel", help="write the weights as this .caffemodel"),
) -> None:
    """Write an hpcdl net as a Caffe prototxt (and its weights as a .caffemodel)."""
    output = output or output_alias
    import yaml

    from hpcdl.caffe.nets import export_net
    from hpcdl.errors import HpcdlError
    from hpcdl.files import write_atomically
    from hpcdl.nets import load_net
    from hpcdl.nets.spec import net_path

    spec = load_net(net, aux_heads=True)
    caffe = (yaml.safe_load(net_path(net).read_text()) or {}).get("caffe") or {}
    text = export_net(spec, caffe, deploy=deploy)
    if caffemodel is not None:
        from hpcdl.caffe.weights import from_torch, write_caffemodel
        from hpcdl.nets.torch_build import build_torch

        model = build_torch(spec)
        if weights is not None:
            from hpcdl.train.backends.pytorch.snapshot import load_torch_snapshot

            load_torch_snapshot(model, weights)
        write_caffemodel(caffemodel, caffe.get("name", spec.name), from_torch(model))
    elif weights is not None:
        raise HpcdlError("export: --weights needs --caffemodel (the file to write them to)")
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_atomically(output, text)


@recipes_app.command("import")
def recipes_import(
    solvers: list[Path] = typer.Argument(..., help="Caffe solver prototxt; several: a chain, each resuming the last"),
    output: Optional[Path] = typer.Option(None, "-o", "--out", help="recipe YAML to write (default: print it)"),
    output_alias: Optional[Path] = typer.Option(None, "--output", hidden=True),  # the name before 0.1.0
    net: Optional[str] = typer.Option(None, "--net", help="hpcdl net (name or YAML) instead of importing the solver's net"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, help="images per rank (default: the net's TRAIN data layer)"),
    name: Optional[str] = typer.Option(None, "--name", help="recipe name (default: the first solver's file name)"),
    input_size: Optional[int] = typer.Option(None, "--input-size", min=1,
                                             help="input side of the solver's net when its file has no crop_size or Input shape "
                                                  "(a Data layer reading LMDB: 32 for CIFAR-10, 28 for MNIST)"),
    channels: Optional[int] = typer.Option(None, "--channels", min=1,
                                           help="input channels of the solver's net (default: from the file, else 3; MNIST: 1)"),
) -> None:
    """Turn a Caffe solver (or a chain of them) into an hpcdl recipe.

    The solver's `net:` file, when it is found, is imported beside the recipe
    (RECIPE.net.yaml) and gives the batch sizes, crop and mirror; with --net, an imported
    net file's own `caffe.data` gives them.
    """
    output = output or output_alias
    import yaml

    from hpcdl.caffe.nets import import_net
    from hpcdl.caffe.solver import data_fields, import_recipe, named_test_net, test_net_fields
    from hpcdl.caffe.yamlout import net_yaml, recipe_yaml
    from hpcdl.errors import HpcdlError
    from hpcdl.files import write_atomically
    from hpcdl.nets.spec import net_path
    from hpcdl.train.recipe import recipe_from_dict

    recipe, notes, net_file = import_recipe(solvers, net=net, name=name)
    test_file = named_test_net(solvers)
    net_text = None
    if net is None:
        if net_file is None or not Path(net_file).is_file():
            raise HpcdlError(f"recipes import: the solver's net {net_file!r} was not found; give --net (and --batch-size)")
        net_data, net_notes = import_net(net_file, input_size=input_size, channels=channels)
        notes.extend(net_notes)
        net_text = net_yaml(net_data, source=Path(net_file).name)
        net_out = (output.with_suffix(".net.yaml") if output else Path(f"{recipe['name']}.net.yaml"))
        recipe["net"] = str(net_out)
    else:
        if input_size is not None or channels is not None:
            raise HpcdlError("recipes import: --input-size and --channels shape the solver's own net; "
                             "with --net the net file gives its input")
        # an imported net file keeps its Caffe data layers under `caffe.data`; a bundled net has none
        net_data = yaml.safe_load(net_path(net).read_text()) or {}
    for key, value in data_fields((net_data.get("caffe") or {}).get("data") or {}).items():
        recipe.setdefault(key, value)
    if any(layer.get("loss_weight") is not None for layer in net_data.get("layers") or []):
        recipe["aux_heads"] = True  # Caffe trains with every loss of the TRAIN net
    if test_file is not None:
        recipe.update(test_net_fields(test_file, notes))
    if batch_size is not None:
        recipe["batch_size"] = batch_size
    if "batch_size" not in recipe:
        raise HpcdlError("recipes import: batch_size: the net has no TRAIN data layer with a batch_size; give --batch-size")
    order = ["name", "net", "data", "batch_size", "test_batch_size"]
    recipe = {**{k: recipe[k] for k in order if k in recipe}, **{k: v for k, v in recipe.items() if k not in order}}
    recipe_from_dict(dict(recipe), "imported")  # the recipe validates before anything is written
    for note in notes:
        typer.echo(f"hpcdl: note: {note}", err=True)
    text = recipe_yaml(recipe, [str(s) for s in solvers])
    if output is None:
        typer.echo(text, nl=False)
        return
    if net_text is not None:
        write_atomically(Path(recipe["net"]), net_text)
    write_atomically(output, text)
    typer.echo(f"{output}: recipe {recipe['name']}" + (f"; net {recipe['net']}" if net_text else ""))
