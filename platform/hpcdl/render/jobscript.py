"""Job scripts: a jinja2 template per scheduler, filled from the plan and the recipe."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import jinja2

from hpcdl import __version__
from hpcdl.errors import HpcdlError
from hpcdl.plan.model import Plan
from hpcdl.render.shell import env_name, join, one_line, quote
from hpcdl.runtimes import runtime_for
from hpcdl.sites.schema import Site

SCHEDULERS = ("local", "slurm", "lsf", "pbs")


@dataclass(frozen=True)
class JobOptions:
    name: str = "hpcdl"
    time: str | None = None
    account: str | None = None
    partition: str | None = None
    image: str | None = None
    output_dir: str | None = None
    extra_args: tuple[str, ...] = ()
    requeue: bool = False


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("hpcdl.render", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["q"] = quote
_env.filters["join"] = join


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
    one_line("name", options.name)
    one_line("account", options.account)
    one_line("partition", options.partition)
    one_line("time", options.time)
    for name in plan.env:
        env_name(name)
    runtime_argv = runtime_for(site.runtime).command(plan, site, options.image or site.defaults.image)
    if program is None:
        program = ["hpcdl", "train", "recipe.json", "--plan", "plan.json", "--results", "results.jsonl"]
    program = [*program, *options.extra_args]
    template = _env.get_template(f"{scheduler}.sh.j2")
    return template.render(
        version=__version__,
        site=site,
        plan=plan,
        options=options,
        env=dict(sorted(plan.env.items())),
        plan_json=json.dumps(plan.to_dict(), sort_keys=True),
        recipe_json=json.dumps(recipe, sort_keys=True),
        launch=[*plan.launcher_argv, *runtime_argv, *program],
        node_map=node_map_lines(plan),
        job_slug=slug(options.name),
    )


def slug(name: str) -> str:
    """A job name made safe for a file name: letters, digits, '.', '-' and '_' only."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".-")
    return cleaned[:64] or "job"


def node_map_lines(plan: Plan) -> list[str]:
    lines = []
    for r in plan.local_ranks():
        gpus = ",".join(map(str, r.gpus)) or "-"
        lines.append(
            f"local rank {r.local_rank}: socket {r.socket}, cores {_ranges(r.cores)}, "
            f"GPU {gpus}, NIC {r.nic or '-'}, {r.omp_num_threads} thread(s)"
        )
    return lines


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
