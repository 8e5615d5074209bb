"""Executors speak one vocabulary: submit -> job id, status, cancel, output; missing tools are named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import FIXTURE_SITES, RECIPES, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.executors import executor_for
from hpcdl.executors.local import job_environment
from hpcdl.executors.pbs import _qstat_fields
from hpcdl.executors.slurm import _exit_code, _fields, _state
from hpcdl.executors.staging import check_copy, stage


def tiny_recipe(folder, max_iter=3, name="tiny"):
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "net": "cifar10_quick", "data": {"source": "digits", "image_size": 32},
        "batch_size": 8, "base_lr": 0.01, "max_iter": max_iter, "display": 1,
    }))
    return path


def env_without(program: str, tmp_path: Path) -> dict:
    """A PATH with hpcdl's Python and the basic tools but without `program`."""
    import sys

    return {"PATH": f"{Path(sys.executable).parent}:/nonexistent-bin", "HPCDL_SITE_PATH": str(FIXTURE_SITES),
            "HPCDL_LOCAL_JOBS": str(tmp_path / "jobs")}


@pytest.mark.parametrize("site, program", [("test-lsf-power9", "bsub"), ("test-pbs-xeon", "qsub")])
def test_submitting_without_the_schedulers_command_names_the_missing_command(site, program, tmp_path):
    proc = hpcdl("submit", "--site", site, RECIPES / "digits-quick.yaml", "--out", tmp_path / "job",
                 env=env_without(program, tmp_path))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"`{program}` is not on PATH" in lines[0]


@pytest.mark.parametrize("name, program", [("lsf", "bjobs"), ("pbs", "qstat"), ("slurm", "squeue")])
def test_status_without_the_schedulers_command_names_it(name, program, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HpcdlError, match=f"`{program}` is not on PATH"):
        executor_for(name).status("123")


def test_dry_run_writes_the_script_and_shows_the_submit_command(tmp_path, fixture_sites):
    for site, expect in (("ci-slurm", "sbatch --parsable --chdir="), ("test-lsf-power9", "bsub -cwd "),
                         ("test-pbs-xeon", "qsub -V -v HPCDL_JOB_DIR=")):
        job = tmp_path / site
        proc = hpcdl("submit", "--dry-run", "--site", site, RECIPES / "digits-quick.yaml", "--out", job,
                     env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
        assert proc.returncode == 0, proc.stderr
        assert expect in proc.stdout and (job / "job.sh").exists()
    assert "< " in proc.stdout or "bsub" not in proc.stdout


def test_a_rendered_script_is_submitted_to_the_scheduler_its_directives_name(tmp_path, fixture_sites):
    script = tmp_path / "rendered.sh"
    hpcdl("render", "--site", "test-lsf-power9", RECIPES / "digits-quick.yaml", "-o", script,
          env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)}, check=True)
    proc = hpcdl("submit", "--dry-run", script, "--out", tmp_path / "job")
    assert proc.returncode == 0 and "would run: bsub -cwd" in proc.stdout
    assert (tmp_path / "job" / "job.sh").read_text() == script.read_text()


def test_status_of_a_job_hpcdl_did_not_submit_asks_for_the_scheduler(tmp_path):
    proc = hpcdl("status", "4242", env={"HPCDL_LOCAL_JOBS": str(tmp_path / "jobs")})
    assert proc.returncode == 2 and "--scheduler" in proc.stderr


@pytest.mark.slow
def test_the_local_executor_submits_reports_and_cancels(tmp_path):
    env = {"HPCDL_LOCAL_JOBS": str(tmp_path / "jobs")}
    proc = hpcdl("submit", "--site", "local", tiny_recipe(tmp_path), "--out", tmp_path / "done", env=env)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[-1]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        shown = json.loads(hpcdl("status", job_id, "--json", env=env, check=True).stdout)
        if shown["state"] not in ("PENDING", "RUNNING"):
            break
        time.sleep(1)
    assert shown["state"] == "COMPLETED" and shown["exit_code"] == 0 and shown["scheduler"] == "local"
    assert json.loads((tmp_path / "done" / "results.jsonl").read_text().splitlines()[-1])["event"] == "final"

    proc = hpcdl("submit", "--site", "local", tiny_recipe(tmp_path, 100_000, "long"), "--out", tmp_path / "long",
                 env=env)
    job_id = proc.stdout.split()[-1]
    assert hpcdl("cancel", job_id, env=env).returncode == 0
    shown = json.loads(hpcdl("status", job_id, "--json", env=env, check=True).stdout)
    assert shown["state"] == "CANCELLED"


@pytest.mark.slow
def test_the_warning_signal_reaches_the_ranks_and_ends_the_job(tmp_path):
    """SIGUSR1 to the batch shell (what Slurm's --signal=B:USR1 sends) is forwarded to the launcher."""
    script = tmp_path / "job.sh"
    hpcdl("render", "--site", "local", tiny_recipe(tmp_path, 100_000, "long"), "-o", script, check=True)
    job_dir = tmp_path / "job"
    with open(tmp_path / "out.log", "w") as log:
        proc = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT,
                                env=job_environment(job_dir), cwd=tmp_path)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "iter" not in (tmp_path / "out.log").read_text():
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGUSR1)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    assert "got SIGUSR1" in (tmp_path / "out.log").read_text()


def test_slurm_states_and_exit_codes_read_in_hpcdls_words():
    assert _state("CANCELLED by 0") == "CANCELLED"
    assert _state("NODE_FAIL") == "FAILED" and _state("COMPLETING") == "RUNNING" and _state("") == "UNKNOWN"
    assert _exit_code("3:0") == 3 and _exit_code("0:15") == 143 and _exit_code("0:0") == 0
    fields = _fields("JobId=7 JobName=a b=c JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 StdOut=/x y/o.out")
    assert fields["JobName"] == "a b=c" and fields["JobState"] == "FAILED" and fields["StdOut"] == "/x y/o.out"


def test_qstat_fields_are_read_with_their_continuation_lines():
    text = "Job Id: 12.pbs\n    job_state = F\n    Exit_status = 1\n    Output_Path = host:/home/u/very/long\n\tpath/j.o12\n"
    fields = _qstat_fields(text)
    assert fields["job_state"] == "F" and fields["Exit_status"] == "1"
    assert fields["Output_Path"] == "host:/home/u/very/longpath/j.o12"


def test_a_job_id_that_is_not_one_is_refused_before_any_command_runs():
    with pytest.raises(HpcdlError, match="job id"):
        executor_for("slurm").cancel("1; scancel -u root")


def test_staging_copies_checks_and_reuses_a_complete_copy(tmp_path, capsys):
    data = tmp_path / "shared" / "imagenet"
    (data / "train").mkdir(parents=True)
    (data / "train" / "a.tar").write_bytes(b"a" * 2000)
    (data / "val.tar").write_bytes(b"v" * 100)
    target = stage(data, tmp_path / "nvme")
    assert target == tmp_path / "nvme" / "imagenet"
    assert check_copy(data, target) == (2, 2100)
    stage(data, tmp_path / "nvme")
    assert "already holds 2 file(s)" in capsys.readouterr().out
    (target / "val.tar").write_bytes(b"v" * 10)  # a short copy is found and named
    with pytest.raises(HpcdlError, match="1 of the wrong size"):
        check_copy(data, target)
    stage(data, tmp_path / "nvme")  # and replaced by a whole one
    assert (target / "val.tar").stat().st_size == 100
    assert not list((tmp_path / "nvme").glob(".*partial*"))


def test_staging_a_missing_data_set_names_the_path(tmp_path):
    with pytest.raises(HpcdlError, match="data.path"):
        stage(tmp_path / "nope", tmp_path / "nvme")


def _slurm_of_several_clusters(folder: Path, cluster: str) -> Path:
    """sbatch, squeue, scontrol and scancel as a Slurm controller of several clusters answers them, whose default
    cluster is not `cluster` (VSC's wICE: "Our Slurm scheduler is aware of multiple clusters and wice is not the default
    one"): sbatch --parsable of a script that names the cluster prints "jobid;cluster" (sbatch(1), --parsable); a
    command about the job that does not name the cluster asks the default one, which knows no such job. Stand-ins,
    since a real Slurm resolves cluster names only through an accounting database the test Slurm does not run; each
    logs its arguments."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    log = folder / "slurm.log"
    on = f"--clusters={cluster}"
    scripts = {
        "sbatch": f'echo "4242;{cluster}"',
        "squeue": f'case " $* " in *" {on} "*) echo RUNNING;; *) echo "slurm_load_jobs error: Invalid job id '
                  f'specified" >&2; exit 1;; esac',
        "scontrol": f'case " $* " in *" {on} show job "*) echo "JobId=4242 JobState=RUNNING ExitCode=0:0 '
                    f'StdOut={folder}/job-4242.out";; *) echo "slurm_load_jobs error: Invalid job id specified" >&2; '
                    f'exit 1;; esac',
        "scancel": f'case " $* " in *" {on} "*) ;; *) echo "scancel: error: Invalid job id 4242" >&2; exit 1;; esac',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{body}\n')
        path.chmod(0o755)
    return bin_dir


def test_a_job_sent_to_a_named_cluster_is_followed_and_cancelled_there(tmp_path):
    import sys

    script = tmp_path / "rendered.sh"
    hpcdl("render", "--site", "wice-gpu", RECIPES / "digits-quick.yaml", "-A", "lp_myproject", "-o", script, check=True)
    assert "#SBATCH --cluster=wice" in script.read_text()
    bin_dir = _slurm_of_several_clusters(tmp_path, "wice")
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "HPCDL_LOCAL_JOBS": str(tmp_path / "state" / "jobs")}
    proc = hpcdl("submit", script, "--out", tmp_path / "job", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "4242"
    shown = json.loads(hpcdl("status", "4242", "--json", env=env, check=True).stdout)
    assert shown["state"] == "RUNNING" and shown["output"] == str(tmp_path / "job-4242.out")
    assert hpcdl("cancel", "4242", env=env).returncode == 0
    asked = (tmp_path / "slurm.log").read_text().splitlines()
    assert [line.split()[0] for line in asked if "--clusters=wice" not in line] == ["sbatch"], asked
    assert any(line.startswith("scancel --clusters=wice 4242") for line in asked)


def test_a_cluster_name_that_is_not_one_is_refused():
    from hpcdl.executors.slurm import SlurmExecutor

    executor = SlurmExecutor()
    executor.cluster = "wice --uid=0"
    with pytest.raises(HpcdlError, match="is not a cluster name"):
        executor.status("4242")
