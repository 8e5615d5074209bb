"""Kill and resume: SIGTERM writes a snapshot and exits for requeue; the resumed run equals the
uninterrupted one in loss and learning rate, also when the newest snapshot was damaged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from test_train import THREADS, assert_same_weights, final_weights, records, run_ranks, write_recipe

from hpcdl.launch import PREEMPTED_EXIT
from hpcdl.train import checkpoint

ITERS = 40


def steps(path):
    return {r["iter"]: r for r in records(path) if r["event"] == "step"}


def start_ranks(recipe, results):
    argv = [sys.executable, "-m", "hpcdl", "launch", "-n", "2", "--",
            sys.executable, "-m", "hpcdl.train", str(recipe), "--results", str(results)]
    return subprocess.Popen(argv, env={**os.environ, **THREADS}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_after(proc, results, iteration: int, sig=signal.SIGTERM) -> int:
    """Send the scheduler's warning signal once the run has passed `iteration`."""
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline
        if results.exists() and any(i >= iteration for i in steps(results)):
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    return proc.returncode


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("whole")
    recipe = write_recipe(tmp, "whole", max_iter=ITERS, display=2, snapshot=10, lr_policy="step", stepsize=15,
                          gamma=0.5, snapshot_prefix=str(tmp / "snap" / "w"))
    proc = run_ranks(2, recipe, tmp / "r.jsonl")
    assert proc.returncode == 0, proc.stderr
    return tmp


def interrupted_then_resumed(tmp, damage=None):
    recipe = write_recipe(tmp, "parts", max_iter=ITERS, display=2, snapshot=10, lr_policy="step", stepsize=15,
                          gamma=0.5, snapshot_prefix=str(tmp / "snap" / "w"))
    results = tmp / "r.jsonl"
    rc = stop_after(start_ranks(recipe, results), results, 12)
    assert rc == PREEMPTED_EXIT
    recs = records(results)
    stopped = next(r for r in recs if r["event"] == "preempted")
    assert stopped["iter"] < ITERS and not any(r["event"] == "final" for r in recs)
    newest_iter, newest = checkpoint.list_snapshots(tmp / "snap" / "w")[0]
    assert newest_iter == stopped["iter"]  # the signal's own snapshot
    if damage:
        damage(newest)
    proc = run_ranks(2, recipe, results)
    assert proc.returncode == 0, proc.stderr
    return stopped, records(results)


def test_sigterm_writes_a_snapshot_and_the_resumed_run_equals_the_uninterrupted_one(tmp_path, uninterrupted):
    stopped, recs = interrupted_then_resumed(tmp_path)
    resume = next(r for r in recs if r["event"] == "resume")
    assert resume["iter"] == stopped["iter"]
    whole, parts = steps(uninterrupted / "r.jsonl"), steps(tmp_path / "r.jsonl")
    assert set(whole) == set(parts)
    for it in whole:
        assert parts[it]["lr"] == whole[it]["lr"]
        assert parts[it]["loss"] == pytest.approx(whole[it]["loss"], rel=1e-5), it
    assert_same_weights(final_weights(uninterrupted / "snap" / "w"), final_weights(tmp_path / "snap" / "w"))
    assert recs[-1]["event"] == "final" and recs[-1]["iter"] == ITERS


def test_a_truncated_newest_snapshot_is_skipped_and_the_previous_one_resumes_the_same_run(tmp_path, uninterrupted):
    def truncate(path):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])

    stopped, recs = interrupted_then_resumed(tmp_path, damage=truncate)
    resume = next(r for r in recs if r["event"] == "resume")
    assert resume["iter"] == 10 < stopped["iter"]  # the periodic snapshot before the damaged one
    whole, parts = steps(uninterrupted / "r.jsonl"), steps(tmp_path / "r.jsonl")
    assert parts[ITERS]["loss"] == pytest.approx(whole[ITERS]["loss"], rel=1e-5)
    assert parts[ITERS]["lr"] == whole[ITERS]["lr"]
