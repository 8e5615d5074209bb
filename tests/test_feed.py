"""The data pipeline: worker processes decode ahead, and still hand out exactly the batches
a pure function of (seed, micro-batch, rank) gives, so resume stays exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_train import records, train_here, write_recipe

from hpcdl.errors import HpcdlError
from hpcdl.train.backends.pytorch.feed import AheadOfTime, DeviceFeed, ResidentFeed, default_workers, resident_fits
from hpcdl.train.data import Batches, Split


def split(n=200, size=12):
    rng = np.random.default_rng(3)
    return Split(rng.integers(0, 10, n).astype(np.int64), rng.standard_normal((n, 3, size, size), dtype=np.float32))


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_workers_hand_out_the_very_batches_of_the_pure_function_from_any_starting_micro_batch(workers):
    batches = Batches(split(), 8, seed=5, rank=1, world=2, crop=8, mirror=True)
    reference = Batches(split(), 8, seed=5, rank=1, world=2, crop=8, mirror=True)
    first = 17  # a resumed run starts mid-epoch
    feed = AheadOfTime(batches, first, workers)
    try:
        for k in range(first, first + 30):  # across two epoch boundaries (12 micro-batches an epoch)
            x, y = feed.next()
            rx, ry = reference.get(k)
            assert np.array_equal(x, rx) and np.array_equal(y, ry), k
    finally:
        feed.close()


def test_a_batch_that_fails_to_decode_in_a_worker_stops_the_loop_with_the_reason():
    class Broken(Batches):
        def get(self, k):
            if k == 3:
                raise HpcdlError("data.path: image 41 is not a JPEG")
            return super().get(k)

    feed = AheadOfTime(Broken(split(), 8, 1, 0, 1), 0, 2)
    try:
        with pytest.raises(HpcdlError, match="micro-batch 3: data.path: image 41 is not a JPEG"):
            for _ in range(6):
                feed.next()
    finally:
        feed.close()


def test_worker_count_follows_the_ranks_cores_on_a_gpu_and_is_zero_on_a_cpu():
    assert default_workers(None, torch.device("cpu"), cores=16) == 0
    assert default_workers(None, torch.device("cuda", 0), cores=7) == 6  # Summit: 42 cores / 6 GPUs
    assert default_workers(None, torch.device("cuda", 0), cores=1) == 1
    assert default_workers(4, torch.device("cpu"), cores=16) == 4


def test_the_cpu_feed_gives_tensors_in_the_asked_memory_format():
    feed = DeviceFeed(AheadOfTime(Batches(split(), 8, 1, 0, 1), 0, 0), torch.device("cpu"), torch.channels_last)
    x, y = feed.next()
    assert x.is_contiguous(memory_format=torch.channels_last) and y.dtype == torch.int64
    feed.prefetch()  # nothing to stage on a CPU: the next batch is still micro-batch 1
    assert torch.equal(feed.next()[0], torch.from_numpy(Batches(split(), 8, 1, 0, 1).get(1)[0]))
    feed.close()


@pytest.mark.slow
def test_training_with_decode_workers_takes_the_same_steps_as_without(tmp_path):
    losses = {}
    for workers in (0, 2):
        recipe = write_recipe(tmp_path, f"w{workers}", max_iter=6, iter_size=2,
                              data={"source": "synthetic", "synthetic_samples": 300, "image_size": 36, "crop": 32,
                                    "mirror": True, "workers": workers})
        train_here(recipe, tmp_path / f"w{workers}.jsonl")
        losses[workers] = [r["loss"] for r in records(tmp_path / f"w{workers}.jsonl") if r["event"] == "step"]
    assert losses[0] == losses[2] and len(losses[0]) == 6


@pytest.mark.gpu
def test_on_a_gpu_the_next_batch_is_copied_from_pinned_memory_on_a_side_stream():
    feed = DeviceFeed(AheadOfTime(Batches(split(), 8, 1, 0, 1), 0, 2), torch.device("cuda", 0))
    reference = Batches(split(), 8, 1, 0, 1)
    try:
        assert all(p is None or p[0].is_pinned() for p in feed._pinned)
        for k in range(6):
            x, y = feed.next()
            if k % 3:  # staged by the loop's prefetch after backward, or by next() itself: the same batches
                feed.prefetch()
            assert x.is_cuda and torch.equal(x.cpu(), torch.from_numpy(reference.get(k)[0]))
    finally:
        feed.close()


def test_the_decode_slots_fit_in_half_of_dev_shm_and_too_little_is_one_line(tmp_path):
    import os

    from hpcdl.train.backends.pytorch.feed import slot_count

    assert slot_count(14, 1000, shm=str(tmp_path)) == 29  # 2 per worker and the loop's, where room is plenty
    assert slot_count(2, 1000, depth=3, shm=str(tmp_path)) == 3
    st = os.statvfs(tmp_path)
    third_of_half = st.f_bavail * st.f_frsize // 2 // 3
    assert 2 <= slot_count(14, third_of_half, shm=str(tmp_path)) <= 4  # capped by the room, not 29
    with pytest.raises(HpcdlError, match=r"^data.workers: 14 decode workers need 2 micro-batches of .* MiB free"):
        slot_count(14, 10**18, shm=str(tmp_path))


@pytest.mark.parametrize("crop, mirror", [(None, False), (8, False), (None, True), (8, True), (12, True)])
def test_a_split_held_on_the_device_gives_the_pure_functions_batches_crops_and_flips_from_any_micro_batch(
        crop, mirror):
    """The resident feed's one gather (rows, channels, cropped and mirrored coordinates) against
    Batches.get's numpy slicing, from a resumed micro-batch across two epoch boundaries; on the CPU
    here, where torch's indexing is the same operation it is on a GPU."""
    batches = Batches(split(), 8, seed=5, rank=1, world=2, crop=crop, mirror=mirror)
    reference = Batches(split(), 8, seed=5, rank=1, world=2, crop=crop, mirror=mirror)
    first = 17
    feed = ResidentFeed(batches, first, torch.device("cpu"), torch.channels_last)
    for k in range(first, first + 30):
        x, y = feed.next()
        rx, ry = reference.get(k)
        assert torch.equal(x, torch.from_numpy(rx)) and torch.equal(y, torch.from_numpy(ry)), k
        assert x.is_contiguous(memory_format=torch.channels_last)


def test_only_an_in_memory_split_on_a_gpu_is_held_there():
    assert not resident_fits(Batches(split(), 8, 1, 0, 1), torch.device("cpu"))
    files = Split(np.zeros(200, dtype=np.int64), None, loader=object(), indices=np.arange(200))
    assert not resident_fits(Batches(files, 8, 1, 0, 1), torch.device("cpu"))


@pytest.mark.gpu
def test_on_a_gpu_a_small_synthetic_set_trains_from_the_device_with_no_decode_workers(tmp_path):
    assert resident_fits(Batches(split(), 8, 1, 0, 1), torch.device("cuda", 0))
    recipe = write_recipe(tmp_path, max_iter=4, device="cuda", batch_size=8,
                          data={"source": "synthetic", "synthetic_samples": 500, "image_size": 32, "crop": 28,
                                "mirror": True})
    train_here(recipe, tmp_path / "r.jsonl")
    start = next(r for r in records(tmp_path / "r.jsonl") if r["event"] == "start")
    steps = [r for r in records(tmp_path / "r.jsonl") if r["event"] == "step"]
    assert start["data_workers"] == 0 and len(steps) == 4 and all(np.isfinite(r["loss"]) for r in steps)
