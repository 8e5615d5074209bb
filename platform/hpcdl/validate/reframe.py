"""The suite as ReFrame (reframe-hpc 4.x) tests, and ReFrame-style perflogs of hpcdl's own runs.

`hpcdl validate --export-reframe DIR` writes

  DIR/hpcdl_<site>.py   one ReFrame test class per check, whose `parameter()` runs through the
                        check's jobs (a thread-sweep placement, a scaling point, a collective
                        scope), each with its performance variables and hpcdl's references as
                        a ReFrame reference table
                        (`{'system:partition': {'pvar': (target, lower, upper, unit)}}`, the
                        thresholds fractions of the target: reframe docs/tutorial.rst);
  DIR/jobs/<job>.sh     the job script hpcdl renders for the site, which each test runs
                        inside the allocation ReFrame makes (ReFrame's own launcher is set to
                        `local`, since the script carries hpcdl's launch line, e.g. srun);
  DIR/settings.py       a ReFrame configuration for the site (system = site, partition = node
                        kind), whose perflog handler writes the format below.

A centre runs `reframe -C DIR/settings.py -c DIR/hpcdl_<site>.py -r`, or only the test file
with its own configuration and `-S hpcdl_system=SYS:PART` to name its system and partition.

hpcdl's own runs append the same lines to perflogs: `<prefix>/<system>/<partition>/<class>.log`,
one `|`-separated line per test case (variant) and run under a header row, as ReFrame's filelog handler
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
from collections.abc import Callable
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
class Variant:
    """One ReFrame test case: a job of the suite and the values its check reads from it."""

    label: str  # the value of the class's parameter ('' for a class without one)
    key: str
    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    render: Callable[[], str] = field(repr=False)  # the job script, rendered when asked for
    perf: list[PerfVar] = field(default_factory=list)  # a baseline here is another variant's label
    environment: dict | None = None  # {"frameworks": {...}, "ranks": n} for the environment job

    @property
    def script(self) -> str:
        return self.render()

    def descr(self, check: str) -> str:
        return (f"hpcdl {check}: {self.nodes} node(s) x {self.ranks_per_node} rank(s) x "
                f"{self.threads_per_rank} thread(s)")


@dataclass
class ExportedTest:
    """One ReFrame test class: one check, its jobs the values of one `parameter()`.

    ReFrame's perflog handler writes every variant of a class into one file, `<class>.log`,
    under one header row naming the performance variables, and moves the file aside when a
    record's header differs (reframe PR #2882; MultiFileHandler.emit names the file
    `type(check).variant_name()`, the class). So a class holds what carries the
    same variables: a thread-sweep point, a scaling point of one mode, a collective scope.
    """

    check: str
    name: str
    parameter: str | None  # None: a single job, no parameter
    variants: list[Variant]
    about: str  # the class's docstring

    @property
    def tags(self) -> set[str]:
        """`reframe -t collectives` selects an area, `-t hpcdl` the whole suite."""
        return {"hpcdl", self.check}

    def display_name(self, variant: Variant) -> str:
        """ReFrame's name of a variant (its `name` and `display_name`): the perflogs' name column."""
        return self.name if self.parameter is None else f"{self.name} %{self.parameter}={variant.label}"


def system_name(ctx) -> str:
    return f"{ctx.site.name}:{ctx.node_kind_name}"


def exported_tests(ctx, selected) -> list[ExportedTest]:
    """Each selected check as a ReFrame test class whose parameter runs through its jobs.

    A job that several checks read (the default placement is a thread-sweep point, the
    throughput job and a scaling point) is a variant of each of their classes, so each class
    stands alone (`reframe -t throughput`); hpcdl's own run measures it once.
    """
    from hpcdl.plan import make_plan
    from hpcdl.validate.jobs import convergence_target, thread_sweep_configs
    from hpcdl.validate.runner import render_validation_job

    refs = ctx.references
    limit = ctx.settings.job_timeout_s
    time_limit = f"{limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}"
    # the perflogs need each job's shape only; the export renders its script too, once per job
    scripts: dict[str, str] = {}

    def variant(job, label, perf=(), environment=None) -> Variant:
        def render() -> str:
            if job.key not in scripts:
                scripts[job.key] = render_validation_job(ctx.site, job, time_limit)
            return scripts[job.key]

        plan = make_plan(ctx.site, job.request)
        return Variant(label, job.key, plan.nodes, plan.ranks_per_node, plan.threads_per_rank, render,
                       list(perf), environment)

    def var(pvar, name, unit, how, default=None, baseline=None, judged=True) -> PerfVar:
        return PerfVar(pvar, name, unit, how, (refs.lookup(name) or default) if judged else None, baseline)

    tests = []
    for check in selected:
        if check.name == "environment":
            frameworks = dict(refs.expect.get("frameworks") or {"pytorch": ""})
            for job in check.jobs(ctx):
                env = {"frameworks": frameworks, "ranks": job.request.ranks_per_node or 1}
                tests.append(ExportedTest("environment", "hpcdl_environment", None,
                                          [variant(job, "", environment=env)],
                                          "Each framework imports at its version; launcher, MPI and "
                                          "torch.distributed agree on the ranks."))
        elif check.name == "collectives":
            variants = []
            for job in check.jobs(ctx):
                scope = job.payload["probe"]["scope"]
                perf = []
                for backend in ("nccl" if ctx.uses_gpus else "gloo", "mpi"):
                    perf += [var(f"{backend}_latency_us", f"collectives/{backend}/{scope}/latency_us", "us",
                                 ["latency_us", backend]),
                             var(f"{backend}_busbw_GBps", f"collectives/{backend}/{scope}/busbw_GBps", "GB/s",
                                 ["busbw_GBps", backend])]
                variants.append(variant(job, scope, perf))
            tests.append(ExportedTest("collectives", "hpcdl_collectives", "scope", variants,
                                      "Allreduce latency and bus bandwidth inside a node and across two."))
        elif check.name == "threads":
            # which point is best is known only across the variants: each is logged, none judged
            variants = [variant(job, f"{r}x{t}", [var("images_per_sec", f"threads/{r}x{t}/images_per_sec",
                                                      "images/s", ["final", "images_per_sec_total"])])
                        for job, (r, t) in zip(check.jobs(ctx), thread_sweep_configs(ctx))]
            tests.append(ExportedTest("threads", "hpcdl_threads", "placement", variants,
                                      "Training images/s on one node per placement: ranks x OpenMP threads per rank."))
        elif check.name == "throughput":
            variants = []
            for job in check.jobs(ctx):
                net, fw = job.payload["net"], job.request.framework
                variants.append(variant(job, f"{net}-{fw}", [var("images_per_sec",
                                f"throughput/{net}/{fw}/images_per_sec", "images/s", ["final", "images_per_sec_total"])]))
            tests.append(ExportedTest("throughput", "hpcdl_throughput", "model", variants,
                                      "Training images/s on one node per net and framework, the default placement."))
        elif check.name == "scaling":
            _, plan = check.plan(ctx)
            for mode in ("weak", "strong"):
                points = [(p, job) for m, p, _, _, job in plan if m == mode]
                has_base = any(p == 1 for p, _ in points)
                stored = refs.lookup(f"scaling/{mode}/1/images_per_sec")
                variants = []
                for p, job in points:
                    perf = [var("images_per_sec", f"scaling/{mode}/{p}/images_per_sec", "images/s",
                                ["final", "images_per_sec_total"])]
                    # every variant carries `efficiency`, so all share one perflog header:
                    # E(1) = X(1) / (1 X(1)) = 1 by definition, logged, not judged
                    name = f"scaling/{mode}/{p}/efficiency"
                    if has_base:
                        perf.append(var("efficiency", name, "", ["efficiency", p], baseline="1", judged=p != 1))
                    elif stored:
                        perf.append(var("efficiency", name, "", ["efficiency_stored", p, stored.value]))
                    variants.append(variant(job, str(p), perf))
                tests.append(ExportedTest("scaling", f"hpcdl_{mode}_scaling", "p", variants,
                                          f"{mode.capitalize()} scaling over p nodes (ranks on one node): "
                                          "X(p) and E(p) = X(p) / (p X(1))."))
        elif check.name == "convergence":
            target = convergence_target()["target"]
            variants = [variant(job, job.payload["net"], [
                var("accuracy", "convergence/cifar10_quick/accuracy", "", ["final", "accuracy"],
                    Reference(target["accuracy"], target["accuracy_tolerance"], "the suite's stated target")),
                var("time_to_solution_s", "convergence/cifar10_quick/time_to_solution_s", "s",
                    ["final", "time_to_solution_s"],
                    Reference(target["time_to_solution_s"], target["time_tolerance"], "the suite's stated budget"))])
                for job in check.jobs(ctx)]
            tests.append(ExportedTest("convergence", "hpcdl_convergence", "net", variants,
                                      "The net reaches the stated accuracy within the stated time."))
    return [t for t in tests if t.variants]


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


def test_file(ctx, tests: list[ExportedTest], command: str) -> str:
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
        "# One class per check; its parameter runs through the check's jobs, each the job script hpcdl",
        "# rendered (jobs/<job>.sh) run inside ReFrame's allocation. Rank 0 writes results.jsonl in the",
        "# stage folder, and the performance values are read from it. The variants of a class carry the",
        "# same performance variables, so ReFrame writes them into one perflog, <class>.log, under one header.",
        "",
        "import json",
        "import os",
        "",
        "import reframe as rfm",
        "import reframe.utility.sanity as sn",
        "from reframe.core.backends import getlauncher",
        "from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable",
        "from reframe.core.exceptions import SanityError",
        "",
        "",
        _extract_source(),
        "",
        "# who answers for these tests at your centre: put your team's contact here",
        f"HPCDL_MAINTAINERS = [{ctx.site.name + ' HPC staff'!r}]",
        "",
        "",
        "class HpcdlValidationTest(rfm.RunOnlyRegressionTest):",
        '    """One check of hpcdl\'s suite; each variant runs one job script hpcdl rendered, inside ReFrame\'s allocation."""',
        "",
        f"    hpcdl_system = variable(str, value={system!r})",
        "    valid_prog_environs = ['*']",
        "    sourcesdir = 'jobs'",
        "    maintainers = HPCDL_MAINTAINERS",
        "    keep_files = ['results.jsonl']  # the evidence the values were read from",
        "    hpcdl_parameter = None  # the name of the class's parameter; None: one job",
        "    # parameter value -> the job: key (its script is jobs/<key>.sh), shape, batch options, and its",
        "    # perf: (pvar, hpcdl name, unit, how, reference tuple or None, baseline variant or None)",
        "    hpcdl_variants = {}",
        "",
        "    @run_after('init')",
        "    def hpcdl_set_up(self):",
        "        self.hpcdl_label = getattr(self, self.hpcdl_parameter) if self.hpcdl_parameter else ''",
        "        job = self.hpcdl_variants[self.hpcdl_label]",
        "        self.hpcdl_key = job['key']",
        "        self.hpcdl_perf = job['perf']",
        "        self.hpcdl_environment = job.get('environment')",
        "        self.hpcdl_options = job.get('options', [])",
        "        self.descr = job['descr']",
        "        self.num_tasks = job['num_tasks']",
        "        self.num_tasks_per_node = job['num_tasks_per_node']",
        "        self.num_cpus_per_task = job['num_cpus_per_task']",
        "        self.valid_systems = [self.hpcdl_system]",
        "        self.executable = 'bash'",
        "        self.executable_opts = [self.hpcdl_key + '.sh']",
        "        self.env_vars['HPCDL_JOB_DIR'] = '\"$PWD\"'",
        "        self.reference = {self.hpcdl_system: {pvar: ref for pvar, _, _, _, ref, _ in self.hpcdl_perf if ref}}",
        "        self.perf_variables = {",
        "            pvar: sn.make_performance_function(self.hpcdl_measure, unit, how, baseline)",
        "            for pvar, _, unit, how, _, baseline in self.hpcdl_perf",
        "        }",
        "        # X(1) of a scaling study comes from the class's own p = 1 variant",
        "        for baseline in sorted({b for *_, b in self.hpcdl_perf if b and b != self.hpcdl_label}):",
        "            self.depends_on(self.hpcdl_variant_name(baseline))",
        "",
        "    @classmethod",
        "    def hpcdl_variant_name(cls, label):",
        "        (num,) = cls.get_variant_nums(**{cls.hpcdl_parameter: lambda value: value == label})",
        "        return cls.variant_name(num)",
        "",
        "    @run_before('run')",
        "    def hpcdl_launch_from_the_script(self):",
        "        # the script carries hpcdl's own launch line (srun, mpirun, jsrun, ibrun ...)",
        "        self.job.launcher = getlauncher('local')()",
        "        # batch directives of hpcdl's script that ReFrame does not write itself (partition, GPUs ...)",
        "        self.job.options += self.hpcdl_options",
        "",
        "    def hpcdl_records(self, test=None):",
        "        test = test or self",
        "        return hpcdl_records(os.path.join(test.stagedir, 'results.jsonl'))",
        "",
        "    def hpcdl_measure(self, how, baseline):",
        "        base = None",
        "        if baseline == self.hpcdl_label:",
        "            base = self.hpcdl_records()",
        "        elif baseline:",
        "            base = self.hpcdl_records(self.getdep(self.hpcdl_variant_name(baseline)))",
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
    for test in tests:
        variants = {}
        for v in test.variants:
            job = {"key": v.key, "descr": v.descr(test.check), "num_tasks": v.nodes * v.ranks_per_node,
                   "num_tasks_per_node": v.ranks_per_node, "num_cpus_per_task": v.threads_per_rank,
                   "perf": [(p.pvar, p.name, p.unit, p.how, p.ref_tuple(), p.baseline) for p in v.perf]}
            options = scheduler_options(v.script, scheduler)
            if options:
                job["options"] = options
            if v.environment:
                job["environment"] = v.environment
            variants[v.label] = job
        lines += [
            "",
            "@rfm.simple_test",
            f"class {test.name}(HpcdlValidationTest):",
            f'    """{test.about}"""',
            "",
            "    tags = {" + ", ".join(map(repr, sorted(test.tags))) + "}",
            f"    time_limit = '{ctx.settings.job_timeout_s}s'",
        ]
        if test.parameter:
            lines += [f"    {test.parameter} = parameter({_py([v.label for v in test.variants])})",
                      f"    hpcdl_parameter = {test.parameter!r}"]
        lines += ["    hpcdl_variants = {", *_variant_lines(variants), "    }", ""]
    return "\n".join(lines).rstrip() + "\n"


def _variant_lines(variants: dict) -> list[str]:
    """The variants' table laid out one job per block and one performance variable per line."""
    out = []
    for label, job in variants.items():
        out.append(f"        {label!r}: {{")
        out.append("            " + ", ".join(f"{k!r}: {job[k]!r}" for k in ("key", "descr")) + ",")
        out.append("            " + ", ".join(f"{k!r}: {job[k]!r}" for k in
                                               ("num_tasks", "num_tasks_per_node", "num_cpus_per_task")) + ",")
        for k in ("options", "environment"):
            if k in job:
                out.append(f"            {k!r}: {job[k]!r},")
        out.append("            'perf': [" + ("" if job["perf"] else "],"))
        if job["perf"]:
            out += [f"                {_py(p)}," for p in job["perf"]] + ["            ],"]
        out.append("        },")
    return out


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
    tests = exported_tests(ctx, selected)
    files = {out_dir / f"hpcdl_{re.sub(r'[^A-Za-z0-9_]', '_', ctx.site.name)}.py": test_file(ctx, tests, command),
             out_dir / "settings.py": settings_file(ctx, command)}
    for test in tests:
        for v in test.variants:
            files[out_dir / "jobs" / f"{v.key}.sh"] = v.script
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
    """Append one line per ReFrame test case of this run to `prefix/<site>/<node kind>/<class>.log`
    (header first): every variant of a class in its one file, named as ReFrame names it."""
    import time

    written = []
    failed = {(v.check, v.job) for v in verdicts if v.result == "fail"}
    for test in exported_tests(ctx, selected):
        keys = {v.label: v.key for v in test.variants}
        path = Path(prefix) / ctx.site.name / ctx.node_kind_name / f"{test.name}.log"
        for variant in test.variants:
            outcome = outcomes.get(variant.key)
            if outcome is None:
                continue
            records = outcome.records
            values = []
            for p in variant.perf:
                base = outcomes.get(keys.get(p.baseline)) if p.baseline else None
                value = hpcdl_value(records, p.how, base.records if base else None)
                ref = p.ref_tuple() or (0, None, None, p.unit)
                values.append((p.pvar, value, p.unit, ref[0], ref[1], ref[2]))
            times = [r["time"] for r in records if isinstance(r.get("time"), (int, float))]
            ok = (outcome.ok and (test.check, job_name(variant.key)) not in failed
                  and all(v[1] is not None for v in values))
            # the scheduler's nodes: the job folder's nodes/ (train jobs), else what the probe gathered
            nodelist = outcome.nodelist or next((tuple(r["nodelist"]) for r in records if r.get("nodelist")), ())
            line = perflog_line(max(times) if times else time.time(), test.display_name(variant), ctx.site.name,
                                ctx.node_kind_name, variant.nodes * variant.ranks_per_node, nodelist,
                                "pass" if ok else "fail", values)
            header = perflog_header([v[0] for v in values])
            text = path.read_text() if path.exists() else ""
            if text and text.splitlines()[0] != header:
                n = 0
                while path.with_name(f"{path.name}.h{n}").exists():
                    n += 1
                path.rename(path.with_name(f"{path.name}.h{n}"))  # as ReFrame does when the columns change
                text = ""
            write_atomically(path, (text or header + "\n") + line + "\n", mode=0o644)
            if path not in written:
                written.append(path)
    return written
