"""Snapshots are data, not code (#17): read without running anything, trusted only from the user
training, skipped when they do not fit the net, and never silently replaced by a fresh start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from hpcdl.errors import HpcdlError
from hpcdl.train import checkpoint
from test_train import THREADS, records, write_recipe


class Payload:
    """Unpickling this runs `touch CANARY`: what a crafted snapshot in a shared folder would do."""

    def __init__(self, canary):
        self.canary = str(canary)

    def __reduce__(self):
        return (os.system, (f"touch {self.canary}",))


def test_a_crafted_snapshot_runs_no_code_and_is_skipped_for_the_older_good_one(tmp_path):
    canary = tmp_path / "CANARY"
    checkpoint.save({"iter": 10, "model": {"w": torch.ones(2)}}, checkpoint.snapshot_path(tmp_path / "net", 10))
    # a valid header and checksum around a pickle that runs a command
    checkpoint.save({"iter": 20, "model": Payload(canary)}, checkpoint.snapshot_path(tmp_path / "net", 20))
    messages = []
    state, path = checkpoint.load_latest(tmp_path / "net", log=messages.append)
    assert not canary.exists()
    assert state["iter"] == 10 and "net_iter_20.ckpt" in messages[0] and "plain data" in messages[0]


def test_a_snapshot_owned_by_another_user_is_not_read(tmp_path):
    path = checkpoint.save({"iter": 10, "model": {}}, checkpoint.snapshot_path(tmp_path / "net", 10))
    me = checkpoint.this_user()
    assert checkpoint.load(path)["iter"] == 10  # our own file
    with pytest.raises(checkpoint.CorruptCheckpoint, match="not to uid"):
        checkpoint.load(path, owner=me + 1)  # as another user training would see it
    if me == 0:  # root can make the file really belong to someone else
        os.chown(path, 4321, -1)
        with pytest.raises(checkpoint.CorruptCheckpoint, match="belongs to uid 4321"):
            checkpoint.load(path)


def small_net():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3))
    return net


def test_a_snapshot_of_another_net_is_skipped_for_the_older_one_that_fits(tmp_path):
    net = small_net()
    checkpoint.save({"iter": 10, "model": net.state_dict(), "optimizer": {"velocity": {}}},
                    checkpoint.snapshot_path(tmp_path / "net", 10))
    other = torch.nn.Sequential(torch.nn.Linear(5, 3))
    checkpoint.save({"iter": 20, "model": other.state_dict(), "optimizer": {"velocity": {}}},
                    checkpoint.snapshot_path(tmp_path / "net", 20))
    messages = []
    state, path = checkpoint.resume(tmp_path / "net", lambda s: checkpoint.state_fits(s, net), log=messages.append)
    assert state["iter"] == 10 and "another net" in messages[0]


def test_when_no_snapshot_can_be_used_training_refuses_unless_asked_to_start_over(tmp_path):
    net = small_net()
    (tmp_path / "net_iter_5.ckpt").write_bytes(b"junk")
    checkpoint.save({"iter": 9, "model": {"x": torch.ones(1)}}, checkpoint.snapshot_path(tmp_path / "net", 9))
    fits = lambda s: checkpoint.state_fits(s, net)  # noqa: E731
    with pytest.raises(HpcdlError, match="none of the 2 snapshot.*--start-over"):
        checkpoint.resume(tmp_path / "net", fits, log=lambda m: None)
    messages = []
    assert checkpoint.resume(tmp_path / "net", fits, start_over=True, log=messages.append) is None
    assert "starting over" in messages[-1]
    assert checkpoint.resume(tmp_path / "empty", fits) is None  # no snapshot at all: a first run


def run_train(recipe, results, *extra):
    return subprocess.run([sys.executable, "-m", "hpcdl", "train", str(recipe), "--results", str(results), *extra],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **THREADS})


def test_the_trainer_skips_another_nets_snapshot_and_refuses_when_none_fits(tmp_path):
    prefix = tmp_path / "snap" / "s"
    first = write_recipe(tmp_path, "a", max_iter=4, snapshot=2, snapshot_prefix=str(prefix))
    assert run_train(first, tmp_path / "a.jsonl").returncode == 0
    # a newer snapshot of another net under the same prefix, with a valid checksum
    other = {"iter": 6, "model": {"conv1.weight": torch.zeros(1)}, "optimizer": {"velocity": {}}}
    checkpoint.save(other, checkpoint.snapshot_path(prefix, 6))
    longer = write_recipe(tmp_path, "b", max_iter=6, snapshot=2, snapshot_prefix=str(prefix))
    proc = run_train(longer, tmp_path / "b.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert "s_iter_6.ckpt" in proc.stderr and "another net" in proc.stderr
    resumed = [r for r in records(tmp_path / "b.jsonl") if r["event"] == "resume"]
    assert resumed and resumed[0]["iter"] == 4
    # now every snapshot is of another net: one line, no training from 0 unless asked
    for it, path in checkpoint.list_snapshots(prefix):
        checkpoint.save({**other, "iter": it}, path)
    proc = run_train(longer, tmp_path / "c.jsonl")
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2 and len(lines) == 1 and "--start-over" in lines[0], proc.stderr
    proc = run_train(longer, tmp_path / "d.jsonl", "--start-over")
    assert proc.returncode == 0, proc.stderr
    start = [r for r in records(tmp_path / "d.jsonl") if r["event"] == "start"][0]
    assert start["iter"] == 0


def test_a_graceful_stop_of_a_local_mpirun_job_exits_75(tmp_path):
    """SIGTERM to the job script: the ranks snapshot and exit 75, mpirun reports 1 of its own,
    and the script still exits 75 (requeue to resume), as docs/trainer.md promises."""
    import signal
    import time

    from conftest import require_tool
    from hpcdl.executors.local import job_environment

    require_tool("mpirun")
    recipe = write_recipe(tmp_path, "long", max_iter=100_000, snapshot=1000, display=1,
                          snapshot_prefix=str(tmp_path / "snap" / "s"))
    script = tmp_path / "job.sh"
    proc = subprocess.run([sys.executable, "-m", "hpcdl", "render", "--site", "local", str(recipe), "-o", str(script)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "mpirun" in script.read_text()
    job_dir = tmp_path / "job"
    job = subprocess.Popen(["bash", str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=job_environment(job_dir, HPCDL_JOB_ID="9", **THREADS))
    results = job_dir / "results.jsonl"
    deadline = time.monotonic() + 240
    while not (results.exists() and any(r["event"] == "step" for r in records(results))):
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert any(r["event"] == "preempted" for r in records(results)), err
    assert job.returncode == 75, err


def test_a_snapshot_folder_that_cannot_be_written_is_refused_before_training(tmp_path):
    (tmp_path / "file").write_text("x")
    recipe = write_recipe(tmp_path, "r", max_iter=200, snapshot=100, snapshot_prefix=str(tmp_path / "file" / "snap" / "s"))
    proc = run_train(recipe, tmp_path / "r.jsonl")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "snapshot_prefix" in lines[0], proc.stderr
    assert not any(r["event"] == "step" for r in records(tmp_path / "r.jsonl")) if (tmp_path / "r.jsonl").exists() else True
    with pytest.raises(HpcdlError, match="MiB free, less than one snapshot needs"):
        checkpoint.check_folder(tmp_path / "ok" / "s", need_bytes=2**62)
    checkpoint.check_folder(tmp_path / "ok" / "s", need_bytes=1)
    assert os.listdir(tmp_path / "ok") == []  # the probe file is gone


@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_failed_snapshot_stops_training_unless_the_recipe_says_go_on(tmp_path, monkeypatch, policy):
    from test_train import train_here

    real_save = checkpoint.save

    def save(state, path):
        if state["iter"] == 2:
            raise HpcdlError(f"{path}: cannot write: No space left on device")
        return real_save(state, path)

    monkeypatch.setattr(checkpoint, "save", save)
    recipe = write_recipe(tmp_path, "r", max_iter=4, snapshot=2, snapshot_failure=policy,
                          snapshot_prefix=str(tmp_path / "snap" / "s"))
    if policy == "stop":
        with pytest.raises(HpcdlError, match="No space left"):
            train_here(recipe, tmp_path / "r.jsonl")
        return
    train_here(recipe, tmp_path / "r.jsonl")
    events = [(r["event"], r.get("iter")) for r in records(tmp_path / "r.jsonl")]
    assert ("snapshot_failed", 2) in events and ("snapshot", 4) in events and events[-1][0] == "final"


def test_the_tensorflow_and_mxnet_snapshots_follow_the_same_rules(tmp_path):
    """framework_loop's .npz snapshots: arrays only, another net's skipped, none usable refused."""
    import numpy as np

    from hpcdl.train.framework_loop import restore_snapshot
    from hpcdl.train.recipe import load_recipe

    class Trainer:
        framework = "tensorflow"

        def __init__(self):
            self.w = np.zeros((3, 2))

        def state(self):
            return {"w0": self.w.copy()}

        def load_state(self, arrays):
            self.w = arrays["w0"].copy()

    prefix = tmp_path / "s"
    recipe = load_recipe(write_recipe(tmp_path, "r", snapshot=1, snapshot_prefix=str(prefix)))

    def write(it, w):
        np.savez(f"{prefix}_tensorflow_iter_{it}.npz", __iter=it, __epoch=0, __cursor=it, w0=w)

    write(1, np.ones((3, 2)))
    write(2, np.ones((5, 2)))  # another net's
    trainer = Trainer()
    assert restore_snapshot(recipe, trainer) == (1, 0, 1) and trainer.w.sum() == 6
    with open(f"{prefix}_tensorflow_iter_3.npz", "wb") as f:  # a pickled object, not arrays
        np.save(f, np.array([Payload(tmp_path / "CANARY")], dtype=object), allow_pickle=True)
    assert restore_snapshot(recipe, Trainer())[0] == 1 and not (tmp_path / "CANARY").exists()
    os.unlink(f"{prefix}_tensorflow_iter_1.npz")
    with pytest.raises(HpcdlError, match="--start-over"):
        restore_snapshot(recipe, Trainer())
    assert restore_snapshot(recipe, Trainer(), start_over=True) is None
