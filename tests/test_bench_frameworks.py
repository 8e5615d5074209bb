"""The PyTorch/TensorFlow/MXNet benchmark rows render for docs/performance.md (the timing itself is `make bench`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpcdl.bench.frameworks import Case, markdown_table, measure


def test_framework_rows_render_as_a_table_with_the_trainer_to_bare_ratio_and_failures_said_in_words():
    text = markdown_table([
        {"framework": "tensorflow", "net": "resnet50", "image_size": 64, "batch": 16, "window": 2, "windows": 10,
         "threads": 1, "trainer_images_per_sec": 26.4, "bare_images_per_sec": 26.3, "ratio": 1.004,
         "median_ratio": 1.007, "load_before": [4.56, 5.92, 4.87], "load_after": [9.17, 7.07, 5.51]},
        {"framework": "mxnet", "error": "No module named mxnet"},
    ])
    assert "| tensorflow | resnet50 | 64 px | 16 | 10 x 2 it | 26.4 | 26.3 | **1.004** | 1.007 | 4.56, 9.17 |" in text
    assert "| mxnet | - | - | - | - | - | - | not measured: No module named mxnet | - | - |" in text


def test_rows_of_an_earlier_bench_still_render():
    text = markdown_table([{"framework": "tensorflow", "net": "cifar10_quick", "batch": 32, "threads": 1,
                            "trainer_images_per_sec": 1266.8, "bare_images_per_sec": 1356.7, "ratio": 0.934}])
    assert "| tensorflow | cifar10_quick | - | 32 | - | 1266.8 | 1356.7 | **0.934** | - | -, - |" in text


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_trainer_and_bare_loop_windows_alternate_in_one_process(monkeypatch, framework):
    """A tiny real run: one bare window after each of the trainer's display records, the warm-up pair dropped."""
    import torch

    for name in ("OMP_NUM_THREADS", "HPCDL_INTRA_OP_THREADS", "HPCDL_INTER_OP_THREADS", "TF_CPP_MIN_LOG_LEVEL",
                 "MXNET_CPU_WORKER_NTHREADS"):
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    threads = torch.get_num_threads()
    row = measure(framework, [Case("cifar10_quick", 16, 4, window=1, windows=3)])[0]
    torch.set_num_threads(threads)  # measure() sized this test process's pool
    assert len(row["trainer_windows_s"]) == len(row["bare_windows_s"]) == row["windows"] == 3
    assert row["trainer_images_per_sec"] > 0 and row["bare_images_per_sec"] > 0
    assert row["ratio"] == pytest.approx(row["trainer_images_per_sec"] / row["bare_images_per_sec"], rel=0.01)


def test_the_frameworks_guide_names_only_test_files_that_exist():
    root = Path(__file__).resolve().parent.parent
    guide = (root / "docs" / "frameworks.md").read_text()
    import re

    named = set(re.findall(r"tests/(test_\w+\.py)", guide))
    assert named and all((root / "tests" / name).exists() for name in named)
