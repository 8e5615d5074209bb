"""`hpcdl cluster up/down`: the local Slurm the tests use, shipped for people to try hpcdl on.

Up prints the two exports (SLURM_CONF, HPCDL_SITE_PATH with the `local-slurm` profile it
writes); a validation job then runs through it with sbatch and srun; down stops every daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, hpcdl, require_slurm_daemons

pytestmark = [pytest.mark.slurm, pytest.mark.slow]




def exports(stdout: str) -> dict:
    """The `export NAME=VALUE` lines, as a shell would set them (HPCDL_SITE_PATH's `${...:+...}` tail dropped)."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("export "):
            name, value = line[len("export "):].split("=", 1)
            out[name] = value.split("${", 1)[0]
    return out


def test_cluster_up_runs_a_validation_job_and_down_stops_it(tmp_path, tmp_path_factory):
    require_slurm_daemons()
    # a short folder: PMIx puts unix sockets under it, and their paths may not exceed 107 characters
    folder = tmp_path_factory.mktemp("cl")
    proc = hpcdl("cluster", "up", "--nodes", "2", "--dir", folder, timeout=180)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        env = exports(proc.stdout)
        assert env["SLURM_CONF"] == str(folder / "slurm.conf")
        assert env["HPCDL_SITE_PATH"] == str(folder / "sites")
        sinfo = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                               env={**os.environ, **env}, timeout=60)
        assert sorted(sinfo.stdout.split()) == ["idle", "idle", "n1", "n2"]
        again = hpcdl("cluster", "up", "--dir", folder, timeout=60)
        assert again.returncode == 2 and "already running" in again.stderr

        jobs_env = {**env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "platform"), os.environ.get("PYTHONPATH"))
                                                  if p)}
        shown = hpcdl("sites", "show", "local-slurm", env=jobs_env)
        assert shown.returncode == 0 and "scheduler: slurm" in shown.stdout and "nodes_per_host: 2" in shown.stdout
        out = tmp_path / "val"
        run = hpcdl("validate", "--site", "local-slurm", "--checks", "environment", "--nodes", "1", "--max-jobs", "1",
                    "--no-history", "-o", out, env=jobs_env, cwd=tmp_path, timeout=600)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr
        suite = json.loads((out / "results.jsonl").read_text().splitlines()[0])
        assert suite["scheduler"] == "slurm" and suite["site"] == "local-slurm"
        assert "#SBATCH --partition=debug" in next((out / "jobs").glob("*/job.sh")).read_text()
        # once, at start: the pretend nodes run unbound (task/none), not a warning per job only
        assert proc.stderr.count("cpu binding") == 1 and "--nodes 1 binds them" in proc.stderr
        assert f"cluster down --dir {folder}" in proc.stderr
        # `down` without --dir names the cluster that runs elsewhere instead of saying none runs
        elsewhere = {"HPCDL_CLUSTER_DIR": str(tmp_path / "no-cluster-here"), "SLURM_CONF": ""}
        lost = hpcdl("cluster", "down", env=elsewhere, timeout=60)
        assert lost.returncode == 2 and str(folder) in lost.stderr, lost.stdout + lost.stderr
    finally:
        # without --dir, the cluster SLURM_CONF points at (what `cluster up` exported) is the one stopped
        down = hpcdl("cluster", "down", env={"HPCDL_CLUSTER_DIR": str(tmp_path / "no-cluster-here"),
                                             "SLURM_CONF": str(folder / "slurm.conf")}, timeout=120)
        if down.returncode != 0:
            hpcdl("cluster", "down", "--dir", folder, timeout=120)
    assert down.returncode == 0 and "stopped the cluster" in down.stdout and str(folder) in down.stdout
    assert not any(folder.glob("*.pid"))
    assert "no cluster was running" in hpcdl("cluster", "down", "--dir", folder, timeout=60).stdout
