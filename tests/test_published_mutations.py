"""The published checks must be able to fail: every site under tests/published/ gets its plan broken
in the ways a wrong plan is wrong, and the checks must notice.

The mutations are generic, driven by the plan's own data, never written per site:
  - two ranks swap their GPUs, their NICs or their cores (local ranks 0 and 1, 0 and the last),
    on every node;
  - the GPU order is reversed;
  - each variable the centre's line sets is dropped: the profile's own settings (`env:`, written
    from the centre's pages) and every variable a check names;
  - each option of the launch line is dropped;
  - a foreign option is added to the launch line.
A rank's GPU and NIC settings (CUDA_VISIBLE_DEVICES, NCCL_IB_HCA ...) and the launch line's
per-rank masks follow the mutated placement, as the planner would have written them.

Beside the centre's checks, the launcher itself judges: a line the installed srun or Open MPI mpirun
refuses (an option it does not know, a value it cannot take: tests/real_launchers.py) would not run,
and that kills the mutation as surely as a check would. The unchanged line must be accepted.

A mutation counts only if it changes what runs. Dropping an option whose value the launcher derives
from the rest of the line starts the same step (an equivalent mutant, whatever the line's text):
srun's task count from --nodes and --ntasks-per-node, its node count from --ntasks and
--ntasks-per-node, Open MPI's -np from `--map-by ppr:K:node` ("Launch N times the number of objects of
the specified type on each node", mpirun(1)) on the job's nodes; the real srun and mpirun show each
(test_the_launcher_derives_what_a_dropped_option_said). So does an srun option whose value a step over
the whole job takes from the job itself, where the #SBATCH header asks the same: --ntasks-per-node
(srun(1), input environment: "SLURM_NTASKS_PER_NODE Same as --ntasks-per-node", which sbatch sets) and
the GPUs a node (srun(1) --gres: "By default, a job step is allocated all of the generic resources that
have been requested by the job"); a real slurmd shows both (test_a_step_takes_from_the_job_what_the_header_asked). Otherwise a mutation counts if it changes
the script's commands (comments are not run) and
what each rank applies from plan.json (its CPUs, environment, threads), compared as a set of
per-rank settings, so a swap that only renames interchangeable ranks (two CPU-only ranks trading
cores), or trades NICs that no setting names, is not a wrong plan. The kill rate is printed per
site (pytest -s) and must be at least 95 %. Renders in-process; the launchers' verdicts, one short
process per distinct line, are kept.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import require_tool
from real_launchers import mpirun_refuses, srun_refuses
from test_published_practice import (CASES, Rendered, _case, _plan, checks_of_plan, judge, launcher_options, named_options,
                                     render_case, spawner_options, spawner_words)

from hpcdl.launchers import launcher_for
from hpcdl.plan.env import intel_mpi_pin_domain, rank_env
from hpcdl.plan.planner import make_plan
from hpcdl.plan.request import JobRequest
from hpcdl.sites.schema import option_value

FOREIGN_OPTION = "--hpcdl-foreign-option"
KILL_RATE = 0.95
CHECKED = [p for p in CASES if not _case(p).get("refused")]
# Sites whose centre publishes nothing this suite has found for what the surviving mutations change
# (which GPU, cores or HCA a rank gets, hpcdl's own launcher options): a check needs a source that
# says what it asserts, so these stay below the bar, named, until one is found.
UNSOURCED: dict[str, str] = {}


def _relocate(site, plan, move):
    """The plan with each node's local placements changed by `move` (a list of per-local-rank dicts
    in, the same out), rank settings and the launch line rebuilt from the new placement."""
    kind, node = site.node_kind(plan.node_kind)
    local = [dict(cores=r.cores, cpus=r.cpus, socket=r.socket, gpus=r.gpus, nic=r.nic) for r in plan.local_ranks()]
    moved = move(local)
    ranks = tuple(
        replace(r, **moved[r.local_rank],
                env=rank_env(site, node, moved[r.local_rank]["gpus"], moved[r.local_rank]["nic"], site.launch.gpu_visibility,
                             tuple(sorted({g for p in moved for g in p["gpus"]}))))
        for r in plan.ranks
    )
    env = dict(plan.env)
    if "I_MPI_PIN_DOMAIN" in env:  # Intel MPI's domains follow the ranks' cores, as the planner writes them
        domain = site.env.get("I_MPI_PIN_DOMAIN")
        env["I_MPI_PIN_DOMAIN"] = intel_mpi_pin_domain(domain if isinstance(domain, str) else "omp",
                                                       [p["cores"] for p in moved], [p["cpus"] for p in moved])
    plan = replace(plan, ranks=ranks, env=env)
    return replace(plan, launcher_argv=tuple(launcher_for(site.launcher).command(plan, site)))


def _swap(keys, a, b):
    def move(local):
        out = [dict(p) for p in local]
        for key in keys:
            out[a][key], out[b][key] = local[b][key], local[a][key]
        return out
    return move


def _reverse_gpus(local):
    gpus = [p["gpus"] for p in local][::-1]
    return [{**p, "gpus": g} for p, g in zip(local, gpus)]


def mutations(checks: list[dict], site, plan, header: list[str] = ()):
    """(name, plan -> mutated plan) for every generic mutation of this plan; `checks` name the
    variables of the centre's line beside the profile's own; `header`: the job's directives, as rendered."""
    last = plan.ranks_per_node - 1
    pairs = sorted({(0, 1), (0, last)}) if last > 0 else []
    for what, keys in (("GPUs", ("gpus",)), ("NICs", ("nic",)), ("cores", ("cores", "cpus", "socket"))):
        for a, b in pairs:
            yield f"local ranks {a} and {b} swap {what}", lambda s, p, k=keys, a=a, b=b: _relocate(s, p, _swap(k, a, b))
    yield "GPU order reversed", lambda s, p: _relocate(s, p, _reverse_gpus)
    named = {name for check in checks for name in (check.get("env") or {})}
    for name in sorted((set(site.env) | named) & (set(plan.env) | set(plan.env_paths))):
        yield f"{name} dropped", lambda s, p, n=name: replace(
            p, env={k: v for k, v in p.env.items() if k != n}, env_paths={k: v for k, v in p.env_paths.items() if k != n})
    argv = list(plan.launcher_argv)
    for tokens in launcher_options(argv):
        at = next(i for i in range(1, len(argv)) if argv[i : i + len(tokens)] == tokens)
        if derived_by_the_launcher(argv[0], argv[:at] + argv[at + len(tokens):], tokens, plan.nodes, header):
            continue  # the launcher derives it from the rest of the line: the same step, an equivalent mutant
        yield f"launcher option {' '.join(tokens)} dropped", lambda s, p, at=at, n=len(tokens): replace(
            p, launcher_argv=p.launcher_argv[:at] + p.launcher_argv[at + n:])
    spawner = list(plan.spawner_argv)
    in_bash = spawner_words(spawner) != spawner
    for tokens in spawner_options(spawner):
        # each option of a per-node spawner (launch.spawner: torchrun's --nnodes, --nproc_per_node, its rendezvous):
        # none is derived from the rest, so every drop counts
        if in_bash:
            # the spawner's words in the command a node's bash runs (launch.spawner_rendezvous: static): the option's
            # words dropped from that command, as bash splits them
            raw = spawner[2].split(" ")
            at = next(i for i in range(len(raw)) if [w for word in raw[i:i + len(tokens)] for w in shlex.split(word)]
                      == tokens)
            yield f"spawner option {' '.join(tokens)} dropped", lambda s, p, at=at, n=len(tokens), raw=raw: replace(
                p, spawner_argv=(*p.spawner_argv[:2], " ".join(raw[:at] + raw[at + n:]), *p.spawner_argv[3:]))
            continue
        at = next(i for i in range(1, len(spawner)) if spawner[i : i + len(tokens)] == tokens)
        yield f"spawner option {' '.join(tokens)} dropped", lambda s, p, at=at, n=len(tokens): replace(
            p, spawner_argv=p.spawner_argv[:at] + p.spawner_argv[at + n:])
    yield f"foreign launcher option {FOREIGN_OPTION} added", lambda s, p: replace(
        p, launcher_argv=(p.launcher_argv[0], FOREIGN_OPTION, *p.launcher_argv[1:]))


def derived_by_the_launcher(launcher: str, rest: list[str], tokens: list[str], nodes: int,
                            header: list[str] = ()) -> bool:
    """Whether the option `tokens` says only what the launcher derives from the rest of its line on a
    job of `nodes` nodes, so that the line without it starts the same step (an equivalent mutant):
    srun(1) "--ntasks-per-node ... Meant to be used with the --nodes option", the task count from the
    two and the node count from the tasks; Open MPI's mpirun(1) "--map-by ppr:N:<object>: Launch N
    times the number of objects of the specified type on each node", -np from ppr:N:node. A real slurmd
    and a real mpirun show both (test_the_launcher_derives_what_a_dropped_option_said). Or what an srun
    step over all the job's nodes takes from the job, where the job's `header` (#SBATCH directives)
    asks the same: its tasks a node and its GPUs a node (test_a_step_takes_from_the_job_what_the_header_asked)."""
    name, _, value = tokens[0].partition("=")
    value = value or (tokens[1] if len(tokens) > 1 else "")
    if launcher == "srun" and taken_from_the_job(rest, name, value, nodes, header):
        return True
    if not value.isdigit():
        return False

    def count(*spellings, short=None) -> int | None:
        given = option_value(rest, *spellings, short=short)
        return int(given) if given and given.isdigit() else None

    said = int(value)
    if launcher == "srun" and (per_node := count("--ntasks-per-node")) is not None:
        if name in ("--ntasks", "-n"):
            return count("--nodes", short="-N") == nodes and said == nodes * per_node
        if name in ("--nodes", "-N"):
            return said == nodes and count("--ntasks", short="-n") == nodes * per_node
    if launcher == "mpirun" and name in ("-np", "-n", "--np"):
        ppr = (option_value(rest, "--map-by", "-map-by") or "").split(":")
        return len(ppr) >= 3 and ppr[0] == "ppr" and ppr[1].isdigit() and ppr[2] == "node" and said == nodes * int(ppr[1])
    return False


def gpus_a_node(name: str, value: str) -> int | None:
    """The GPUs a node an srun or sbatch option asks (--gpus-per-node=N, --gres=gpu:N, gpu:TYPE:N), None
    where the option asks none that way."""
    if name != "--gpus-per-node" and not (name == "--gres" and "," not in value and value.startswith("gpu:")):
        return None
    count = value.rpartition(":")[2]  # [type:]N
    return int(count) if count.isdigit() else None


def taken_from_the_job(rest: list[str], name: str, value: str, nodes: int, header: list[str]) -> bool:
    """Whether an srun step without `name=value` takes the same from its batch job: the step spans the
    job's `nodes` (no --nodes, or that many) and the header asks the same tasks a node, or the same
    GPUs a node, in any spelling; a step asking other GPUs on its line (--gpus-per-task) is not judged."""
    spans = (option_value(rest, "--nodes", short="-N") or str(nodes)) == str(nodes)
    if not spans or not header:
        return False
    asked = [d.split("=", 1) if "=" in d else [d, ""] for d in header]
    if name == "--ntasks-per-node":
        return [name, value] in asked
    wanted = gpus_a_node(name, value)
    return (wanted is not None and not any(option_value(rest, o) for o in ("--gpus-per-task", "--gpus", "--gres"))
            and any(gpus_a_node(n, v) == wanted for n, v in asked))


RELOCATION = ("local ranks", "GPU order")  # the mutations that move ranks on the node


def placements(plan) -> list:
    """What each rank of a node holds, whoever holds it: a plan whose ranks only traded
    identical roles (two CPU-only ranks swapping their cores) places the same."""
    return sorted((r.node, r.cores, r.gpus, r.nic or "") for r in plan.ranks)


def what_runs(job: Rendered) -> tuple:
    """The job as it runs: its commands less the plan, and per node the set of what each rank
    applies from the plan (CPUs, environment, threads): renaming interchangeable ranks runs the same."""
    commands = "\n".join(line for line in job.code.splitlines() if not line.startswith('{"'))  # less plan.json
    ranks = {}
    for r in job.plan["ranks"]:
        ranks.setdefault(r["node"], []).append(json.dumps([r["cpus"], r["env"], r["omp_num_threads"]], sort_keys=True))
    return commands, json.dumps(job.plan["env"], sort_keys=True), json.dumps(job.plan.get("env_paths"), sort_keys=True), \
        {n: sorted(v) for n, v in ranks.items()}.__repr__()


def launcher_refuses(job: Rendered, named: set[str]) -> str | None:
    """The installed launcher's own refusal of the job's launch line, None where it accepts it or is
    not installable here (jsrun, ibrun, PALS and Hydra mpiexec: their lines are checked by the centres'
    checks alone). `named`: the options the centre's own line names (a SPANK plugin's, for srun)."""
    launcher = job.launcher[0]
    if launcher == "srun":
        return srun_refuses(require_tool("srun"), tuple(job.launcher[1:]), frozenset(named))
    if launcher == "mpirun" and job.site.mpi == "openmpi":
        return mpirun_refuses(require_tool("mpirun"), tuple(job.launcher[1:]))
    return None


def kill_rate(path: Path, judge_check=judge) -> tuple[int, int, list[str]]:
    """(killed, mutations that change what runs, the names of those that survived) of the case's
    plan, judged by the checks that ask about that plan."""
    case = _case(path)
    site, original = render_case(path)
    plan = _plan(site, case.get("request", {}))
    # a known mismatch already fails: it cannot kill anything
    checks = [c for c in checks_of_plan(case, site, plan) if "known_mismatch" not in c]
    named = named_options(checks)
    # a check that already fails on the unchanged plan "kills" every mutation and proves nothing
    failing = [c["what"] for c in checks if judge_check(c, render_case(path, c)[1], "", named)]
    assert not failing, f"{path.stem}: checks that fail on the unchanged plan: {failing}"
    refused = launcher_refuses(original, named)
    assert refused is None, f"{path.stem}: the launcher refuses the unchanged line: {refused}"
    base = what_runs(original)
    killed, counted, survived = 0, 0, []
    for name, mutate in mutations(checks, site, plan, original.directives):
        jobs = {}

        def job_for(check, mutate=mutate, jobs=jobs):
            key = json.dumps(check.get("options"), sort_keys=True)
            if key not in jobs:
                jobs[key] = render_case(path, check, plan_of=lambda s, p: mutate(s, p))[1]
            return jobs[key]

        if name.startswith(RELOCATION) and placements(mutate(site, plan)) == placements(plan):
            continue  # interchangeable ranks renamed: the same job, however the launcher spells it
        if what_runs(job_for({})) == base:
            continue  # the same job: nothing a check could or should see
        counted += 1
        if (any(judge_check(check, job_for(check), "", named) for check in checks)
                or launcher_refuses(job_for({}), named) is not None):
            killed += 1
        else:
            survived.append(name)
    return killed, counted, survived


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=[pytest.mark.xfail(reason=UNSOURCED[p.stem], strict=True)] if p.stem in UNSOURCED else [])
    for p in CHECKED], ids=[p.stem for p in CHECKED])
def test_published_checks_fail_on_a_wrong_plan(path):
    killed, counted, survived = kill_rate(path)
    rate = killed / counted if counted else 1.0
    print(f"\n{path.stem}: {killed}/{counted} mutations killed ({rate:.0%})"
          + "".join(f"\n  survived: {name}" for name in survived))
    assert counted, f"{path.stem}: no mutation changed what runs"
    assert rate >= KILL_RATE, f"{path.stem}: the published checks miss {survived}"


def test_a_mutation_that_renames_interchangeable_ranks_runs_the_same():
    """CPU-only ranks trading cores run the same job; ranks trading GPUs do not."""
    for site_name, same in (("stampede2-knl", True), ("frontier", False)):
        path = next(p for p in CHECKED if _case(p).get("site") == site_name)
        case = _case(path)
        site, _ = render_case(path)
        plan = make_plan(site, JobRequest(**case["request"]))
        swapped = _relocate(site, plan, _swap(("cores", "cpus", "socket"), 0, 1))
        assert (placements(swapped) == placements(plan)) is same, site_name


def test_a_placement_socket_check_follows_the_ranks_cores():
    """`placement: {i: {socket: gpu}}`: local rank i's cores lie on the socket its GPUs hang off (in the
    profile), `socket: <n>` on socket n; ranks trading their cores across the sockets fail both."""
    from hpcdl.render.jobscript import JobOptions, render_job_script

    path = next(p for p in CHECKED if _case(p).get("site") == "cheaha-gpu")
    site, job = render_case(path)
    by_gpu = {"placement": {0: {"socket": "gpu"}, 1: {"socket": "gpu"}}}
    by_number = {"placement": {0: {"socket": 0}, 1: {"socket": 1}}}
    assert judge(by_gpu, job) == [] and judge(by_number, job) == []
    swapped = _relocate(site, make_plan(site, JobRequest(**_case(path)["request"])), _swap(("cores", "cpus", "socket"), 0, 1))
    wrong = Rendered(site, render_job_script(site, swapped, {}, JobOptions(**_case(path).get("options", {}))))
    assert judge(by_gpu, wrong) and judge(by_number, wrong)


def test_only_what_the_launcher_derives_is_an_equivalent_drop():
    srun = ["srun", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=8"]
    assert derived_by_the_launcher("srun", srun[:2] + srun[3:], ["--ntasks=8"], 2)
    assert derived_by_the_launcher("srun", srun[:1] + srun[2:], ["--nodes=2"], 2)
    assert not derived_by_the_launcher("srun", srun[:4], ["--cpus-per-task=8"], 2)  # nothing else gives -c
    assert not derived_by_the_launcher("srun", ["srun", "--nodes=2", "--ntasks-per-node=3"], ["--ntasks=8"], 2)
    assert not derived_by_the_launcher("srun", ["srun", "--nodes=2"], ["--ntasks=8"], 2)  # one task a node by default
    mpirun = ["mpirun", "--map-by", "ppr:4:node:PE=12", "--bind-to", "core"]
    assert derived_by_the_launcher("mpirun", mpirun, ["-np", "8"], 2)
    assert not derived_by_the_launcher("mpirun", mpirun, ["-np", "6"], 2)
    assert not derived_by_the_launcher("mpirun", ["mpirun", "--map-by", "ppr:2:socket"], ["-np", "8"], 2)


def _step(cluster, *options: str) -> list[str]:
    """What each task of an srun step reports of itself: its node, rank and the step's task count."""
    done = subprocess.run(["srun", *options, "bash", "-c", 'echo "$SLURMD_NODENAME $SLURM_PROCID $SLURM_STEP_NUM_TASKS"'],
                          env=cluster.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    return sorted(done.stdout.split("\n"))


@pytest.mark.slurm
def test_the_launcher_derives_what_a_dropped_option_said(slurm_clusters):
    """A real slurmd 22.05 (two pretend nodes) starts the same tasks on the same nodes with --ntasks
    or --nodes dropped from a line that has the other two; a real Open MPI mpirun starts the same
    ranks with -np dropped beside --map-by ppr:N:node (on this host, one node)."""
    cluster = slurm_clusters.ensure(2)
    whole = ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=1"]
    started = _step(cluster, *whole)
    assert len([line for line in started if line]) == 2, started
    for dropped in ("--ntasks=2", "--nodes=2"):
        rest = [w for w in whole if w != dropped]
        assert derived_by_the_launcher("srun", ["srun", *rest], [dropped], 2)
        assert _step(cluster, *rest) == started, dropped
    # and where the rest does not give it, the step differs: the test can tell
    assert _step(cluster, "--nodes=2", "--cpus-per-task=1") != _step(cluster, "--nodes=2", "--ntasks=4", "--cpus-per-task=1")

    mpirun = [require_tool("mpirun"), "--allow-run-as-root", "--oversubscribe", "--map-by", "ppr:2:node", "--bind-to", "none"]
    program = ["bash", "-c", 'echo "$OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE"']
    ranks = [sorted(subprocess.run([*mpirun, *np, *program], capture_output=True, text=True, timeout=120).stdout.split("\n"))
             for np in (["-np", "2"], [])]
    assert ranks[0] == ranks[1] and len([r for r in ranks[0] if r]) == 2, ranks
    assert derived_by_the_launcher("mpirun", ["mpirun", "--map-by", "ppr:2:node"], ["-np", "2"], 1)


def test_a_step_takes_from_the_job_only_what_the_header_asked():
    header = ["--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4"]
    srun = ["srun", "--nodes=2", "--ntasks=8", "--cpus-per-task=8", "--gpu-bind=map_gpu:0,1,2,3"]
    assert derived_by_the_launcher("srun", srun, ["--ntasks-per-node=4"], 2, header)
    assert derived_by_the_launcher("srun", srun, ["--gpus-per-node=4"], 2, header)
    assert derived_by_the_launcher("srun", srun, ["--gres=gpu:4"], 2, ["--nodes=2", "--gres=gpu:a100:4"])
    assert not derived_by_the_launcher("srun", srun, ["--ntasks-per-node=4"], 2, ["--nodes=2", "--ntasks=8"])
    assert not derived_by_the_launcher("srun", srun, ["--gpus-per-node=2"], 2, header)  # the job holds four
    assert not derived_by_the_launcher("srun", ["srun", "--nodes=1"], ["--gpus-per-node=4"], 2, header)  # one node of two
    assert not derived_by_the_launcher("srun", srun, ["--gpu-bind=map_gpu:0,1,2,3"], 2, header)
    assert not derived_by_the_launcher("mpirun", ["mpirun"], ["--gpus-per-node=4"], 2, header)


@pytest.mark.slurm
def test_a_step_takes_from_the_job_what_the_header_asked(slurm_clusters, tmp_path):
    """A real slurmd 22.05, two pretend nodes of four GPUs: inside a batch job whose header asks four tasks
    and four GPUs a node, an srun step without --ntasks-per-node or --gpus-per-node starts the same
    tasks on the same nodes with the same GPUs bound; without --gpu-bind, which no header gives, it does not."""
    from slurm_cluster import NodeShape

    cluster = slurm_clusters.ensure(2, NodeShape(sockets=2, cores_per_socket=4, gpus=4))
    probe = 'echo "$SLURMD_NODENAME $SLURM_PROCID $SLURM_LOCALID $SLURM_STEP_NUM_TASKS $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"'
    header = ["--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=1", "--gpus-per-node=4", "--time=00:09:00"]
    whole = ["--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=1", "--gpus-per-node=4",
             "--gpu-bind=map_gpu:0,1,2,3"]
    lines = {"whole": whole, **{dropped: [w for w in whole if w != dropped] for dropped in whole[2:] if "cpus" not in dropped}}
    steps = "\n".join(f"echo '== {name}'; srun {shlex.join(line)} bash -c {shlex.quote(probe)} | sort" for name, line in lines.items())
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in header) + f"{steps}\n")
    # srun's own words (a step waiting for the last one's CPUs: "Requested nodes are busy") go to their own file
    done = cluster.sbatch("--wait", f"--output={tmp_path / 'out.txt'}", f"--error={tmp_path / 'err.txt'}", job,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    text = (tmp_path / "out.txt").read_text()
    started = {block.split("\n", 1)[0]: block.split("\n", 1)[1].strip() for block in text.split("== ")[1:]}
    assert len(started["whole"].splitlines()) == 8 and "n2 7 3 8 3 3" in started["whole"], text
    for dropped in ("--ntasks-per-node=4", "--gpus-per-node=4"):
        assert derived_by_the_launcher("srun", ["srun", *lines[dropped]], [dropped], 2, header)
        assert started[dropped] == started["whole"], (dropped, text)
    # and where the header gives nothing, the step differs: every task sees all four GPUs
    assert started["--gpu-bind=map_gpu:0,1,2,3"] != started["whole"], text


@pytest.mark.parametrize("path", CHECKED, ids=[p.stem for p in CHECKED])
def test_the_real_launcher_accepts_every_published_line(path):
    """Every case's launch line as rendered is one the installed srun (Slurm 22.05) or Open MPI mpirun
    takes whole, values included (a centre's SPANK plugin option aside, where its own line names it)."""
    case = _case(path)
    site, job = render_case(path)
    named = named_options(checks_of_plan(case, site, _plan(site, case.get("request", {}))))
    assert launcher_refuses(job, named) is None


def test_the_launchers_refuse_what_they_cannot_run():
    """The verdicts can fail: an unknown option, a mask or distribution srun cannot parse, an MPI
    plugin it lacks; an option Open MPI's mpirun does not know. A centre's plugin option passes only
    where the centre's line names it."""
    srun, mpirun = require_tool("srun"), require_tool("mpirun")
    assert srun_refuses(srun, ("--nodes=2", "--ntasks-per-node=4", "--cpu-bind=cores")) is None
    for wrong in (FOREIGN_OPTION, "--cpu-bind=mask_cpu:zz", "--distribution=blerg", "--mpi=nosuch", "--mpibind=off"):
        assert srun_refuses(srun, ("--nodes=2", wrong)) is not None, wrong
    assert srun_refuses(srun, ("--nodes=2", "--mpibind=off"), frozenset({"--mpibind"})) is None
    assert mpirun_refuses(mpirun, ("-np", "8", "--map-by", "ppr:4:node", "--bind-to", "core")) is None
    assert mpirun_refuses(mpirun, (FOREIGN_OPTION, "-np", "8")) is not None
