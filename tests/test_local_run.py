"""The thin slice end to end: plan, render, run 2 ranks, read the results."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import RECIPES, hpcdl, shellcheck


def test_rendered_local_script_passes_shellcheck(tmp_path):
    out = tmp_path / "job.sh"
    hpcdl("render", "--site", "local", RECIPES / "digits-quick.yaml", "-o", out, check=True)
    shellcheck(out)
    text = out.read_text()
    assert "plan.json" in text and "hpcdl train" in text


@pytest.mark.slow
def test_hpcdl_run_trains_two_ranks_on_digits_to_95_percent(tmp_path, isolated_jobs):
    """recipes/digits-quick.yaml on 2 ranks reaches what its comment promises (>= 95 % held out)."""
    run_dir = tmp_path / "run"
    proc = hpcdl("run", "--site", "local", RECIPES / "digits-quick.yaml", "--out", run_dir, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank" in proc.stdout and "cores" in proc.stdout  # the node map was shown
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["event"] == "step"]
    final = records[-1]
    assert final["event"] == "final"
    assert final["ranks"] == 2 and final["nodes"] == 1
    assert final["accuracy"] >= 0.95
    assert final["images_per_sec_total"] > 0
    assert all({"iter", "loss", "lr", "images_per_sec_rank", "images_per_sec_total"} <= set(s) for s in steps)
    assert (run_dir / "job.sh").exists() and (run_dir / "output.log").exists()
    assert "held-out accuracy" in proc.stdout.splitlines()[-1]


def test_hpcdl_launch_stops_all_ranks_when_one_dies(tmp_path):
    """A dead rank ends the job, non-zero, within a bounded time, never a hang."""
    program = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    sys.exit(3)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hpcdl", "launch", "--nproc", "2", "--", sys.executable, "-c", program],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert time.monotonic() - start < 30
    assert "rank 1 exited with status 3" in proc.stderr


def test_hpcdl_launch_gives_each_rank_its_number(tmp_path):
    # each rank writes its own file: two processes printing to one pipe may interleave
    program = (
        "import os, pathlib\n"
        "e = os.environ\n"
        f"pathlib.Path({str(tmp_path)!r}, 'rank' + e['RANK']).write_text(' '.join((e['RANK'], e['WORLD_SIZE'], e['LOCAL_RANK'])))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hpcdl", "launch", "-n", "2", "--", sys.executable, "-c", program],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rank0").read_text() == "0 2 0"
    assert (tmp_path / "rank1").read_text() == "1 2 1"
