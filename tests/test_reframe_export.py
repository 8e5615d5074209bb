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
    # the 2-node point's efficiency reads X(1) from its class's p = 1 variant, through depends_on
    assert ("('efficiency', 'scaling/weak/2/efficiency', '', ['efficiency', 2], (0.45, -0.7, None, ''), '1')"
            in text)
    assert "self.depends_on(self.hpcdl_variant_name(baseline))" in text


def test_reframe_lists_the_exported_tests(tmp_path):
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2")
    proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_ci_slurm.py", "-l",
                           "--prefix", tmp_path / "rfm-run"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env_for_jobs())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Found 12 check(s)" in proc.stdout, proc.stdout
    assert "- hpcdl_collectives %scope=inter-node" in proc.stdout
    assert "- hpcdl_weak_scaling %p=2" in proc.stdout and "^hpcdl_weak_scaling %p=1" in proc.stdout


def test_a_check_kind_is_a_reframe_tag_and_each_test_says_what_it_is(tmp_path):
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2")
    text = (out / "hpcdl_ci_slurm.py").read_text()
    assert "'descr': 'hpcdl collectives: 2 node(s) x 1 rank(s) x 2 thread(s)'" in text
    assert "maintainers = HPCDL_MAINTAINERS" in text
    settings = (out / "settings.py").read_text()
    assert "'.*'" not in settings  # merged into a centre's configuration, it claims no other host
    listed = {}
    for tag in ("collectives", "scaling", "hpcdl"):
        proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_ci_slurm.py", "-l",
                               "-t", f"^{tag}$", "--prefix", tmp_path / "rfm-run"], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env=env_for_jobs())
        assert proc.returncode == 0, proc.stdout + proc.stderr
        listed[tag] = sorted(set(re.findall(r"^\s*(?:- |\^)(hpcdl_\w+(?: %\S+)?)", proc.stdout, flags=re.M)))
    assert listed["collectives"] == ["hpcdl_collectives %scope=inter-node", "hpcdl_collectives %scope=intra-node"]
    assert listed["scaling"] == ["hpcdl_strong_scaling %p=1", "hpcdl_strong_scaling %p=2",
                                 "hpcdl_weak_scaling %p=1", "hpcdl_weak_scaling %p=2"]
    assert len(listed["hpcdl"]) == 12


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


def test_every_variant_of_a_class_carries_the_same_performance_variables(tmp_path):
    """ReFrame writes all variants of a class into one perflog and moves it aside when a record's
    header differs: each class's variants must name the same variables, on every shipped site and
    for node lists with and without the 1-node baseline (then a stored X(1), or no efficiency)."""
    from hpcdl.errors import HpcdlError
    from hpcdl.sites import list_sites
    from hpcdl.validate.checks import JobOutcome
    from hpcdl.validate.reframe import exported_tests, write_perflogs
    from hpcdl.validate.suite import build_context, select_checks

    selected = select_checks(None)
    seen = 0
    # the full suite (every net, every framework present) on two sites: its classes are the quick one's, longer
    cases = [*((site, "quick", nodes) for site in list_sites() for nodes in ((1, 2), (2, 4))),
             ("local", "full", (1,)), ("alps-gh200", "full", (1, 2))]
    for site, suite, nodes in cases:
        try:
            ctx = build_context(site, suite, nodes)
            tests = exported_tests(ctx, selected)
        except HpcdlError as e:  # a site with fewer nodes than asked for
            assert str(e).startswith("--nodes:"), (site, e)
            continue
        for test in tests:
            names = {tuple(p.pvar for p in v.perf) for v in test.variants}
            assert len(names) == 1, (site, suite, nodes, test.name, names)
            labels = [v.label for v in test.variants]
            assert len(set(labels)) == len(labels), (site, test.name, labels)
            seen += 1
    assert seen > 50
    # and so hpcdl's own perflog for the local scaling study is one file, one header, a line per point
    ctx = build_context("local", "quick", (1,))
    selected = select_checks("scaling")
    outcomes = {}
    for test in exported_tests(ctx, selected):
        for v in test.variants:
            final = {"event": "final", "time": 1_700_000_000.0, "images_per_sec_total": 800.0 * v.nodes * v.ranks_per_node}
            outcomes[v.key] = JobOutcome(None, "COMPLETED", 0, [final], ("vm",))  # type: ignore[arg-type]
    write_perflogs(ctx, selected, outcomes, [], tmp_path)
    logs = tmp_path / "local" / ctx.node_kind_name
    assert sorted(p.name for p in logs.iterdir()) == ["hpcdl_strong_scaling.log", "hpcdl_weak_scaling.log"]
    weak = (logs / "hpcdl_weak_scaling.log").read_text().splitlines()
    assert weak[0].endswith("|efficiency_var=efficiency_value|efficiency_unit|efficiency_ref|"
                            "efficiency_lower_thres|efficiency_upper_thres")
    assert [line.split("|")[1] for line in weak[1:]] == ["hpcdl_weak_scaling %p=1", "hpcdl_weak_scaling %p=2"]
    assert "efficiency=1.0|" in weak[1]


@pytest.mark.slurm
@pytest.mark.slow
def test_reframe_runs_the_exported_suite_on_slurm_and_hpcdl_writes_the_same_perflogs(slurm_clusters, tmp_path):
    from hpcdl.validate.checks import JobOutcome
    from hpcdl.validate.reframe import exported_tests, write_perflogs
    from hpcdl.validate.suite import build_context, select_checks

    cluster = slurm_clusters.ensure(2)
    env = env_for_jobs({"SLURM_CONF": str(cluster.conf), "HPCDL_LOCAL_JOBS": str(tmp_path / "local-jobs")})
    out = export(tmp_path, "--site", "ci-slurm", "--nodes", "1,2", "--checks", "environment,collectives,scaling",
                 env=env)
    assert "'scheduler': 'squeue'" in (out / "settings.py").read_text()  # the test Slurm keeps no accounting
    prefix = tmp_path / "rfm-run"
    proc = subprocess.run([reframe_exe(), "-C", out / "settings.py", "-c", out / "hpcdl_ci_slurm.py", "-r",
                           # one scaling class is enough to show depends_on and one perflog per class; the
                           # strong one would run the 2-node job again (it is the weak study's p=2 too)
                           "-x", "hpcdl_collectives%scope=intra-node", "-x", "hpcdl_strong_scaling", "--prefix", prefix],
                          capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Ran 4/4 test case(s)" in proc.stdout and "0 failure(s)" in proc.stdout, proc.stdout[-3000:]
    # judged against the references hpcdl exported: ReFrame prints (r:target, l:lower, u:upper)
    assert "P: gloo_busbw_GBps:" in proc.stdout and "(r:0.55, l:-0.8, u:None)" in proc.stdout
    assert "P: efficiency:" in proc.stdout and "(r:0.45, l:-0.7, u:None)" in proc.stdout

    # one perflog per class, every variant in it under one header (nothing moved aside to .h0)
    logs = prefix / "perflogs" / "ci-slurm" / "node"
    theirs = {p.stem: p.read_text().splitlines() for p in logs.glob("*.log")}
    assert set(theirs) == {"hpcdl_environment", "hpcdl_collectives", "hpcdl_weak_scaling"}
    assert not list(logs.glob("*.h*"))
    weak = {line.split("|")[1]: line.split("|") for line in theirs["hpcdl_weak_scaling"][1:]}
    assert set(weak) == {"hpcdl_weak_scaling %p=1", "hpcdl_weak_scaling %p=2"}
    two = weak["hpcdl_weak_scaling %p=2"]
    assert two[6] == "n1,n2" and two[7] == "pass"

    # hpcdl's own perflog writer, class by class, on the results.jsonl ReFrame kept for each test case
    # (a job that two classes read runs once in each, with values of its own)
    runs: dict[str, dict[str, Path]] = {}
    for kept in (prefix / "output" / "ci-slurm" / "node" / "hpcdl").glob("*/results.jsonl"):
        script = (kept.parent / "rfm_job.sh").read_text()
        key = re.search(r"^bash '?([^'\s]+)\.sh'?", script, flags=re.M).group(1)
        # the output folder is the test's short name: the class, then _<hash> for a variant of a parameter
        name = kept.parent.name if kept.parent.name in theirs else kept.parent.name.rsplit("_", 1)[0]
        runs.setdefault(name, {})[key] = kept
    assert set(runs) == set(theirs)
    os.environ["HPCDL_SITE_PATH"] = str(FIXTURE_SITES)
    try:
        ctx = build_context("ci-slurm", "quick", (1, 2))
        selected = select_checks("environment,collectives,scaling")
        for name, lines in theirs.items():
            nodelists = {line.split("|")[1]: tuple(line.split("|")[6].split(",")) for line in lines[1:]}
            outcomes = {}
            for test in exported_tests(ctx, selected):
                for v in test.variants:
                    if test.name == name and v.key in runs[name] and test.display_name(v) in nodelists:
                        records = [json.loads(x) for x in runs[name][v.key].read_text().splitlines() if x.strip()]
                        # the node list is the scheduler's (hpcdl's runner reads it from the job folder): ReFrame's here
                        outcomes[v.key] = JobOutcome(None, "COMPLETED", 0, records,  # type: ignore[arg-type]
                                                     nodelists[test.display_name(v)])
            mine_dir = tmp_path / "hpcdl-perflogs" / name
            write_perflogs(ctx, selected, outcomes, [], mine_dir)
            mine = (mine_dir / "ci-slurm" / "node" / f"{name}.log").read_text().splitlines()
            assert mine[0] == lines[0], name  # the header
            assert sorted(x.split("|")[1:] for x in mine[1:]) == sorted(x.split("|")[1:] for x in lines[1:]), name
    finally:
        del os.environ["HPCDL_SITE_PATH"]
