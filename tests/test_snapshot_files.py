"""Snapshot files that are not what their names say (#29): links, FIFOs, devices, crafted .npz
headers and zip bombs, impossible content, and two trainings on one prefix. Each is skipped for
the older good snapshot (or refused in one line), never followed, hung on, or resumed from."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch

from hpcdl.errors import HpcdlError
from hpcdl.train import checkpoint
from test_train import THREADS, write_recipe


@contextlib.contextmanager
def within(seconds: int):
    """Fail, rather than hang the suite, when the body blocks (a FIFO read)."""
    def timeout(*_):
        raise AssertionError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3))


def save(prefix, it, model=None):
    return checkpoint.save({"iter": it, "model": (model or net()).state_dict()}, checkpoint.snapshot_path(prefix, it))


def resume(prefix, max_iter=None):
    messages = []
    found = checkpoint.resume(prefix, lambda s: checkpoint.state_fits(s, net(), max_iter=max_iter),
                              log=messages.append)
    return found, messages


def test_a_link_named_like_a_newer_snapshot_is_not_followed(tmp_path):
    """Another user's link to a snapshot the victim owns (another run's, an older one) was resumed
    without a word: os.stat followed it. Now the open refuses links (O_NOFOLLOW)."""
    (tmp_path / "snap").mkdir(mode=0o755)
    prefix = tmp_path / "snap" / "s"
    save(prefix, 10)
    elsewhere = save(tmp_path / "elsewhere", 20)
    os.symlink(elsewhere, checkpoint.snapshot_path(prefix, 29))
    os.symlink("/dev/zero", checkpoint.snapshot_path(prefix, 30))  # root owns /dev/zero: a root victim read it whole
    with within(20):
        (state, path), messages = resume(prefix)
    assert state["iter"] == 10 and path.name == "s_iter_10.ckpt"
    assert [m for m in messages if "symbolic link" in m and "_iter_29" in m] and len(messages) == 2, messages


def test_a_fifo_named_like_a_snapshot_is_skipped_not_waited_on(tmp_path):
    prefix = tmp_path / "s"
    save(prefix, 10)
    os.mkfifo(checkpoint.snapshot_path(prefix, 20))
    with within(20):
        (state, _), messages = resume(prefix)
    assert state["iter"] == 10 and "FIFO" in messages[0]
    with pytest.raises(HpcdlError, match="s_iter_20.ckpt is a FIFO"):  # and refused before training reaches it
        checkpoint.check_folder(prefix)


def test_a_snapshot_renamed_to_look_newer_is_skipped(tmp_path):
    prefix = tmp_path / "s"
    save(prefix, 10)
    os.replace(save(prefix, 20), checkpoint.snapshot_path(prefix, 29))
    (state, _), messages = resume(prefix)
    assert state["iter"] == 10 and "holds iteration 20, not the 29 of its name" in messages[0]


def test_a_header_claiming_more_than_the_file_holds_is_refused_unread(tmp_path):
    path = save(tmp_path / "s", 10)
    data = bytearray(path.read_bytes())
    data[8:16] = (2**40).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CorruptCheckpoint, match="truncated"):
        checkpoint.load(path)


def test_impossible_content_is_skipped_and_a_finished_training_says_so(tmp_path):
    prefix = tmp_path / "s"
    save(prefix, 10)
    save(prefix, 10**6)  # beyond max_iter
    broken = net()
    with torch.no_grad():
        broken[0].weight.fill_(float("nan"))
    save(prefix, 20, broken)
    (state, _), messages = resume(prefix, max_iter=30)
    assert state["iter"] == 10
    assert "beyond this recipe's max_iter 30" in messages[0] and "not finite" in messages[1], messages
    with pytest.raises(HpcdlError, match="has finished.*--start-over"):
        checkpoint.refuse_finished(30, 30, "s_iter_30.ckpt")


def test_a_snapshot_folder_others_can_write_is_warned_about(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    save(folder / "s", 10)
    _, messages = resume(folder / "s")
    assert "can be written by everyone (mode 0777)" in messages[0]
    os.chmod(folder, 0o755)
    assert resume(folder / "s")[1] == []


# --- the .npz snapshots of the TensorFlow, MXNet and Horovod loops (framework_loop) ---

class Trainer:
    framework = "tensorflow"

    def __init__(self):
        self.w = np.zeros((3, 2))

    def state(self):
        return {"w0": self.w.copy()}

    def load_state(self, arrays):
        self.w = arrays["w0"].copy()


def npz(prefix, it, **arrays):
    fields = {"__iter": it, "__epoch": 0, "__cursor": it, "w0": np.ones((3, 2))}
    fields.update(arrays)
    path = f"{prefix}_tensorflow_iter_{it}.npz"
    np.savez(path, **fields)
    return path


def npy_member(shape, dtype="<f8", body=b""):
    """An .npy file's bytes whose header claims `shape`, followed by `body`."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (dtype, shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + body


def crafted(prefix, it, member, data, compress=zipfile.ZIP_STORED):
    path = f"{prefix}_tensorflow_iter_{it}.npz"
    good = npz(prefix, it)
    with zipfile.ZipFile(good) as z:
        kept = {i.filename: z.read(i) for i in z.infolist() if i.filename != member}
    with zipfile.ZipFile(path, "w", compress) as z:
        for name, body in kept.items():
            z.writestr(name, body)
        z.writestr(member, data)
    return path


CRAFTED = {
    "string iteration": lambda p: npz(p, 20, __iter=np.array("x")),
    "array iteration": lambda p: npz(p, 20, __iter=np.arange(3)),
    "float epoch": lambda p: npz(p, 20, __epoch=np.array(0.5)),
    "2^40 elements in a header": lambda p: crafted(p, 20, "w0.npy", npy_member((2**40,))),
    "zip bomb": lambda p: crafted(p, 20, "w0.npy", npy_member((3, 2), body=bytes(64 * 2**20)), zipfile.ZIP_DEFLATED),
    "renamed to look newer": lambda p: os.replace(npz(p, 20), f"{p}_tensorflow_iter_25.npz"),
    "beyond max_iter": lambda p: npz(p, 500),
    "NaN weights": lambda p: npz(p, 20, w0=np.full((3, 2), np.nan)),
    "an array this net has not": lambda p: npz(p, 20, extra=np.ones(2)),
    "a link to a good one": lambda p: os.symlink(npz(f"{p}_other", 15), f"{p}_tensorflow_iter_20.npz"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_npz_snapshot_is_skipped_for_the_older_good_one(tmp_path, capsys, case):
    """TensorFlow, MXNet and Horovod resumes ended in ValueError, TypeError or MemoryError on these,
    followed links, hung on FIFOs or decompressed the bomb before looking at its size."""
    from hpcdl.train.framework_loop import restore_snapshot
    from hpcdl.train.recipe import load_recipe

    prefix = tmp_path / "s"
    recipe = load_recipe(write_recipe(tmp_path, "r", snapshot=1, snapshot_prefix=str(prefix)))
    npz(prefix, 10, w0=np.full((3, 2), 2.0))
    CRAFTED[case](prefix)
    trainer = Trainer()
    tracemalloc.start()
    try:
        with within(20):
            assert restore_snapshot(recipe, trainer, max_iter=100) == (10, 0, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert trainer.w.sum() == 12
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB read for a file that should be judged by its headers"
    assert "skipping snapshot" in capsys.readouterr().err


def test_a_fifo_named_like_an_npz_snapshot_is_refused_at_once_not_waited_on(tmp_path):
    from hpcdl.train.framework_loop import restore_snapshot
    from hpcdl.train.recipe import load_recipe

    prefix = tmp_path / "s"
    recipe = load_recipe(write_recipe(tmp_path, "r", snapshot=1, snapshot_prefix=str(prefix)))
    npz(prefix, 10)
    os.mkfifo(f"{prefix}_tensorflow_iter_20.npz")
    with within(20), pytest.raises(HpcdlError, match="is a FIFO, a device or a socket named like a snapshot"):
        restore_snapshot(recipe, Trainer(), max_iter=100)


def test_a_finished_npz_training_is_refused_not_reported_as_nan(tmp_path):
    from hpcdl.train.framework_loop import restore_snapshot
    from hpcdl.train.recipe import load_recipe

    prefix = tmp_path / "s"
    recipe = load_recipe(write_recipe(tmp_path, "r", snapshot=1, snapshot_prefix=str(prefix)))
    npz(prefix, 30)
    with pytest.raises(HpcdlError, match="max_iter: the training has finished"):
        restore_snapshot(recipe, Trainer(), max_iter=30)


# --- one prefix, one training ---

def test_a_second_training_on_the_same_snapshot_prefix_is_refused(tmp_path):
    """Two trainings on one prefix both ran and interleaved their snapshots; a requeued job then
    resumed its twin's weights. The prefix is locked for the whole run."""
    prefix = tmp_path / "snap" / "s"
    recipe = write_recipe(tmp_path, "r", max_iter=2, snapshot=1, snapshot_prefix=str(prefix))
    with checkpoint.prefix_locked(prefix):  # the first training, holding it
        proc = subprocess.run([sys.executable, "-m", "hpcdl", "train", str(recipe)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, **THREADS})
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "another training is writing snapshots" in lines[0]
    assert not checkpoint.list_snapshots(prefix)
    with checkpoint.prefix_locked(prefix):  # released when the first one ends
        pass


def test_a_folder_named_like_a_snapshot_is_refused_before_training(tmp_path):
    """It was skipped on resume, and training then stopped when it reached that iteration, losing
    the work since the last snapshot."""
    prefix = tmp_path / "snap" / "s"
    checkpoint.snapshot_path(prefix, 20).mkdir(parents=True)
    with pytest.raises(HpcdlError, match="s_iter_20.ckpt is a folder named like a snapshot"):
        checkpoint.check_folder(prefix)


def test_a_link_named_like_the_next_snapshot_is_replaced_not_written_through(tmp_path):
    """Written through, a link would let whoever made it choose which of our files a snapshot overwrites."""
    victim = tmp_path / "precious.txt"
    victim.write_text("mine")
    path = checkpoint.snapshot_path(tmp_path / "s", 10)
    os.symlink(victim, path)
    save(tmp_path / "s", 10)
    assert victim.read_text() == "mine" and not path.is_symlink() and checkpoint.load(path)["iter"] == 10


@pytest.mark.slow
def test_the_surviving_rank_says_in_one_line_that_its_peer_is_gone(tmp_path):
    """When one rank of two dies, the other printed gloo's multi-line RuntimeError traceback."""
    import time

    from hpcdl.launch import free_port
    from test_train import records

    recipe = write_recipe(tmp_path, "r", max_iter=100_000, display=1, collective_timeout_s=30)
    env = {**os.environ, **THREADS, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    ranks = [subprocess.Popen([sys.executable, "-m", "hpcdl", "train", str(recipe), "--results", str(tmp_path / f"{r}.jsonl")],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    results = tmp_path / "0.jsonl"
    deadline = time.monotonic() + 240
    while not (results.exists() and any(r["event"] == "step" for r in records(results))):
        assert ranks[0].poll() is None and time.monotonic() < deadline, ranks[0].communicate()
        time.sleep(0.2)
    ranks[1].kill()
    ranks[1].communicate()
    _, err = ranks[0].communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip() and "step" not in line and "iter" not in line]
    assert ranks[0].returncode == 1 and "Traceback" not in err, err
    assert [line for line in lines if "another rank is gone" in line] and len(lines) == 1, err
