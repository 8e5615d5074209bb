"""The `local` site is this node, detected; its plan puts one rank on each core."""

from __future__ import annotations

import os
import subprocess

import yaml

from conftest import hpcdl
from hpcdl.plan import JobRequest, make_plan
from hpcdl.sites import load_site
from hpcdl.sites.detect import detect_local_site


def test_detected_node_matches_lscpu_and_meminfo():
    node = detect_local_site().node_kinds["node"]
    assert node.sockets * node.cores_per_socket * node.threads_per_core == os.cpu_count()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    sockets = int(next(line.split(":")[1] for line in lscpu.splitlines() if line.startswith("Socket(s)")))
    assert node.sockets == sockets
    assert node.memory_gb > 0.5
    assert node.gpus == () or all(g.model for g in node.gpus)


def test_sites_detect_prints_a_profile_that_loads_back(tmp_path):
    text = hpcdl("sites", "detect", check=True).stdout
    data = yaml.safe_load(text)
    assert data["name"] == "local" and data["scheduler"] == "local"
    path = tmp_path / "sites" / "mybox.yaml"
    path.parent.mkdir()
    path.write_text(text.replace("name: local", "name: mybox"))
    listed = hpcdl("sites", env={"HPCDL_SITE_PATH": str(path.parent)}, check=True).stdout
    assert "mybox" in listed


def test_local_plan_gives_each_core_its_own_rank_with_one_thread():
    site = load_site("local")
    node = site.node_kinds["node"]
    plan = make_plan(site, JobRequest())
    if node.cores == 2:  # this machine: the issue's own example
        assert plan.ranks_per_node == 2
        assert [r.cores for r in plan.ranks] == [(0,), (1,)]
        assert all(r.omp_num_threads == 1 for r in plan.ranks)
    cores = [c for r in plan.ranks for c in r.cores]
    assert len(cores) == len(set(cores)), "no core shared by two ranks"
    assert plan.env["OMP_NUM_THREADS"] == str(plan.threads_per_rank)


def test_plan_json_has_the_documented_fields():
    import json

    data = json.loads(hpcdl("plan", "--site", "local", "--json", check=True).stdout)
    for key in ("env", "launcher_argv", "ranks"):
        assert key in data
    for rank in data["ranks"]:
        assert set(rank) >= {"rank", "node", "local_rank", "socket", "cores", "gpus", "nic", "omp_num_threads"}


def test_the_local_site_told_to_use_slurm_where_none_answers_says_so(tmp_path):
    # (tests/test_images_build.py runs `--site local` through the real local Slurm)
    # a $SLURM_CONF that names no file is said at once (Slurm's clients retry it for 60 s)
    missing = tmp_path / "no-slurm.conf"
    proc = hpcdl("sites", "detect", "--scheduler", "slurm", env={"SLURM_CONF": str(missing)}, timeout=15)
    assert proc.returncode == 2 and f"$SLURM_CONF names no file ('{missing}')" in proc.stderr, proc.stderr
    # one Slurm's clients cannot use (no ClusterName): sinfo fails, and no Slurm answers
    empty = tmp_path / "empty.conf"
    empty.write_text("")
    env = {"SLURM_CONF": str(empty)}
    proc = hpcdl("sites", "detect", "--scheduler", "slurm", env=env, timeout=30)
    assert proc.returncode == 2 and "scheduler: slurm, but no Slurm answers here" in proc.stderr, proc.stderr
    proc = hpcdl("plan", "--site", "local", env={**env, "HPCDL_LOCAL_SCHEDULER": "pbs"})
    assert proc.returncode == 2 and "scheduler: 'pbs' is not one of local, slurm" in proc.stderr, proc.stderr


def test_detect_keeps_a_host_device_name_exactly_when_a_profile_may_hold_it():
    # detect reads names from /sys/class/{infiniband,cxi,net}; one no profile may hold is left out
    import pydantic

    from hpcdl.sites.detect import _device_name_ok
    from hpcdl.sites.schema import DeviceName

    schema = pydantic.TypeAdapter(DeviceName)
    for name in ["mlx5_0", "hfi1_0", "cxi0", "ib0.8001", "x" * 64, "x" * 65, "mlx5_0\n", "-x", "a b", "", "é"]:
        try:
            schema.validate_python(name)
            valid = True
        except pydantic.ValidationError:
            valid = False
        assert _device_name_ok(name) == valid, name


def test_detect_reads_the_cpu_numbering_from_sysfs(tmp_path):
    """CPU 1 beside CPU 0 on its core: core-major; on the other socket: socket-interleaved (TACC
    Frontera's CLX nodes: socket 0's proc-ids even, socket 1's odd); else thread-major."""
    from hpcdl.sites.detect import _cpu_numbering

    def sysfs(siblings, packages):
        root = tmp_path / f"{siblings}-{'-'.join(packages)}"
        for cpu, package in enumerate(packages):
            (root / f"cpu{cpu}/topology").mkdir(parents=True)
            (root / f"cpu{cpu}/topology/physical_package_id").write_text(package + "\n")
            (root / f"cpu{cpu}/topology/thread_siblings_list").write_text(siblings + "\n")
        return root

    assert _cpu_numbering(4, 2, sysfs("0-3", ["0", "0"])) == "core-major"
    assert _cpu_numbering(1, 2, sysfs("0", ["0", "1"])) == "socket-interleaved"
    assert _cpu_numbering(2, 2, sysfs("0,56", ["0", "1"])) == "socket-interleaved"
    assert _cpu_numbering(2, 2, sysfs("0,48", ["0", "0"])) == "thread-major"
    assert _cpu_numbering(1, 1, sysfs("0", ["0", "0"])) == "thread-major"
    assert _cpu_numbering(2, 2, tmp_path / "none") == "thread-major"
