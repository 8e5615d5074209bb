"""hpcdl plan / render / run / submit / status / cancel / stage."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from hpcdl.cli import app
from hpcdl.cli.options import SiteOpt
from hpcdl.cli.output import checked_output, checked_submit_folder, write_atomically
from hpcdl.cli.output import console as make_console
from hpcdl.executors import executor_for
from hpcdl.files import claim_run_folder
from hpcdl.plan import JobRequest, Plan, check_request, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.render.jobscript import DEFAULT_WARNING_SECONDS, _ranges, loaded_hpcdl_module, slug
from hpcdl.shell import join, quote
from hpcdl.sites import load_site
from hpcdl.train.recipe import RECIPE_HELP, load_recipe, recipe_file

NodesOpt = typer.Option(1, "--nodes", "-N", min=1, help="number of nodes")
FrameworkOpt = typer.Option(None, "--framework", "-f", help="pytorch, tensorflow or mxnet (default: the recipe's, else pytorch)")
RpnOpt = typer.Option(None, "--ranks-per-node", "-r", min=1, help="ranks per node (default: from the mode)")
ThreadsOpt = typer.Option(None, "--threads-per-rank", "-t", min=1, help="OpenMP threads per rank")
ModeOpt = typer.Option("auto", "--mode", "-m", help="auto, per-gpu, per-nic, per-socket, per-node or per-core")
KindOpt = typer.Option(None, "--node-kind", help="node kind (default: the site's default)")
DistOpt = typer.Option("auto", "--dist", help="auto, gloo, nccl, mpi or horovod")
NET_PLUGIN_HELP = ("Slingshot: the NCCL/RCCL network plugin (aws-ofi-nccl) inside an image hpcdl does not build, "
                   "e.g. /opt/aws-ofi-nccl/lib/libnccl-net.so; set as NCCL_NET_PLUGIN with the plugin's settings")


def build_plan(site_name, nodes, framework, ranks_per_node, threads, mode, node_kind, dist,
               use_gpus=None, precision="fp32", spatial_ways=1, spatial_split="rows", image=None,
               net_plugin=None, script_for: str | None = None) -> tuple:
    """(site, plan). With `script_for` (a job script is to be rendered for that scheduler, "" for the
    site's own), a node count whose script the scheduler cannot take is refused from the plan of one
    node, before the plan of them all is built."""
    from pydantic import ValidationError

    from hpcdl.errors import HpcdlError, validation_message
    from hpcdl.render.jobscript import refuse_nodes_the_scheduler_cannot_take

    site = load_site(site_name)
    try:
        request = JobRequest(
            nodes=nodes, framework=framework, ranks_per_node=ranks_per_node, threads_per_rank=threads,
            mode=mode, node_kind=node_kind, distributed=dist, use_gpus=use_gpus, precision=precision,
            spatial_ways=spatial_ways, spatial_split=spatial_split, image=image, net_plugin=net_plugin,
        )
    except ValidationError as exc:
        raise HpcdlError(validation_message(exc, "request")) from None
    check_request(site, request)
    if script_for is not None:
        _check_launcher_fits(site, script_for or None)
    if script_for is not None and request.nodes > 1:
        one_node = make_plan(site, request.model_copy(update={"nodes": 1}))
        refuse_nodes_the_scheduler_cannot_take(one_node, request.nodes, script_for or site.scheduler)
    return site, make_plan(site, request)


def print_node_map(plan: Plan, console: Console | None = None) -> None:
    console = console or make_console()
    table = Table(
        "rank", "node", "socket", "cores", "GPU", "NIC", "threads",
        title=f"{plan.site}: {plan.nodes} node(s) x {plan.ranks_per_node} rank(s) ({plan.mode}, {plan.distributed})",
    )
    if plan.spatial:
        table.add_column("spatial group / slab")
    near_gpu = plan.rank_cpus == "gpu-local"  # the ranks' cores are found at run time, near each one's GPU
    for r in plan.local_ranks():
        row = [str(r.rank), str(r.node), "near GPU" if near_gpu else str(r.socket),
               f"{len(r.cores)} near GPU" if near_gpu else _ranges(r.cores),
               ",".join(map(str, r.gpus)) or "-", r.nic or "-", str(r.omp_num_threads)]
        if plan.spatial:
            group, slab = plan.spatial.group_of(r.rank)
            row.append(f"{group} / {slab}")
        table.add_row(*row)
    console.print(table)
    if plan.spatial:
        s = plan.spatial
        console.print(f"spatial: {s.ways}-way ({s.split}, {s.grid[0]} x {s.grid[1]} slabs) x "
                      f"{s.data_parallel_groups} data-parallel group(s)", highlight=False)
    if plan.nodes > 1:
        console.print(f"(nodes 1..{plan.nodes - 1} repeat this layout: ranks n*{plan.ranks_per_node} + local rank)")


@app.command()
def plan(
    site: str = SiteOpt, nodes: int = NodesOpt, framework: Optional[str] = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    gpus: Optional[bool] = typer.Option(None, "--gpus/--no-gpus", help="use the GPUs (default: when the node has them)"),
    precision: str = typer.Option("fp32", "--precision", help="fp32, bf16 or fp16"),
    spatial_ways: int = typer.Option(1, "--spatial-ways", min=1, help="ranks that share each sample (spatial parallelism)"),
    spatial_split: str = typer.Option("rows", "--spatial-split", help="rows or rows_and_columns"),
    image: Optional[str] = typer.Option(None, "--image", help="the container image the job runs (default: the site's)"),
    net_plugin: Optional[str] = typer.Option(None, "--net-plugin", help=NET_PLUGIN_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    picture: Optional[Path] = typer.Option(None, "--picture", help="draw one node's layout to this PNG"),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="also predict images/s and efficiency for this recipe (a file or a shipped recipe's name)"),
) -> None:
    """Show where every rank runs: node map, environment and launch line (before anything is submitted)."""
    _given_or_left_out(framework=framework, node_kind=node_kind, image=image, net_plugin=net_plugin)
    s, p = build_plan(site, nodes, framework or "pytorch", ranks_per_node, threads_per_rank, mode, node_kind, dist,
                      use_gpus=gpus, precision=precision, spatial_ways=spatial_ways, spatial_split=spatial_split,
                      image=image, net_plugin=net_plugin)
    if picture:
        from hpcdl.plan.picture import picture_format

        picture_format(picture)
        checked_output(picture, "--picture")
    prediction, unpredicted = _prediction(s, p, recipe) if recipe else (None, None)
    if picture:
        # drawn first, so a bad path fails before anything is printed; written atomically
        from hpcdl.plan.picture import draw_node

        draw_node(s, p, picture)
    if as_json:
        data = p.to_dict()
        if prediction:
            data["prediction"] = prediction.to_list()
        if unpredicted:
            data["prediction_note"] = unpredicted
        typer.echo(json.dumps(data, indent=2))
        return
    console = make_console()
    print_node_map(p, console)
    console.print("environment (every rank):", highlight=False, markup=False)
    for name, value in sorted(p.env.items()):
        console.print(f"  {name}={value}", highlight=False, markup=False)
    for name, value in sorted(p.env_paths.items()):
        console.print(f"  {name}={value.shown(name)}  (the job shell expands it)", highlight=False, markup=False)
    if p.modules:
        console.print("modules the plan adds: " + " ".join(p.modules), highlight=False, markup=False)
    per_rank = _per_rank_env_lines(p)
    if per_rank:
        console.print("environment (per local rank, applied by each rank from plan.json):", highlight=False, markup=False)
        for line in per_rank:
            console.print(f"  {line}", highlight=False, markup=False)
    if p.runtime is not None:
        # what the ranks run in, and where their framework, MPI and network plugin come from
        for line in p.runtime.describe():
            console.print(line, highlight=False, markup=False)
    console.print("launch: " + " ".join(p.launcher_argv), highlight=False, markup=False)
    if p.spawner_argv:
        # the per-node spawner srun starts once per node (launch.spawner), which starts the node's ranks
        console.print("spawner: " + " ".join(p.spawner_argv), highlight=False, markup=False)
    for note in p.notes:
        console.print(f"  - {note}", highlight=False, markup=False)
    if picture:
        console.print(f"picture: {picture}", highlight=False)
    if prediction:
        from hpcdl.cli.predict import prediction_table

        console.print(prediction_table(prediction, f"predicted for {prediction.net} (hpcdl predict; docs/predict.md)"))
    if unpredicted:
        console.print(f"prediction: none ({unpredicted})", highlight=False, markup=False)


def _prediction(site, plan: Plan, recipe: Path):
    """The weak-scaling prediction for this request's node count against one node (hpcdl predict), or
    None and why where the node's device has no reference rate: the plan stands without it."""
    from hpcdl.predict import predict
    from hpcdl.predict.calibration import load_calibration
    from hpcdl.predict.scenario import NoReferenceRate

    r = load_recipe(recipe)
    request = JobRequest(framework=plan.framework, ranks_per_node=plan.ranks_per_node,
                         threads_per_rank=plan.threads_per_rank, mode=plan.mode, node_kind=plan.node_kind,
                         distributed=plan.distributed, precision=plan.precision)
    try:
        return predict(site, r.net, r.batch_size * r.iter_size, sorted({1, plan.nodes}), "weak", request,
                       load_calibration(site.name)), None
    except NoReferenceRate as exc:
        return None, str(exc)


def _per_rank_env_lines(p: Plan) -> list[str]:
    return [
        f"rank {r.local_rank}: " + " ".join(f"{k}={v}" for k, v in sorted(r.env.items()))
        for r in p.local_ranks() if r.env
    ]


ImageOpt = typer.Option(None, "--image", help="container image (default: the site's)")
NetPluginOpt = typer.Option(None, "--net-plugin", help=NET_PLUGIN_HELP)
TimeOpt = typer.Option(None, "--time", help="wall-clock limit: HH:MM:SS, MM:SS, minutes or D-HH:MM:SS")
AccountOpt = typer.Option(None, "--account", "-A", help="account/project to charge")
PartitionOpt = typer.Option(None, "--partition", "-p", help="partition (Slurm) or queue (LSF, PBS)")
NameOpt = typer.Option(None, "--name", "-J", help="job name (default: the recipe's name)")
SchedulerOpt = typer.Option(None, "--scheduler", help="slurm, lsf, pbs or local (default: the site's)")
ConstraintOpt = typer.Option(None, "--constraint", "-C", help="node features, e.g. quad,cache on KNL")
QosOpt = typer.Option(None, "--qos", help="Slurm quality of service (default: the site's)")
ExclusiveOpt = typer.Option(None, "--exclusive/--shared", help="whole nodes or shared (default: the site's)")
RequeueOpt = typer.Option(False, "--requeue", help="warn before the time limit, checkpoint and requeue")
WarningOpt = typer.Option(DEFAULT_WARNING_SECONDS, "--warning", min=1,
                          help="with --requeue: seconds before the limit the trainer is told to checkpoint")
OutputDirOpt = typer.Option(None, "--output-dir", help="folder for the scheduler's output file")
EXTRA = {"allow_extra_args": True}  # trainer arguments after `--`, e.g. -- --max-iter 5


def _given_or_left_out(**options: str | None) -> None:
    """An option is used as given or refused: '' or blanks (`-A "$ACCOUNT"` with ACCOUNT unset) are
    not quietly taken for the default the option was left out for."""
    from hpcdl.errors import HpcdlError

    for option, value in options.items():
        if value is not None and not value.strip():
            raise HpcdlError(f"--{option.replace('_', '-')}: {value!r} is empty; give a value, or leave the option "
                             "out for the default")


def _render(site, nodes, recipe, framework, ranks_per_node, threads, mode, node_kind, dist, image, time, account,
            partition, name, scheduler=None, constraint=None, exclusive=None, requeue=False,
            warning=DEFAULT_WARNING_SECONDS, output_dir=None, extra_args=(), net_plugin=None, qos=None) -> tuple:
    from hpcdl.errors import HpcdlError
    from hpcdl.nets.spec import net_path

    _given_or_left_out(name=name, account=account, partition=partition, time=time, image=image,
                       constraint=constraint, output_dir=output_dir, node_kind=node_kind, framework=framework,
                       scheduler=scheduler, qos=qos, net_plugin=net_plugin)
    r = load_recipe(recipe)
    net_path(r.net)  # a net file the recipe names must be there now, not only on the compute node
    if r.weights and not os.path.isfile(r.weights):  # and so must the weights it starts from (False on any OSError)
        raise HpcdlError(f"recipe {recipe}: weights: {r.weights}: no such file (a .caffemodel the job starts from "
                         "must be there when the job is rendered, not only after its queue wait)")
    # the recipe says which framework and distribution it was written for; the command line wins
    framework = framework or r.framework
    if dist == "auto" and r.distributed != "auto":
        dist = r.distributed
    ways, split = (r.spatial.ways, r.spatial.split) if r.spatial else (1, "rows")
    s, p = build_plan(site, nodes, framework, ranks_per_node, threads, mode, node_kind, dist,
                      spatial_ways=ways, spatial_split=split, image=image, net_plugin=net_plugin,
                      script_for=scheduler or "")
    options = JobOptions(
        name=name or r.name, time=time, account=account, partition=partition, image=image,
        constraint=constraint, exclusive=exclusive, requeue=requeue, warning_seconds=warning,
        output_dir=output_dir, extra_args=tuple(extra_args), qos=qos,
        # hpcdl's own module, where the job is rendered under one: a job that keeps the submitting environment out
        # loads it again itself
        hpcdl_module=loaded_hpcdl_module(os.environ),
    )
    text = render_job_script(s, p, r.model_dump(mode="json"), options, scheduler=scheduler)
    return s, p, r, text


def _check_launcher_fits(site, scheduler: str | None) -> None:
    """--scheduler over a profile: the site's launcher must run under it (ibrun and srun read a
    Slurm allocation, jsrun an LSF one), as the profile validator checks for the profile's own."""
    from hpcdl.errors import HpcdlError
    from hpcdl.sites.schema import LAUNCHER_NEEDS

    needs = LAUNCHER_NEEDS.get(site.launcher)
    if scheduler and needs and scheduler not in needs:
        raise HpcdlError(f"--scheduler: {site.launcher} (the launcher of site {site.name!r}) only starts ranks inside a "
                         f"{' or '.join(needs)} allocation, not under {scheduler}; drop --scheduler or use a site "
                         f"profile whose launcher runs under {scheduler}")


@app.command(context_settings=EXTRA)
def render(
    ctx: typer.Context,
    recipe: Path = typer.Argument(..., help=RECIPE_HELP),
    site: str = SiteOpt, nodes: int = NodesOpt, framework: Optional[str] = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    image: Optional[str] = ImageOpt, time: Optional[str] = TimeOpt, account: Optional[str] = AccountOpt,
    partition: Optional[str] = PartitionOpt, name: Optional[str] = NameOpt,
    scheduler: Optional[str] = SchedulerOpt, constraint: Optional[str] = ConstraintOpt,
    exclusive: Optional[bool] = ExclusiveOpt, requeue: bool = RequeueOpt, warning: int = WarningOpt,
    output_dir: Optional[str] = OutputDirOpt, net_plugin: Optional[str] = NetPluginOpt,
    qos: Optional[str] = QosOpt,
    output: Optional[Path] = typer.Option(None, "-o", "--out", help="write the script here"),
    output_alias: Optional[Path] = typer.Option(None, "--output", hidden=True),  # the name before 0.1.0
) -> None:
    """Render the job script for a recipe on a site (printed, or written with -o).

    Arguments after `--` go to the trainer, for example:

    \b
      hpcdl render -s summit -N 4 r.yaml -- --max-iter 50
    """
    *_, text = _render(site, nodes, recipe, framework, ranks_per_node, threads_per_rank, mode, node_kind, dist,
                       image, time, account, partition, name, scheduler, constraint, exclusive, requeue, warning,
                       output_dir, ctx.args, net_plugin, qos)
    output = checked_output(output or output_alias, "-o")
    if output:
        write_atomically(output, text, mode=0o755)
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(text, nl=False)


def _scheduler_of_script(text: str) -> str:
    """Which scheduler a rendered (or hand-written) script is for, from its directives."""
    for prefix, scheduler in (("#SBATCH", "slurm"), ("#BSUB", "lsf"), ("#PBS", "pbs")):
        if any(line.startswith(prefix) for line in text.splitlines()):
            return scheduler
    return "local"


@app.command(context_settings=EXTRA)
def submit(
    ctx: typer.Context,
    source: Path = typer.Argument(..., help=RECIPE_HELP + ", or a job script rendered before"),
    site: Optional[str] = typer.Option(None, "--site", "-s", envvar="HPCDL_SITE", show_envvar=False,
                                        help="site profile (needed with a recipe); default: $HPCDL_SITE"),
    nodes: int = NodesOpt, framework: Optional[str] = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    image: Optional[str] = ImageOpt, time: Optional[str] = TimeOpt, account: Optional[str] = AccountOpt,
    partition: Optional[str] = PartitionOpt, name: Optional[str] = NameOpt,
    scheduler: Optional[str] = SchedulerOpt, constraint: Optional[str] = ConstraintOpt,
    exclusive: Optional[bool] = ExclusiveOpt, requeue: bool = RequeueOpt, warning: int = WarningOpt,
    output_dir: Optional[str] = OutputDirOpt, net_plugin: Optional[str] = NetPluginOpt,
    qos: Optional[str] = QosOpt,
    job_dir: Optional[Path] = typer.Option(None, "-o", "--out", help="job folder (default runs/<time>-<name>)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="write the script and show the submit command only"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable: job id, scheduler, job folder, script"),
) -> None:
    """Submit a job: render it from a recipe (same options as render), or send a rendered script."""
    from hpcdl.errors import HpcdlError

    if not source.is_file():
        source = recipe_file(source)  # a shipped recipe's name, or one line saying neither is there
    head = source.read_text(errors="replace")
    if head.startswith("#!"):
        text, job_name = head, name or source.stem
        scheduler = scheduler or _scheduler_of_script(text)
        if ctx.args:
            raise HpcdlError("trainer arguments after -- only apply when submitting a recipe; render the script again")
    else:
        if site is None:
            raise HpcdlError("site: give --site to submit a recipe (or pass a rendered job script)")
        s, _, r, text = _render(site, nodes, source, framework, ranks_per_node, threads_per_rank, mode, node_kind,
                                dist, image, time, account, partition, name, scheduler, constraint, exclusive,
                                requeue, warning, output_dir, ctx.args, net_plugin, qos)
        scheduler, job_name = scheduler or s.scheduler, name or r.name
    executor = executor_for(scheduler)
    checked_output(job_dir, "-o")
    if site is not None:  # a rendered script names no site unless --site (or $HPCDL_SITE) does
        checked_submit_folder(load_site(site) if head.startswith("#!") else s, job_dir, "-o")
    folder = claim_run_folder(job_dir, "{time}-" + slug(job_name))  # unique, and not shared with a run going on
    script = folder / "job.sh"
    write_atomically(script, text, mode=0o755)
    if dry_run:
        command = join(executor.submit_command(script, folder))
        if executor.script_on_stdin:
            command += f" < {quote(str(script))}"
        if as_json:
            typer.echo(json.dumps({"script": str(script), "scheduler": scheduler, "job_dir": str(folder),
                                   "command": command, "submitted": False}))
            return
        typer.echo(f"job script: {script}")
        typer.echo(f"would run: {command}")
        return
    job_id = executor.submit(script, folder)
    record_submission(job_id, scheduler, folder, getattr(executor, "cluster", None))
    if as_json:
        typer.echo(json.dumps({"job_id": job_id, "scheduler": scheduler, "job_dir": str(folder),
                               "script": str(script), "submitted": True}))
        return
    typer.echo(f"submitted {scheduler} job {job_id}; job folder {folder}; output {_output_of(executor, job_id, folder)}")
    typer.echo(job_id)


def _submissions() -> Path:
    """The record of every job hpcdl submitted here (docs/jobs.md, "Where jobs and their output are")."""
    from hpcdl.executors.local import STATE_DIR

    return STATE_DIR.parent / "submitted.jsonl"


def record_submission(job_id: str, scheduler: str, folder: Path, cluster: Optional[str] = None) -> None:
    """One line per job; `cluster` where the scheduler sent it to a named cluster of several (Slurm's
    `--clusters`), which every later command about the job must name."""
    path = _submissions()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"job_id": job_id, "scheduler": scheduler, "job_dir": str(folder),
              "submitted": _dt.datetime.now().isoformat(timespec="seconds")}
    if cluster:
        record["cluster"] = cluster
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _output_of(executor, job_id: str, folder: Path) -> str:
    try:
        return str(executor.output(job_id))
    except Exception:  # the scheduler may not say yet; the job folder is where it will be
        return str(folder)


def _executor_of(job_id: str, scheduler: Optional[str]):
    """The executor of a job id: --scheduler, a SCHEDULER:ID id, or the one scheduler hpcdl sent it to.

    Local ids count 1, 2, 3... and so do small Slurm or PBS ids: an id that hpcdl sent to two
    schedulers is ambiguous and needs saying which.
    """
    from hpcdl.errors import HpcdlError

    path = _submissions()
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def on_its_cluster(executor, job_id: str):
        # a job hpcdl sent to a named cluster of several (Slurm's --clusters) is asked about there
        cluster = next((r.get("cluster") for r in reversed(records)
                        if r["job_id"] == job_id and r["scheduler"] == executor.name), None)
        if cluster:
            executor.cluster = cluster
        return executor, job_id

    if scheduler:
        return on_its_cluster(executor_for(scheduler), job_id)
    prefix, sep, rest = job_id.partition(":")
    if sep and prefix in ("slurm", "lsf", "pbs", "local"):
        return on_its_cluster(executor_for(prefix), rest)
    schedulers = list(dict.fromkeys(r["scheduler"] for r in reversed(records) if r["job_id"] == job_id))
    if len(schedulers) > 1:
        raise HpcdlError(f"job id: {job_id} was sent to {' and '.join(schedulers)}; say which with --scheduler "
                         f"or as {schedulers[0]}:{job_id}")
    if schedulers:
        return on_its_cluster(executor_for(schedulers[0]), job_id)
    raise HpcdlError(f"job id: {job_id!r} was not submitted by hpcdl here (records in {path}); "
                     f"say which scheduler with --scheduler")


@app.command()
def status(
    job_id: str = typer.Argument(..., help="job id printed by hpcdl submit"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="slurm, lsf, pbs or local"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable"),
) -> None:
    """Show a job's state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT) and its output file."""
    executor, job_id = _executor_of(job_id, scheduler)
    state = executor.status(job_id)
    try:
        output = str(executor.output(job_id))
    except Exception:  # the output path is a courtesy; the state is the answer
        output = None
    if as_json:
        typer.echo(json.dumps({"job_id": state.job_id, "scheduler": executor.name, "state": state.state,
                               "exit_code": state.exit_code, "reason": state.reason, "output": output}))
        return
    code = "" if state.exit_code is None else f" (exit {state.exit_code})"
    typer.echo(f"{executor.name} job {state.job_id}: {state.state}{code}" + (f"; output {output}" if output else ""))


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="job id printed by hpcdl submit"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="slurm, lsf, pbs or local"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable"),
) -> None:
    """Cancel a pending or running job.

    A job the scheduler does not know is an error (exit 2); one that already ended is not
    cancelled again and exits 1, naming its state.
    """
    executor, job_id = _executor_of(job_id, scheduler)
    before = executor.status(job_id)  # raises for a job the scheduler does not know
    if before.finished:
        if as_json:
            typer.echo(json.dumps({"job_id": job_id, "scheduler": executor.name, "state": before.state,
                                   "cancelled": False}))
        typer.echo(f"hpcdl: error: {executor.name} job {job_id} already ended ({before.state}); nothing to cancel",
                   err=True)
        raise typer.Exit(1)
    executor.cancel(job_id)
    if as_json:
        typer.echo(json.dumps({"job_id": job_id, "scheduler": executor.name, "state": before.state,
                               "cancelled": True}))
        return
    typer.echo(f"cancelled {executor.name} job {job_id} (was {before.state})")


@app.command()
def stage(
    source: Path = typer.Argument(..., help="data set: a file or a folder"),
    dest: Path = typer.Argument(..., help="node-local folder to copy it into"),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="point this recipe.json's data.path at the copy"),
    no_copy: bool = typer.Option(False, "--no-copy", help="only rewrite --recipe (the copy is made per node)"),
    shard: Optional[str] = typer.Option(None, "--shard", help="copy only this node's shard: NODE/NODES or auto/NODES"),
) -> None:
    """Copy a data set to node-local storage and check the copy (job scripts run this once per node)."""
    from hpcdl.executors.staging import parse_shard, point_recipe_at
    from hpcdl.executors.staging import stage as stage_data

    if not no_copy:
        stage_data(source, dest, parse_shard(shard))
    if recipe is not None:
        point_recipe_at(recipe, source, dest)


@app.command(context_settings=EXTRA)
def run(
    ctx: typer.Context,
    recipe: Path = typer.Argument(..., help=RECIPE_HELP),
    site: str = SiteOpt, nodes: int = NodesOpt, framework: Optional[str] = FrameworkOpt,
    ranks_per_node: Optional[int] = RpnOpt, threads_per_rank: Optional[int] = ThreadsOpt,
    mode: str = ModeOpt, node_kind: Optional[str] = KindOpt, dist: str = DistOpt,
    name: Optional[str] = NameOpt,
    out_dir: Optional[Path] = typer.Option(None, "-o", "--out", help="run folder (default runs/<time>-<name>)"),
    as_json: bool = typer.Option(False, "--json", help="print the final result as JSON on stdout (the job's output goes to stderr)"),
) -> None:
    """Plan, render and run a job with the site's executor, here and now (local sites).

    Arguments after `--` go to the trainer, for example:

    \b
      hpcdl run -s local digits-quick -- --max-iter 60

    Exits 1 when the job fails or ends without a final result (its own status is in the last line).
    """
    import sys

    s, p, r, text = _render(site, nodes, recipe, framework, ranks_per_node, threads_per_rank, mode, node_kind,
                            dist, None, None, None, None, name, extra_args=ctx.args)
    if s.scheduler != "local":
        from hpcdl.errors import HpcdlError

        raise HpcdlError(f"site {s.name!r} uses {s.scheduler}; use `hpcdl submit` there, `hpcdl run` is for local sites")
    from hpcdl.train.preflight import check_before_launch

    env = {**os.environ, **{k: str(v) for k, v in p.env.items()}}
    # here, once, not once per rank after the launch; a framework inside an image is the image's business
    check_before_launch(r, p.framework, p.distributed, env, frameworks_here=s.runtime == "none")
    checked_output(out_dir, "-o")
    job_dir = claim_run_folder(out_dir, "{time}-" + slug(name or r.name))  # unique, and not shared with a run going on
    script = job_dir / "job.sh"
    write_atomically(script, text, mode=0o755)
    console = make_console()
    if as_json:  # stdout carries only the JSON
        from rich.console import Console as _Console

        console = _Console(stderr=True, soft_wrap=True)
    print_node_map(p, console)
    console.print(f"job script: {script}", highlight=False)
    status = executor_for("local").run(script, job_dir, stream=sys.stderr if as_json else None)
    final = _final_record(job_dir / "results.jsonl")
    if as_json:
        typer.echo(json.dumps({"status": status, "job_dir": str(job_dir), "script": str(script),
                               "output": str(job_dir / "output.log"), "final": final}))
    if status != 0 or final is None:
        console.print(f"job failed with status {status}; output in {job_dir / 'output.log'}", highlight=False)
        raise typer.Exit(1)  # 2 stays the usage-error code, whatever the job's own status was
    console.print(
        f"done: {final['images_per_sec_total']:.1f} images/s total, held-out accuracy {final['accuracy']:.4f}; "
        f"results and script in {job_dir}", highlight=False,
    )


def _final_record(path: Path) -> dict | None:
    if not path.exists():
        return None
    finals = [json.loads(line) for line in path.read_text().splitlines() if '"final"' in line]
    return finals[-1] if finals else None
