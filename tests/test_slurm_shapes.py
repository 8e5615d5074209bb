"""Every Slurm site's rendered job, judged by a real Slurm shaped like that site's node.

For each node kind of each Slurm site profile (the shipped ones, the test fixtures and two
written here for machines hpcdl does not ship), the
harness (tests/slurm_cluster.py) starts slurmctld and two slurmd posing as two of the
machine's nodes: its sockets, cores and hardware threads, the CPUs its Slurm counts (threads,
or cores where the site schedules cores: Frontier), its core specialisation (CpuSpecList), its
GPUs as GRES, its memory, features and partition. The hardware and the counting come from what
the centre publishes (tests/published/<case>.yaml, slurm_nodes), not from the profile under
test, wherever a published case has them; fixtures and the machines written here are posed
from their own profile. Up to SIDE_BY_SIDE machines are posed at once, side by side in one
cluster, each in its own partition (the job names it, so Slurm weighs it against that machine's
nodes alone): one bring-up judges many machines. Then:

  1. `sbatch --test-only` of the script exactly as rendered for the machine: Slurm itself
     says whether the directives can ever be allocated there (nodes, tasks, -c, GPUs,
     partition, constraint, time limit, exclusive);
  2. the same request with one CPU per task more than the node holds is refused, so the
     shape has teeth (a Slurm that took anything would pass step 1 too);
  3. for srun sites, the job itself runs, with a probe in place of the trainer (and no
     container or modules, which this host lacks): every rank prints where Slurm put it and
     the GPUs Slurm bound to it, and the plan's cores must lie inside Slurm's allocation.

What this host cannot emulate (CPU binding, real devices) is listed in docs/sites.md,
"What a real Slurm judges here".
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import FIXTURE_SITES
from slurm_cluster import NodeShape

from hpcdl.sites.registry import SHIPPED as SHIPPED_DIR

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODES = 2  # two pretend nodes: enough for a multi-node request and rank numbering across nodes
SIDE_BY_SIDE = 12  # machines posed in one cluster: 24 slurmd, one bring-up instead of twelve


# Machines hpcdl does not ship, written as a centre would from its guide: the shapes the
# shipped sites lack (two sockets, core-major POWER numbering with SMT4 under Slurm, a Slurm
# that counts cores on a CPU node with core specialisation on both sockets).
UNSHIPPED = {
    "power9-slurm": """
name: power9-slurm
description: 2 x POWER9 (16 cores, SMT4) + 4 V100 under Slurm (shape as CINECA Marconi100)
scheduler: slurm
launcher: srun
mpi: spectrum-mpi
node_kinds:
  ac922:
    cpu_target: power9le
    sockets: 2
    cores_per_socket: 16
    threads_per_core: 4
    scheduler_cpus_per_core: 4
    cpu_numbering: core-major
    memory_gb: 256
    gpus:
      - {model: V100-SXM2-16GB, socket: 0}
      - {model: V100-SXM2-16GB, socket: 0}
      - {model: V100-SXM2-16GB, socket: 1}
      - {model: V100-SXM2-16GB, socket: 1}
defaults: {partition: m100_usr_prod, time: "01:00:00", max_time: "24:00:00"}
""",
    "xeon-cores-slurm": """
name: xeon-cores-slurm
description: 2 x 24-core Xeon, SMT2, a Slurm that schedules cores, one core per socket specialised
scheduler: slurm
launcher: srun
mpi: intel-mpi
node_kinds:
  cpu:
    cpu_target: skylake_avx512
    sockets: 2
    cores_per_socket: 24
    threads_per_core: 2
    scheduler_cpus_per_core: 1
    reserved_cores_per_socket: 1
    memory_gb: 192
    default_ranks_per_socket: 2
defaults: {partition: compute, constraint: skx, time: "00:30:00"}
""",
}


def site_kinds(keep, *, published: bool = False) -> list[tuple[str, str]]:
    """(profile file, node kind) of every profile `keep(site)` takes: the shipped profiles (the seeds and
    the machines written from their centres' guides: LUMI-G, JUWELS Booster, Quartz ...), the fixtures,
    the published cases' own profiles where asked, and the machines written above."""
    from hpcdl.sites.registry import SHIPPED

    folders = [SHIPPED, FIXTURE_SITES] + ([Path(__file__).parent / "published" / "profiles"] if published else [])
    found = []
    for source in [*(str(p) for folder in folders for p in sorted(folder.glob("*.yaml"))), *UNSHIPPED]:
        site = _load(source)
        if keep(site):
            found += [(source, kind) for kind in site.node_kinds]
    return found


@functools.lru_cache(maxsize=None)
def _published_cases() -> tuple[dict, ...]:
    import yaml

    return tuple(yaml.load(p.read_text(), Loader=yaml.CSafeLoader)
                 for p in sorted((Path(__file__).parent / "published").glob("*.yaml")))


def _published_facts(source: str, kind: str) -> dict | None:
    """The node the machine's centre publishes (tests/published/<case>.yaml, slurm_nodes), where a
    case covers this profile: the shipped site it names, or the profile file it carries."""
    published = Path(__file__).parent / "published"
    for case in _published_cases():
        covers = (case.get("site") and Path(source).resolve() == (SHIPPED_DIR / f"{case['site']}.yaml").resolve()) or (
            case.get("profile") and Path(source).resolve() == (published / case["profile"]).resolve())
        if covers:
            return (case.get("slurm_nodes") or {}).get(kind)
    return None


def _shape(source: str, site, kind: str) -> NodeShape:
    """The node a slurmd poses: as its centre publishes it where a published case has it, so a
    profile that counts CPUs or reserves cores wrongly is judged by the real node; a fixture's or
    an invented machine's own profile otherwise."""
    facts = _published_facts(source, kind) if source not in UNSHIPPED else None
    return NodeShape.from_published(site, kind, facts) if facts else NodeShape.from_site(site, kind)


@functools.lru_cache(maxsize=None)
def _load(source: str):
    import yaml

    from hpcdl.sites.registry import load_site_file
    from hpcdl.sites.schema import Site

    if source in UNSHIPPED:
        return Site.model_validate(yaml.safe_load(UNSHIPPED[source]))
    return load_site_file(Path(source))


def side_by_side(shapes) -> list[tuple[NodeShape, ...]]:
    """The shapes packed into clusters of up to SIDE_BY_SIDE machines, each cluster's partitions all
    different and its machines agreeing on the default task distribution (slurm.conf says it once).
    """
    groups: list[list[NodeShape]] = []
    shapes = list(dict.fromkeys(shapes))
    # the most shared partition names first (seven machines call theirs `gpu`): each needs a cluster of its own
    names = [shape.partition for shape in shapes]
    for shape in sorted(shapes, key=lambda shape: -names.count(shape.partition)):
        group = next((g for g in groups if len(g) < SIDE_BY_SIDE and shape.partition not in {s.partition for s in g}
                      and g[0].distribution_default == shape.distribution_default), None)
        if group is None:
            groups.append(group := [])
        group.append(shape)
    return [tuple(g) for g in groups]


def _posed(source: str, kind: str) -> NodeShape:
    """The node a slurmd poses for this kind. A machine whose jobs name no partition (they go to its
    default: NERSC Perlmutter, NSC Berzelius) is posed in a partition named after it, which its jobs
    are sent to on sbatch's command line (posed_partition): the partition a job names is the one it
    would get on the machine, and machines side by side do not share a default."""
    site = _load(source)
    shape = _shape(source, site, kind)
    defaults = site.job_defaults(kind)
    names_none = not defaults.partition and not defaults.partition_by_nodes
    return replace(shape, partition=f"{Path(source).stem}-{kind}") if names_none else shape


def posed_partition(shape: NodeShape, script: Path) -> list[str]:
    """sbatch's --partition for a script that names none: its machine's posed default."""
    return [] if re.search(r"(?m)^#SBATCH (--partition[= ]|-p )", script.read_text()) else [f"--partition={shape.partition}"]


SITE_KINDS = site_kinds(lambda site: site.scheduler == "slurm")
SHAPES = {(source, kind): _posed(source, kind) for source, kind in SITE_KINDS}
CLUSTERS = side_by_side(SHAPES.values())
# the machines of one cluster one after another, so each cluster comes up once
SITE_KINDS.sort(key=lambda sk: next(i for i, group in enumerate(CLUSTERS) if SHAPES[sk] in group))

# one write per line: the ranks a per-node spawner starts share their task's output (launch.spawner)
PROBE = """
import json, os
e = os.environ
os.write(1, ("HPCDL-PROBE " + json.dumps({
    "rank": int(e.get("RANK", e["SLURM_PROCID"])), "local": int(e.get("LOCAL_RANK", e["SLURM_LOCALID"])),
    "node": int(e["SLURM_NODEID"]), "task": int(e["SLURM_PROCID"]),
    "nodename": e.get("SLURMD_NODENAME"), "cpus_per_task": e.get("SLURM_CPUS_PER_TASK"),
    "cpu_bind": e.get("SLURM_CPU_BIND_LIST"), "affinity": sorted(os.sched_getaffinity(0)),
    "cuda": e.get("CUDA_VISIBLE_DEVICES"), "rocr": e.get("ROCR_VISIBLE_DEVICES"),
}) + "\\n").encode())
"""


def largest_job(site, kind) -> int:
    """The most nodes a job of `kind` may take (hpcdl.validate.suite.largest_whole_job: its count, max_nodes and
    queues, by nodes or by GPUs), NODES where nothing bounds it."""
    from hpcdl.validate.suite import largest_whole_job

    return min(x for x in (NODES, largest_whole_job(site, kind)) if x)


def render(site, kind, folder: Path, *, runnable: bool, conf: str = "") -> tuple[object, Path]:
    """The job script for two nodes of `kind` (one where the machine has one: Mahidol's MAI HPC, RCC Midway3's A100 node); `runnable`: the probe instead of the trainer,
    without the container runtime, modules and conda environment this host does not have."""
    from hpcdl.plan import JobRequest, make_plan
    from hpcdl.render.jobscript import JobOptions, render_job_script
    from hpcdl.sites.schema import Modules

    if runnable:
        # launcher options of the site's own Slurm plugins (LLNL's --mpibind) are not on this host, nor the centre's
        # own free-port command (Princeton's get_free_port): the job takes hpcdl's port from its id
        # nor do the pretend nodes' own names resolve here (launch.master_addr: node-list): the batch host's name does
        launch = site.launch.model_copy(update={"args": tuple(a for a in site.launch.args if _srun_knows(a, conf)),
                                                "master_port_command": (), "master_addr": "host-name",
                                                # nor the site prolog's rendezvous variables (C3SE Alvis's PROEPI_*)
                                                "master_addr_env": None, "master_port_env": None,
                                                # nor the centre's own path to its srun (Vector's Killarney jobs:
                                                # /cm/shared/apps/slurm/current/bin/srun): this host's srun stands in
                                                **({"command": ()} if site.launcher == "srun" else {}),
                                                **_stand_in_wrappers(site, folder)})
        site = site.model_copy(update={"launch": launch})
        # nor the variables the centre sets in every job (Texas A&M HPRC's $SCRATCH, under which its jobs put
        # HF_HOME: env {path: ...}): a folder of the test's stands in for each that such a path names
        stand_ins = {name: str(folder / "provided" / name) for name in site.provides_env}
        env = {name: value.model_copy(update={"path": re.sub(
                   r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: stand_ins.get(m.group(1), m.group(0)), value.path)})
               if not isinstance(value, str) and value.path is not None else value
               for name, value in site.env.items()}
        site = site.model_copy(update={"env": env})
    # a machine with a single node of the kind (Mahidol's MAI HPC: one H100 node, one A100 node) gets a one-node job,
    # and so does a kind whose queues take one node at most (Purdue Gautschi's smallgpu: "You can use up to 2 GPUs in
    # this partition at once", its node's two)
    count = site.node_kinds[kind].count
    nodes = min(NODES, count or NODES, largest_job(site, kind))
    plan = make_plan(site, JobRequest(nodes=nodes, node_kind=kind))
    held = site.environment_for(kind).frameworks if site.environment_for(kind) is not None else ()
    if plan.runtime is not None and plan.runtime.refusal and held and "pytorch" not in held:
        # a kind whose one route is the centre's environment for another framework (MASSIVE M3's P100s, for which no
        # hpcdl image is built: TensorFlow 2 from its users' conda) is posed with that framework
        plan = make_plan(site, JobRequest(nodes=nodes, node_kind=kind, framework=held[0]))
    program = None
    if runnable:
        # nor the centre's conda environment (Mahidol's MAI HPC: conda activate hpc_lab), which this host lacks too
        site = site.model_copy(update={"runtime": "none", "modules": Modules(system="none"), "environment": None})
        if site.filesystems.runs == "scratch":
            # nor the centre's scratch (SciNet Trillium's $SCRATCH, where its jobs write: filesystems.runs): a folder
            # of the test's stands in for it, so the job still makes its run folder there
            site = site.model_copy(update={"filesystems": site.filesystems.model_copy(
                update={"scratch": str(folder / "scratch")})})
        program = [sys.executable, "-S", "-c", PROBE]  # -S: the probe needs no site-packages, and starts in half the time
        if plan.spawner_argv[:1] in (("torchrun",), ("hpcdl",)):
            # the spawner beside this Python (a batch job's PATH need not hold it): torchrun, or hpcdl's own launcher
            # (launch.spawner: hpcdl, LRZ's AI Systems)
            # the pretend nodes are this host, whose few cores hold fewer than the node's ranks: hpcdl's launcher is
            # told so (it refuses more ranks than the cores it may use, unless asked)
            spawner = plan.spawner_argv[1:] if plan.spawner_argv[0] == "torchrun" else ("launch", "--oversubscribe",
                                                                                        *plan.spawner_argv[2:])
            plan = replace(plan, spawner_argv=(str(Path(sys.executable).parent / plan.spawner_argv[0]), *spawner))
        elif plan.spawner_argv[:2] == ("/bin/bash", "-c") and plan.spawner_argv[2].startswith("exec torchrun "):
            # the torchrun a node's bash runs (launch.spawner_rendezvous: static), beside this Python likewise
            torchrun = shlex.quote(str(Path(sys.executable).parent / "torchrun"))
            plan = replace(plan, spawner_argv=(*plan.spawner_argv[:2], plan.spawner_argv[2].replace(
                "exec torchrun ", f"exec {torchrun} ", 1), *plan.spawner_argv[3:]))
    recipe = {"name": "shape-probe", "net": "cifar10_quick", "data": {"source": "digits"}}
    # a centre that runs no job without a project (CSC: "The billing project argument is mandatory") gets one;
    # the test Slurm keeps no accounts, so any name passes
    account = "project_test" if site.defaults.account_required else None
    options = JobOptions(name=f"shape-{site.name}-{kind}", output_dir=str(folder), account=account)
    script = folder / ("probe.sh" if runnable else "job.sh")
    folder.mkdir(parents=True, exist_ok=True)
    text = render_job_script(site, plan, recipe, options, program=program)
    # nor a controller of several clusters (VSC's wICE: "#SBATCH --cluster=wice", "Our Slurm scheduler is aware of
    # multiple clusters and wice is not the default one"): sbatch looks a cluster name up in the accounting database,
    # which this host's test Slurm does not run, so the line is set aside (docs/sites.md, "What this host cannot
    # emulate"); the rest of the header is judged as rendered
    text = re.sub(r"(?m)^#SBATCH (--clusters?[= ]|-M ?)\S+\n", "", text)
    script.write_text(text)
    return plan, script


def _stand_in_wrappers(site, folder: Path) -> dict:
    """The centre's launch wrappers (EPCC's gpu_launch.sh), which this host lacks, as stand-ins in the job's folder
    that keep the contract the profile declares: a wrapper that binds the GPUs (launch.gpu_bind: wrapper) gives
    local rank i GPU i, as EPCC's sets CUDA_VISIBLE_DEVICES to the task's local rank; any other only runs the rank."""
    out = {}
    for field in ("wrapper", "gpu_wrapper"):
        if not getattr(site.launch, field):
            continue
        binds = site.launch.gpu_bind == "wrapper"
        stand_in = folder / f"stand-in-{field}.sh"
        folder.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\n" + ('export CUDA_VISIBLE_DEVICES="$SLURM_LOCALID"\n' if binds else "")
                            + 'exec "$@"\n')
        stand_in.chmod(0o755)
        out[field] = (str(stand_in),)
    return out


@functools.lru_cache(maxsize=None)
def _srun_knows(arg: str, conf: str) -> bool:
    """Whether this host's srun takes the option (a site plugin's own, such as LLNL's --mpibind, it does
    not): srun parses its options before --help, so an unknown one fails there."""
    if not arg.startswith("-"):
        return True
    proc = subprocess.run(["srun", arg, "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_CONF": conf})
    return proc.returncode == 0


def wait_gone(cluster, job_id: str, timeout: float = 120) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True,
                              env=cluster.env).stdout.strip():
            break
        time.sleep(0.2)
    else:
        subprocess.run(["scancel", job_id], env=cluster.env)
        raise AssertionError(f"job {job_id} still queued or running after {timeout} s")
    return show_job(cluster, job_id)


def show_job(cluster, job_id: str) -> dict[str, str]:
    text = subprocess.run(["scontrol", "-d", "show", "job", job_id], capture_output=True, text=True,
                          env=cluster.env).stdout
    fields = dict(re.findall(r"(\S+?)=(\S*)", text))
    fields["_text"] = text
    return fields


def allocated_cores(cluster, fields: dict[str, str], threads_per_core: int) -> dict[str, set[int]]:
    """Node name -> the physical cores Slurm allocated there (`scontrol -d show job`'s CPU_IDs are
    Slurm's abstract ids: core x ThreadsPerCore + thread)."""
    out: dict[str, set[int]] = {}
    for nodes, ids in re.findall(r"Nodes=(\S+) CPU_IDs=(\S+)", fields["_text"]):
        names = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True,
                               env=cluster.env, check=True).stdout.split()
        cores = {int(i) // threads_per_core for i in _expand(ids)}
        for name in names:
            out[name] = cores
    return out


def _expand(ranges: str) -> list[int]:
    out = []
    for part in ranges.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


@pytest.mark.parametrize(("source", "kind"), SITE_KINDS, ids=[f"{Path(p).stem}-{k}" for p, k in SITE_KINDS])
def test_slurm_shaped_like_the_machine_allocates_its_rendered_job(slurm_clusters, tmp_path, source, kind):
    site = _load(source)
    node = site.node_kinds[kind]
    shape = SHAPES[source, kind]
    cluster = slurm_clusters.ensure(NODES, shapes=next(group for group in CLUSTERS if shape in group))

    # 1. the script as the machine would get it
    plan, script = render(site, kind, tmp_path / "as-rendered", runnable=False)
    proc = cluster.sbatch("--test-only", *posed_partition(shape, script), script, cwd=tmp_path)
    assert proc.returncode == 0 and "to start at" in proc.stderr, (
        f"{site.name} {kind}: Slurm shaped like the node refuses the rendered job:\n{proc.stderr}\n"
        + "\n".join(line for line in script.read_text().splitlines() if line.startswith("#SBATCH")))

    # 2. one CPU per task more than the node's allocatable CPUs hold is refused
    allocatable = (node.cores - len(shape.spec_cores)) * node.cpus_per_core  # in the profile's -c unit
    tasks_per_node = 1 if plan.spawner else plan.ranks_per_node  # one task per node holds a spawner's ranks
    too_many = allocatable // tasks_per_node + 1
    greedy = tmp_path / "greedy.sh"
    text = script.read_text()
    if "\n#SBATCH --cpus-per-gpu=" in text:
        # the CPUs asked per GPU (defaults.cpu_request: cpus-per-gpu; sbatch takes no --cpus-per-task beside it):
        # one more for each GPU than the node's CPUs share out over the job's GPUs on it
        gpus = len({g for r in plan.local_ranks() for g in r.gpus})
        text = re.sub(r"(?m)^#SBATCH --cpus-per-gpu=\d+$", f"#SBATCH --cpus-per-gpu={allocatable // gpus + 1}", text)
    elif "\n#SBATCH --cpus-per-task=" not in text:
        # a header that asks the nodes alone (defaults.batch_request: nodes, Pawsey's allocation-packs): srun
        # asks the tasks, which --test-only does not see; the same tasks asked in the header are judged
        unit = (f"\n#SBATCH --threads-per-core={node.cpus_per_core}" if node.cpus_per_core < node.threads_per_core
                else "")
        text = re.sub(r"(?m)^(#SBATCH --nodes=\d+)$",
                      rf"\1\n#SBATCH --ntasks-per-node={plan.ranks_per_node}\n#SBATCH --cpus-per-task=0{unit}", text)
    greedy.write_text(re.sub(r"(?m)^#SBATCH --cpus-per-task=\d+$", f"#SBATCH --cpus-per-task={too_many}", text))
    proc = cluster.sbatch("--test-only", *posed_partition(shape, greedy), greedy, cwd=tmp_path)
    assert proc.returncode != 0 and "Requested node configuration is not available" in proc.stderr, proc.stderr

    # 3. the job step itself, with the probe in place of the trainer
    if site.launcher != "srun":
        return  # ibrun/mpirun are not on this host; Slurm judged the allocation above
    plan, probe_script = render(site, kind, tmp_path / "run", runnable=True, conf=str(cluster.conf))
    proc = cluster.sbatch("--parsable", *posed_partition(shape, probe_script), probe_script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    fields = wait_gone(cluster, job_id)
    outputs = list((tmp_path / "run").glob("*.out"))
    output = outputs[0].read_text(errors="replace") if outputs else "(no output file)"
    assert fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0", (
        f"{fields.get('JobState')} {fields.get('ExitCode')}\n{output[-3000:]}\n{cluster.logs()}")

    seen = {}
    for line in output.splitlines():
        # srun --label puts the task's number before each line it passes on (srun(1): "Prepend task number to
        # lines of stdout/err"; Vector's Killarney jobs: srun -l)
        line = re.sub(r"^ *\d+: ", "", line)
        if line.startswith("HPCDL-PROBE "):
            record = json.loads(line.split(" ", 1)[1])
            seen[record["rank"]] = record
    assert sorted(seen) == list(range(plan.world_size)), output[-3000:]
    gpu_var = "rocr" if node.gpus and node.gpus[0].vendor == "amd" else "cuda"
    for placement in plan.ranks:
        got = seen[placement.rank]
        if plan.spawner:
            # one Slurm task per node holds the node's ranks (launch.spawner); torchrun numbers its nodes in the order
            # they join its rendezvous, and every node's local layout is the same
            assert got["local"] == placement.local_rank and got["task"] == got["node"], got
            assert got["cpus_per_task"] == str(len(placement.cores) * node.cpus_per_core * plan.ranks_per_node)
            assert sum(s["node"] == got["node"] for s in seen.values()) == plan.ranks_per_node, seen
        else:
            # Slurm numbers the ranks as the plan does: node by node, local rank within a node
            assert (got["node"], got["local"]) == (placement.node, placement.local_rank), got
            assert got["cpus_per_task"] == str(len(placement.cores) * node.cpus_per_core)
        if got["cpu_bind"] and got["cpu_bind"] not in ("cores", "sockets"):  # (words: tests/test_slurm_binding.py)
            # the mask srun got for this rank (--cpu-bind=mask_cpu:) holds the plan's CPUs, no more
            mask = int(got["cpu_bind"].split(",")[placement.local_rank], 16)
            assert {i for i in range(mask.bit_length()) if mask >> i & 1} == set(placement.cpus), (placement, got)
        if placement.gpus and site.launch.gpu_visibility == "node":
            # no per-task GPU binding (--gpu-bind=none): the rank sees the node's GPUs and drives
            # the plan's own, which HPCDL_GPU names (NERSC Perlmutter, E3SM issue 4834)
            assert got[gpu_var] in (None, ",".join(map(str, range(len(node.gpus))))), (placement, got)
            assert placement.env["HPCDL_GPU"] == ",".join(map(str, placement.gpus)), placement
        elif placement.gpus and "--gpu-bind=closest" in plan.launcher_argv:
            # not posed here: --gpu-bind=closest picks each task's GPUs by their core affinity (gres.conf
            # Cores=) from the task's CPU mask, which task/none leaves unset, so every GPU is as close as any;
            # the planner holds the plan to the GPUs beside each rank's cores (launch.gpu_bind, test_gpu_bind.py)
            pass
        elif placement.gpus:
            # the GPU Slurm bound to the rank (--gpu-bind) is the plan's
            assert got[gpu_var] == ",".join(map(str, placement.gpus)), (placement, got)
    if fields.get("OverSubscribe") == "NO" and shape.spec_cores:
        # a whole node, less its specialised cores: every core the plan uses is one Slurm gave the job
        allocated = allocated_cores(cluster, fields, node.threads_per_core)
        assert sorted(allocated) == sorted(cluster.nodes_of(shape)[:plan.nodes]), fields["_text"]
        for name, cores in allocated.items():
            planned = {c for r in plan.local_ranks() for c in r.cores}
            assert planned <= cores, f"{name}: planned cores {sorted(planned - cores)} are not allocated"
            assert not cores & set(shape.spec_cores), f"{name}: Slurm allocated specialised cores"


WRONG_COUNTING = ["frontier", "perlmutter"]


@pytest.mark.parametrize("name", WRONG_COUNTING)
def test_slurm_posed_from_the_centre_refuses_a_profile_that_counts_cpus_wrongly(slurm_clusters,
                                                                                 tmp_path, name):
    """The profile says Slurm counts twice the CPUs per core the centre's Slurm does: the node posed
    from the centre's facts (not from that profile) refuses the job the profile renders."""
    import yaml

    case = yaml.safe_load((Path(__file__).parent / "published" / f"{name}.yaml").read_text())
    source = str(SHIPPED_DIR / f"{case['site']}.yaml") if "site" in case else str(
        Path(__file__).parent / "published" / case["profile"])
    site = _load(source)
    kind = next(iter(case["slurm_nodes"]))
    facts = case["slurm_nodes"][kind]
    shape = NodeShape.from_published(site, kind, facts)
    counted = 2 * shape.cpus_per_core
    node = site.node_kinds[kind]
    wrong = node.model_copy(update={"threads_per_core": max(node.threads_per_core, counted),
                                    "scheduler_cpus_per_core": counted})
    wrong_site = site.model_copy(update={"node_kinds": {**site.node_kinds, kind: wrong}})
    cluster = slurm_clusters.ensure(NODES, shape)
    _, script = render(wrong_site, kind, tmp_path / "wrong", runnable=False)
    proc = cluster.sbatch("--test-only", script, cwd=tmp_path)
    assert proc.returncode != 0, f"{name}: Slurm posed from the centre's facts took -c for {counted} CPUs per core"
    _, script = render(site, kind, tmp_path / "right", runnable=False)
    proc = cluster.sbatch("--test-only", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_machines_posed_side_by_side_judge_each_job_by_its_own_partitions_nodes(slurm_clusters, tmp_path):
    """One cluster posing a 4-core and a 64-core machine: a job asking 32 CPUs a task is taken in the large
    machine's partition and refused in the small one's, so a job is never judged against a neighbour's node."""
    small = NodeShape(sockets=1, cores_per_socket=4, partition="small", memory_mb=8192)
    large = NodeShape(sockets=2, cores_per_socket=32, partition="large", memory_mb=262144)
    cluster = slurm_clusters.ensure(NODES, shapes=(small, large))
    assert cluster.nodes_of(small) == ["n1", "n2"] and cluster.nodes_of(large) == ["n3", "n4"]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=32\nsrun true\n")
    taken = cluster.sbatch("--test-only", "--partition=large", script, cwd=tmp_path)
    assert taken.returncode == 0 and "n[3-4]" in taken.stderr, taken.stderr
    refused = cluster.sbatch("--test-only", "--partition=small", script, cwd=tmp_path)
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr, refused.stderr
    with pytest.raises(ValueError, match="share a partition"):
        slurm_clusters.ensure(NODES, shapes=(small, replace(large, partition="small")))
