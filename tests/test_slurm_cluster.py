"""Rendered jobs on a real Slurm started on this machine: they train, fail, and cancel as Slurm says.

The cluster (munge, slurmctld, slurmd) comes from the session fixture `slurm_clusters`
(tests/slurm_cluster.py) and is torn down after the tests whatever happened.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from conftest import FIXTURE_SITES, hpcdl

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def tiny_recipe(folder, max_iter=4, name="tiny"):
    """cifar10_quick on the digits, a few steps: enough to prove two ranks train together."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "net": "cifar10_quick", "data": {"source": "digits", "image_size": 32},
        "batch_size": 8, "base_lr": 0.01, "max_iter": max_iter, "display": 1, "random_seed": 1,
    }))
    return path


@pytest.fixture
def slurm_env(tmp_path, monkeypatch):
    """What every hpcdl call in these tests sees: the test sites and a private submission record."""
    monkeypatch.setenv("HPCDL_SITE_PATH", str(FIXTURE_SITES))
    monkeypatch.setenv("HPCDL_LOCAL_JOBS", str(tmp_path / "state" / "local-jobs"))
    return {"HPCDL_SITE_PATH": str(FIXTURE_SITES), "HPCDL_LOCAL_JOBS": str(tmp_path / "state" / "local-jobs")}


@pytest.fixture
def one_node(slurm_clusters, slurm_env, monkeypatch):
    cluster = slurm_clusters.ensure(1)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    return cluster


@pytest.fixture
def two_nodes(slurm_clusters, slurm_env, monkeypatch):
    cluster = slurm_clusters.ensure(2)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    return cluster


def submit(cluster, tmp_path, *args, job_dir=None) -> tuple[str, object]:
    job_dir = job_dir or tmp_path / "job"
    proc = hpcdl("submit", "--site", "ci-slurm", "--out", job_dir, *args, cwd=tmp_path,
                 env={"SLURM_CONF": str(cluster.conf)}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split()[-1], job_dir


def wait_until(job_id, done, timeout=240):
    from hpcdl.executors import executor_for

    slurm = executor_for("slurm")
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = slurm.status(job_id)
        if done(state):
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {state} after {timeout} s")


def results(job_dir) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "results.jsonl").read_text().splitlines()]


def output_of(cluster, job_id) -> str:
    from hpcdl.executors import executor_for

    return executor_for("slurm").output(job_id).read_text(errors="replace")


def test_a_rendered_job_trains_two_ranks_on_one_node_and_completes(one_node, tmp_path):
    recipe = tiny_recipe(tmp_path)
    job_id, job_dir = submit(one_node, tmp_path, recipe, "--nodes", "1")
    state = wait_until(job_id, lambda s: s.finished)
    assert state.state == "COMPLETED", output_of(one_node, job_id)
    assert state.exit_code == 0
    records = results(job_dir)
    final = records[-1]
    assert final["event"] == "final"
    assert final["ranks"] == 2 and final["nodes"] == 1 and final["iter"] == 4
    assert sum(r["event"] == "step" for r in records) == 4
    # the CLI reads the same state back
    proc = hpcdl("status", job_id, "--json", env={"SLURM_CONF": str(one_node.conf)}, check=True)
    shown = json.loads(proc.stdout)
    assert shown["state"] == "COMPLETED" and shown["scheduler"] == "slurm"
    assert shown["output"].startswith(str(job_dir))


def test_a_job_whose_trainer_fails_is_reported_failed(one_node, tmp_path):
    recipe = tiny_recipe(tmp_path, name="doomed")
    # --max-iter 0 is refused by the trainer (exit status 2) inside the job
    job_id, job_dir = submit(one_node, tmp_path, recipe, "--", "--max-iter", "0")
    state = wait_until(job_id, lambda s: s.finished)
    assert state.state == "FAILED"
    assert state.exit_code not in (None, 0)
    assert not (job_dir / "results.jsonl").exists()


def test_a_running_job_is_cancelled_and_its_odd_name_reaches_slurm_intact(one_node, tmp_path):
    name = "odd name \"q\" 'q' $(touch CANARY) `touch CANARY` ; # \\ end"
    recipe = tiny_recipe(tmp_path, max_iter=100_000, name="long")
    job_id, job_dir = submit(one_node, tmp_path, recipe, "--name", name)
    wait_until(job_id, lambda s: s.state == "RUNNING", timeout=120)
    shown = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%j"], capture_output=True, text=True,
                           env={**one_node.env})
    assert shown.stdout.rstrip("\n") == name  # sbatch read the escaped directive back byte for byte
    proc = hpcdl("cancel", job_id, env={"SLURM_CONF": str(one_node.conf)})
    assert proc.returncode == 0, proc.stderr
    state = wait_until(job_id, lambda s: s.finished, timeout=60)
    assert state.state == "CANCELLED"
    assert not list(tmp_path.rglob("CANARY")) and not list(job_dir.rglob("CANARY"))


def test_the_requeue_warning_reaches_the_ranks_and_requeues_the_job(one_node, tmp_path):
    """What --signal=B:USR1@T does at the time limit, sent now with scancel --signal=USR1 --batch."""
    recipe = tiny_recipe(tmp_path, max_iter=100_000, name="requeued")
    job_id, job_dir = submit(one_node, tmp_path, recipe, "--requeue", "--time", "00:10:00", "--warning", "120")
    script = (job_dir / "job.sh").read_text()
    assert "#SBATCH --signal=B:USR1@120" in script and "#SBATCH --requeue" in script
    wait_until(job_id, lambda s: s.state == "RUNNING", timeout=120)
    time.sleep(3)  # let the batch shell reach its trap
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True, env=one_node.env)
    deadline = time.monotonic() + 120
    restarts = "0"
    while time.monotonic() < deadline:
        fields = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                                env=one_node.env).stdout
        restarts = next((w.split("=", 1)[1] for w in fields.split() if w.startswith("Restarts=")), "0")
        if restarts != "0":
            break
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], env=one_node.env)
    assert restarts != "0", output_of(one_node, job_id)
    wait_until(job_id, lambda s: s.finished, timeout=60)


def test_a_job_spanning_two_pretend_nodes_trains_one_rank_on_each(two_nodes, tmp_path):
    recipe = tiny_recipe(tmp_path)
    job_id, job_dir = submit(two_nodes, tmp_path, recipe, "--nodes", "2", "--ranks-per-node", "1")
    state = wait_until(job_id, lambda s: s.finished)
    assert state.state == "COMPLETED", output_of(two_nodes, job_id)
    fields = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                            env=two_nodes.env).stdout
    assert "NodeList=n[1-2]" in fields
    final = results(job_dir)[-1]
    assert final["event"] == "final" and final["ranks"] == 2 and final["nodes"] == 2


def test_hostile_account_output_folder_and_trainer_arguments_run_nothing_under_slurm(one_node, tmp_path):
    # no accounting here, so Slurm takes any account and shows it back
    account = "acct ; touch canary-account $(touch canary-account) `touch canary-account`"
    out_dir = tmp_path / "out $(touch canary-out) ; `touch canary-out` 'q' \"q\""
    out_dir.mkdir()
    recipe = tiny_recipe(tmp_path, name="hostile")
    job_id, job_dir = submit(one_node, tmp_path, recipe, "--account", account, "--output-dir", out_dir,
                             "--", "--max-iter", "$(touch canary-arg)", "; touch canary-arg")
    state = wait_until(job_id, lambda s: s.finished)
    assert state.state == "FAILED"  # the trainer refused the odd arguments
    assert not list(tmp_path.rglob("canary-*"))
    fields = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, env=one_node.env).stdout
    assert f"Account={account}" in fields
    outputs = list(out_dir.glob("hostile-*.out"))
    assert len(outputs) == 1 and "Invalid value for '--max-iter'" in outputs[0].read_text()


def test_the_clients_submit_with_a_login_shells_user_and_logname(tmp_path, monkeypatch):
    """sbatch hands a job the submitting shell's environment, and a login shell always has USER and LOGNAME,
    which profiles may use in a job's paths (CARC Discovery: `TMPDIR=/scratch1/$USER/tmp` under `set -u`); the
    cluster's clients get them from the password database where this process was started without them, so the
    posed machine runs a job as it would be submitted from a login node. Building the cluster starts nothing."""
    import pwd
    import os
    from hpcdl.cluster import SlurmCluster
    name = pwd.getpwuid(os.getuid()).pw_name
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.setenv("LOGNAME", "")
    env = SlurmCluster(tmp_path).env
    assert env["USER"] == name and env["LOGNAME"] == name
    assert env["SLURM_CONF"] == str(tmp_path / "slurm.conf")
    monkeypatch.setenv("USER", "someone")
    assert SlurmCluster(tmp_path).env["USER"] == "someone"  # a login's own is kept


def test_a_job_that_keeps_the_submitting_environment_out_writes_into_hpcdl_submits_folder(one_node, tmp_path):
    """Under `#SBATCH --export=NONE` (NHR@FAU's Alex, VSC's Hortense; wICE's Slurm does it by itself) the
    HPCDL_JOB_DIR hpcdl submit hands sbatch never reaches the job, which then made a folder of its own under
    the submit folder (hpcdl-runs/<name>-<id>) where `hpcdl status` and `results` do not look. sbatch runs in
    the job's folder, which hpcdl holds, and the job takes that."""
    sites = tmp_path / "sites"
    sites.mkdir()
    site = yaml.safe_load((FIXTURE_SITES / "ci-slurm.yaml").read_text())
    site.setdefault("defaults", {}).setdefault("directives", []).append("--export=NONE")
    (sites / "ci-slurm.yaml").write_text(yaml.safe_dump(site))
    job_dir = tmp_path / "job"
    proc = hpcdl("submit", "--site", "ci-slurm", "--out", job_dir, tiny_recipe(tmp_path), "--nodes", "1",
                 cwd=tmp_path, env={"SLURM_CONF": str(one_node.conf), "HPCDL_SITE_PATH": str(sites)}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_until(proc.stdout.split()[-1], lambda s: s.finished)
    # the plan and the recipe the job writes first are in the job's folder (its ranks, started with the
    # login environment alone, find no hpcdl here: a site's job loads hpcdl's module itself)
    assert (job_dir / "plan.json").is_file() and (job_dir / "recipe.json").is_file()
    assert not (job_dir / "hpcdl-runs").exists()
