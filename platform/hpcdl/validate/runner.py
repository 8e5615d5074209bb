"""Render the validation jobs, submit them with the site's executor, wait with progress, collect.

Only the executor verbs are used (submit, status, cancel, output), so a site whose
scheduler is slurm, lsf or pbs runs the same suite through its own executor. On the
`local` scheduler the jobs share one node, so they run one at a time: two timing jobs
side by side would measure each other.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from hpcdl.executors import executor_for
from hpcdl.files import write_atomically
from hpcdl.plan import make_plan
from hpcdl.predict.host import core_scaling, share_of_core
from hpcdl.render import JobOptions, render_job_script
from hpcdl.render.jobscript import loaded_hpcdl_module
from hpcdl.sites.schema import Site
from hpcdl.validate.checks import JobOutcome
from hpcdl.validate.jobs import ValidationJob


def render_validation_job(site: Site, job: ValidationJob, time_limit: str | None = None) -> str:
    plan = make_plan(site, job.request)
    # hpcdl's own module, loaded again by a job that keeps the submitting environment out (--export=NONE)
    options = JobOptions(name=job.name, time=time_limit or site.defaults.time,
                         hpcdl_module=loaded_hpcdl_module(os.environ))
    return render_job_script(site, plan, job.payload, options, program=job.program())


def jobs_run_on_this_host(site: Site) -> bool:
    """Local sites, and test clusters whose pretend nodes share this machine."""
    return site.scheduler == "local" or any(k.nodes_per_host > 1 for k in site.node_kinds.values())


def _threads_on_host(site: Site, job: ValidationJob) -> int:
    plan = make_plan(site, job.request)
    _, node = site.node_kind(plan.node_kind)
    return min(plan.nodes, node.nodes_per_host) * plan.ranks_per_node * plan.threads_per_rank


def default_max_jobs(site: Site) -> int:
    return 1 if site.scheduler == "local" else 8


def run_jobs(
    site: Site, jobs: list[ValidationJob], out_dir: Path, *, timeout_s: int, max_jobs: int | None = None,
    console: Console | None = None, poll_s: float = 0.5,
) -> dict[str, JobOutcome]:
    console = console or Console()
    executor = executor_for(site.scheduler)
    max_jobs = max_jobs or default_max_jobs(site)
    limit = _hhmmss(timeout_s)
    scripts = {}
    for job in jobs:
        job_dir = (out_dir / "jobs" / job.key).resolve()
        script = job_dir / "job.sh"
        write_atomically(script, render_validation_job(site, job, limit), mode=0o755)
        scripts[job.key] = (script, job_dir)

    waiting = list(jobs)
    running: dict[str, tuple[ValidationJob, str, float]] = {}
    outcomes: dict[str, JobOutcome] = {}
    # on a host the jobs share with other work: the share of a core each rank's thread could have
    # while the job ran, from the other sessions' runnable threads (hpcdl.predict.host); hpcdl
    # predict divides a rank's rate by it
    load: dict[str, list[float]] = {job.key: [] for job in jobs}
    threads_on_host = {job.key: _threads_on_host(site, job) for job in jobs} if jobs_run_on_this_host(site) else {}
    next_sample = 0.0
    # how fast cores compute when as many are busy as the job has threads, against one alone:
    # measured once per thread count before any job runs, beside the jobs (hpcdl.predict.host)
    scaling = {n: core_scaling(n) for n in sorted(set(threads_on_host.values())) if n > 1}
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[state]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        overall = progress.add_task(f"{site.name}: {len(jobs)} validation job(s)", total=len(jobs), state="")
        tasks = {job.key: progress.add_task(f"  {job.name}", total=1, state="waiting", start=False) for job in jobs}
        try:
            while waiting or running:
                while waiting and len(running) < max_jobs:
                    job = waiting.pop(0)
                    script, job_dir = scripts[job.key]
                    job_id = executor.submit(script, job_dir)
                    running[job.key] = (job, job_id, time.monotonic())
                    progress.start_task(tasks[job.key])
                    progress.update(tasks[job.key], state=f"submitted as {job_id}")
                sample = bool(threads_on_host) and time.monotonic() >= next_sample
                if sample:
                    next_sample = time.monotonic() + 1.0  # a /proc walk costs tens of ms; once a second is plenty
                for key, (job, job_id, started) in list(running.items()):
                    if sample and (share := share_of_core(threads_on_host[key])) is not None:
                        load[key].append(share)
                    state = executor.status(job_id)
                    if not state.finished and time.monotonic() - started > timeout_s:
                        executor.cancel(job_id)
                        state = type(state)(job_id, "TIMEOUT", None)
                    progress.update(tasks[key], state=state.state.lower())
                    if state.finished:
                        del running[key]
                        outcomes[key] = _collect(executor, job, job_id, state, scripts[key][1])
                        if load[key]:
                            outcomes[key].host_cpu_share = sum(load[key]) / len(load[key])
                        if key in threads_on_host:
                            outcomes[key].host_core_scaling = scaling.get(threads_on_host[key], 1.0)
                        # one line per finished job also where the output is not a terminal (make, CI logs)
                        progress.console.print(f"  {job.name}: {state.state.lower()} after "
                                               f"{time.monotonic() - started:.0f} s (job {job_id})", highlight=False)
                        progress.update(tasks[key], completed=1)
                        progress.stop_task(tasks[key])
                        progress.advance(overall)
                if running:
                    time.sleep(poll_s)
        except KeyboardInterrupt:
            for job, job_id, _ in running.values():
                executor.cancel(job_id)
            raise
    return outcomes


def _collect(executor, job: ValidationJob, job_id: str, state, job_dir: Path) -> JobOutcome:
    output = ""
    try:
        out = Path(executor.output(job_id))
        if out.exists() and out.resolve() != (job_dir / "output.log").resolve():
            shutil.copyfile(out, job_dir / "output.log")
        output = str(job_dir / "output.log") if (job_dir / "output.log").exists() else str(out)
    except Exception:  # the output may be gone on some schedulers; the verdict still names the job
        output = str(job_dir)
    results = job_dir / "results.jsonl"
    records = []
    if results.exists():
        for line in results.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a rank killed mid-line: the rest is still evidence
    nodes_dir = job_dir / "nodes"
    nodelist = tuple(sorted(p.name for p in nodes_dir.iterdir())) if nodes_dir.is_dir() else ()
    per_node = {}
    for name in nodelist:  # train jobs: each node's first rank leaves its images/s (probes.probe_train)
        try:
            value = json.loads((nodes_dir / name).read_text()).get("images_per_sec_rank")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, (int, float)):
            per_node[name] = value
    return JobOutcome(job, state.state, state.exit_code, records, nodelist, str(job_dir), output, per_node=per_node)


def _hhmmss(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
