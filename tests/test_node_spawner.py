"""launch.spawner: srun starts ONE task per node and a per-node launcher spawns that node's ranks.

NRIS publishes it for Olivia (documentation.sigma2.no, PyTorch on Olivia, multi-node: `#SBATCH --nodes=2
--ntasks-per-node=1 --gpus-per-node=4 --cpus-per-task=72`, `srun torchrun --nnodes="${SLURM_JOB_NUM_NODES}"
--nproc_per_node="${SLURM_GPUS_ON_NODE}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_backend=c10d
--rdzv_endpoint="${head_node}:29500"`, head_node the first host of `scontrol show hostnames "${SLURM_JOB_NODELIST}"`;
its container path `srun apptainer exec --nv ... torchrun ...`). The plan stays the same data (its ranks, cores and
GPUs), and records the spawner; the header and srun ask one task a node holding its ranks' CPUs and GPUs; torchrun's
words come from the plan; each rank binds itself from plan.json and reads torchrun's RANK/LOCAL_RANK/WORLD_SIZE.
A real Slurm 22.05 (tests/slurm_cluster.py) runs a rendered job whose torchrun agents rendezvous across two nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from hpcdl.plan import JobRequest, make_plan
from hpcdl.plan.model import Plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites.registry import load_site
from hpcdl.sites.schema import Site
from hpcdl.train.ranks import rank_info

POSED = """
name: spawned
description: two sockets of 4 cores and 2 GPUs each, whose centre runs one torchrun per node under srun
scheduler: slurm
launcher: srun
runtime: none
mpi: mpich
node_kinds:
  gpu:
    description: 2 x 4 cores, 4 GPUs
    count: 4
    cpu_model: posed
    sockets: 2
    cores_per_socket: 4
    threads_per_core: 1
    memory_gb: 64
    gpus:
      - {model: posed, socket: 0}
      - {model: posed, socket: 0}
      - {model: posed, socket: 1}
      - {model: posed, socket: 1}
launch:
  spawner: torchrun
  gpu_visibility: node
environment: {kind: venv, activate: /opt/venv, prefer: true}
"""


def _site(text: str = POSED, **launch) -> Site:
    data = yaml.safe_load(text)
    data["launch"].update(launch)
    return Site.model_validate(data)


def _launch_line(script: str) -> list[str]:
    import shlex

    line = next(line for line in script.splitlines() if line.endswith(" &") and " train " in line)
    return shlex.split(line[:-2])


def test_the_plan_keeps_its_ranks_and_records_the_spawner():
    spawned, own = _site(), _site(spawner="none")
    request = JobRequest(nodes=3)
    a, b = make_plan(spawned, request), make_plan(own, request)
    assert a.ranks == b.ranks and a.ranks_per_node == b.ranks_per_node == 4
    assert [r.cores for r in a.local_ranks()] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [r.gpus for r in a.local_ranks()] == [(0,), (1,), (2,), (3,)]
    assert a.spawner == "torchrun" and b.spawner is None
    data = a.to_dict()
    assert data["spawner"] == "torchrun" and data["spawner_argv"][0] == "torchrun"
    assert Plan.from_dict(json.loads(json.dumps(data))) == a
    assert "spawner" not in b.to_dict() and "spawner_argv" not in b.to_dict()  # other plans read as before


def test_the_header_and_srun_ask_one_task_per_node_with_its_ranks_cpus():
    site = _site()
    plan = make_plan(site, JobRequest(nodes=3))
    script = render_job_script(site, plan, {}, JobOptions())
    header = [line for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert {"#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8",
            "#SBATCH --gpus-per-node=4"} <= set(header)
    assert list(plan.launcher_argv) == ["srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--cpus-per-task=8",
                                        "--gpus-per-node=4", "--gpu-bind=none"]
    # nothing binds a rank's cores but the rank (from plan.json): no --cpu-bind, mask or distribution
    assert not any(w.startswith(("--cpu-bind", "--distribution", "--hint")) for w in plan.launcher_argv)
    # a bare srun under the header (NRIS's `srun torchrun ...`) restates none of it
    bare = _site(srun_layout="header", gpu_bind_default="none")
    plan = make_plan(bare, JobRequest(nodes=2, ranks_per_node=2))
    script = render_job_script(bare, plan, {}, JobOptions())
    assert list(plan.launcher_argv) == ["srun"]
    assert "#SBATCH --cpus-per-task=8" in script and "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in script


def test_torchruns_words_come_from_the_plan_and_the_jobs_rendezvous():
    for nodes, per_node in ((2, 4), (3, 2)):
        site = _site(master_port=29500) if nodes == 2 else _site()
        plan = make_plan(site, JobRequest(nodes=nodes, ranks_per_node=per_node))
        argv = _launch_line(render_job_script(site, plan, {}, JobOptions()))
        at = argv.index("torchrun")
        assert argv[at:at + 7] == ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={per_node}",
                                   "--rdzv_id=${SLURM_JOB_ID}", "--rdzv_backend=c10d",
                                   "--rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT}", "--no-python"]
        assert argv[at + 7:at + 9] == ["hpcdl", "train"]
    # hpcdl's own: hpcdl launch, its node's rank from SLURM_NODEID
    site = _site(spawner="hpcdl")
    plan = make_plan(site, JobRequest(nodes=2))
    argv = _launch_line(render_job_script(site, plan, {}, JobOptions()))
    assert argv[argv.index("launch") - 1:][:8] == ["hpcdl", "launch", "--nproc", "4", "--nnodes", "2", "--", "hpcdl"]


def test_a_static_rendezvous_gives_each_nodes_torchrun_its_own_node_rank(tmp_path):
    """launch.spawner_rendezvous: static (RWTH HPC on CLAIX-2023: `multiproc.py --nproc_per_node ${SLURM_GPUS_PER_NODE}
    --nnodes ${SLURM_NNODES} --node_rank ${SLURM_NODEID} --master_addr ${MASTER_ADDR} --master_port ${MASTER_PORT}`,
    inside the task's `bash -c '... train.sh'`): each node's torchrun is told its own SLURM_NODEID, read by a bash on
    the node, since the batch shell's is node 0's; the program's words pass through as they are."""
    site = _site(spawner_rendezvous="static", master_port=12340)
    plan = make_plan(site, JobRequest(nodes=2))
    line = next(line for line in render_job_script(site, plan, {}, JobOptions()).splitlines()
                if line.endswith(" &") and " train " in line)
    assert plan.spawner_argv[:2] == ("/bin/bash", "-c") and plan.spawner_argv[3] == "bash"
    assert "--rdzv" not in plan.spawner_argv[2] and " bash hpcdl train " in line
    # what a node's task runs, with a torchrun that prints its words: node 1's rank is 1, the job's host and port
    fake = tmp_path / "torchrun"
    fake.write_text('#!/bin/sh\nfor w in "$@"; do printf "%s\\n" "$w"; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_NODEID": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "12340"}
    ran = subprocess.run(["/bin/bash", "-c", line[line.index("/bin/bash"):-2]], env=env, capture_output=True,
                         text=True, check=True)
    assert ran.stdout.splitlines() == ["--nnodes=2", "--nproc_per_node=4", "--node_rank=1", "--master_addr=n1",
                                       "--master_port=12340", "--no-python", "hpcdl", "train", "recipe.json", "--plan",
                                       "plan.json", "--results", "results.jsonl"]
    # the default stays c10d, and a one-node job's --standalone wins where the centre asks it
    assert make_plan(_site(), JobRequest(nodes=2)).spawner_argv[4] == "--rdzv_backend=c10d"
    alone = make_plan(_site(spawner_rendezvous="static", spawner_one_node="standalone"), JobRequest(nodes=1))
    assert alone.spawner_argv[:2] == ("torchrun", "--standalone")


def test_the_installed_torchrun_starts_a_one_node_job_at_localhost(tmp_path):
    """launch.spawner_one_node: localhost (MIT ORCD: 'torchrun --nnodes=1 --nproc_per_node=4 --rdzv_id=$SLURM_JOB_ID
    --rdzv_endpoint="localhost:1234"', no backend named): the plan's torchrun words, run by the installed torchrun with
    the job's id and port, start every worker of the node, ranks 0 and 1 of 2, meeting at localhost."""
    words = make_plan(_site(spawner_one_node="localhost"), JobRequest(nodes=1, ranks_per_node=2)).spawner_argv
    assert not any(str(w).startswith("--rdzv_backend") for w in words)
    port = str(20000 + os.getpid() % 20000)
    line = " ".join(str(w) for w in words[1:])
    torchrun = Path(sys.executable).parent / "torchrun"
    ran = subprocess.run(["/bin/bash", "-c", f'exec "$0" {line} "$@"', str(torchrun), "/bin/bash", "-c",
                          'echo "$RANK $WORLD_SIZE $MASTER_ADDR"'],
                         env={**os.environ, "SLURM_JOB_ID": "7", "MASTER_PORT": port}, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert sorted(ran.stdout.split("\n"))[1:] == ["0 2 localhost", "1 2 localhost"], ran.stdout


def test_a_container_runs_torchrun_inside_it():
    site = _site(POSED.replace("runtime: none", "runtime: apptainer").replace(
        "environment: {kind: venv, activate: /opt/venv, prefer: true}", ""))
    plan = make_plan(site, JobRequest(nodes=2))
    argv = _launch_line(render_job_script(site, plan, {}, JobOptions(image="/images/torch.sif")))
    at = argv.index("apptainer")
    assert argv[:at] == list(plan.launcher_argv) and argv[at:at + 2] == ["apptainer", "exec"]
    assert "--nv" in argv[at:argv.index("torchrun")] and argv.index("/images/torch.sif") < argv.index("torchrun")


def test_the_rendezvous_host_from_the_node_list():
    site = _site(master_addr="node-list")
    script = render_job_script(site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions())
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script.splitlines()
    assert "MASTER_ADDR=$(hostname)" not in script
    # Princeton's Della takes it so (its published form)
    della = load_site("della-gpu")
    script = render_job_script(della, make_plan(della, JobRequest(nodes=2)), {}, JobOptions())
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script.splitlines()


@pytest.mark.parametrize("change,words", [
    ({"launcher": "mpirun"}, "launch.spawner: torchrun is started once per node by srun"),
    ({"launch": {"gpu_visibility": "per-rank"}}, "launch.spawner: torchrun's ranks share one task's GPUs"),
    ({"defaults": {"gpu_request": "gpus-per-task"}}, "launch.spawner: torchrun runs one task per node"),
    ({"launch": {"cpu_bind_default": "auto"}}, "launch.spawner: torchrun's ranks share one task"),
    ({"launch": {"wrapper": ["bind.sh"]}}, "launch.spawner: torchrun starts the ranks"),
    ({"defaults": {"batch_request": "nodes"}}, "launch.spawner: torchrun asks one task per node"),
    ({"launch": {"spawner": "mpirun"}}, "launch.spawner"),
    ({"launch": {"spawner": "hpcdl", "spawner_rendezvous": "static"}}, "launch.spawner_rendezvous: static"),
    ({"launch": {"spawner_rendezvous": "etcd"}}, "spawner_rendezvous"),
    ({"scheduler": "pbs", "launcher": "mpirun", "launch": {"spawner": "none", "master_addr": "node-list"}},
     "launch.master_addr"),
])
def test_bad_combinations_are_refused_at_load_naming_the_field(change, words):
    data = yaml.safe_load(POSED)
    for key, value in change.items():
        if isinstance(value, dict):
            data.setdefault(key, {}).update(value)
        else:
            data[key] = value
    with pytest.raises(ValueError) as caught:
        Site.model_validate(data)
    assert words in str(caught.value)


def test_the_trainer_reads_torchruns_ranks_before_sruns():
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
           "SLURM_LOCALID": "0"}
    me = rank_info(env)
    assert (me.rank, me.world_size, me.local_rank, me.launcher) == (5, 8, 1, "torchrun")


def test_hpcdl_launch_numbers_a_nodes_ranks_after_the_nodes_before_it(tmp_path):
    """`hpcdl launch --nproc 2 --nnodes 3` on node 1 (SLURM_NODEID, as srun sets it) starts ranks 2 and 3 of 6."""
    out = tmp_path / "ranks"
    program = [sys.executable, "-c", "import os, sys; open(sys.argv[1] + os.environ['RANK'], 'w').write("
               "' '.join(os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR')))", str(out)]
    env = {**os.environ, "SLURM_NODEID": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "29500",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-m", "hpcdl", "launch", "--nproc", "2", "--nnodes", "3", "--", *program],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.read_text() for p in tmp_path.glob("ranks*")) == ["2 0 6 n1", "3 1 6 n1"]
    env.pop("SLURM_NODEID")
    done = subprocess.run([sys.executable, "-m", "hpcdl", "launch", "--nproc", "2", "--nnodes", "3", "--", *program],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--nnodes" in done.stderr and "SLURM_NODEID" in done.stderr


def test_olivia_runs_ranks_as_nris_does():
    site = load_site("olivia")
    assert site.launch.spawner == "torchrun" and site.launch.master_addr == "node-list"
    plan = make_plan(site, JobRequest(nodes=2))
    assert plan.spawner == "torchrun" and list(plan.launcher_argv) == ["srun"]
    assert [r.cores[0] for r in plan.local_ranks()] == [0, 72, 144, 216]  # each superchip's cores, as before


PROBE = textwrap.dedent("""
    import json, os, sys
    import torch
    import torch.distributed as dist
    from hpcdl.train.binding import apply_plan, load_plan
    from hpcdl.train.ranks import rank_info
    me = rank_info()
    applied = apply_plan(load_plan("plan.json"), me)
    dist.init_process_group("gloo")
    total = torch.tensor([float(me.rank)])
    dist.all_reduce(total)
    with open(os.path.join(sys.argv[1], f"rank-{me.rank}.json"), "w") as out:
        out.write(json.dumps({
        "rank": me.rank, "world": me.world_size, "local": me.local_rank, "launcher": me.launcher,
        "node": os.environ.get("SLURMD_NODENAME"), "task": os.environ.get("SLURM_PROCID"),
        "sum": total.item(), "affinity": sorted(os.sched_getaffinity(0)), "applied": applied.get("cpus"),
        "bound": applied.get("bound")}))
    dist.destroy_process_group()
""")


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("spawner", ["torchrun", "hpcdl", "torchrun-static"])
def test_a_rendered_job_spawns_each_nodes_ranks_under_a_real_srun(slurm_clusters, tmp_path, spawner):
    """The real slurmd 22.05 with two pretend nodes: the rendered job's srun starts one task on each, whose spawner
    starts that node's two ranks; all four rendezvous (gloo, on the job's first host) and agree on the sum."""
    from hpcdl.cluster import site_profile

    cluster = slurm_clusters.ensure(2)
    data = yaml.safe_load(site_profile(2))
    # (the rendezvous at the batch host's name: the pretend nodes' own names, n1 and n2, resolve nowhere on this host)
    data["launch"] = ({"spawner": "torchrun", "spawner_rendezvous": "static"} if spawner == "torchrun-static"
                      else {"spawner": spawner})
    site = Site.model_validate(data)
    plan = make_plan(site, JobRequest(nodes=2, ranks_per_node=2, use_gpus=False, distributed="gloo"))
    (tmp_path / "probe.py").write_text(PROBE)
    script = render_job_script(site, plan, {}, JobOptions(name=f"spawned-{spawner}", output_dir=str(tmp_path)),
                               program=[sys.executable, str(tmp_path / "probe.py"), str(tmp_path)])
    job = tmp_path / "job.sh"
    job.write_text(script)
    bin_dir = str(Path(sys.executable).parent)
    env = {**cluster.env, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "HPCDL_JOB_DIR": str(tmp_path / "run")}
    done = subprocess.run(["sbatch", "--wait", str(job)], env=env, capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    output = "".join(p.read_text() for p in tmp_path.glob("spawned-*.out"))
    assert done.returncode == 0, done.stdout + done.stderr + output + cluster.logs()
    seen = [json.loads(p.read_text()) for p in tmp_path.glob("rank-*.json")]
    assert sorted(s["rank"] for s in seen) == [0, 1, 2, 3], output
    assert {s["world"] for s in seen} == {4} and {s["sum"] for s in seen} == {6.0}
    assert {s["launcher"] for s in seen} == {"torchrun"}  # RANK/WORLD_SIZE/LOCAL_RANK, from either spawner
    assert sorted(s["local"] for s in seen) == [0, 0, 1, 1]
    # one Slurm task per node: every rank of a node is inside its node's one task
    assert sorted((s["node"], s["task"]) for s in seen) == [("n1", "0"), ("n1", "0"), ("n2", "1"), ("n2", "1")]
    if spawner == "torchrun-static":
        # a static rendezvous numbers the nodes by their SLURM_NODEID: node n1's workers are ranks 0 and 1
        assert sorted((s["node"], s["rank"]) for s in seen) == [("n1", 0), ("n1", 1), ("n2", 2), ("n2", 3)]
    # each rank applied its own planned CPUs (pretend nodes on one host share its CPUs: the plan does not pin there)
    for s in seen:
        rank = next(r for r in plan.ranks if r.rank == s["rank"])
        assert s["applied"] == sorted(rank.cpus)
