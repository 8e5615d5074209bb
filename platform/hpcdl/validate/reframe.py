"""The suite as ReFrame (reframe-hpc 4.x) tests, and ReFrame-style perflogs of hpcdl's own runs.

`hpcdl validate --export-reframe DIR` writes

  DIR/hpcdl_<site>.py   one ReFrame test class per validation job, each with its performance
                        variables and hpcdl's references as a ReFrame reference table
                        (`{'system:partition': {'pvar': (target, lower, upper, unit)}}`, the
                        thresholds fractions of the target: reframe docs/tutorial.rst);
  DIR/jobs/<job>.sh     the job script hpcdl renders for the site, which each test runs
                        inside the allocation ReFrame makes (ReFrame's own launcher is set to
                        `local`, since the script carries hpcdl's launch line, e.g. srun);
  DIR/settings.py       a ReFrame configuration for the site (system = site, partition = node
                        kind), whose perflog handler writes the format below.

A centre runs `reframe -C DIR/settings.py -c DIR/hpcdl_<site>.py -r`, or only the test file
with its own configuration and `-S hpcdl_system=SYS:PART` to name its system and partition.

hpcdl's own runs append the same lines to perflogs: `<prefix>/<system>/<partition>/<test>.log`,
one `|`-separated line per job and run under a header row, as ReFrame's filelog handler
writes them (reframe/core/logging.py, MultiFileHandler), so a dashboard that reads a centre's
ReFrame perflogs reads hpcdl's results in the same files and columns.

The values come from the same code in both: the functions between the two `hpcdl-extract`
markers below are copied into the test file as they are.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import json
import pprint
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from hpcdl import __version__
from hpcdl.errors import HpcdlError
from hpcdl.files import write_atomically
from hpcdl.validate.jobs import job_name
from hpcdl.validate.references import Reference, better_for

# ReFrame's perflog placeholders (reframe docs/config_reference.rst, logging.handlers_perflog)
PERFLOG_FORMAT = ("%(check_job_completion_time)s|%(check_name)s|%(check_system)s|%(check_partition)s|"
                  "%(check_environ)s|%(check_num_tasks)s|%(check_job_nodelist)s|%(check_result)s|"
                  "%(check_perfvalues)s")
PERFLOG_PERFVARS = ("%(check_perf_var)s=%(check_perf_value)s|%(check_perf_unit)s|%(check_perf_ref)s|"
                    "%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|")
PERFLOG_DATEFMT = "%Y-%m-%dT%H:%M:%S%:z"  # RFC 3339, ReFrame's default
ENVIRON = "hpcdl"  # the ReFrame programming environment: the job scripts bring their own


# ---- hpcdl-extract: begin (copied verbatim into the exported test file)

def hpcdl_records(path):
    """The JSON records rank 0 wrote (results.jsonl); a line cut short by a killed rank is skipped."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def hpcdl_value(records, how, baseline_records=None):
    """One performance value from a job's records, as `how` says:

    ["final", field]           the field of the trainer's final record (images_per_sec_total, accuracy, ...)
    ["latency_us", backend]    the allreduce time of the smallest message with that backend
    ["busbw_GBps", backend]    the allreduce bus bandwidth of the largest message with that backend
    ["efficiency", p]          X(p) / (p X(1)), X(1) from `baseline_records` (the 1-node or 1-rank job)
    ["efficiency_stored", p, x1]  the same against a stored X(1)
    """
    kind = how[0]
    if kind == "final":
        finals = [r for r in records if r.get("event") == "final"]
        return float(finals[-1][how[1]]) if finals else None
    if kind in ("latency_us", "busbw_GBps"):
        points = sorted((r for r in records if r.get("event") == "collective" and r.get("backend") == how[1]),
                        key=lambda r: r["bytes"])
        if not points:
            return None
        return float(points[0]["time_us"]) if kind == "latency_us" else float(points[-1]["busbw_GBps"])
    if kind in ("efficiency", "efficiency_stored"):
        x = hpcdl_value(records, ["final", "images_per_sec_total"])
        if kind == "efficiency":
            x1 = hpcdl_value(baseline_records or [], ["final", "images_per_sec_total"])
        else:
            x1 = how[2]
        return x / (how[1] * x1) if x is not None and x1 else None
    raise ValueError(f"unknown measurement {how!r}")


def hpcdl_environment_problems(records, frameworks, ranks):
    """What is wrong with an environment probe's record: frameworks, versions, ranks, allreduce."""
    env = [r for r in records if r.get("event") == "environment"]
    if not env:
        return ["the environment probe wrote no record"]
    everyone = env[-1]["ranks_info"]
    problems = []
    if len(everyone) != ranks:
        problems.append(f"{len(everyone)} rank(s) started, {ranks} asked for")
    total = len(everyone) * (len(everyone) + 1) / 2
    for r in everyone:
        if r.get("torch_allreduce") != total:
            problems.append(f"allreduce on rank {r.get('rank')} gave {r.get('torch_allreduce')}, not {total}")
    for fw, want in sorted(frameworks.items()):
        got = everyone[0].get("frameworks", {}).get(fw, {})
        if "version" not in got:
            problems.append(f"{fw} does not import: {got.get('error', 'not tried')}")
        elif want and not got["version"].startswith(want):
            problems.append(f"{fw} {got['version']}, the image should have {want}")
    return problems

# ---- hpcdl-extract: end


@dataclass
class PerfVar:
    pvar: str  # the ReFrame performance variable
    name: str  # hpcdl's measurement name: the key in the references file
    unit: str
    how: list
    reference: Reference | None = None
    baseline: str | None = None  # the job key whose records give X(1)

    def ref_tuple(self) -> tuple | None:
        """ReFrame's (target, lower, upper, unit): only the worse side is bounded."""
        if self.reference is None:
            return None
        r = self.reference
        if better_for(self.name) == "higher":
            return (r.value, r.tolerance, None, self.unit)
        return (r.value, None, r.tolerance, self.unit)


@dataclass
class ExportedJob:
    key: str
    kind: str
    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    script: str
    perf: list[PerfVar] = field(default_factory=list)
    environment: dict | None = None  # {"frameworks": {...}, "ranks": n} for the environment job
    checks: list[str] = field(default_factory=list)  # the checks that read it: its ReFrame tags

    @property
    def tags(self) -> set[str]:
        """`reframe -t collectives` selects an area, `-t hpcdl` the whole suite."""
        return {"hpcdl", *self.checks}

    @property
    def descr(self) -> str:
        return (f"hpcdl {', '.join(self.checks) or self.kind}: {self.nodes} node(s) x {self.ranks_per_node} "
                f"rank(s) x {self.threads_per_rank} thread(s)")

    @property
    def class_name(self) -> str:
        return class_name(self.key)

    @property
    def depends(self) -> list[str]:
        return sorted({p.baseline for p in self.perf if p.baseline})


def class_name(key: str) -> str:
    return "hpcdl_" + re.sub(r"\W", "_", key)


def system_name(ctx) -> str:
    return f"{ctx.site.name}:{ctx.node_kind_name}"


def _add(jobs: dict, key: str, var: PerfVar) -> None:
    mine = jobs[key].perf
    for i, old in enumerate(mine):
        if old.pvar == var.pvar:
            if old.reference is None and var.reference is not None:
                mine[i] = var  # a judged name wins over one only logged
            return
    mine.append(var)


def exported_jobs(ctx, selected) -> list[ExportedJob]:
    """Each job of the suite once, with the performance variables the selected checks read from it."""
    from hpcdl.plan import make_plan
    from hpcdl.validate.jobs import convergence_target, suite_jobs, thread_sweep_configs
    from hpcdl.validate.runner import render_validation_job

    refs = ctx.references
    limit = ctx.settings.job_timeout_s
    time_limit = f"{limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}"
    jobs: dict[str, ExportedJob] = {}
    for job in suite_jobs(ctx, selected):
        plan = make_plan(ctx.site, job.request)
        jobs[job.key] = ExportedJob(job.key, job.kind, plan.nodes, plan.ranks_per_node, plan.threads_per_rank,
                                    render_validation_job(ctx.site, job, time_limit))

    def var(key, pvar, name, unit, how, default=None, baseline=None):
        _add(jobs, key, PerfVar(pvar, name, unit, how, refs.lookup(name) or default, baseline))

    for check in selected:
        for job in check.jobs(ctx):
            if check.name not in jobs[job.key].checks:
                jobs[job.key].checks.append(check.name)
    for check in selected:
        if check.name == "environment":
            for job in check.jobs(ctx):
                frameworks = refs.expect.get("frameworks") or {"pytorch": ""}
                jobs[job.key].environment = {"frameworks": dict(frameworks), "ranks": job.request.ranks_per_node or 1}
        elif check.name == "collectives":
            for job in check.jobs(ctx):
                scope = job.payload["probe"]["scope"]
                for backend in ("nccl" if ctx.uses_gpus else "gloo", "mpi"):
                    var(job.key, f"{backend}_latency_us", f"collectives/{backend}/{scope}/latency_us", "us",
                        ["latency_us", backend])
                    var(job.key, f"{backend}_busbw_GBps", f"collectives/{backend}/{scope}/busbw_GBps", "GB/s",
                        ["busbw_GBps", backend])
        elif check.name == "threads":
            for job, (r, t) in zip(check.jobs(ctx), thread_sweep_configs(ctx)):
                var(job.key, "images_per_sec", f"threads/{r}x{t}/images_per_sec", "images/s",
                    ["final", "images_per_sec_total"])
        elif check.name == "throughput":
            for job in check.jobs(ctx):
                net, fw = job.payload["net"], job.request.framework
                var(job.key, "images_per_sec", f"throughput/{net}/{fw}/images_per_sec", "images/s",
                    ["final", "images_per_sec_total"])
        elif check.name == "scaling":
            _, plan = check.plan(ctx)
            for mode in ("weak", "strong"):
                points = [(p, job) for m, p, _, _, job in plan if m == mode]
                base = next((job.key for p, job in points if p == 1), None)
                stored = refs.lookup(f"scaling/{mode}/1/images_per_sec")
                for p, job in points:
                    var(job.key, "images_per_sec", f"scaling/{mode}/{p}/images_per_sec", "images/s",
                        ["final", "images_per_sec_total"])
                    if p == 1:
                        continue
                    if base:
                        var(job.key, f"{mode}_efficiency", f"scaling/{mode}/{p}/efficiency", "", ["efficiency", p],
                            baseline=base)
                    elif stored:
                        var(job.key, f"{mode}_efficiency", f"scaling/{mode}/{p}/efficiency", "",
                            ["efficiency_stored", p, stored.value])
        elif check.name == "convergence":
            target = convergence_target()["target"]
            for job in check.jobs(ctx):
                var(job.key, "accuracy", "convergence/cifar10_quick/accuracy", "", ["final", "accuracy"],
                    Reference(target["accuracy"], target["accuracy_tolerance"], "the suite's stated target"))
                var(job.key, "time_to_solution_s", "convergence/cifar10_quick/time_to_solution_s", "s",
                    ["final", "time_to_solution_s"],
                    Reference(target["time_to_solution_s"], target["time_tolerance"], "the suite's stated budget"))
    return list(jobs.values())


# ---- the test file

_DIRECTIVE = {"slurm": "#SBATCH", "lsf": "#BSUB", "pbs": "#PBS"}
# what ReFrame writes itself (job name, its own output files, the time limit, the job's size)
_REFRAME_SETS = {
    "slurm": ("--job-name", "--output", "--error", "--time", "--nodes", "--ntasks", "--ntasks-per-node",
              "--cpus-per-task"),
    "lsf": ("-J", "-o", "-e", "-W"),
    "pbs": ("-N", "-o", "-e", "-j"),
}


def scheduler_options(script: str, scheduler: str) -> list[str]:
    """hpcdl's batch directives that ReFrame does not write itself (partition, account, GPUs, constraints)."""
    prefix = _DIRECTIVE.get(scheduler)
    if prefix is None:
        return []
    out = []
    for line in script.splitlines():
        if not line.startswith(prefix + " "):
            continue
        option = line[len(prefix) + 1:].strip()
        name = option.split("=", 1)[0].split(" ", 1)[0]
        if name not in _REFRAME_SETS[scheduler]:
            out.append(option)
    return out


def _extract_source() -> str:
    text = inspect.getsource(__import__(__name__, fromlist=["_"]))
    begin = text.index("# ---- hpcdl-extract: begin")
    end = text.index("# ---- hpcdl-extract: end")
    return text[text.index("\n", begin) + 1:end].strip() + "\n"


def test_file(ctx, jobs: list[ExportedJob], command: str) -> str:
    system = system_name(ctx)
    scheduler = ctx.site.scheduler
    lines = [
        f"# ReFrame tests for the hpcdl validation suite on site {ctx.site.name!r}, node kind "
        f"{ctx.node_kind_name!r} ({ctx.suite} suite).",
        f"# Generated by hpcdl {__version__}: {command}",
        f"# References: {ctx.references.source}",
        "#",
        "# Run: reframe -C settings.py -c THIS_FILE -r    (or with your own configuration:",
        f"#      reframe -c THIS_FILE -r -S hpcdl_system=SYS:PARTITION  where the default is {system})",
        "# Each test runs the job script hpcdl rendered (jobs/<test>.sh) inside ReFrame's allocation;",
        "# rank 0 writes results.jsonl in the stage folder, and the performance values are read from it.",
        "",
        "import json",
        "import os",
        "",
        "import reframe as rfm",
        "import reframe.utility.sanity as sn",
        "from reframe.core.backends import getlauncher",
        "from reframe.core.builtins import run_after, run_before, sanity_function, variable",
        "from reframe.core.exceptions import SanityError",
        "",
        "",
        _extract_source(),
        "",
        "# who answers for these tests at your centre: put your team's contact here",
        f"HPCDL_MAINTAINERS = [{ctx.site.name + ' HPC staff'!r}]",
        "",
        "",
        "class HpcdlValidationJob(rfm.RunOnlyRegressionTest):",
        '    """One hpcdl validation job: the script hpcdl rendered, run inside ReFrame\'s allocation."""',
        "",
        f"    hpcdl_system = variable(str, value={system!r})",
        "    valid_prog_environs = ['*']",
        "    sourcesdir = 'jobs'",
        "    maintainers = HPCDL_MAINTAINERS",
        "    keep_files = ['results.jsonl']  # the evidence the values were read from",
        "    hpcdl_key = ''",
        "    hpcdl_perf = []  # (pvar, hpcdl name, unit, how, reference tuple or None, baseline test or None)",
        "    hpcdl_environment = None",
        "",
        "    @run_after('init')",
        "    def hpcdl_set_up(self):",
        "        self.valid_systems = [self.hpcdl_system]",
        "        self.executable = 'bash'",
        "        self.executable_opts = [self.hpcdl_key + '.sh']",
        "        self.env_vars['HPCDL_JOB_DIR'] = '\"$PWD\"'",
        "        self.reference = {self.hpcdl_system: {pvar: ref for pvar, _, _, _, ref, _ in self.hpcdl_perf if ref}}",
        "        self.perf_variables = {",
        "            pvar: sn.make_performance_function(self.hpcdl_measure, unit, how, baseline)",
        "            for pvar, _, unit, how, _, baseline in self.hpcdl_perf",
        "        }",
        "        for baseline in sorted({b for *_, b in self.hpcdl_perf if b}):",
        "            self.depends_on(baseline)",
        "",
        "    @run_before('run')",
        "    def hpcdl_launch_from_the_script(self):",
        "        # the script carries hpcdl's own launch line (srun, mpirun, jsrun, ibrun ...)",
        "        self.job.launcher = getlauncher('local')()",
        "",
        "    def hpcdl_records(self, test=None):",
        "        test = test or self",
        "        return hpcdl_records(os.path.join(test.stagedir, 'results.jsonl'))",
        "",
        "    def hpcdl_measure(self, how, baseline):",
        "        base = self.hpcdl_records(self.getdep(baseline)) if baseline else None",
        "        value = hpcdl_value(self.hpcdl_records(), how, base)",
        "        if value is None:",
        "            raise SanityError(f'{self.hpcdl_key}: no value for {how} in results.jsonl')",
        "        return value",
        "",
        "    @sanity_function",
        "    def hpcdl_sane(self):",
        "        records = self.hpcdl_records()",
        "        if self.hpcdl_environment is not None:",
        "            problems = hpcdl_environment_problems(records, self.hpcdl_environment['frameworks'],",
        "                                                  self.hpcdl_environment['ranks'])",
        "            if problems:",
        "                raise SanityError('; '.join(problems))",
        "            return True",
        "        want = 'collective' if any(p[3][0] in ('latency_us', 'busbw_GBps') for p in self.hpcdl_perf) else 'final'",
        "        if want not in {r.get('event') for r in records}:",
        "            raise SanityError(f'{self.hpcdl_key}: no {want} record in results.jsonl')",
        "        return True",
        "",
    ]
    for job in jobs:
        perf = [(p.pvar, p.name, p.unit, p.how, p.ref_tuple(), class_name(p.baseline) if p.baseline else None)
                for p in job.perf]
        lines += [
            "",
            "@rfm.simple_test",
            f"class {job.class_name}(HpcdlValidationJob):",
            f'    """{job.descr}."""',
            "",
            f"    descr = {job.descr!r}",
            "    tags = {" + ", ".join(map(repr, sorted(job.tags))) + "}",
            f"    hpcdl_key = {job.key!r}",
            f"    num_tasks = {job.nodes * job.ranks_per_node}",
            f"    num_tasks_per_node = {job.ranks_per_node}",
            f"    num_cpus_per_task = {job.threads_per_rank}",
            f"    time_limit = '{ctx.settings.job_timeout_s}s'",
        ]
        options = scheduler_options(job.script, scheduler)
        if options:
            lines.append("    hpcdl_options = " + _py(options))
        lines.append("    hpcdl_perf = [" + ("" if perf else "]"))
        if perf:
            lines += [f"        {_py(p)}," for p in perf] + ["    ]"]
        if job.environment:
            lines.append(f"    hpcdl_environment = {_py(job.environment)}")
        if options:
            lines += ["", "    @run_before('run')", "    def hpcdl_scheduler_options(self):",
                      "        self.job.options += self.hpcdl_options"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _py(value) -> str:
    """A Python literal (repr keeps tuples, None and floats as they are)."""
    return repr(value)


def reframe_scheduler(scheduler: str) -> str:
    """ReFrame's backend name; a Slurm that keeps no accounting gets `squeue` (ReFrame's `slurm` reads sacct)."""
    if scheduler != "slurm":
        return scheduler
    import shutil
    import subprocess

    if shutil.which("scontrol"):
        try:
            proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return "slurm"
        if re.search(r"^AccountingStorageType\s*=\s*accounting_storage/none", proc.stdout, re.M):
            return "squeue"
    return "slurm"


def settings_file(ctx, command: str) -> str:
    from hpcdl.validate.runner import jobs_run_on_this_host

    site = ctx.site
    scheduler = reframe_scheduler(site.scheduler)
    config = {
        "systems": [{
            "name": site.name,
            "descr": site.description or site.name,
            # this host where the jobs run on it; elsewhere none: a centre adds its login nodes' names
            # or runs `reframe --system NAME`, and a merged configuration claims no other machine
            "hostnames": [f"^{re.escape(socket.gethostname())}$"] if jobs_run_on_this_host(site) else [],
            "modules_system": "nomod",
            "partitions": [{
                "name": ctx.node_kind_name,
                "descr": f"hpcdl node kind {ctx.node_kind_name}: {ctx.node.cpu_model or ''}".strip(),
                "scheduler": scheduler,
                "launcher": "local",
                "environs": [ENVIRON],
                # jobs that share one host's cores would measure each other (hpcdl.validate.runner)
                "max_jobs": 1 if jobs_run_on_this_host(site) else 8,
            }],
        }],
        "environments": [{"name": ENVIRON}],
        "logging": [{
            "handlers_perflog": [{
                "type": "filelog",
                "prefix": "%(check_system)s/%(check_partition)s",
                "level": "info",
                "format": PERFLOG_FORMAT,
                "format_perfvars": PERFLOG_PERFVARS,
                "datefmt": PERFLOG_DATEFMT,
                "append": True,
            }],
        }],
    }
    return (f"# ReFrame configuration for hpcdl's site {site.name!r}: one system, one partition per node kind.\n"
            f"# Generated by hpcdl {__version__}: {command}\n"
            "# The perflog handler writes the columns hpcdl's own runs write (hpcdl.validate.reframe).\n\n"
            f"site_configuration = {pprint.pformat(config, sort_dicts=False, width=100)}\n")


def export_reframe(ctx, selected, out_dir: Path, command: str) -> list[Path]:
    """Write the test file, the job scripts and the configuration; nothing is written on an error."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise HpcdlError(f"--export-reframe: {out_dir} exists and is not a folder")
    jobs = exported_jobs(ctx, selected)
    files = {out_dir / f"hpcdl_{re.sub(r'[^A-Za-z0-9_]', '_', ctx.site.name)}.py": test_file(ctx, jobs, command),
             out_dir / "settings.py": settings_file(ctx, command)}
    for job in jobs:
        files[out_dir / "jobs" / f"{job.key}.sh"] = job.script
    for path, text in files.items():
        write_atomically(path, text, mode=0o755 if path.suffix == ".sh" else 0o644)
    return list(files)


# ---- hpcdl's own perflogs

def perflog_header(perf_names: list[str]) -> str:
    """The header row ReFrame's filelog handler writes for this format (MultiFileHandler.__generate_header)."""
    attr = re.compile(r"%\((.*?)\)s(.*?(?=%|$))?")
    header = ""
    for m in attr.finditer(PERFLOG_FORMAT):
        name, delim = m.group(1), m.group(2)
        if name == "check_perfvalues":
            delim_p = ""
            for var in perf_names:
                for m0 in attr.finditer(PERFLOG_PERFVARS):
                    header += m0.group(1).replace("check_perf", var) + (m0.group(2) or "")
                    delim_p = m0.group(2)
            if delim_p:
                header = header.rstrip(delim_p)
        else:
            header += name[6:] if name.startswith("check_") else name
        header += delim or ""
    return header


def perflog_line(completed: float, test: str, system: str, partition: str, num_tasks: int,
                 nodelist, result: str, values: list[tuple]) -> str:
    stamp = _dt.datetime.fromtimestamp(completed).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")
    stamp = stamp[:-2] + ":" + stamp[-2:]  # Python 3.11 has no %:z
    perf = PERFLOG_PERFVARS[:-1]
    chunks = [perf % {"check_perf_var": v[0], "check_perf_value": v[1], "check_perf_unit": v[2],
                      "check_perf_ref": v[3], "check_perf_lower_thres": v[4], "check_perf_upper_thres": v[5]}
              for v in values]
    fields = {"check_job_completion_time": stamp, "check_name": test, "check_system": system,
              "check_partition": partition, "check_environ": ENVIRON, "check_num_tasks": str(num_tasks),
              "check_job_nodelist": ",".join(nodelist), "check_result": result,
              "check_perfvalues": PERFLOG_PERFVARS[-1].join(chunks)}
    return PERFLOG_FORMAT % fields


def write_perflogs(ctx, selected, outcomes: dict, verdicts, prefix: Path) -> list[Path]:
    """Append one line per job of this run to `prefix/<site>/<node kind>/<test>.log` (header first)."""
    import time

    written = []
    failed_jobs = {v.job for v in verdicts if v.result == "fail"}
    for job in exported_jobs(ctx, selected):
        outcome = outcomes.get(job.key)
        if outcome is None:
            continue
        records = outcome.records
        values = []
        for p in job.perf:
            base = outcomes[p.baseline].records if p.baseline and p.baseline in outcomes else None
            value = hpcdl_value(records, p.how, base)
            ref = p.ref_tuple() or (0, None, None, p.unit)
            values.append((p.pvar, value, p.unit, ref[0], ref[1], ref[2]))
        times = [r["time"] for r in records if isinstance(r.get("time"), (int, float))]
        ok = outcome.ok and job_name(job.key) not in failed_jobs and all(v[1] is not None for v in values)
        # the scheduler's nodes: the job folder's nodes/ (train jobs), else what the probe gathered
        nodelist = outcome.nodelist or next((tuple(r["nodelist"]) for r in records if r.get("nodelist")), ())
        line = perflog_line(max(times) if times else time.time(), job.class_name, ctx.site.name,
                            ctx.node_kind_name, job.nodes * job.ranks_per_node, nodelist,
                            "pass" if ok else "fail", values)
        path = Path(prefix) / ctx.site.name / ctx.node_kind_name / f"{job.class_name}.log"
        header = perflog_header([v[0] for v in values])
        text = path.read_text() if path.exists() else ""
        if text and text.splitlines()[0] != header:
            n = 0
            while path.with_name(f"{path.name}.h{n}").exists():
                n += 1
            path.rename(path.with_name(f"{path.name}.h{n}"))  # as ReFrame does when the columns change
            text = ""
        write_atomically(path, (text or header + "\n") + line + "\n", mode=0o644)
        written.append(path)
    return written
