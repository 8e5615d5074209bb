"""data.loader: dali (NVIDIA DALI decoding JPEGs on the GPU): what a CPU can check.

DALI itself needs a CUDA GPU and its own wheel (not installed by hpcdl): here the recipe's
rules, the refusals, and that the plan DALI is fed draws the very files, labels, crops and
flips hpcdl's own loader draws (so resume stays exact); the `gpu` test trains with it.
"""

from __future__ import annotations

import io
import sys
import threading
import time

import numpy as np
import pytest
import torch
from framework_tools import missing
from test_train import records, train_here, write_recipe

from hpcdl.errors import HpcdlError
from hpcdl.train.backends.pytorch.dali_feed import PlanColumns, batch_plan, check_device, import_dali, normalisation
from hpcdl.train.data import Batches, FileImages, Split
from hpcdl.train.recipe import recipe_from_dict


def encoded_images(n: int, size: int, fmt: str = "PNG") -> dict[str, bytes]:
    from PIL import Image

    rng = np.random.default_rng(7)
    files = {}
    for i in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, format=fmt)
        files[f"class{i % 3}/img{i}.{fmt.lower()}"] = buf.getvalue()
    return files


def file_split(files: dict[str, bytes], size: int, caffe=None) -> Split:
    names = sorted(files)
    loader = FileImages(files.__getitem__, names, size, 3, caffe)
    labels = np.array([int(name[5]) for name in names], dtype=np.int64)
    return Split(labels, loader=loader, indices=np.arange(len(names)))


def test_the_plan_dali_is_fed_is_the_batch_hpcdls_loader_draws_files_labels_crops_and_flips():
    split = file_split(encoded_images(30, 12), 12)
    batches = Batches(split, 4, seed=5, rank=1, world=2, crop=8, mirror=True)
    rows = {name: i for i, name in enumerate(split.loader.names)}
    for k in (0, 3, 4, 9):  # across an epoch boundary (3 micro-batches an epoch per rank)
        plan = batch_plan(batches, k)
        x, y = batches.get(k)
        assert np.array_equal(plan["labels"], y)
        full = split.loader.decode(np.array([rows[f] for f in plan["files"]]))
        for i, (top, left, flip) in enumerate(zip(plan["tops"], plan["lefts"], plan["flips"])):
            want = full[i, :, top:top + 8, left:left + 8]
            assert np.array_equal(want[:, :, ::-1] if flip else want, x[i]), (k, i)


def test_dalis_source_gives_the_plans_columns_in_order_with_the_files_read_in_a_thread_of_its_own():
    files = encoded_images(30, 12)
    split = file_split(files, 12)
    readers = []

    def read(name):  # the loader's read, recording which thread reads
        readers.append(threading.current_thread().name)
        return files[name]

    split.loader.read_bytes = read
    batches = Batches(split, 4, seed=5, rank=1, world=2, crop=8, mirror=True)
    source = PlanColumns(batches, 2)
    try:
        for k in (2, 3, 4, 5):  # across an epoch boundary, resumed at micro-batch 2
            encoded, labels, tops, lefts, flips = source()
            plan = batch_plan(batches, k)
            assert [bytes(e) for e in encoded] == [files[f] for f in plan["files"]]
            assert labels.dtype == np.int64 and labels.tolist() == [[v] for v in plan["labels"]]
            room = 12 - 8
            assert tops.dtype == lefts.dtype == np.float32 and flips.dtype == np.int32
            assert np.array_equal(tops * room, plan["tops"]) and np.array_equal(lefts * room, plan["lefts"])
            assert np.array_equal(flips.astype(bool), plan["flips"])
            # the next micro-batch's files are read with no further call: while this one trains
            deadline = time.monotonic() + 30
            while len(readers) < 4 * (k - 2 + 2) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(readers) == 4 * (k - 2 + 2)
    finally:
        source.close()
    # the loop's thread drew the plans; every file was read by the reader thread
    assert set(readers) == {"hpcdl-dali-read_0"}, set(readers)


@pytest.mark.parametrize("caffe", [None, (np.array([104.0, 117.0, 123.0], dtype=np.float32)[:, None, None], 0.5)])
def test_dalis_mean_and_std_on_0_255_pixels_give_hpcdls_and_caffes_transforms(caffe):
    from PIL import Image

    files = encoded_images(1, 6)
    loader = file_split(files, 6, caffe).loader
    mean, std, bgr = normalisation(loader)
    pixels = np.asarray(Image.open(io.BytesIO(next(iter(files.values())))), dtype=np.float32).transpose(2, 0, 1)
    pixels = pixels[::-1] if bgr else pixels
    dali_like = (pixels - np.array(mean, dtype=np.float32)[:, None, None]) / np.array(std, dtype=np.float32)[:, None, None]
    np.testing.assert_allclose(dali_like, loader.decode(np.array([0]))[0], rtol=1e-5, atol=1e-5)
    assert bgr == (caffe is not None)  # Caffe reads files as cv::imread does: BGR


def test_a_recipe_asks_dali_only_for_image_files():
    base = {"name": "r", "net": "cifar10_quick", "batch_size": 4, "base_lr": 0.1, "max_iter": 1}
    with pytest.raises(HpcdlError, match=r"data.loader: dali decodes image files .*not source synthetic"):
        recipe_from_dict({**base, "data": {"source": "synthetic", "loader": "dali"}}, "r.yaml")
    recipe = recipe_from_dict({**base, "data": {"source": "imagefolder", "path": "/data/train", "loader": "dali"}}, "r")
    assert recipe.data.loader == "dali"
    assert recipe_from_dict(base, "r").data.loader == "hpcdl"


def test_a_cpu_rank_is_refused_before_the_data_set_is_read(tmp_path):
    recipe = write_recipe(tmp_path, data={"source": "imagefolder", "path": str(tmp_path / "absent"), "loader": "dali"})
    with pytest.raises(HpcdlError, match="data.loader: dali decodes JPEGs on an NVIDIA GPU and this rank runs on cpu"):
        train_here(recipe)


def test_without_dali_installed_one_line_says_what_to_install(monkeypatch):
    from hpcdl.train.backends.pytorch.dali_feed import dali_package

    assert (dali_package("12.8"), dali_package("13.0")) == ("nvidia-dali-cuda120", "nvidia-dali-cuda130")
    wheel = dali_package()  # for this PyTorch's CUDA (cuda120 for a CPU build)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # an import of it fails, installed or not
    with pytest.raises(HpcdlError, match=f"pip install {wheel} "):
        import_dali()
    if torch.cuda.is_available():
        with pytest.raises(HpcdlError, match=wheel):
            check_device(torch.device("cuda", 0))


def test_the_tensorflow_mxnet_and_horovod_loop_refuses_the_dali_loader():
    from hpcdl.train.framework_loop import run_loop
    from hpcdl.train.ranks import RankInfo

    recipe = recipe_from_dict({"name": "r", "net": "cifar10_quick", "batch_size": 4, "base_lr": 0.1, "max_iter": 1,
                               "data": {"source": "imagefolder", "path": "/data", "loader": "dali"}}, "r")

    class Keras:
        framework = "tensorflow"

    with pytest.raises(HpcdlError, match="data.loader: dali feeds the PyTorch trainer .* not tensorflow"):
        run_loop(recipe, RankInfo(0, 1, 0, "none"), None, {}, None, None, Keras())


@pytest.mark.gpu
def test_on_a_gpu_dali_decodes_a_jpeg_folder_and_trains(tmp_path):
    try:
        import_dali()
    except HpcdlError as exc:
        missing(str(exc))
    for name, data in encoded_images(48, 40, "JPEG").items():
        path = tmp_path / "images" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    recipe = write_recipe(tmp_path, max_iter=4, device="cuda", batch_size=8,
                          data={"source": "imagefolder", "path": str(tmp_path / "images"), "image_size": 36,
                                "crop": 32, "mirror": True, "loader": "dali"})
    train_here(recipe, tmp_path / "dali.jsonl")
    steps = [r for r in records(tmp_path / "dali.jsonl") if r["event"] == "step"]
    assert len(steps) == 4 and all(np.isfinite(r["loss"]) for r in steps)
