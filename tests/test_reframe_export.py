"""`hpcdl validate --export-reframe DIR`: the suite as ReFrame 4.x tests, run with the real `reframe`.

The fast tests list the exported tests with `reframe -l` (ReFrame loads and checks the file and
the configuration; nothing runs). The Slurm test runs them with `reframe -r` on the local Slurm
(tests/slurm_cluster.py, two pretend nodes) and then checks that hpcdl's own perflog writer,
given the very results.jsonl each ReFrame test read, writes the same perflog lines ReFrame
wrote (all columns but the completion time).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURE_SITES, ROOT, hpcdl

REFERENCES = FIXTURE_SITES / "references" / "ci-slurm.yaml"


def reframe_exe() -> str:
    exe = Path(sys.executable).parent / "reframe"
    if exe.exists():
        return str(exe)
    found = shutil.which("reframe")
    if found:
        return found
    message = "reframe (reframe-hpc, the pyproject `test` extra) is not installed"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def env_for_jobs(extra: dict | None = None) -> dict:
    """hpcdl on PATH (this interpreter's) and this checkout first, for the jobs Slurm starts."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    pythonpath = os.pathsep.join(p for p in (str(ROOT / "platform"), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PATH": path, "PYTHONPATH": pythonpath, "HPCDL_SITE_PATH": str(FIXTURE_SITES),
            **(extra or {})}


def export(tmp_path, *args, env=None):
    out = tmp_path / "rfm"
    proc = hpcdl("validate", *args, "--export-reframe", out, env=env or {"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_export_writes_tests_scripts_and_a_configuration_and_runs_nothing(tmp_path):
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2")
    tests = out / "hpcdl_ci_slurm.py"
    assert tests.is_file() and (out / "settings.py").is_file()
    scripts = sorted((out / "jobs").glob("*.sh"))
    assert len(scripts) == 9 and all(os.access(s, os.X_OK) for s in scripts)
    assert not (tmp_path / "runs").exists()  # nothing was submitted or run
    ast.parse(tests.read_text())
    # each script is hpcdl's own rendering: the srun launch line the validation would submit
    assert all(" --mpi=pmix hpcdl probe " in s.read_text() for s in scripts)


def test_hpcdls_references_become_reframe_reference_tables(tmp_path):
    import yaml

    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2")
    text = (out / "hpcdl_ci_slurm.py").read_text()
    refs = yaml.safe_load(REFERENCES.read_text())["references"]
    # throughput is better high: (target, lower, None, unit); a latency is bounded above only
    tp = refs["throughput/cifar10_quick/pytorch/images_per_sec"]
    assert (f"'throughput/cifar10_quick/pytorch/images_per_sec', 'images/s', ['final', 'images_per_sec_total'], "
            f"({float(tp['value'])}, {tp['tolerance']}, None, 'images/s')") in text
    lat = refs["collectives/gloo/*/latency_us"]
    assert f"({float(lat['value'])}, None, {lat['tolerance']}, 'us')" in text
    # the 2-node job's efficiencies depend on the 1-node jobs that give X(1)
    assert "'hpcdl_1n2x1_b32_i150_cifar10_quick_pytorch_train'" in text
    assert "self.depends_on(baseline)" in text


def test_reframe_lists_the_exported_tests(tmp_path):
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2")
    proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_ci_slurm.py", "-l",
                           "--prefix", tmp_path / "rfm-run"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env_for_jobs())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Found 9 check(s)" in proc.stdout, proc.stdout
    assert "hpcdl_2n1r_collectives" in proc.stdout


def test_a_check_kind_is_a_reframe_tag_and_each_test_says_what_it_is(tmp_path):
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2")
    text = (out / "hpcdl_ci_slurm.py").read_text()
    assert "descr = 'hpcdl collectives: 2 node(s) x 1 rank(s) x 2 thread(s)'" in text
    assert "maintainers = HPCDL_MAINTAINERS" in text
    settings = (out / "settings.py").read_text()
    assert "'.*'" not in settings  # merged into a centre's configuration, it claims no other host
    listed = {}
    for tag in ("collectives", "scaling", "hpcdl"):
        proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_ci_slurm.py", "-l",
                               "-t", f"^{tag}$", "--prefix", tmp_path / "rfm-run"], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env=env_for_jobs())
        assert proc.returncode == 0, proc.stdout + proc.stderr
        listed[tag] = sorted(set(re.findall(r"^\s*(?:- |\^)(hpcdl_\w+)", proc.stdout, flags=re.M)))
    assert listed["collectives"] == ["hpcdl_1n2r_collectives", "hpcdl_2n1r_collectives"]
    assert "hpcdl_2n2x1_b32_i150_cifar10_quick_pytorch_train" in listed["scaling"]
    assert not any("collectives" in t or "environment" in t for t in listed["scaling"])
    assert len(listed["hpcdl"]) == 9


def test_a_node_kind_is_exported_as_its_reframe_partition(tmp_path):
    out = export(tmp_path, "--site", "perlmutter", "--node-kind", "cpu", "--checks", "throughput", "--nodes", "1")
    tests = (out / "hpcdl_perlmutter.py").read_text()
    assert "hpcdl_system = variable(str, value='perlmutter:cpu')" in tests
    settings = (out / "settings.py").read_text()
    assert "'name': 'cpu'" in settings
    # its configuration claims no host (hostnames: []): the centre names the system, or adds its hosts
    assert "'hostnames': []" in settings and "'.*'" not in settings
    proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_perlmutter.py", "-l",
                           "--system", "perlmutter:cpu", "--prefix", tmp_path / "rfm-run"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env_for_jobs())
    assert proc.returncode == 0 and "Found 1 check(s)" in proc.stdout, proc.stdout + proc.stderr


def test_a_bad_node_kind_is_refused_with_the_kinds_the_site_has(tmp_path):
    proc = hpcdl("validate", "--site", "perlmutter", "--node-kind", "knl", "--export-reframe", tmp_path / "x")
    assert proc.returncode == 2 and "--node-kind" in proc.stderr and "cpu, gpu" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_hpcdls_perflog_header_is_the_one_reframe_writes_for_the_same_format():
    from hpcdl.validate.reframe import perflog_header

    header = perflog_header(["images_per_sec", "weak_efficiency"])
    assert header.startswith("job_completion_time|name|system|partition|environ|num_tasks|job_nodelist|result|")
    assert header.endswith("weak_efficiency_lower_thres|weak_efficiency_upper_thres")
    assert perflog_header([]).endswith("|result|")


@pytest.mark.slurm
@pytest.mark.slow
def test_reframe_runs_the_exported_suite_on_slurm_and_hpcdl_writes_the_same_perflogs(slurm_clusters, tmp_path):
    from hpcdl.validate.checks import JobOutcome
    from hpcdl.validate.reframe import write_perflogs
    from hpcdl.validate.suite import build_context, select_checks

    cluster = slurm_clusters.ensure(2)
    env = env_for_jobs({"SLURM_CONF": str(cluster.conf), "HPCDL_LOCAL_JOBS": str(tmp_path / "local-jobs")})
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2", "--checks", "environment,collectives,scaling",
                 env=env)
    assert "'scheduler': 'squeue'" in (out / "settings.py").read_text()  # the test Slurm keeps no accounting
    prefix = tmp_path / "rfm-run"
    proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_ci_slurm.py", "-r",
                           "-x", "hpcdl_1n2r_collectives", "--prefix", prefix],
                          capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Ran 5/5 test case(s)" in proc.stdout and "0 failure(s)" in proc.stdout, proc.stdout[-3000:]
    # judged against the references hpcdl exported: ReFrame prints (r:target, l:lower, u:upper)
    assert "P: gloo_busbw_GBps:" in proc.stdout and "(r:0.55, l:-0.8, u:None)" in proc.stdout
    assert "P: weak_efficiency:" in proc.stdout and "(r:0.45, l:-0.7, u:None)" in proc.stdout

    logs = prefix / "perflogs" / "ci-slurm" / "node"
    theirs = {p.stem: p.read_text().splitlines() for p in logs.glob("*.log")}
    assert set(theirs) == {"hpcdl_1n2r_environment", "hpcdl_2n1r_collectives",
                           "hpcdl_1n2x1_b32_i150_cifar10_quick_pytorch_train",
                           "hpcdl_1n2x1_b64_i150_cifar10_quick_pytorch_train",
                           "hpcdl_2n2x1_b32_i150_cifar10_quick_pytorch_train"}
    two = theirs["hpcdl_2n2x1_b32_i150_cifar10_quick_pytorch_train"][1].split("|")
    assert two[6] == "n1,n2" and two[7] == "pass"

    # hpcdl's own perflog writer, on the results.jsonl ReFrame kept for each test
    os.environ["HPCDL_SITE_PATH"] = str(FIXTURE_SITES)
    try:
        ctx = build_context("ci-slurm", "quick", (1, 2))
        selected = select_checks("environment,collectives,scaling")
        from hpcdl.validate.reframe import exported_jobs

        outcomes = {}
        for job in exported_jobs(ctx, selected):
            kept = prefix / "output" / "ci-slurm" / "node" / "hpcdl" / job.class_name / "results.jsonl"
            if not kept.exists():
                continue
            records = [json.loads(line) for line in kept.read_text().splitlines() if line.strip()]
            # the node list is the scheduler's (hpcdl's runner reads it from the job folder): ReFrame's here
            nodelist = tuple(theirs[job.class_name][1].split("|")[6].split(","))
            outcomes[job.key] = JobOutcome(None, "COMPLETED", 0, records, nodelist)  # type: ignore[arg-type]
        mine_dir = tmp_path / "hpcdl-perflogs"
        write_perflogs(ctx, selected, outcomes, [], mine_dir)
    finally:
        del os.environ["HPCDL_SITE_PATH"]
    for name, lines in theirs.items():
        mine = (mine_dir / "ci-slurm" / "node" / f"{name}.log").read_text().splitlines()
        assert mine[0] == lines[0], name  # the header
        assert mine[1].split("|")[1:] == lines[1].split("|")[1:], name  # every column but the time
