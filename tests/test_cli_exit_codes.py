"""Exit codes and --json that mean something (issue 16): report fails with a failed row, cancel of
a job the scheduler does not know is an error, validate lists and dry-runs its jobs, run takes
trainer arguments and -J like render and submit."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from conftest import ROOT, hpcdl


def test_report_exits_1_when_a_row_failed(tmp_path):
    example = ROOT / "docs" / "validation-example" / "results.jsonl"
    ok = hpcdl("report", example, "-o", tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    lines = example.read_text().splitlines()
    failed = [line.replace('"result": "pass"', '"result": "fail"', 1) if '"environment/pytorch"' in line else line
              for line in lines]
    bad = tmp_path / "results.jsonl"
    bad.write_text("\n".join(failed) + "\n")
    proc = hpcdl("report", bad, "-o", tmp_path / "bad", "--json")  # --json: the same exit status and files
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "environment/pytorch" in proc.stderr
    assert (tmp_path / "bad" / "index.html").exists()  # the report is still written
    assert json.loads(proc.stdout)["passed"] is False


def _local_env(tmp_path):
    return {"HPCDL_LOCAL_JOBS": str(tmp_path / "jobs")}


def test_cancel_of_a_job_nobody_knows_is_an_error(tmp_path):
    proc = hpcdl("cancel", "424242", "--scheduler", "local", env=_local_env(tmp_path))
    assert proc.returncode == 2 and "424242" in proc.stderr and "cancelled" not in proc.stdout
    proc = hpcdl("cancel", "424242", env=_local_env(tmp_path))
    assert proc.returncode == 2 and "--scheduler" in proc.stderr


def test_cancel_of_a_job_that_already_ended_cancels_nothing(tmp_path):
    env = _local_env(tmp_path)
    script = tmp_path / "quick.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    sent = json.loads(hpcdl("submit", script, "--scheduler", "local", "-o", tmp_path / "job", "--json",
                            env=env, check=True).stdout)
    assert sent["submitted"] is True and sent["scheduler"] == "local"
    job_id = sent["job_id"]
    for _ in range(600):
        if json.loads(hpcdl("status", job_id, "--json", env=env, check=True).stdout)["state"] == "COMPLETED":
            break
        time.sleep(0.2)
    proc = hpcdl("cancel", job_id, "--json", env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    shown = json.loads(proc.stdout)
    assert shown == {"job_id": job_id, "scheduler": "local", "state": "COMPLETED", "cancelled": False}
    assert "already ended" in proc.stderr


def test_submit_dry_run_json(tmp_path):
    shown = json.loads(hpcdl("submit", "-s", "summit", ROOT / "recipes" / "digits-quick.yaml", "--dry-run",
                             "--json", "-o", tmp_path / "job", check=True).stdout)
    assert shown["submitted"] is False and shown["scheduler"] == "lsf"
    assert shown["command"].startswith("bsub") and (tmp_path / "job" / "job.sh").exists()


def test_validate_lists_and_dry_runs_its_jobs_without_a_scheduler(tmp_path):
    listed = json.loads(hpcdl("validate", "-s", "summit", "--list", "--json", check=True).stdout)
    assert listed["scheduler"] == "lsf" and listed["jobs"]
    assert {"environment", "throughput"} <= {c for job in listed["jobs"] for c in job["checks"]}
    assert not list(tmp_path.iterdir())
    out = tmp_path / "val"
    proc = hpcdl("validate", "-s", "summit", "--dry-run", "--checks", "environment", "-o", out, check=True)
    assert "would run: bsub" in proc.stdout
    scripts = list(out.glob("jobs/*/job.sh"))
    assert len(scripts) == 1 and scripts[0].read_text().startswith("#!/bin/bash")
    assert not (out / "results.jsonl").exists()


def test_images_list_json():
    rows = {r["name"]: r for r in json.loads(hpcdl("images", "list", "--json", check=True).stdout)}
    assert rows and all("cpu_target" in r and "mpi" in r for r in rows.values())


@pytest.mark.slow
def test_run_takes_trainer_arguments_and_a_job_name(tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "tiny", "net": "cifar10_quick", "data": {"source": "digits", "image_size": 32},
        "batch_size": 8, "base_lr": 0.01, "max_iter": 100_000, "display": 1,
    }))
    proc = hpcdl("run", "-s", "local", recipe, "-J", "short", "-o", tmp_path / "run", "--json",
                 "--", "--max-iter", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout)  # stdout holds only the JSON
    assert shown["status"] == 0 and shown["final"]["event"] == "final"
    steps = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert max(r["iter"] for r in steps if "iter" in r) <= 2  # the override, not the recipe's 100,000
    script = (tmp_path / "run" / "job.sh").read_text()
    assert "--max-iter 2" in script and "short" in script
    # the ranks ran under mpirun, which gives them a pseudo-terminal: still no escape codes in the log
    log = (tmp_path / "run" / "output.log").read_text()
    assert "\x1b" not in log and "\x1b" not in proc.stderr and "iter      2" in log


def test_local_and_slurm_ids_are_kept_apart(tmp_path):
    env = _local_env(tmp_path)
    script = tmp_path / "quick.sh"
    script.write_text("#!/bin/bash\necho hello from the job\n")
    sent = json.loads(hpcdl("submit", script, "--scheduler", "local", "-o", tmp_path / "job", "--json",
                            env=env, check=True).stdout)
    job_id = sent["job_id"]
    records = tmp_path / "submitted.jsonl"  # beside HPCDL_LOCAL_JOBS
    with open(records, "a") as f:  # a Slurm job that happens to carry the same number
        f.write(json.dumps({"job_id": job_id, "scheduler": "slurm", "job_dir": "/elsewhere"}) + "\n")
    proc = hpcdl("status", job_id, env=env)
    assert proc.returncode == 2 and ("local and slurm" in proc.stderr or "slurm and local" in proc.stderr), proc.stderr
    for _ in range(600):
        shown = json.loads(hpcdl("status", f"local:{job_id}", "--json", env=env, check=True).stdout)
        if shown["state"] == "COMPLETED":
            break
        time.sleep(0.2)
    # the output is in the job folder, as with hpcdl run
    assert shown["output"] == str((tmp_path / "job" / "output.log").resolve())
    assert (tmp_path / "job" / "output.log").read_text() == "hello from the job\n"


@pytest.mark.slow
def test_validate_json_prints_the_verdicts_on_stdout_only(tmp_path):
    proc = hpcdl("validate", "-s", "local", "--checks", "environment", "-o", tmp_path / "val", "--json",
                 env=_local_env(tmp_path), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    shown = json.loads(proc.stdout)
    assert shown["site"] == "local" and shown["verdicts"]
    assert {v["check"] for v in shown["verdicts"]} == {"environment"}
    assert proc.returncode == (1 if any(v["result"] == "fail" for v in shown["verdicts"]) else 0)
