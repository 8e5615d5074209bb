"""Branches that only run on a GPU, exercised on a CPU where their logic allows it.

torch.device("cuda", 0) can be built without a GPU, and the process-wide cuDNN/TF32 switches
can be set and read on a CPU build of torch: enough to check what the trainers hand to
PyTorch before the first kernel, without a GPU node's scarce minutes.
"""

from __future__ import annotations

import io

import pytest
import torch

from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import recipe_from_dict
from hpcdl.train.results import ResultsWriter

CUDA = torch.device("cuda", 0)


@pytest.fixture
def restore_switches():
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cudnn.benchmark = saved[0]
    torch.backends.cuda.matmul.allow_tf32 = saved[1]
    torch.backends.cudnn.allow_tf32 = saved[2]


def recipe(**fields):
    base = {"name": "r", "net": "cifar10_quick", "batch_size": 4, "base_lr": 0.01, "max_iter": 1,
            "data": {"source": "synthetic", "synthetic_samples": 20, "image_size": 32}}
    return recipe_from_dict({**base, **fields}, "r")


@pytest.mark.parametrize("tf32,allowed", [("on", True), ("highest", False)])
def test_the_tf32_switches_are_set_through_one_api_so_every_reader_agrees(restore_switches, tf32, allowed):
    """PyTorch >= 2.9 keeps the legacy allow_tf32 flags and the fp32_precision settings side by
    side; setting some through one and some through the other makes a later legacy read (a
    library's torch.get_float32_matmul_precision()) raise "mix of the legacy and new APIs"."""
    from hpcdl.train.backends.pytorch.cuda_settings import apply_cuda_settings

    done = apply_cuda_settings(recipe(tf32=tf32, cudnn_benchmark=False), CUDA)
    assert done == {"cudnn_benchmark": False, "tf32": tf32}
    assert torch.backends.cudnn.benchmark is False
    assert torch.backends.cuda.matmul.allow_tf32 is allowed and torch.backends.cudnn.allow_tf32 is allowed
    assert torch.get_float32_matmul_precision() == ("high" if allowed else "highest")  # reads without raising
    if hasattr(torch.backends.cudnn, "conv"):  # the new API's view of the same choice
        assert (torch.backends.cuda.matmul.fp32_precision == "tf32") is allowed
        assert (torch.backends.cudnn.conv.fp32_precision == "tf32") is allowed


def test_the_spatial_trainer_applies_the_recipes_gpu_settings_as_the_plain_one_does(monkeypatch):
    """On a GPU the spatial loop ran with PyTorch's defaults (no cuDNN autotuning, TF32
    convolutions even under tf32: highest): it must apply the recipe's, and say so."""
    from hpcdl.train.backends.pytorch.spatial import loop

    seen = []

    def applied(r, device):
        seen.append((r.tf32, r.cudnn_benchmark, device.type))
        return {"cudnn_benchmark": r.cudnn_benchmark, "tf32": r.tf32}

    monkeypatch.setattr(loop, "apply_cuda_settings", applied)
    r = recipe_from_dict({"name": "m", "net": "mesh", "batch_size": 2, "base_lr": 0.01, "max_iter": 1, "display": 1,
                          "tf32": "highest", "cudnn_benchmark": False,
                          "data": {"source": "mesh", "image_size": 16, "synthetic_samples": 4,
                                   "holdout_fraction": 0.25}}, "m")
    stream = io.StringIO()
    writer = ResultsWriter(None, enabled=True, stream=stream)
    torch.set_num_threads(1)
    try:
        loop.train(r, RankInfo(0, 1, 0, "none"), writer, {"site": "test", "nodes": 1})
    finally:
        writer.close()
    assert seen == [("highest", False, "cpu")]


def test_the_gpu_bench_reads_the_driver_version_without_nvidia_smi(tmp_path, monkeypatch):
    """`tools/gpu-node.sh tests` starts with the GPU bench's rehearsal under `set -e`: a node whose
    container has the GPU but no nvidia-smi (FileNotFoundError) lost the whole test stage."""
    from hpcdl.bench.gpu import driver_version

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on it
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 02:45:00 UTC 2025\n"
                    "GCC version:  gcc version 12.2.0\n")
    assert driver_version(str(proc)) == "570.124.06"
    assert driver_version(str(tmp_path / "absent")) == "?"


def test_the_collectives_probe_drives_the_gpu_the_trainer_drives(monkeypatch):
    """Where every rank sees the node's GPUs the plan names each rank's (HPCDL_GPU): the trainer
    took it, the validation's NCCL probe took the local rank's, so a plan that spreads 2 ranks
    over a 4-GPU node's sockets (GPUs 0 and 2) had the probe time GPUs 0 and 1 instead."""
    import torch.distributed as dist

    from hpcdl.train.ranks import gpu_index
    from hpcdl.validate import probes

    me = RankInfo(1, 2, 1, "srun")
    assert gpu_index(me, 4, {"HPCDL_GPU": "2"}) == 2
    assert gpu_index(me, 4, {}) == 1 and gpu_index(me, 1, {}) == 0  # one GPU left visible per rank
    chosen = []
    monkeypatch.setenv("HPCDL_GPU", "2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: None)
    probes._init_torch_distributed(me, "nccl")
    assert chosen == [2]
