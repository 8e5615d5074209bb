"""Snapshots: written whole or not at all, verified before use, the previous one taken when damaged."""

from __future__ import annotations

import os

import pytest
import torch

from hpcdl.train import checkpoint


def write(prefix, it):
    return checkpoint.save({"iter": it, "w": torch.full((3,), float(it))}, checkpoint.snapshot_path(prefix, it))


def test_a_snapshot_round_trips_and_uses_caffes_iter_naming(tmp_path):
    path = write(tmp_path / "net", 40)
    assert path.name == "net_iter_40.ckpt"
    state = checkpoint.load(path)
    assert state["iter"] == 40 and state["w"].tolist() == [40.0] * 3


def test_the_newest_snapshot_is_loaded(tmp_path):
    for it in (10, 20, 30):
        write(tmp_path / "net", it)
    state, path = checkpoint.load_latest(tmp_path / "net")
    assert state["iter"] == 30 and path.name == "net_iter_30.ckpt"


@pytest.mark.parametrize("damage", ["truncate", "flip_a_byte", "empty", "foreign"])
def test_a_damaged_newest_snapshot_is_detected_and_the_previous_one_used(tmp_path, damage):
    write(tmp_path / "net", 10)
    newest = write(tmp_path / "net", 20)
    data = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    elif damage == "flip_a_byte":
        newest.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "empty":
        newest.write_bytes(b"")
    else:
        newest.write_bytes(b"PK\x03\x04 not ours" * 10)
    messages = []
    state, path = checkpoint.load_latest(tmp_path / "net", log=messages.append)
    assert state["iter"] == 10
    assert "net_iter_20.ckpt" in messages[0]
    with pytest.raises(checkpoint.CorruptCheckpoint):
        checkpoint.load(newest)


def test_no_usable_snapshot_means_a_fresh_start(tmp_path):
    assert checkpoint.load_latest(tmp_path / "none") is None
    (tmp_path / "net_iter_5.ckpt").write_bytes(b"junk")
    assert checkpoint.load_latest(tmp_path / "net", log=lambda m: None) is None


def test_a_failed_write_leaves_the_old_snapshot_and_no_temporary_file(tmp_path):
    path = write(tmp_path / "net", 10)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        checkpoint.save({"iter": 10, "x": Unpicklable()}, path)
    assert checkpoint.load(path)["iter"] == 10
    assert os.listdir(tmp_path) == ["net_iter_10.ckpt"]


def test_prune_keeps_the_newest(tmp_path):
    for it in (1, 2, 3, 4):
        write(tmp_path / "net", it)
    checkpoint.prune(tmp_path / "net", keep=2)
    assert [it for it, _ in checkpoint.list_snapshots(tmp_path / "net")] == [4, 3]
