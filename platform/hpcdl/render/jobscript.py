"""Job scripts: a jinja2 template per scheduler, filled from the plan, the request and the recipe.

Everything a template prints is decided here or in the plan; the templates only lay it out.
Values reach the script three ways, each safe on its own terms:
  - shell words go through `quote`/`join` (shlex), so nothing in them runs;
  - batch directives (#SBATCH, #BSUB, #PBS) are comments to bash but parsed by the scheduler,
    so they get the scheduler's own escaping (Slurm) or must be plain words (LSF, PBS);
  - values no directive can carry (a newline in a job name) are refused with the field named.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Sequence

import jinja2

from hpcdl import __version__
from hpcdl.errors import HpcdlError
from hpcdl.launchers.base import gpu_total_uneven, slurm_gpu_style
from hpcdl.launchers.mpi import srun_threads_word
from hpcdl.plan.model import Plan
from hpcdl.plan.runtime import IMAGE, SITE_CONTAINER, choose_runtime
from hpcdl.runtimes import IMAGE_FILE_SUFFIX, image_reference, runtime_for
from hpcdl.shell import (
    Expanding,
    comment_text,
    env_name,
    join,
    one_line,
    path_in_double_quotes,
    path_with_variables,
    plain_word,
    quote,
    slurm_directive_value,
    variables_in,
)
from hpcdl.sites.project import with_project
from hpcdl.sites.schema import ULIMIT_OPTIONS, ULIMIT_VALUE, NodeKind, Site, slurm_seconds

SCHEDULERS = ("local", "slurm", "lsf", "pbs")

#: the longest job name: Slurm shows and stores names of any length, but a name goes into an
#: environment variable, and any one of those is limited (MAX_ARG_STRLEN, 128 KiB)
MAX_NAME = 1024
#: the longest single word of the launch line or one environment value (below MAX_ARG_STRLEN)
MAX_WORD = 65536

#: how long before the time limit a --requeue job is warned (SIGUSR1): enough for a
#: checkpoint of a ResNet-50-sized model to reach a parallel filesystem.
DEFAULT_WARNING_SECONDS = 300


@dataclass(frozen=True)
class JobOptions:
    """What a user asks of the batch system (the plan says where ranks run).

    name: job name, shown by squeue/bjobs/qstat; any text without a newline.
    time: wall-clock limit, [D-]HH:MM:SS, MM:SS or minutes (default: the site's).
    account, partition: charged account/project and partition/queue (default: the site's).
    constraint: node features, e.g. KNL ``quad,cache`` (default: the site's).
    exclusive: whole nodes for the job (default: the site's).
    image: container image (default: the site's).
    output_dir: where the scheduler writes the job's output file (default: the submit folder).
    extra_args: appended to the trainer's command line, e.g. ("--max-iter", "5").
    requeue: warn the job `warning_seconds` before its limit, checkpoint and requeue it.
    qos: Slurm quality of service (default: the site's, or the node kind's).
    hpcdl_module: hpcdl's own module the job is rendered under (``hpcdl/0.1.0``, as LOADEDMODULES names it),
        which a job whose header keeps the submitting environment out loads itself.
    """

    name: str = "hpcdl"
    time: str | None = None
    account: str | None = None
    partition: str | None = None
    image: str | None = None
    output_dir: str | None = None
    extra_args: tuple[str, ...] = ()
    requeue: bool = False
    constraint: str | None = None
    exclusive: bool | None = None
    warning_seconds: int = DEFAULT_WARNING_SECONDS
    qos: str | None = None
    hpcdl_module: str | None = None


# hpcdl's own module as Lmod and Tcl modules name it in LOADEDMODULES: hpcdl, or hpcdl/<version>
HPCDL_MODULE = re.compile(r"hpcdl(/[A-Za-z0-9._+-]+)?")


def loaded_hpcdl_module(environ) -> str | None:
    """hpcdl's own module among the modules loaded in `environ` (LOADEDMODULES), or None."""
    return next((m for m in environ.get("LOADEDMODULES", "").split(":") if HPCDL_MODULE.fullmatch(m)), None)


def _one_line_only(value):
    """jinja2's `finalize`: the backstop under every `{{ ... }}` of every template.

    Each value is checked (with its field named) before it gets here; this makes sure that
    nothing a template prints can ever start a line of its own, whatever a future field is.
    """
    text = "" if value is None else str(value)
    if any(c in text for c in "\n\r\0"):
        raise HpcdlError(f"render: a value holds a newline or NUL, which no line of a job script may: {text[:80]!r}")
    return value


_env = jinja2.Environment(
    finalize=_one_line_only,
    loader=jinja2.PackageLoader("hpcdl.render", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)
_env.filters["q"] = quote
_env.filters["join"] = join
_env.filters["sbatch"] = slurm_directive_value
_env.filters["comment"] = comment_text


def default_image(site: Site, node_kind: str | None = None, plan: Plan | None = None) -> str | None:
    """How the job names the image the runtime decision chose (hpcdl.plan.runtime, carried in the
    plan): an hpcdl image file lives in the folder the `hpcdl` module names in $HPCDL_IMAGE_DIR
    unless the profile names image_dir, and a registry runtime gets the tag the modules use; the
    centre's own container is named as the profile names it. None outside a container."""
    if plan is not None and plan.runtime is not None:
        choice = plan.runtime
    else:
        kind, node = site.node_kind(node_kind)
        choice = choose_runtime(site, kind, use_gpus=bool(node.gpus))
    if choice.refusal:
        raise HpcdlError(f"runtime: {choice.refusal}")
    if not choice.in_container:
        return None
    if choice.kind == SITE_CONTAINER and variables_in(choice.image):
        # the centre's image under a folder the login or the job's modules name (UVA's $CONTAINERDIR: the profile
        # declares it in environment.module_env or provides_env): it expands when the job runs, nothing else does
        return Expanding(choice.image)
    if choice.kind != IMAGE or "/" in choice.image:
        return choice.image
    suffix = IMAGE_FILE_SUFFIX.get(site.runtime)
    if suffix and not site.defaults.image_dir:
        return Expanding(f"${{HPCDL_IMAGE_DIR}}/{choice.image}{suffix}")
    return image_reference(site, "", choice.image)


def render_job_script(
    site: Site, plan: Plan, recipe: dict, options: JobOptions, scheduler: str | None = None,
    program: Sequence[str] | None = None,
) -> str:
    """The job script for `plan` on `site`.

    `program` is what each rank runs (default: the trainer on recipe.json); the validation
    suite passes its own probes here. It is quoted like every other value.
    """
    scheduler = scheduler or site.scheduler
    if scheduler not in SCHEDULERS:
        raise HpcdlError(f"scheduler: unknown {scheduler!r}; known: {', '.join(SCHEDULERS)}")
    for field in ("name", "account", "partition", "time", "constraint", "image", "output_dir", "qos"):
        one_line(field, getattr(options, field))
    if options.hpcdl_module is not None and not HPCDL_MODULE.fullmatch(options.hpcdl_module):
        raise HpcdlError(f"hpcdl_module: {options.hpcdl_module!r} is not hpcdl's module (hpcdl or hpcdl/<version>)")
    for i, arg in enumerate(options.extra_args):
        if "\0" in arg:
            raise HpcdlError(f"extra argument {i + 1}: contains a NUL byte, which no command line can carry")
    if not options.name.strip():
        raise HpcdlError("name: the job name is empty")
    if len(options.name) > MAX_NAME:
        raise HpcdlError(f"name: {len(options.name)} characters; a job name may have at most {MAX_NAME}")
    env = {env_name(k): v for k, v in sorted(plan.env.items())}
    for r in plan.ranks:
        for k in r.env:
            env_name(k)
    if site.defaults.account_required and scheduler == site.scheduler and not (options.account or site.defaults.account) \
            and not _accountless(site, plan, options):
        # the centre ends such a job at once (Minerva: "If -P option is not specified, job will be
        # immediately terminated"): better refused here than after the queue wait
        raise HpcdlError(f"account: site {site.name!r} runs no job without an account or project "
                         "(defaults.account_required); give it with --account")
    if options.account and _accountless(site, plan, options):
        # UArizona's windfall partitions: "Do not include an --account flag when requesting this partition"
        raise HpcdlError(f"account: partition {_job_partition(site, plan, options)!r} of site {site.name!r} takes no "
                         "account (defaults.accountless_partitions); leave out --account")
    site = with_project(site, options.account or site.defaults.account, scheduler,
                        site.node_kinds[plan.node_kind].defaults.account_suffix)
    if plan.runtime is not None and plan.runtime.refusal:
        # the job would start no framework: refused here, before the queue wait
        raise HpcdlError(f"runtime: {plan.runtime.refusal}")
    image = options.image or default_image(site, plan.node_kind, plan)
    if image and site.defaults.image_dir and not image.startswith(("/", "docker:", "docker://", "oras://")) \
            and not isinstance(image, Expanding) and site.runtime in ("apptainer", "singularity", "charliecloud"):
        image = str(PurePosixPath(site.defaults.image_dir) / image)
    in_container = plan.runtime.in_container if plan.runtime is not None else site.runtime != "none"
    runtime = runtime_for(site.runtime if in_container else "none")
    runtime_argv = runtime.command(plan, site, image)
    centre = site.environment_for(plan.node_kind)
    if in_container and centre is not None and plan.runtime is not None and plan.runtime.kind == SITE_CONTAINER \
            and str(image) == str(default_image(site, plan.node_kind, plan)):
        # the centre's own image, as its jobs run it: the user's environment in overlay images over it, activated by a
        # script sourced inside (NYU Torch: apptainer exec --nv --overlay ...ext3:ro IMAGE /bin/bash -c "source
        # /ext3/env.sh; python ..."); an image the job names is its own, and gets neither
        runtime_argv = runtime.with_overlays(list(runtime_argv), centre.overlays)
        if centre.source:
            runtime_argv = [*runtime_argv, "/bin/bash", "-c", f'source {centre.source} && exec "$@"', "bash"]
    if plan.runtime is not None and plan.runtime.kind == "uenv":
        # CSCS: srun --uenv=<image> --view=<view> starts each rank inside the uenv
        uenv = site.environment_for(plan.node_kind)
        runtime_argv = [f"--uenv={uenv.activate}", *([f"--view={uenv.view}"] if uenv.view else [])]
    runtime_files = runtime.files(plan, site, image)
    for text in runtime_files.values():
        _heredoc_safe_lines(text, "HPCDL_RUNTIME_FILE")
    if program is None:
        program = ["hpcdl", "train", "recipe.json", "--plan", "plan.json", "--results", "results.jsonl"]
    program = [*program, *options.extra_args]
    # a per-node spawner (launch.spawner) runs inside the container, as the centres' lines put it there
    # (NRIS Olivia: srun apptainer exec --nv ... torchrun ...), and starts the program once per rank
    launch = [*plan.launcher_argv, *runtime_argv, *plan.spawner_argv, *program]
    for what, words in (("the launch line", launch), ("env", env.values())):
        for word in words:
            if len(str(word)) > MAX_WORD:
                # Linux refuses any one argument or environment string over 128 KiB (MAX_ARG_STRLEN):
                # the job would die at start with status 126, after its queue wait
                raise HpcdlError(f"{what}: a word of {len(str(word))} characters is longer than a command "
                                 f"line may carry ({MAX_WORD}): {str(word)[:40]!r}...")
    job = batch_request(site, plan, options, scheduler)
    stage = staging(site, plan, recipe, scheduler)
    job["node_local_gres"] = node_local_gres(site, plan, job) if stage else None
    # the plan's JSON travels in the script and grows with every rank: judged from one rank's share
    # first, before the whole of it is built (minutes for 100,000 nodes)
    _fits_the_scheduler(len(json.dumps(dataclasses.asdict(plan.ranks[0]))) * len(plan.ranks), plan, scheduler)
    plan_json = json.dumps(plan.to_dict(), sort_keys=True)
    template = _env.get_template(f"{scheduler}.sh.j2")
    text = template.render(
        version=__version__,
        site=site,
        plan=plan,
        options=options,
        job=job,
        env=env,
        env_paths=env_path_lines(plan),
        ulimits=ulimit_lines(plan),
        tmpdir=path_with_variables(plan.tmpdir) if plan.tmpdir else None,
        modules=_with_own_module(site, module_lines(site, plan), options, job),
        activate=activate_lines(site, plan),
        runtime_files=runtime_files,
        plan_json=plan_json,
        recipe_json=_heredoc_safe(json.dumps(recipe, sort_keys=True)),
        launch=launch,
        image_from_module="${HPCDL_IMAGE_DIR}" in str(image or ""),
        stage=stage,
        node_map=node_map_lines(plan),
        job_slug=slug(options.name),
        # the run folder's root where the compute nodes cannot write the submit folder (filesystems.runs: scratch)
        runs_root=path_in_double_quotes(site.filesystems.scratch) if site.filesystems.runs == "scratch" else None,
        name_comment=comment_text(options.name),
    )
    _fits_the_scheduler(len(text.encode()), plan, scheduler)
    return text


# The largest job script each scheduler takes by default, and what it calls that limit:
# - Slurm's slurm.conf(5), SchedulerParameters: "max_script_size=# Specify the maximum size of a
#   batch script, in bytes. The default value is 4 megabytes." (https://slurm.schedmd.com/slurm.conf.html)
# - OpenPBS / PBS Professional: the server's jobscript_max_size, "default value is 100MB"
#   (DFLT_JOBSCRIPT_MAX_SIZE "100mb" in src/include/pbs_internal.h, github.com/openpbs/openpbs;
#   PBS sizes count mb as 2^20 bytes)
# LSF names no such limit; the local scheduler runs the script itself.
SCRIPT_LIMITS = {
    "slurm": (4 * 2**20, "4 MiB sbatch takes (Slurm's max_script_size default)"),
    "pbs": (100 * 2**20, "100 MiB qsub takes (PBS's jobscript_max_size default)"),
}
SBATCH_MAX_SCRIPT_SIZE = SCRIPT_LIMITS["slurm"][0]


def _fits_the_scheduler(size: int, plan: Plan, scheduler: str) -> None:
    """Refuse a job script its scheduler would refuse: the plan it carries grows with every rank."""
    if scheduler in SCRIPT_LIMITS and size > SCRIPT_LIMITS[scheduler][0]:
        raise _too_large(plan.nodes, plan.ranks_per_node, size, scheduler)


def refuse_nodes_the_scheduler_cannot_take(one_node: Plan, nodes: int, scheduler: str) -> None:
    """Before the plan of `nodes` nodes is built (its cost grows with every rank): refuse a node
    count whose job script the scheduler could not take, judged from the plan of one node.

    The script carries the whole plan, a record for every rank; every node's records are the first
    node's with other node and rank numbers, never shorter ones. So `nodes` times the first node's
    records is less than the script will hold, and over the limit the script is too."""
    if scheduler not in SCRIPT_LIMITS:
        return
    per_node = sum(len(json.dumps(dataclasses.asdict(r), sort_keys=True)) + len(", ") for r in one_node.ranks)
    if nodes * per_node > SCRIPT_LIMITS[scheduler][0]:
        raise _too_large(nodes, one_node.ranks_per_node, nodes * per_node, scheduler)


def _too_large(nodes: int, ranks_per_node: int, size: int, scheduler: str) -> HpcdlError:
    return HpcdlError(f"nodes: {nodes} nodes of {ranks_per_node} rank(s) make a job script of "
                      f"{size / 2**20:.1f} MiB or more, over the {SCRIPT_LIMITS[scheduler][1]}; ask for fewer nodes")


def _heredoc_safe_lines(text: str, end: str) -> str:
    if any(line == end for line in text.splitlines()):
        raise HpcdlError(f"runtime: a file the job writes holds the line {end}, which would end it early")
    return text


def _heredoc_safe(text: str) -> str:
    # json.dumps escapes newlines, so no line of it can equal the heredoc's end word
    assert "\n" not in text
    return text


# ---------------------------------------------------------------------------------------------
# The batch request: what the directives ask for, in each scheduler's units and spelling.


def _cpus_per_gpu(site: Site, cpus_per_rank: int, gpus_per_rank: int) -> int | None:
    """A rank's CPUs per GPU, where the header asks CPUs so (defaults.cpu_request: cpus-per-gpu) and they divide."""
    if site.defaults.cpu_request != "cpus-per-gpu" or not gpus_per_rank or cpus_per_rank % gpus_per_rank:
        return None
    return cpus_per_rank // gpus_per_rank


def _job_partition(site: Site, plan: Plan, options: JobOptions) -> str | None:
    """The partition (queue) the job is written for: the one asked, else the site's for its size and time."""
    if options.partition:
        return options.partition
    return partition_for(site, plan, site.job_defaults(plan.node_kind),
                         parse_time(options.time or site.defaults.time))


def _accountless(site: Site, plan: Plan, options: JobOptions) -> bool:
    """Whether the job's partition is one whose jobs name no account (defaults.accountless_partitions)."""
    return bool(site.defaults.accountless_partitions) \
        and _job_partition(site, plan, options) in site.defaults.accountless_partitions


def batch_request(site: Site, plan: Plan, options: JobOptions, scheduler: str) -> dict:
    node = site.node_kinds[plan.node_kind]
    # the site's defaults, with the node kind's own partition, qos, constraint and directives
    # (Perlmutter: -C gpu for its GPU nodes, -C cpu for its CPU nodes)
    defaults = site.job_defaults(plan.node_kind)
    seconds = parse_time(options.time or site.defaults.time)
    if site.defaults.max_time and seconds > parse_time(site.defaults.max_time):
        raise HpcdlError(f"time: {options.time or site.defaults.time} is longer than site {site.name!r} allows "
                         f"(defaults.max_time {site.defaults.max_time})")
    if site.defaults.min_time and seconds < parse_time(site.defaults.min_time):
        # SciNet Trillium's GPU compute partition: "Min. walltime 15 minutes"
        raise HpcdlError(f"time: {options.time or site.defaults.time} is shorter than site {site.name!r} takes "
                         f"(defaults.min_time {site.defaults.min_time})")
    partition = _job_partition(site, plan, options)
    _queue_time_limit(site, plan, defaults, partition, seconds, options.time or site.defaults.time)
    gpus_per_rank = len(plan.ranks[0].gpus)
    job_gpus_per_node = gpus_per_rank * plan.ranks_per_node  # the GPUs the job holds on each of its nodes
    cores_per_rank = len(plan.ranks[0].cores)
    exclusive = site.defaults.exclusive if options.exclusive is None else options.exclusive
    if options.exclusive is None and site.defaults.exclusive_when_full and _takes_every_gpu(site, plan):
        exclusive = True
    job = {
        "nodes": plan.nodes,
        "ranks_per_node": plan.ranks_per_node,
        "world_size": plan.world_size,
        "cores_per_rank": cores_per_rank,
        # in the unit the batch system counts (Slurm -c, PBS ncpus): a core is as many CPUs as
        # the hardware threads it hands out, all of them by default, 1 where the site schedules
        # physical cores (OLCF Frontier: "-c" counts physical cores under --threads-per-core=1)
        "cpus_per_rank": cores_per_rank * node.cpus_per_core,
        # ... or per GPU, where the centre's scripts ask a GPU's CPUs with it (defaults.cpu_request: cpus-per-gpu,
        # Baskerville's "--gpus 1 --cpus-per-gpu 36"); a rank with no GPU, or CPUs its GPUs do not divide, asks per task
        "cpus_per_gpu": _cpus_per_gpu(site, cores_per_rank * node.cpus_per_core, gpus_per_rank),
        "threads_per_rank": plan.threads_per_rank,
        # Slurm: the hardware threads per core -c counts, asked for where fewer than the core has
        "threads_per_core": node.cpus_per_core if node.cpus_per_core < node.threads_per_core else None,
        # ... as the srun line asks it: --hint=nomultithread where the centre writes that (launch.threads_request)
        # (a bare srun, launch.srun_layout: header, names none: the header's reaches it as SLURM_HINT)
        "hint": "nomultithread" if ("--hint=nomultithread" in plan.launcher_argv or (
            plan.launcher == "srun" and site.launch.srun_layout == "header"
            and srun_threads_word(plan, site) == "--hint=nomultithread")) else None,
        "gpus_per_rank": gpus_per_rank,
        # none where the node's GPUs come with the node and the batch system takes no GPU request
        # (TACC: "--gres | TACC does not support this option"); each rank still gets its own GPU
        # from plan.json (hpcdl.train.binding)
        "gpus_per_node": 0 if site.defaults.gpu_request == "none" else job_gpus_per_node,
        "seconds": seconds,
        # none in a partition whose jobs name none (defaults.accountless_partitions: UArizona's windfall)
        "account": None if partition in site.defaults.accountless_partitions
        else job_account(site, plan, options.account or site.defaults.account),
        "partition": partition,
        "qos": options.qos or qos_for(site, plan, defaults, seconds),
        # how the GPUs are asked: the style the centre's submit filter counts (Slurm: --gpus-per-node,
        # --gres=gpu:N or --gpus-per-task; LSF: -gpu or rusage)
        # (defaults.single_gpu_request: a job on one GPU in all, where the centre asks one otherwise)
        "gpu_style": slurm_gpu_style(site, plan.nodes, job_gpus_per_node),
        # Slurm's GRES type where the centre names it ("--gres=gpu:a100:4", CSC Mahti)
        "gpu_type_prefix": f"{node.defaults.gpu_type}:" if node.defaults.gpu_type else "",
        # Slurm: the node memory that comes with the job's GPUs, where the centre asks it so ("--gres=gpu:a100:1
        # --mem=125000", "--gres=gpu:a100:4 --mem=500000", MPCDF Raven): the GPUs per node times the kind's share
        # (at most the kind's max_mem, the most the centre lets a job ask of a node: UQ RCC Bunya's 2000000M; or,
        # where that is 0, all of the node's memory for a job on all its GPUs: NREL Kestrel's --mem=0)
        "mem": _mem_for_gpus(node.defaults.mem_per_gpu, job_gpus_per_node, node.defaults.max_mem,
                             len(node.gpus)),
        # Slurm: the header asks tasks, CPUs and GPUs (tasks), or the nodes alone (nodes: Pawsey's
        # allocation-packs, where srun says the rest)
        "batch_request": site.defaults.batch_request,
        # cores: the header asks each node's every usable core as a task of one CPU, srun the ranks (EPCC Tursa); on a
        # node other jobs share, the job's own cores there (CU Boulder Alpine: "a 50-core job ... using 2 GPUs:
        # --ntasks=50 --gres=gpu:2"), the ranks' cores, set below once the job knows whether it shares its nodes
        "node_cores": node.usable_cores,
        # the job's total tasks named beside the tasks per node, where the centre's scripts count them so (CSD3)
        "total_tasks": plan.nodes * plan.ranks_per_node if site.defaults.total_tasks else None,
        # the job's total GPUs named beside each task's, where the centre's scripts count them so (UFRC HiPerGator)
        "total_gpus": plan.nodes * job_gpus_per_node if site.defaults.total_gpus else None,
        # the most tasks on one socket as the site's Slurm counts sockets, where the centre's scripts ask it (ULHPC)
        "tasks_per_socket": (node.tasks_per_scheduler_socket(min(r.cores) for r in plan.local_ranks())
                             if site.defaults.tasks_per_socket else None),
        "constraint": options.constraint if options.constraint is not None else defaults.constraint,
        "exclusive": exclusive,
        # asked in the script, unless the batch system hands out whole nodes to every job by itself
        "exclusive_request": exclusive and site.defaults.exclusive_by == "request",
        "requeue": options.requeue,
        "warning_seconds": options.warning_seconds,
        "output_dir": options.output_dir,
        # the profile's extra directives are written for its own scheduler
        # and after them those of the plan's framework (KISTI Neuron's mandatory application name, --comment=pytorch)
        # and last those the centre asks of its multi-node jobs only (Alliance Nibi's --switches=1)
        "directives": ([*defaults.directives, *site.defaults.framework_directives.get(plan.framework, ()),
                        *(site.defaults.multi_node_directives if plan.nodes > 1 else ())]
                       if scheduler == site.scheduler else []),
        # sbatch's --export=NONE (or a list without ALL) reaches every srun of the job through SLURM_EXPORT_ENV,
        # which would start the ranks without this script's exports (MASTER_ADDR, OMP_NUM_THREADS, ...): the
        # script unsets it before the launch, as NHR@FAU's job scripts do ("#SBATCH --export=NONE",
        # "unset SLURM_EXPORT_ENV")
        # so too where the site's Slurm keeps the submitting environment out by itself and the job names no --export
        # (defaults.export_default: none; KU Leuven: "Slurm jobs start in a clean environment which corresponds to
        # your login environment"), as the centre's scripts name none
        "unset_export_env": scheduler == "slurm" == site.scheduler and _keeps_environment_out(site, defaults.directives),
        "export_by_site": not any(d.startswith("--export=") for d in defaults.directives),
        # a bare srun under the header (launch.srun_layout: header) gets each task's CPUs only from the environment:
        # "Beginning with 22.05, srun will not inherit the --cpus-per-task value requested by salloc or sbatch. It
        # must be requested again with the call to srun or set with the SRUN_CPUS_PER_TASK environment variable"
        # (sbatch(1), Slurm 22.05), as EPCC and NHR@FAU write it: export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
        # (not where the line names the CPUs per task itself, launch.srun_restates: cpus-per-task; MSU ICER: "srun -c
        # $SLURM_CPUS_PER_TASK my_hybrid_program")
        "srun_cpus_per_task": (scheduler == "slurm" == site.scheduler and site.launcher == "srun"
                               and site.launch.srun_layout == "header" and site.defaults.batch_request == "tasks"
                               and "cpus-per-task" not in site.launch.srun_restates),
        # Open MPI's mpirun under a Slurm header of nodes alone (defaults.batch_request: nodes): Slurm gives each node
        # one task (SLURM_TASKS_PER_NODE 1(xN)), which Open MPI takes as the node's slots and so refuses the ranks;
        # the job exports the plan's counts before the launch, as EPCC's Cirrus jobs do
        "mpirun_slots": ({"SLURM_NTASKS": str(plan.world_size), "SLURM_NTASKS_PER_NODE": str(plan.ranks_per_node),
                          "SLURM_TASKS_PER_NODE": f"{plan.ranks_per_node}(x{plan.nodes})"}
                         if (scheduler == "slurm" == site.scheduler and plan.launcher == "mpirun"
                             and site.defaults.batch_request == "nodes" and site.launch.mpirun_layout == "restate")
                         else None),
        # the step asks its own GPUs (srun's --gres per node), so a whole-node header of nodes alone names none
        "step_asks_gpus": plan.launcher == "srun",
        "job_resources": [],
        "job_id_var": {"slurm": "SLURM_JOB_ID", "lsf": "LSB_JOBID", "pbs": "PBS_JOBID", "local": "HPCDL_JOB_ID"}[scheduler],
    }
    # LSF: -P project unless the profile says -G; PBS: -A account unless it says -P (NCI Gadi) or -W group_list;
    # a profile's flag is for its own scheduler
    account_flag = (site.defaults.account_flag if scheduler == site.scheduler and site.defaults.account_flag
                    else {"lsf": "-P", "pbs": "-A"}.get(scheduler))
    job["account_directive"] = account_directive(account_flag, job["account"]) if account_flag and job["account"] else None
    if plan.spawner and scheduler == "slurm" == site.scheduler:
        # one task per node, holding every CPU and GPU of the node's ranks, which its spawner starts (launch.spawner;
        # NRIS Olivia: "#SBATCH --ntasks-per-node=1 ... --gpus-per-node=4 --cpus-per-task=72", one torchrun a node)
        job.update(ranks_per_node=1, world_size=plan.nodes, cpus_per_rank=job["cpus_per_rank"] * plan.ranks_per_node,
                   gpus_per_rank=job["gpus_per_node"], cpus_per_gpu=None, tasks_per_socket=None,
                   total_tasks=plan.nodes if job["total_tasks"] else None)
    if job["batch_request"] == "cores":
        if not exclusive:
            # the job's own cores, each a task of one CPU: Slurm hands them with the GPUs and the launcher lays the
            # ranks over them (Open MPI's mpirun takes them as the node's slots)
            job["node_cores"] = plan.ranks_per_node * job["cpus_per_rank"]
        if job["total_tasks"]:
            job["total_tasks"] = plan.nodes * job["node_cores"]
    for field in ("account", "partition", "constraint", "qos"):
        # the merged value, the site's default included: a profile is input as much as a flag
        one_line(field, job[field])
    if options.requeue and options.warning_seconds >= seconds:
        raise HpcdlError(
            f"time: the warning {options.warning_seconds} s before the limit needs a limit longer than {seconds} s"
        )
    if options.qos and scheduler != "slurm":  # (a profile's own qos is for its Slurm; other templates leave it out)
        raise HpcdlError(f"qos: {options.qos!r} is a Slurm quality of service; {scheduler} jobs have none")
    if scheduler == "slurm":
        job["time"] = slurm_time(seconds)
        if job["gpu_style"] not in ("gpus-per-node", "gres", "gpus-per-task", "gpus"):
            job["gpu_style"] = "gpus-per-node"  # a profile's LSF style, rendered for Slurm
        if job["gpu_style"] == "gpus" and gpu_total_uneven(plan.nodes, job["gpus_per_node"], len(node.gpus)):
            # --gpus is the job's total ("Specify the total number of GPUs required for the job", sbatch(1)),
            # which Slurm may spread over the nodes unevenly where a node holds more than the plan uses there:
            # asked per node instead, as the plan's note says (Slurm takes [type:]N there too)
            job["gpu_style"] = "gpus-per-node"
    elif scheduler == "lsf":
        minutes = -(-seconds // 60)  # -W [hours:]minutes, rounded up
        job["time"] = f"{minutes // 60}:{minutes % 60:02d}"
        job["warning_minutes"] = max(1, options.warning_seconds // 60)
        job["name_directive"] = directive_name(options.name)
        # Summit's CSM LSF allocates whole nodes (-nnodes) and jsrun places ranks inside them;
        # classic LSF counts slots (-n) and spreads them with span[ptile=]. -alloc_flags is CSM's.
        job["csm"] = plan.launcher == "jsrun"
        job["alloc_flags"] = lsf_alloc_flags(site, plan) if job["csm"] else ""
        # classic LSF: a slot is one CPU, a core unless the cluster counts threads (EGO_DEFINE_NCPUS;
        # Mount Sinai Minerva: "each slot you ask for will have 1 cpu and 3GB of memory"), so each
        # rank asks for a slot per core it runs on, as PBS ncpus does; asking in cores never asks
        # more than a node holds. mpirun is told the ranks itself (-np, ppr).
        job["slots"] = plan.world_size * cores_per_rank
        job["slots_per_node"] = plan.ranks_per_node * cores_per_rank
        # GPUs per node: the -gpu option (LSF 10.1), or the older rusage[ngpus_excl_p=N] some centres
        # still document (Minerva); defaults.gpu_request picks
        job["gpu_request"] = site.defaults.gpu_request or "gpu"
        for field in ("account", "partition"):
            if job[field]:
                plain_word(field, "LSF", job[field])
        if job["constraint"] and any(c in job["constraint"] for c in '"\\'):
            # the constraint sits inside -R "select[...]": anything but a quote or backslash is fine
            raise HpcdlError(f"constraint: {job['constraint']!r} cannot go inside an LSF select[] string")
        if options.output_dir:
            plain_word("output_dir", "LSF", options.output_dir)
    elif scheduler == "pbs":
        job["time"] = f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
        job["name_directive"] = directive_name(options.name)[:15]  # PBS job names: 15 characters in Torque
        for field in ("account", "partition", "constraint"):
            if job[field]:
                plain_word(field, "PBS", job[field])
        if options.output_dir:
            plain_word("output_dir", "PBS", options.output_dir)
        job["job_resources"] = pbs_job_resources(site, plan, job, defaults, scheduler)
        if scheduler == site.scheduler and site.defaults.pbs_request == "job-wide":
            # the job's totals, no chunks (NCI Gadi: -l ncpus=96 -l ngpus=8 for two 4-GPU nodes); the
            # centre places whole nodes itself, and a constraint has no chunk to go in
            job["select"] = job["place"] = None
            return job
        share = None if exclusive else node_share(node, job, plan.ranks_per_node)
        # a chunk that takes its node whole asks all the node's CPUs, also where the ranks leave some idle (NCAR:
        # "Request all ncpus when running on exclusive nodes ... users should still request access to all CPUs,
        # but only use a subset": eight V100 ranks of 4 cores on a 36-core Casper node ask ncpus=36, "the maximum
        # resource request", which "will always provide you with an exclusive node"); a shared chunk its ranks'
        used = plan.ranks_per_node * job["cpus_per_rank"]
        whole = node.usable_cores * node.cpus_per_core
        ncpus = f":ncpus={whole if share is None else used}"
        if scheduler == site.scheduler and site.defaults.pbs_request == "processes":
            ncpus = ""  # the queue gives every chunk its node's CPUs (ABCI: "the user cannot change it")
        select = f"select={plan.nodes}{ncpus}:mpiprocs={plan.ranks_per_node}:ompthreads={plan.threads_per_rank}"
        if job["gpus_per_node"]:
            select += f":ngpus={job['gpus_per_node']}"
        for name, value in (defaults.job_resources_per_node if scheduler == site.scheduler else {}).items():
            # a chunk is one node: all it holds where the job takes it whole, else the job's share of it
            select += f":{name}={value if share is None else share_of(value, share)}"
        if job["constraint"]:
            # PBS Pro has no node features, only host resources: a Slurm-style feature list
            # "quad,cache" becomes the boolean resources quad=True:cache=True in the chunk.
            for feature in re.split(r"[,&]", job["constraint"]):
                feature = plain_word("constraint", "PBS", feature.strip())
                select += f":{feature}" if "=" in feature else f":{feature}=True"
        job["select"] = select
        # scatter: "only one chunk ... from any host", nothing to say of a job of one chunk, which a shared node
        # takes where PBS puts it (the default, free); excl asks a node whole at any size
        job["place"] = "scatter:excl" if job["exclusive_request"] else "scatter" if plan.nodes > 1 else None
        if scheduler == site.scheduler:
            _gpu_chunks(site, plan, defaults, partition, job, seconds)
    return job


def _gpu_chunks(site: Site, plan: Plan, defaults, partition: str | None, job: dict, seconds: int | None = None) -> None:
    """A queue whose chunks are GPUs of one node (defaults.partition_by_nodes chunk: gpu): the job asks select=<GPUs>
    alone, as the centre's jobs do (ALCF Sophia's by-gpu: "qsub -I -l select=2 ... -q by-gpu", "the number of GPUs
    you are allocated, and they will all be on the same node"), the queue giving each chunk its GPU and its CPUs; no
    place=scatter, which would put each chunk on a host of its own."""
    size = queue_by_size(site, plan, defaults, seconds)
    if size is None or size.chunk != "gpu" or partition != (size.partition or defaults.partition):
        return
    where = f"defaults.partition_by_nodes: {partition} chunk: gpu"
    gpus = len({gpu for rank in plan.local_ranks() for gpu in rank.gpus})  # each GPU once, however many ranks share it
    if plan.nodes != 1 or not gpus:
        raise HpcdlError(f"nodes: queue {partition!r} hands out GPUs of one node ({where}); this job asks "
                         f"{plan.nodes} node(s) and {gpus} GPU(s) a node")
    if plan.ranks_per_node > gpus:
        # PBS gives each chunk one MPI slot (mpiprocs=1): more ranks than chunks oversubscribe them
        raise HpcdlError(f"ranks_per_node: {plan.ranks_per_node} ranks on {gpus} GPU chunk(s) of "
                         f"queue {partition!r} ({where}), one MPI slot each")
    if defaults.job_resources_per_node:
        raise HpcdlError(f"defaults.job_resources_per_node: a node's resources cannot go into the one-GPU chunks of "
                         f"queue {partition!r} ({where})")
    job["select"] = f"select={gpus}"
    job["place"] = "excl" if job["exclusive_request"] else None


def node_local_gres(site: Site, plan: Plan, job: dict) -> str | None:
    """The generic resource a job staging its data asks for the node-local storage it stages to, as `name:count`
    (CSC Puhti: "--gres=gpu:v100:<number_of_gpus_per_node>,nvme:<local_storage_space_per_node>", "$LOCAL_SCRATCH"):
    without it the job has no such storage to write. On a node other jobs share, the job's share of the node's
    (its GPUs' share of the node's GPUs), as a shared node's other per-node resources are asked."""
    gres = site.filesystems.node_local_gres
    if gres is None:
        return None
    share = None if job["exclusive"] else node_share(site.node_kinds[plan.node_kind], job, plan.ranks_per_node)
    count = gres.per_node if share is None else max(1, int(gres.per_node * share))
    return f"{gres.name}:{count}"


def _takes_every_gpu(site: Site, plan: Plan) -> bool:
    """Whether a GPU job's ranks drive every GPU of each of its nodes (defaults.exclusive_when_full)."""
    node_gpus = len(site.node_kinds[plan.node_kind].gpus)
    used = {gpu for rank in plan.local_ranks() for gpu in rank.gpus}
    return node_gpus > 0 and len(used) == node_gpus


def node_share(node: NodeKind, job: dict, ranks_per_node: int) -> Fraction | None:
    """The share of a node a job's chunk takes where the job shares it with others: its GPUs' share of the node's
    GPUs, or for a CPU job its CPUs' share of the node's usable CPUs; None where it takes the node whole."""
    if job["gpus_per_node"] and node.gpus:
        share = Fraction(job["gpus_per_node"], len(node.gpus))
    else:
        usable = node.usable_cores * node.cpus_per_core
        share = Fraction(ranks_per_node * job["cpus_per_rank"], usable)
    return share if share < 1 else None


def share_of(value: str, share: Fraction) -> str:
    """A per-node resource ("920gb") in a share of the node, rounded down to a whole number of its unit (at least 1):
    on a node other jobs share, PBS hands each its own (Imperial CX3: "`mem` ... the amount of memory to allocate to
    the job per compute node"), and a chunk asking all of it would keep the node's other GPUs' jobs waiting."""
    number = re.match(r"[0-9]+", value).group()
    return f"{max(1, int(int(number) * share))}{value[len(number):]}"


def _queue_time_limit(site: Site, plan: Plan, defaults, partition: str | None, seconds: int, asked: str) -> None:
    """Refuse a time limit longer than the queue the job goes to runs (a queue by size with its own
    max_time: Purdue Anvil's wide runs 12 h where wholenode runs 96 h). The queue is the entry the job's size and
    time chose, not every entry of the same partition: one partition may run longer jobs under another QOS (CU
    Boulder Alpine's aa100 runs a day under the default QOS and seven under `--qos=long`), so a job is refused only
    where no entry of its partition that takes its size runs it that long."""
    sizes = [size for size in defaults.partition_by_nodes or ()
             if (size.partition or defaults.partition) == partition and size.max_time]
    if not sizes:
        return
    chosen = queue_by_size(site, plan, defaults, seconds)
    if chosen is not None and chosen in sizes:
        # the entries of the job's own size: a queue for larger jobs is no place for it
        sizes = [size for size in sizes if (size.max_nodes, size.max_gpus) == (chosen.max_nodes, chosen.max_gpus)]
    if all(seconds > parse_time(size.max_time) for size in sizes):
        longest = max(sizes, key=lambda size: parse_time(size.max_time))
        raise HpcdlError(f"time: {asked} is longer than queue {partition!r} of site {site.name!r} runs "
                         f"(defaults.partition_by_nodes: {partition} max_time {longest.max_time})")


def partition_for(site: Site, plan: Plan, defaults, seconds: int | None = None) -> str | None:
    """The queue a job of the plan's size goes to: the first of the profile's queues by size that takes
    its nodes (TACC Frontera: small for one or two nodes, normal from three), its GPUs (PSI Merlin7:
    a100-general takes a job of up to 4 GPUs, over as many nodes as it likes) and its time (UAB Cheaha:
    amperenodes up to 12 hours, amperenodes-medium up to 48), else the one partition."""
    size = queue_by_size(site, plan, defaults, seconds)
    return defaults.partition if size is None or size.partition is None else size.partition


def qos_for(site: Site, plan: Plan, defaults, seconds: int | None = None) -> str | None:
    """The quality of service a job of the plan's size names: its queue by size's own (NHR@FAU Alex: a
    multi-node A100 job asks --qos=a100multi, a one-node job none), else the kind's or the site's."""
    size = queue_by_size(site, plan, defaults, seconds)
    return size.qos if size is not None and size.qos else defaults.qos


def queue_by_size(site: Site, plan: Plan, defaults, seconds: int | None = None):
    """The first of the profile's queues by size that takes the plan's nodes and GPUs; among queues of that size
    told apart by their time alone, the first that runs the job's time (UAB Cheaha: amperenodes runs 12 hours,
    amperenodes-medium 48); a job no such queue runs that long keeps the first, whose max_time then refuses it by
    name (Purdue Anvil: wide's 12 hours). None without such queues; a job larger than every queue is refused,
    naming the field."""
    sizes = defaults.partition_by_nodes
    if not sizes:
        return None
    gpus = plan.nodes * plan.ranks_per_node * len(plan.ranks[0].gpus)
    fits = [size for size in sizes
            if (size.max_nodes is None or plan.nodes <= size.max_nodes) and (size.max_gpus is None or gpus <= size.max_gpus)]
    if seconds is not None and fits:
        # among the queues of the job's size told apart by their time alone, the first that runs it that long; a
        # queue for larger jobs is no place for it (TACC Frontera's normal starts at 3 nodes)
        bounds = (fits[0].max_nodes, fits[0].max_gpus)
        same = [size for size in fits if (size.max_nodes, size.max_gpus) == bounds]
        fits = [size for size in same if size.max_time is None or seconds <= parse_time(size.max_time)] or fits
    if fits:
        size = fits[0]
        if size.gpu_counts and gpus not in size.gpu_counts:
            # the centre's qsub refuses any other count (ALCF Sophia's by-gpu: 1, 2, 4 or 8)
            raise HpcdlError(f"gpus: {gpus} GPUs is not a count queue {size.partition or 'its queue'!r} of site "
                             f"{site.name!r} takes (defaults.partition_by_nodes: gpu_counts "
                             f"{', '.join(map(str, size.gpu_counts))})")
        return size
    last = sizes[-1]
    queue = last.partition or last.qos or "its queue"
    if last.max_gpus is not None and gpus > last.max_gpus:
        raise HpcdlError(f"gpus: {gpus} is more than any queue of site {site.name!r} takes "
                         f"(defaults.partition_by_nodes: at most {last.max_gpus} GPUs in {queue})")
    raise HpcdlError(f"nodes: {plan.nodes} is more than any queue of site {site.name!r} takes "
                     f"(defaults.partition_by_nodes: at most {last.max_nodes} in {queue})")


def account_directive(flag: str, account: str) -> str:
    """The words of the directive that charges the account: an option and its value (`-A acct`, `-P a00`,
    `-G bank`), or a job attribute that `-W` sets (PBS Pro's qsub: `-W attribute=value`, JCAHPC Miyabi's
    `-W group_list=gz00`)."""
    return f"{flag}={account}" if flag.startswith("-W ") else f"{flag} {account}"


def job_account(site: Site, plan: Plan, account: str | None) -> str | None:
    """The account a job is charged to: the project, with the node kind's own suffix where the centre keeps
    an account per node kind (NCSA Delta: <project>-gpu). A project already carrying the suffix is kept;
    one carrying another kind's suffix is refused, since the centre would charge the wrong allocation."""
    suffix = site.node_kinds[plan.node_kind].defaults.account_suffix
    if not account or not suffix or account.endswith(suffix):
        return account
    for kind, node in site.node_kinds.items():
        other = node.defaults.account_suffix
        if other and account.endswith(other):
            raise HpcdlError(f"account: {account!r} is the account of node kind {kind!r} (suffix {other}), but the job "
                             f"runs on {plan.node_kind!r}; give the project without the suffix, and hpcdl adds {suffix}")
    return account + suffix


def pbs_job_resources(site: Site, plan: Plan, job: dict, defaults, scheduler: str) -> list[str]:
    """The #PBS -l name=value lines outside the select chunk: the profile's own, its project filled in,
    and, where the centre asks the job's totals (pbs_request: job-wide), CPUs, GPUs and the per-node
    resources times the node count (NCI Gadi: -l ncpus=96 -l ngpus=8 -l mem=764GB -l jobfs=800GB)."""
    from hpcdl.sites.schema import PROJECT_PLACEHOLDER

    if scheduler != site.scheduler:
        return []
    lines = []
    if site.defaults.pbs_request == "job-wide":
        lines.append(f"ncpus={plan.nodes * plan.ranks_per_node * job['cpus_per_rank']}")
        if job["gpus_per_node"]:
            lines.append(f"ngpus={plan.nodes * job['gpus_per_node']}")
        for name, value in defaults.job_resources_per_node.items():
            number = re.match(r"[0-9]+", value).group()
            lines.append(f"{name}={plan.nodes * int(number)}{value[len(number):]}")
    for name, value in site.defaults.job_resources.items():
        if PROJECT_PLACEHOLDER in value:
            if not job["account"]:
                raise HpcdlError(f"account: site {site.name!r} names its project in defaults.job_resources.{name} "
                                 f"({value}); give the project with --account")
            value = value.replace(PROJECT_PLACEHOLDER, plain_word("account", "PBS", job["account"]))
        lines.append(f"{name}={value}")
    return lines


def directive_name(name: str) -> str:
    """A job name LSF and PBS take without quoting: starts with a letter, plain characters."""
    cleaned = slug(name)
    return cleaned if cleaned[:1].isalpha() else f"j{cleaned}"


def lsf_alloc_flags(site: Site, plan: Plan) -> str:
    """Summit's -alloc_flags: the NVMe burst buffer when data is staged there, and the SMT mode.

    OLCF Summit guide: `#BSUB -alloc_flags "nvme smt4"` mounts /mnt/bb/$USER and keeps all
    four hardware threads per core (smt4 is the default; smt1 for one thread per core).
    """
    node = site.node_kinds[plan.node_kind]
    flags = []
    if site.filesystems.node_local_kind == "nvme":
        flags.append("nvme")
    if node.threads_per_core > 1:
        flags.append(f"smt{node.threads_per_core}")
    # and the profile's own (defaults.alloc_flags), e.g. gpumps; an SMT mode it names wins
    own = list(site.defaults.alloc_flags)
    if any(f.startswith("smt") for f in own):
        flags = [f for f in flags if not f.startswith("smt")]
    flags += [f for f in own if f not in flags]
    return " ".join(plain_word("defaults.alloc_flags", "LSF", f) for f in flags)


def parse_time(text: str) -> int:
    """Slurm's time forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS -> seconds (slurm_seconds), within
    what a batch queue runs."""
    one_line("time", text)
    seconds = slurm_seconds(str(text).strip())
    if seconds is None:
        raise HpcdlError(f"time: {text!r} is not a time limit; write HH:MM:SS, MM:SS, minutes or D-HH:MM:SS")
    if seconds <= 0:
        raise HpcdlError(f"time: {text!r} is not a positive time limit")
    if seconds > MAX_TIME:
        raise HpcdlError(f"time: {text!r} is longer than a year; no batch queue runs a job that long")
    return seconds


MAX_TIME = 366 * 86400


def slurm_time(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hms = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{hms}" if days else hms


# ---------------------------------------------------------------------------------------------
# Modules and data staging.


# Slurm's memory units in KiB: a bare number is megabytes (sbatch(1): "Default units are megabytes"), the
# suffixes powers of 1024
_SLURM_MEM_KIB = {"K": 1, "": 1024, "M": 1024, "G": 1024**2, "T": 1024**3}


def _slurm_mem(mem: str) -> tuple[int, str]:
    """A Slurm memory amount as its number and its unit ("" for megabytes)."""
    unit = mem[-1] if mem[-1].isalpha() else ""
    return int(mem.rstrip("KMGT")), unit


def _slurm_mem_kib(mem: str) -> int:
    number, unit = _slurm_mem(mem)
    return number * _SLURM_MEM_KIB[unit]


def _mem_for_gpus(mem_per_gpu: str | None, gpus_per_node: int, max_mem: str | None = None,
                  node_gpus: int = 0) -> str | None:
    """Slurm's --mem for a node's GPUs: the kind's memory per GPU times the GPUs, in its unit, or the kind's
    max_mem where that is less (more than the centre lets a job ask would keep the job from ever starting).
    A max_mem of 0 is Slurm's "all of the memory on each node": a job on all node_gpus GPUs asks that, since
    the node's GPUs' shares may add up to more than the memory the node lets jobs have (NREL Kestrel: 90G a
    GPU, "about 350G of usable RAM", "To request all of the memory available on the GPU node, use --mem=0")."""
    if not mem_per_gpu or not gpus_per_node:
        return None
    if max_mem == "0":
        return "0" if gpus_per_node >= node_gpus else _mem_for_gpus(mem_per_gpu, gpus_per_node)
    number, unit = _slurm_mem(mem_per_gpu)
    mem = f"{number * gpus_per_node}{unit}"
    if max_mem and _slurm_mem_kib(mem) > _slurm_mem_kib(max_mem):
        return max_mem
    return mem


def _keeps_environment_out(site: Site, directives) -> bool:
    """Whether the batch shell starts without the submitting shell's environment: the job's own --export (NONE, or
    a list without ALL), or where it names none the site's Slurm default (defaults.export_default)."""
    exports = [d[len("--export="):] for d in directives if d.startswith("--export=")]
    if exports:
        return "ALL" not in exports[-1].split(",")
    return site.defaults.export_default == "none"


def _with_own_module(site: Site, modules: dict, options: JobOptions, job: dict) -> dict:
    """A job whose header keeps the submitting environment out (Slurm --export=NONE) gets none of the submitting
    shell's modules, hpcdl's own among them (its PATH and HPCDL_IMAGE_DIR): it loads the one it was rendered under
    itself, after the site's, as the centre's scripts load theirs ("#SBATCH --export=NONE", "module load <modules>",
    NHR@FAU). Only where the job has `module`: a login shell's, or the profile's init script."""
    own = options.hpcdl_module
    if not (job.get("unset_export_env") and own and own not in modules["load"]):
        return modules
    if site.modules.system == "none" or not (site.modules.login_shell or site.modules.init):
        return modules
    init = modules["init"] or (path_with_variables(site.modules.init) if site.modules.init else None)
    return {**modules, "load": [*modules["load"], own], "init": init}


def module_lines(site: Site, plan: Plan | None = None) -> dict:
    """`module use` and `module load` for the site's modules, the plan's (the GTL of GPU-aware
    Cray MPICH) and the container runtime's, and the init to source."""
    if site.modules.system == "none":
        return {"init": None, "load": [], "use": [], "clean": None, "login": False}
    load = [*site.modules.load, *(plan.modules if plan else ())]
    choice = plan.runtime if plan else None
    in_container = choice.in_container if choice is not None else site.runtime != "none"
    if site.modules.runtime and in_container:
        load.append(site.modules.runtime)
    framework = plan.framework if plan else None
    if choice is not None:
        # the centre's own environment's modules (ALCF Polaris: module load conda; Summit: open-ce)
        load += [m for m in choice.modules if m not in load]
    elif not in_container and framework in site.modules.frameworks:
        # no container: the framework comes from the centre's own module (modules.frameworks)
        load.append(site.modules.frameworks[framework])
    use = [path_with_variables(p) for p in site.modules.use] if load else []
    # the clean start the centre's scripts make before their loads: `module purge`, or Lmod's `module reset`; made
    # where the job loads nothing too (MPCDF Raven's GPU job starts `module purge`), since the runtime carries the
    # host's environment, and what a module the submitting shell had loaded set, into the container
    clean = "purge" if site.modules.purge else "reset" if site.modules.reset else None
    init = path_with_variables(site.modules.init) if site.modules.init and (load or clean) else None
    # a login shell (#!/bin/bash -l) where the centre's scripts start so: `module` from /etc/profile (ULHPC)
    return {"init": init, "load": load, "use": use, "clean": clean, "login": site.modules.login_shell}


def activate_lines(site: Site, plan: Plan) -> list[str]:
    """The shell lines that enter the centre's conda environment or venv before the launch (the
    ranks inherit it); a uenv is entered by srun itself (--uenv)."""
    choice, env = plan.runtime, site.environment_for(plan.node_kind)
    # only where the plan runs the centre's environment: a framework its environment lacks runs from a venv
    # beside hpcdl (kind venv too, the centre's `environment` being modules: CSC Mahti's TensorFlow)
    if choice is None or env is None or choice.kind not in ("conda", "venv") or env.kind != choice.kind:
        return []
    if choice.kind == "conda":
        # conda's own shell function, where the centre's scripts define it first: a batch shell reads no ~/.bashrc,
        # so without it `conda activate` stops with "Run 'conda init' before 'conda activate'"
        hook = ['eval "$(conda shell.bash hook)"'] if env.hook else []
        # or the script of a conda install the batch shell's PATH lacks, sourced where the centre's scripts source it
        # (MASSIVE M3: `source /path/to/miniconda/bin/activate`); only its $NAME references expand
        init = ["# shellcheck disable=SC1090,SC1091", f"source {path_with_variables(env.init)}"] if env.init else []
        # the environment's name, one inert word; none: conda's base
        name = f" {quote(env.activate)}" if env.activate else ""
        if env.activate_command == "source":
            # conda's own activate script, found on the PATH the centre's conda module sets (MIT ORCD Engaging:
            # `module load miniforge/24.3.0-0`, `source activate pytorch`): no shell function needed
            return ["# shellcheck disable=SC1091", "source activate" + name]
        return init + hook + ["conda activate" + name]
    # the venv's own script, on the cluster alone: shellcheck cannot follow it (a folder under $SCRATCH: SC1091)
    return ["# shellcheck disable=SC1090,SC1091",
            f"source {path_with_variables(env.activate.rstrip('/') + '/bin/activate')}"]


def ulimit_lines(plan: Plan) -> list[str]:
    """`ulimit -l unlimited` for each limit the plan raises (the profile's launch.ulimit). A plan read
    back from JSON is checked again: only the limits and values the profile may name reach the shell."""
    lines = []
    for name, value in plan.ulimit.items():
        if name not in ULIMIT_OPTIONS or not ULIMIT_VALUE.fullmatch(str(value)):
            raise HpcdlError(f"plan ulimit: {name}={value!r} is not a limit launch.ulimit takes "
                             f"({', '.join(ULIMIT_OPTIONS)}; unlimited or a whole number)")
        option = ULIMIT_OPTIONS[name]
        lines.append(f"ulimit {option} {value} || echo \"hpcdl: ulimit {option} {value} refused; the ranks keep "
                     f"$(ulimit {option})\" >&2")
    return lines


def env_path_lines(plan: Plan) -> list[str]:
    """`export NAME=...` for values built from other variables: each folder is one quoted word in
    which only $NAME references expand, and the variable's own value joins only when set."""
    lines = []
    for name, value in sorted(plan.env_paths.items()):
        env_name(name)
        if value.path is not None:
            # one path under a variable the job has (HF_HOME on $SCRATCH): only $NAME references expand
            lines.append(f"export {name}={path_with_variables(value.path)}")
            continue
        before = ":".join(path_with_variables(p) for p in value.prepend)
        after = ":".join(path_with_variables(p) for p in value.append)
        own = f'"${{{name}:+:${{{name}}}}}"' if before else f'"${{{name}:+${{{name}}}:}}"'
        lines.append(f"export {name}={before}{own}{f':{after}' if before and after else after}")
    return lines


def once_per_node(plan: Plan, scheduler: str) -> list[str]:
    """The argv prefix that runs a command once on every node of the job."""
    n = str(plan.nodes)
    if scheduler == "local":
        return []
    if scheduler == "slurm":
        return ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1"]
    if plan.launcher == "jsrun":
        return ["jsrun", f"-n{n}", "-r1", "-a1", "-c1"]
    if plan.launcher == "aprun":
        return ["aprun", "-n", n, "-N", "1"]
    if plan.launcher == "mpiexec":
        return ["mpiexec", "-n", n, "-ppn", "1"]
    if plan.launcher == "pals":
        return ["mpiexec", "-n", n, "--ppn", "1"]
    if plan.launcher == "mpirun":
        return ["mpirun", "-np", n, "--map-by", "ppr:1:node"]
    # pbsdsh -u: one task per node of the PBS allocation; blaunch: the same for LSF
    return ["pbsdsh", "-u"] if scheduler == "pbs" else ["blaunch", "-u", "$LSB_DJOB_HOSTFILE"]


def staging(site: Site, plan: Plan, recipe: dict, scheduler: str) -> dict | None:
    data = recipe.get("data") or {}
    if not data.get("stage"):
        return None
    source = data.get("path")
    if not source:
        raise HpcdlError("data.stage: the recipe asks to stage its data set but gives no data.path")
    if not site.filesystems.node_local:
        raise HpcdlError(f"data.stage: site {site.name!r} names no filesystems.node_local to stage to")
    one_line("data.path", source)
    bb = site.filesystems.burst_buffer
    if bb and scheduler != "slurm":
        raise HpcdlError(f"filesystems.burst_buffer: site {site.name!r}: DataWarp's #DW jobdw is a Slurm request")
    shared = bb is not None and bb.access_mode == "striped"  # one namespace for all nodes: copy once
    # per-node shards: each node copies only what its ranks read (data.shuffle: node)
    shard = data.get("shuffle") == "node" and plan.nodes > 1
    if shard and shared:
        raise HpcdlError(f"data.shuffle: node stages a shard per node, but site {site.name!r}'s burst buffer is "
                         "striped (one namespace for all nodes); use access_mode: private")
    prefix = [] if shared else once_per_node(plan, scheduler)
    if prefix[:1] == ["blaunch"]:
        prefix = ["blaunch", "-u"]  # the host file is added in the template, as a variable
    return {
        "source": source,
        "node_local": path_with_variables(site.filesystems.node_local),
        "per_node": prefix,
        "lsf_hostfile": scheduler == "lsf" and prefix[:1] == ["blaunch"],
        "shard": f"auto/{plan.nodes}" if shard else None,
        "datawarp": bb.model_dump() if bb else None,
    }


# ---------------------------------------------------------------------------------------------


def slug(name: str) -> str:
    """A job name made safe for a file name: letters, digits, '.', '-' and '_' only."""
    cleaned = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name).lstrip(".-")
    return cleaned[:64] or "job"


def with_runtime(site: Site, runtime: str) -> Site:
    """The same site with another container runtime (the lint matrix renders them all)."""
    return site.model_copy(update={"runtime": runtime})


def node_map_lines(plan: Plan) -> list[str]:
    lines = []
    for r in plan.local_ranks():
        gpus = ",".join(map(str, r.gpus)) or "-"
        where = (f"{len(r.cores)} cores near its GPU (found at run time)" if plan.rank_cpus == "gpu-local"
                 else f"socket {r.socket}, cores {_ranges(r.cores)}")
        lines.append(f"local rank {r.local_rank}: {where}, GPU {gpus}, NIC {r.nic or '-'}, {r.omp_num_threads} thread(s)")
    return [comment_text(line) for line in lines]


def _ranges(values) -> str:
    values = sorted(values)
    if not values:
        return "-"
    out, start, prev = [], values[0], values[0]
    for v in values[1:]:
        if v != prev + 1:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = v
        prev = v
    out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)

