"""The benchmark report: figures, ratios and the plot come out of one results dict (no timing here)."""

from __future__ import annotations

import pytest

from hpcdl.bench.cpu import Case, trainer, write_report


def test_the_report_states_each_ratio_and_links_its_plot(tmp_path):
    results = {
        "machine": "2 CPUs (test)", "started": "t0", "finished": "t1", "load_before": 3.2, "load_after": 4.1,
        "trainer_vs_bare": [
            {"net": "cifar10_quick", "image_size": 32, "batch": 64, "threads": 2, "bare": [100.0, 104.0, 98.0],
             "trainer": [99.0, 101.0, 97.0], "ratio": 99.0 / 100.0},
            {"net": "resnet50", "image_size": 64, "batch": 16, "threads": 2, "bare": [20.0, 21.0],
             "trainer": [20.5, 20.0], "ratio": 0.98},
        ],
        "channels_last": {"net": "resnet50", "image_size": 64, "batch": 16, "threads": 2, "nchw": [20.0], "channels_last": [25.0],
                          "ratio": 1.25},
        "ranks_vs_threads": {"one_rank_two_threads": [100.0], "two_ranks_one_thread": [150.0], "ratio": 1.5},
    }
    out = tmp_path / "performance.md"
    write_report(results, out)
    text = out.read_text()
    assert "**0.990**" in text and "**0.980**" in text and "**1.25x**" in text and "**1.50x**" in text
    assert "load average" in text.lower() and "shared" in text
    assert "![trainer throughput](performance.png)" in text
    assert (tmp_path / "performance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_trainer_side_of_a_ratio_is_timed_between_its_own_records(tmp_path):
    """A tiny real run: the measured rate is positive and comes from the records after the warm-up."""
    rate = trainer(Case("cifar10_quick", 16, 8, 1, warmup=2, timed=4), tmp_path)
    assert rate > 0


def test_the_report_carries_the_tensorflow_and_mxnet_rows_when_measured(tmp_path):
    results = {
        "machine": "2 CPUs (test)", "started": "t0", "finished": "t1", "load_before": 1.0, "load_after": 1.0,
        "trainer_vs_bare": [{"net": "cifar10_quick", "image_size": 32, "batch": 64, "threads": 1, "bare": [100.0],
                             "trainer": [99.0], "ratio": 0.99}],
        "channels_last": {"net": "resnet50", "image_size": 64, "batch": 16, "threads": 1, "nchw": [20.0],
                          "channels_last": [25.0], "ratio": 1.25},
        "ranks_vs_threads": {"one_rank_two_threads": [100.0], "two_ranks_one_thread": [150.0], "ratio": 1.5},
        "frameworks": [
            {"framework": "tensorflow", "net": "cifar10_quick", "image_size": 32, "batch": 64, "window": 10,
             "windows": 24, "threads": 1, "trainer_images_per_sec": 1500.0, "bare_images_per_sec": 1600.0,
             "ratio": 0.938, "median_ratio": 0.95, "load_before": [1.0, 1.0, 1.0], "load_after": [1.5, 1.0, 1.0]},
            {"framework": "mxnet", "error": "No module named 'mxnet'"},
        ],
    }
    out = tmp_path / "performance.md"
    write_report(results, out)
    text = out.read_text()
    assert "| tensorflow | cifar10_quick | 32 px | 64 | 24 x 10 it | 1500.0 | 1600.0 | **0.938** | 0.95 | 1.0, 1.5 |" in text
    assert "not measured: No module named 'mxnet'" in text


def test_the_report_carries_spatial_against_sample_parallelism_and_memory_per_way(tmp_path):
    results = {
        "machine": "2 CPUs (test)", "started": "t0", "finished": "t1", "load_before": 1.0, "load_after": 1.0,
        "trainer_vs_bare": [{"net": "cifar10_quick", "image_size": 32, "batch": 64, "threads": 1, "bare": [100.0],
                             "trainer": [99.0], "ratio": 0.99}],
        "channels_last": {"net": "resnet50", "image_size": 64, "batch": 16, "threads": 1, "nchw": [20.0],
                          "channels_last": [25.0], "ratio": 1.25},
        "ranks_vs_threads": {"one_rank_two_threads": [100.0], "two_ranks_one_thread": [150.0], "ratio": 1.5},
        "spatial": {"measured": "t2", "load": 2.0, "net": "mesh", "image_size": 192, "mini_batch": 2,
                    "sample_parallel": [1.0, 1.2], "spatial_2way": [0.9], "ratio": 0.75, "memory_image_size": 256,
                    "activation_mib": {"1": 200.0, "2": 104.0, "4": 55.0}},
    }
    out = tmp_path / "performance.md"
    write_report(results, out)
    text = out.read_text()
    assert "**0.75x**" in text
    assert "| 2 | 104.0 | 0.520 | 0.500 |" in text and "| 4 | 55.0 | 0.275 | 0.250 |" in text
    assert "still to be measured on GPUs" in text


def test_without_a_gpu_the_report_says_the_gpu_section_was_skipped_and_what_is_left_to_measure(tmp_path):
    import torch

    from hpcdl.bench.gpu import gpu_rows, markdown

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the section is measured, not skipped")
    gpu = gpu_rows()
    assert gpu == {"skipped": "no CUDA GPU on this machine"}
    text = markdown(gpu)
    assert "Skipped: no CUDA GPU" in text and "still to be measured" in text


def test_the_gpu_section_reports_device_ratios_and_goals(tmp_path):
    from hpcdl.bench.gpu import markdown

    gpu = {"device": {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.1, "driver": "570.1", "cuda": "12.8",
                      "cudnn": 91000, "torch": "2.11"},
           "rows": [{"precision": "bf16", "bare": 3000.0, "trainer": 2950.0, "ratio": 0.983}],
           "loader": {"hpcdl_loader": 3100.0, "torch_dataloader": 3000.0, "ratio": 1.03},
           "jpeg_vs_synthetic": {"jpeg": 2800.0, "synthetic": 2950.0, "ratio": 0.95},
           "larc_vs_sgd": {"sgd_train": 2950.0, "larc_train": 2920.0, "step_ratio": 1.0103, "sgd_ms": 2.0,
                           "larc_ms": 2.6, "ratio": 1.3}}
    text = markdown(gpu)
    assert "NVIDIA H100 80GB HBM3" in text and "driver 570.1" in text
    assert "| bf16 | 3000 | 2950 | **0.983** |" in text and "a LARC step **1.010x** as long (goal <= 1.05)" in text
    dali = {"dali": 2850.0, "hpcdl": 2800.0, "synthetic": 2950.0, "vs_synthetic": 0.966, "vs_hpcdl": 1.018,
            "workers": 14, "version": "2.4.0"}
    text = markdown({**gpu, "dali": dali})
    assert "2850 img/s, **0.97** of synthetic data (goal >= 0.95) and **1.02x** hpcdl's 14 decode workers" in text
    assert "feed alone" not in text  # a run from before the feed was measured alone
    text = markdown({**gpu, "dali": {**dali, "feed_alone": 9100.0}})
    assert "DALI's feed alone, with no training, delivers 9100 img/s." in text


@pytest.mark.slow
def test_the_gpu_section_rehearses_every_path_on_the_cpu(tmp_path):
    """The GPU section's code (bare loop with autocast/GradScaler, the trainer at bf16/fp16, the JPEG folder through
    hpcdl's feed and torch's DataLoader, LARC against SGD) at toy sizes on the CPU: where no GPU is, this is the
    only run it gets, and a GPU node should not be the first to find a broken path."""
    from hpcdl.bench.gpu import REHEARSAL, gpu_rows, markdown

    gpu = gpu_rows(REHEARSAL, "cpu")
    assert [r["precision"] for r in gpu["rows"]] == ["bf16", "fp16"]
    figures = [v for r in gpu["rows"] for v in (r["bare"], r["trainer"])]
    figures += [gpu["loader"]["hpcdl_loader"], gpu["loader"]["torch_dataloader"], gpu["jpeg_vs_synthetic"]["jpeg"],
                gpu["larc_vs_sgd"]["larc_train"], gpu["larc_vs_sgd"]["sgd_ms"], gpu["larc_vs_sgd"]["larc_ms"]]
    assert all(f > 0 for f in figures)
    text = markdown(gpu)
    assert text.count("Rehearsal (") == 1 and "not the section's figures" in text and "| fp16 |" in text
    assert "a LARC step **" in text


def test_a_gpu_part_not_measured_again_keeps_its_earlier_figures_marked_with_their_device():
    from hpcdl.bench.gpu import markdown, merge

    h100 = {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2, "driver": "580.1", "cuda": "13.0", "cudnn": 91900,
            "torch": "2.11"}
    earlier = {"device": h100, "measured": "2026-11-24", "rows": [{"precision": "bf16", "bare": 3957.0,
                                                                  "trainer": 3949.0, "ratio": 0.998}],
               "loader": {"hpcdl_loader": 2883.0, "torch_dataloader": 1913.0, "ratio": 1.51},
               "jpeg_vs_synthetic": {"jpeg": 3869.0, "synthetic": 3949.0, "ratio": 0.98}}
    new = {"device": {**h100, "name": "NVIDIA H200", "memory_gib": 139.8}, "measured": "2026-11-27", "rows": [],
           "compiled": [{"precision": "bf16", "compile": "default", "bare": 6776.0, "trainer": 6659.0, "ratio": 0.983},
                        {"precision": "fp16", "compile": "default", "bare": 6741.0, "trainer": 6700.0,
                         "ratio": 0.994}],
           "not_run": {"larc": "20 s left of the deadline, 60 s needed"}}
    merged = merge(earlier, new)
    assert merged["rows"] == earlier["rows"] and merged["loader"] == earlier["loader"]
    assert set(merged["earlier_parts"]) == {"eager", "loader"}
    text = markdown(merged)
    assert "Device: NVIDIA H200 (139.8 GiB)" in text
    assert "Measured in an earlier run (2026-11-24) on NVIDIA H100 80GB HBM3" in text
    assert "| bf16 | 6776 | 6659 | **0.983** |" in text and "in bf16 runs at **0.994** of its fp16 rate" in text
    assert "Not measured in this run: larc (20 s left of the deadline, 60 s needed)" in text
    # merged again, the eager figures still say where they came from, not the H200
    assert merge(merged, {**new, "compiled": []})["earlier_parts"]["eager"]["device"]["name"] == h100["name"]


def test_a_gpu_run_past_its_deadline_skips_every_part_and_says_so():
    from hpcdl.bench.gpu import REHEARSAL, SECTIONS, gpu_rows, markdown

    gpu = gpu_rows(REHEARSAL, "cpu", deadline=1e-9)
    assert set(gpu["not_run"]) == set(SECTIONS) and not gpu["rows"]
    assert markdown(gpu).count("Not measured in this run") == len(SECTIONS)
