"""Where Slurm binds each task under the srun line as rendered, computed by Slurm's own documented
rule, must be where the plan put the rank: the plan's GPU and NIC choices assume it.

With `--cpu-bind=cores` srun gives each task `--cpus-per-task` CPUs of the node, laid out over the
sockets by the second level of `--distribution` (srun(1), Slurm 22.05, the version the test
cluster runs):

  block:  "distribute allocated CPUs consecutively from the same socket for binding to tasks,
          before using the next consecutive socket";
  cyclic: "distribute allocated CPUs for binding to a given task consecutively from the same
          socket, and from the next consecutive socket for the next task, in a round-robin
          fashion across sockets. Tasks requiring more than one CPU will have all of those CPUs
          allocated on a single socket if possible";
  *:      "Use the default method for distributing CPUs across sockets (cyclic)", unless the
          site's slurm.conf sets SelectTypeParameters=CR_Core_Default_Dist_Block ("Allocate
          cores within a node using block distribution by default", slurm.conf(5)), which a
          job script cannot know: LUMI's guide shows block placement where no distribution is
          given. A line without a distribution must therefore bind as planned under both.

The rule is written here from those words, not taken from the launcher, and was held against a
real slurmd 22.05 laying out a posed two-socket node (2 x 4 cores, task/affinity; its computed
masks, as slurmd logs them): 4 tasks of -c2 without --distribution got 0x03,0x30,0x0C,0xC0
(task 1 on socket 1), with --distribution=block:block 0x03,0x0C,0x30,0xC0; two tasks of -c4 got
0x0F,0xF0 either way. `test_the_rule_is_slurms` repeats that where the host can, and
`test_slurmd_binds_the_rendered_line_as_planned` hands each multi-socket site's rendered CPU
options to a slurmd posing its published node.

A site whose Slurm binds tasks itself (launch.cpu_bind_default: task/affinity's auto binding, or
TaskPluginParam=Cores / CpuBind=core) gets no --cpu-bind: its line is judged by the same rule, and
slurmd posed with the declared default binding must bind it as planned (and, posed not binding,
leaves it unbound: `test_a_slurm_that_binds_by_default_gives_the_plans_cores`). slurmd 22.05 on a
posed 2 x 64-core SMT2 node, no --cpu-bind: -n2 -c128 bound 0-63, 64-127 (both threads), -n4 -c64
cyclic as above; -n4 -c3 (part-cores) was left unbound and -n4 -c1 bound two tasks to one core's
threads, which no hpcdl plan asks; with CpuBind=none nothing was bound.

The node is the one its centre publishes (tests/published/<case>.yaml, slurm_nodes) where a case
has it, else the profile's; the job has the whole node (as hpcdl's plans assume), less the cores
Slurm keeps for the system.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest
import yaml

from test_slurm_shapes import _load, site_kinds

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites.registry import SHIPPED
from hpcdl.sites.schema import srun_cpu_bind_of

PUBLISHED = Path(__file__).parent / "published"


def slurm_task_cores(sockets: int, cores_per_socket: int, free: set[int], tasks: int, per_task: int,
                     level: str) -> list[tuple[int, ...]]:
    """The physical cores Slurm binds each local task to (`--cpu-bind=cores`), by the second level of
    --distribution: `block`, `cyclic` or `fcyclic` (the words above). `free`: the node's cores the job holds."""
    by_socket = [[c for c in range(s * cores_per_socket, (s + 1) * cores_per_socket) if c in free]
                 for s in range(sockets)]
    if level == "block":
        pool = [c for on_socket in by_socket for c in on_socket]
        return [tuple(pool[i * per_task:(i + 1) * per_task]) for i in range(tasks)]
    if level == "fcyclic":
        # srun(1): "Tasks requiring more than one CPU will have each CPUs allocated in a cyclic fashion across
        # sockets": every CPU of every task from the next socket in turn, round the sockets that have one left
        taken, socket, dealt = [0] * sockets, 0, []
        for _ in range(tasks):
            mine = []
            while len(mine) < per_task:
                if taken[socket] < len(by_socket[socket]):
                    mine.append(by_socket[socket][taken[socket]])
                    taken[socket] += 1
                else:
                    assert any(t < len(cs) for t, cs in zip(taken, by_socket)), "more CPUs asked than the node has"
                socket = (socket + 1) % sockets
            dealt.append(tuple(sorted(mine)))
        return dealt
    assert level == "cyclic", level
    taken, socket, out = [0] * sockets, 0, []
    for _ in range(tasks):
        mine: list[int] = []
        while len(mine) < per_task:
            if taken[socket] == len(by_socket[socket]):  # this socket is spent: the task goes on on the next
                socket = (socket + 1) % sockets
                assert any(t < len(cs) for t, cs in zip(taken, by_socket)), "more CPUs asked than the node has"
                continue
            mine.append(by_socket[socket][taken[socket]])
            taken[socket] += 1
        out.append(tuple(mine))
        socket = (socket + 1) % sockets  # the next task starts on the next socket
    return out


def _option(argv: list[str], long: str, short: str | None = None) -> str | None:
    for i, word in enumerate(argv):
        if word.startswith(long + "="):
            return word.split("=", 1)[1]
        if word == long or (short and word == short):
            return argv[i + 1]
        if short and word.startswith(short) and not word.startswith("--"):
            return word[len(short):]
    return None


def levels_slurm_may_use(argv: list[str], site=None) -> list[str]:
    """The socket-level distributions the line may get: the one it names, the one the site declares its
    Slurm's default (launch.distribution_default), or either default."""
    given = _option(argv, "--distribution", "-m")
    level = (given or "").split(",")[0].split(":")[1:2]
    if level and level[0] not in ("", "*"):
        return [level[0]]
    if site is not None and site.launch.distribution_default:
        return [site.launch.distribution_default]
    return ["cyclic", "block"]  # Slurm's default, and CR_Core_Default_Dist_Block's


@functools.lru_cache(maxsize=None)
def _published_nodes() -> dict[tuple[str, str], dict]:
    """(profile file, node kind) -> the node its centre publishes (slurm_nodes of tests/published/<case>.yaml,
    for the shipped site the case names or the profile it carries)."""
    out = {}
    for path in sorted(PUBLISHED.glob("*.yaml")):
        case = yaml.safe_load(path.read_text())
        profile = SHIPPED / f"{case['site']}.yaml" if case.get("site") else PUBLISHED / case.get("profile", "-")
        for kind, facts in (case.get("slurm_nodes") or {}).items():
            out[(str(profile.resolve()), kind)] = facts
    return out


def _node_facts(source: str, site, kind: str) -> dict:
    """The node as its centre publishes it where a case has it, else as the profile says."""
    published = _published_nodes().get((str(Path(source).resolve()), kind))
    if published:
        return published
    node = site.node_kinds[kind]
    usable = {c for s in range(node.sockets) for c in node.usable_cores_of_socket(s)}
    return dict(sockets=node.sockets, cores_per_socket=node.cores_per_socket, threads_per_core=node.threads_per_core,
                cpus=node.cores * node.cpus_per_core, spec_cores=[c for c in range(node.cores) if c not in usable])


def _requests(node) -> list[dict]:
    """The default job, and ranks per node that share a socket or not, on CPUs and on GPUs."""
    out = [{}, {"mode": "per-socket"}]
    out += [{"mode": "per-socket", "ranks_per_node": node.sockets * k} for k in (2, 4)]
    out += [{"mode": "per-gpu", "ranks_per_node": n} for n in range(1, len(node.gpus) + 1)]
    return out


def binding_mismatches(source: str, site, kind: str, request: dict) -> list[str]:
    """How the cores Slurm binds each task to differ from the plan's, for each distribution Slurm
    may use on this line; [] where the launch line gives explicit masks or binds as planned, or says
    the centre's --cpu-bind=none (no task bound by Slurm: each rank binds itself from plan.json)."""
    plan = make_plan(site, JobRequest(nodes=2, node_kind=kind, **request))
    if plan.rank_cpus == "gpu-local":
        return []  # no cores planned: each rank finds its own near its GPU, within the job's CPUs, whatever Slurm bound
    argv = step_line(site, plan)
    if not binds_by_cores(argv, site):
        return []  # mask_cpu: Slurm binds each task to the mask given for it, whatever the distribution
    facts = _node_facts(source, site, kind)
    cores = facts["sockets"] * facts["cores_per_socket"]
    per_core = 1 if _option(argv, "--hint") == "nomultithread" else \
        int(_option(argv, "--threads-per-core") or facts["cpus"] // cores)
    per_task = -(-int(_option(argv, "--cpus-per-task")) // per_core)
    free = set(range(cores)) - set(facts.get("spec_cores", ()))
    planned = [r.cores for r in plan.local_ranks()]
    out = []
    for level in levels_slurm_may_use(argv, site):
        bound = slurm_task_cores(facts["sockets"], facts["cores_per_socket"], free, len(planned), per_task, level)
        if bound != planned:
            out.append(f"{request or 'default'}: under {level} Slurm binds local tasks to "
                       f"{[_span(b) for b in bound]}, the plan means {[_span(p) for p in planned]} ({' '.join(argv)})")
    return out


STEP_FROM_HEADER = ("--ntasks-per-node", "--cpus-per-task", "--hint", "--threads-per-core")


def step_line(site, plan) -> list[str]:
    """The srun line as its step takes it. A bare srun under the header (launch.srun_layout: header) takes the
    header's tasks per node, its CPUs per task through the SRUN_CPUS_PER_TASK the job exports, and its --hint or
    --threads-per-core (SLURM_HINT, SLURM_THREADS_PER_CORE): written here as srun options, as the step gets them
    (tests/test_srun_layout.py holds a real sbatch job's bare srun to the same binding)."""
    argv = list(plan.launcher_argv)
    if site.launch.srun_layout != "header":
        return argv
    script = render_job_script(site, plan, {}, JobOptions(account="p"))
    header = [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]
    return [argv[0], *(d for d in header if d.split("=", 1)[0] in STEP_FROM_HEADER), *argv[1:]]


def binds_by_cores(argv: list[str], site) -> bool:
    """Slurm lays the line's tasks out by --cpus-per-task and --distribution: --cpu-bind=cores, or no
    --cpu-bind where the site declares that its Slurm binds tasks itself (launch.cpu_bind_default) or
    where --threads-per-core or --hint=nomultithread binds them ("Implies --cpu-bind=threads", srun(1):
    one thread per core)."""
    if site.launch.cpu_bind_default == "unstated":
        return False  # the centre's Slurm binds a bare srun's tasks as it will: each rank binds itself from plan.json
    bind = _option(argv, "--cpu-bind")
    # (--cpu-bind=sockets, launch.cpu_bind_unit, is written only where each task holds whole sockets: the same cores)
    return bind in ("cores", "sockets") or (bind is None and (site.launch.cpu_bind_default in ("auto", "cores")
                                                 or _option(argv, "--threads-per-core") is not None
                                                 or _option(argv, "--hint") == "nomultithread"))


# the node's CpuBind= that poses each launch.cpu_bind_default: auto is task/affinity's own default
# (no CpuBind), cores is CpuBind=core (slurm.conf: the node's CpuBind "will control how tasks are bound")
POSED_CPU_BIND = {None: None, "auto": None, "cores": "core", "none": "none"}


def _span(cores) -> str:
    consecutive = list(cores) == list(range(cores[0], cores[-1] + 1))
    return f"{cores[0]}-{cores[-1]}" if consecutive else ",".join(map(str, cores))


SITE_KINDS = site_kinds(lambda site: site.launcher == "srun", published=True)


@pytest.mark.parametrize(("source", "kind"), SITE_KINDS, ids=[f"{Path(p).stem}-{k}" for p, k in SITE_KINDS])
def test_slurm_binds_each_task_to_the_plans_cores(source, kind):
    site = _load(source)
    mismatches = []
    for request in _requests(site.node_kinds[kind]):
        try:
            mismatches += binding_mismatches(source, site, kind, request)
        except HpcdlError:
            continue  # a request this node refuses (more ranks than cores or GPUs)
    assert not mismatches, "\n".join(mismatches)


def test_the_rule_reads_the_documented_layouts():
    """The rule itself, on the srun(1) words: 4 tasks of 2 cores on 2 sockets of 4 cores."""
    free = set(range(8))
    assert slurm_task_cores(2, 4, free, 4, 2, "block") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert slurm_task_cores(2, 4, free, 4, 2, "cyclic") == [(0, 1), (4, 5), (2, 3), (6, 7)]
    # a task takes all its CPUs on one socket where it can: one task per socket either way
    assert slurm_task_cores(2, 4, free, 2, 4, "cyclic") == slurm_task_cores(2, 4, free, 2, 4, "block")
    # cores kept for the system are skipped (a node that keeps core 0 of each socket)
    assert slurm_task_cores(2, 4, free - {0, 4}, 2, 3, "block") == [(1, 2, 3), (5, 6, 7)]


def test_a_site_that_names_its_own_distribution_is_bound_as_planned():
    """A centre whose line carries its own --distribution keeps it; where that lays tasks out across
    the sockets otherwise than the plan, the plan's masks are given instead of --cpu-bind=cores. (Jean Zay's
    node, with hpcdl naming the binding: its own profile leaves the binding to its Slurm.)"""
    site = _load(str(SHIPPED / "jean-zay.yaml"))
    # Jean Zay's Slurm counts one thread per core: --threads-per-core=1 binds the blocks itself (no --cpu-bind)
    for args, bind in (((), ""), (("--distribution=block:cyclic",), "mask_cpu:"),
                       (("-m", "block:block"), ""), (("--distribution=block",), "mask_cpu:")):
        launch = site.launch.model_copy(update={"args": args, "cpu_bind_default": None})
        own = site.model_copy(update={"launch": launch})
        argv = list(make_plan(own, JobRequest(nodes=2)).launcher_argv)
        given = _option(argv, "--cpu-bind") or ""
        assert given.startswith(bind) and (bind or not given), (args, argv)
        assert sum(w.startswith(("--distribution", "-m")) for w in argv) == 1, argv  # the site's, or hpcdl's
        assert not binding_mismatches(str(SHIPPED / "jean-zay.yaml"), own, "v100", {}), args


# a real slurmd's own layout: (tasks, cores per task, the srun options that choose the distribution)
SLURMD_CASES = [(4, 2, ()), (4, 2, ("--distribution=block:block",)), (2, 4, ()), (3, 2, ()),
                (3, 2, ("--distribution=block:block",)), (2, 1, ()), (2, 1, ("--distribution=block:block",)),
                # fcyclic: each task's CPUs dealt over the sockets in turn (ZIH's Slurm by default)
                (2, 2, ("--distribution=block:fcyclic",)), (1, 4, ("--distribution=block:fcyclic",)),
                (4, 2, ("--distribution=block:fcyclic",))]


@pytest.mark.slurm
def test_the_rule_is_slurms(slurm_clusters):
    """slurmd 22.05 (task/affinity) lays tasks out over a posed node of 2 sockets x 4 cores (its
    hardware seen through hwloc's synthetic topology, tests/slurm_cluster.py task_layout): the masks
    it computes, read from its log, are the cores the rule above gives under the distribution asked,
    the default one being cyclic; given `mask_cpu`, it lays nothing out. (The tasks on cores this host
    lacks cannot start: only the layout is judged.)"""
    from slurm_cluster import NodeShape

    shape = NodeShape(sockets=2, cores_per_socket=4, memory_mb=2048)
    cluster = slurm_clusters.ensure(1, shape, task_layout=True)
    for tasks, per_task, options in SLURMD_CASES:
        argv = ["srun", "-N1", f"-n{tasks}", f"--cpus-per-task={per_task}", "--exclusive", "--cpu-bind=cores",
                *options, "true"]
        bound = [tuple(c for c in range(8) if m >> c & 1) for m in _slurmd_masks(cluster, argv)]
        level = levels_slurm_may_use(argv)[0]
        assert bound == slurm_task_cores(2, 4, set(range(8)), tasks, per_task, level), (argv, bound)
    # explicit masks: slurmd lays nothing out, whatever the distribution says
    log = cluster.root / "log" / "slurmd-n1.log"
    before = log.read_text(errors="replace").count("manual binding")
    subprocess.run(["srun", "-N1", "-n2", "--cpus-per-task=2", "--exclusive", "--distribution=block:cyclic",
                    "--cpu-bind=mask_cpu:0x3,0xc", "true"], env=cluster.env, capture_output=True, timeout=60)
    assert log.read_text(errors="replace").count("manual binding") == before + 1, cluster.logs()


def _slurmd_masks(cluster, argv: list[str], absent_ok: bool = False) -> list[int] | None:
    """Run `argv` on the posed node and return the CPU masks slurmd computed for its tasks (None,
    where absent_ok, when it bound none)."""
    log = cluster.root / "log" / "slurmd-n1.log"
    marker = "_lllp_generate_cpu_bind jobid"
    seen = log.read_text(errors="replace").count(marker)
    # the tasks on CPUs this host lacks cannot start: the layout is what is judged
    subprocess.run(argv, env=cluster.env, capture_output=True, text=True, timeout=60)
    lines = [line for line in log.read_text(errors="replace").splitlines() if marker in line]
    if absent_ok and len(lines) == seen:
        return None
    assert len(lines) == seen + 1, f"{' '.join(argv)}: slurmd laid out no tasks\n{cluster.logs()}"
    return [int(m, 16) for m in lines[-1].rsplit(" ", 1)[1].split(",")]


CPU_OPTIONS = ("--ntasks-per-node", "--cpus-per-task", "--threads-per-core", "--hint", "--distribution", "--cpu-bind")
# (a centre whose line asks no binding and does not say how its Slurm binds, launch.cpu_bind_default: unstated, is
# not here: its ranks bind themselves, test_a_rank_binds_itself_to_its_planned_cpus_whatever_slurm_bound_it_to)
MULTI_SOCKET = [(s, k) for s, k in SITE_KINDS
                if _load(s).node_kinds[k].sockets > 1 and _load(s).launch.cpu_bind_default != "unstated"]


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize(("source", "kind"), MULTI_SOCKET, ids=[f"{Path(p).stem}-{k}" for p, k in MULTI_SOCKET])
def test_slurmd_binds_the_rendered_line_as_planned(slurm_clusters, source, kind):
    """The node its centre publishes, posed to a real slurmd that lays tasks out (task_layout): the
    CPU options of the rendered srun line, on one whole node, bind each task to the plan's cores; a
    site whose Slurm binds tasks itself (launch.cpu_bind_default) is posed binding as it declares,
    and its line names no --cpu-bind."""
    site = _load(source)
    mismatches = slurmd_mismatches(slurm_clusters, source, site, kind, POSED_CPU_BIND[site.launch.cpu_bind_default])
    assert not mismatches, "\n".join(mismatches)


def slurmd_mismatches(slurm_clusters, source: str, site, kind: str, cpu_bind: str | None,
                      unbound_lines: bool = False) -> list[str]:
    """How the tasks a slurmd posing the published node (its CpuBind= `cpu_bind`) binds under the
    rendered line's CPU options differ from the plan's cores (with unbound_lines, also the lines that
    say --cpu-bind=none)."""
    from slurm_cluster import NodeShape

    facts = _node_facts(source, site, kind)
    cores = facts["sockets"] * facts["cores_per_socket"]
    shape = NodeShape(sockets=facts["sockets"], cores_per_socket=facts["cores_per_socket"],
                      threads_per_core=facts["threads_per_core"], cpus_per_core=facts["cpus"] // cores,
                      spec_cores=tuple(facts.get("spec_cores", ())), memory_mb=4096, cpu_bind=cpu_bind,
                      # posed laying tasks out as the profile declares its Slurm does (launch.distribution_default)
                      distribution_default=site.launch.distribution_default)
    cluster, out = None, []
    node = site.node_kinds[kind]
    # the default job, two ranks per published socket, one rank per socket of the profile (no --distribution
    # where the Slurm's sockets are smaller than the package's: ARCHER2's 4-core CCX), and one per node
    for request in ({}, {"mode": "per-socket", "ranks_per_node": 2 * facts["sockets"]},
                    {"mode": "per-socket", "ranks_per_node": node.sockets}, {"mode": "per-node"}):
        try:
            plan = make_plan(site, JobRequest(nodes=2, node_kind=kind, **request))
        except HpcdlError:
            continue
        if plan.rank_cpus == "gpu-local":
            # no cores planned: each rank finds its own near its GPU among the job's CPUs, whatever Slurm bound
            # (test_a_rank_finds_its_cpus_near_its_gpu_whatever_block_slurm_bound_its_task_to)
            continue
        line = step_line(site, plan)
        says_unbound = _option(line, "--cpu-bind") == "none" or site.launch.cpu_bind_default == "none"
        if not binds_by_cores(line, site) and not (unbound_lines and says_unbound):
            continue  # explicit masks: Slurm binds each task to its own
        cluster = cluster or slurm_clusters.ensure(1, shape, task_layout=True)
        options = [w for w in line[1:] if w.split("=", 1)[0] in CPU_OPTIONS]
        masks = _slurmd_masks(cluster, ["srun", "-N1", "--exclusive", *options, "true"], absent_ok=True)
        if masks is None:
            out.append(f"{request or 'default'}: slurmd binds no task ({' '.join(options)})")
            continue
        # hwloc's synthetic node numbers a core's hardware threads together, as Slurm's abstract CPUs do
        bound = [tuple(sorted({cpu // shape.threads_per_core for cpu in range(cores * shape.threads_per_core)
                               if m >> cpu & 1})) for m in masks]
        planned = [r.cores for r in plan.local_ranks()]
        if bound != planned:
            out.append(f"{request or 'default'}: slurmd binds local tasks to {[_span(b) for b in bound]}, "
                       f"the plan means {[_span(p) for p in planned]} ({' '.join(options)})")
            continue
        # and to the hardware threads the plan gives each rank (its cpus): all of a core's, or only the
        # first where Slurm counts physical cores (a task bound to both threads of a core where the plan
        # says one is not the plan, whatever its cores)
        threads = [sorted({cpu % shape.threads_per_core for cpu in range(cores * shape.threads_per_core)
                           if m >> cpu & 1}) for m in masks]
        planned_threads = [sorted({next(t for c in r.cores for t, linux in enumerate(node.cpus_of_core(c)) if linux == cpu)
                                   for cpu in r.cpus}) for r in plan.local_ranks()]
        if threads != planned_threads:
            out.append(f"{request or 'default'}: slurmd binds hardware threads {threads[0]} of each core, the plan's "
                       f"cpus are threads {planned_threads[0]} ({' '.join(options)})")
    return out


BINDS_BY_ITSELF = [(s, k) for s, k in SITE_KINDS if _load(s).launch.cpu_bind_default in ("auto", "cores")]


@pytest.mark.slurm
@pytest.mark.parametrize(("source", "kind"), BINDS_BY_ITSELF, ids=[f"{Path(p).stem}-{k}" for p, k in BINDS_BY_ITSELF])
def test_a_slurm_that_binds_by_default_gives_the_plans_cores(slurm_clusters, source, kind):
    """Where the profile says the site's Slurm binds tasks itself, its srun line names no --cpu-bind
    (as the centre's do), and a slurmd posing the published node with the default binding declared
    binds each task to the plan's cores; posed not binding (CpuBind=none: "Perform no task binding
    by default", slurm.conf TaskPluginParam), the same line leaves the tasks unbound, and this
    notices; unless the line asks --threads-per-core or --hint=nomultithread (Slurm counting fewer of a core's
    threads than it has), which "Implies --cpu-bind=threads" (srun(1)): then it binds them as planned either way."""
    site = _load(source)
    lines = [step_line(site, make_plan(site, JobRequest(nodes=2, node_kind=kind, **r))) for r in ({}, {"mode": "per-socket"})]
    assert not any(w.startswith("--cpu-bind") for line in lines for w in line), lines
    assert not slurmd_mismatches(slurm_clusters, source, site, kind, POSED_CPU_BIND[site.launch.cpu_bind_default])
    unbound = slurmd_mismatches(slurm_clusters, source, site, kind, "none")
    if any(w.startswith(("--threads-per-core", "--hint=nomultithread")) for line in lines for w in line):
        # a line asking fewer threads than a core has binds by itself: --threads-per-core "Implies
        # --cpu-bind=threads" (srun(1)), and so does --hint=nomultithread, which implies it: one thread of each
        # of the task's cores, whatever the node's CpuBind (CSC Mahti, Pawsey Setonix, IDRIS Jean Zay)
        assert not unbound, unbound
    else:
        # (a site whose GPU ranks find their cores near their GPU, launch.rank_cpus: gpu-local, has no plan of cores
        # here to judge: each rank replaces the block Slurm bound its task to, within the job's CPUs,
        # test_a_rank_finds_its_cpus_near_its_gpu_whatever_block_slurm_bound_its_task_to)
        assert (unbound or site.launch.rank_cpus == "gpu-local") and all("binds no task" in m for m in unbound), unbound


UNBOUND_BY_SLURM = [(s, k) for s, k in SITE_KINDS if "none" in (srun_cpu_bind_of(_load(s).launch.args) or "").split(",")
                    or _load(s).launch.cpu_bind_default == "none"]


@pytest.mark.slurm
@pytest.mark.parametrize(("source", "kind"), UNBOUND_BY_SLURM, ids=[f"{Path(p).stem}-{k}" for p, k in UNBOUND_BY_SLURM])
def test_a_line_saying_cpu_bind_none_leaves_every_task_to_bind_itself(slurm_clusters, source, kind):
    """A centre whose lines say --cpu-bind=none (JSC's deep-learning jobs, launch.args): the rendered line's
    CPU options, --threads-per-core included (which "Implies --cpu-bind=threads unless overridden by command
    line", srun(1)), leave every task unbound on a slurmd posing the published node with task/affinity's own
    default, so each rank's binding is the trainer's, to its cores in plan.json (train/binding.py). A site whose
    Slurm binds no task (launch.cpu_bind_default: none, NRIS Olivia) is posed so (CpuBind=none) and its line
    names no binding word at all."""
    site = _load(source)
    plan = make_plan(site, JobRequest(nodes=2, node_kind=kind))
    own = [] if site.launch.cpu_bind_default == "none" else ["--cpu-bind=none"]
    assert [w for w in plan.launcher_argv if w.startswith(("--cpu-bind", "--distribution", "--hint"))] == own
    assert all(r.cores for r in plan.local_ranks())
    unbound = slurmd_mismatches(slurm_clusters, source, site, kind, POSED_CPU_BIND[site.launch.cpu_bind_default],
                                unbound_lines=True)
    # (a site whose GPU ranks find their cores near their GPU, launch.rank_cpus: gpu-local, may have no plan of cores
    # here to judge: those ranks move among the job's CPUs whatever Slurm bound)
    assert (unbound or site.launch.rank_cpus == "gpu-local") and all("binds no task" in m for m in unbound), unbound


@pytest.mark.slurm
def test_a_slurm_that_binds_to_cores_by_default_gives_the_plans_cores(slurm_clusters):
    """launch.cpu_bind_default: cores (slurm.conf TaskPluginParam=Cores or the node's CpuBind=core,
    "Bind tasks to cores by default. Overrides automatic binding"): Alps Eiger's node declared so and
    posed with CpuBind=core binds the line without --cpu-bind as planned; posed not binding, not at all."""
    source = str(SHIPPED / "alps-eiger.yaml")
    site = _load(source)
    site = site.model_copy(update={"launch": site.launch.model_copy(update={"cpu_bind_default": "cores"})})
    assert not any(w.startswith("--cpu-bind") for w in make_plan(site, JobRequest(nodes=2)).launcher_argv)
    assert not slurmd_mismatches(slurm_clusters, source, site, "zen2", POSED_CPU_BIND["cores"])
    assert slurmd_mismatches(slurm_clusters, source, site, "zen2", "none")


UNSTATED = [(s, k) for s, k in SITE_KINDS if _load(s).launch.cpu_bind_default == "unstated"]


@pytest.mark.parametrize(("source", "kind"), UNSTATED, ids=[f"{Path(p).stem}-{k}" for p, k in UNSTATED])
def test_a_bare_srun_centre_gets_a_line_asking_no_binding(source, kind):
    """launch.cpu_bind_default: unstated (SURF, BriCS: a bare srun, and no page saying how their Slurm binds
    it): the line names no --cpu-bind, --distribution or mask, whatever the layout, and every rank has the
    cores it binds itself to in plan.json."""
    site = _load(source)
    for request in _requests(site.node_kinds[kind]):
        try:
            plan = make_plan(site, JobRequest(nodes=2, node_kind=kind, **request))
        except HpcdlError:
            continue
        assert not [w for w in plan.launcher_argv if w.startswith(("--cpu-bind", "--distribution"))], plan.launcher_argv
        # (a GPU rank of launch.rank_cpus: gpu-local has its count of cores and finds its CPUs near its GPU)
        assert all(r.cores and (r.cpus or (plan.rank_cpus == "gpu-local" and r.gpus)) for r in plan.local_ranks())


@pytest.mark.slurm
def test_a_rank_finds_its_cpus_near_its_gpu_whatever_block_slurm_bound_its_task_to(slurm_clusters, tmp_path):
    """launch.rank_cpus: gpu-local under a real slurmd: Slurm binds the task to CPU 1 (map_cpu, as a header's
    --threads-per-core binds a bare srun's tasks to blocks); the rank's GPU, in a sysfs written here, is near CPU 0,
    and the rank ends on CPU 0: it looks for its CPUs among those its job holds, not only its task's."""
    import json
    import sys

    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:07:00.0"
    device.mkdir(parents=True)
    for name, text in (("class", "0x030200"), ("vendor", "0x10de"), ("local_cpulist", "0")):
        (device / name).write_text(text + "\n")
    cluster = slurm_clusters.ensure(1)
    plan = {"nodes": 1, "ranks_per_node": 1, "world_size": 1, "env": {}, "rank_cpus": "gpu-local",
            "ranks": [{"rank": 0, "node": 0, "local_rank": 0, "cores": [0], "cpus": [], "gpus": [0], "env": {},
                       "omp_num_threads": 1}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    code = ("import json, os, sys; from pathlib import Path; from hpcdl.train.binding import apply_plan, load_plan; "
            "from hpcdl.train.ranks import RankInfo; before = sorted(os.sched_getaffinity(0)); "
            f"applied = apply_plan(load_plan({str(tmp_path / 'plan.json')!r}), RankInfo(0, 1, 0, 'srun'), "
            f"Path({str(tmp_path / 'sys')!r})); print(json.dumps([before, applied, sorted(os.sched_getaffinity(0))]))")
    done = subprocess.run(["srun", "-N1", "-n1", "--cpus-per-task=2", "--cpu-bind=map_cpu:1", sys.executable, "-c", code],
                          env=cluster.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    before, applied, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [1], before  # Slurm bound the task to CPU 1
    assert applied["bound"] is True and after == [0], (applied, after)


@pytest.mark.slurm
def test_a_rank_binds_itself_to_its_planned_cpus_whatever_slurm_bound_it_to(slurm_clusters, tmp_path):
    """What launch.cpu_bind_default: unstated and a centre's --cpu-bind=none rest on: the trainer's first act
    (train/binding.apply_plan) binds the rank to its CPUs in plan.json, inside the CPUs of its step, whatever
    CPU the site's Slurm bound the task to. A real slurmd binds the task to CPU 1 (map_cpu); the rank, whose
    plan says CPU 0, ends on CPU 0."""
    import json
    import sys

    cluster = slurm_clusters.ensure(1)
    plan = {"nodes": 1, "ranks_per_node": 1, "world_size": 1, "env": {},
            "ranks": [{"rank": 0, "local_rank": 0, "cpus": [0], "env": {}, "omp_num_threads": 1}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    code = ("import json, os, sys; from hpcdl.train.binding import apply_plan, load_plan; "
            "from hpcdl.train.ranks import RankInfo; before = sorted(os.sched_getaffinity(0)); "
            f"applied = apply_plan(load_plan({str(tmp_path / 'plan.json')!r}), RankInfo(0, 1, 0, 'srun')); "
            "print(json.dumps([before, applied, sorted(os.sched_getaffinity(0))]))")
    done = subprocess.run(["srun", "-N1", "-n1", "--cpus-per-task=2", "--cpu-bind=map_cpu:1", sys.executable, "-c", code],
                          env=cluster.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    before, applied, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [1], before  # Slurm bound the task to CPU 1
    assert applied["bound"] is True and after == [0], (applied, after)
