"""The CUDA paths, run where a GPU is (marked `gpu`: skipped, and reported so, elsewhere)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import RECIPES
from test_train import final_weights, records, write_recipe

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def train(recipe, results):
    proc = subprocess.run([sys.executable, "-m", "hpcdl.train", str(recipe), "--results", str(results)],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "HPCDL_PROGRESS": "plain"})
    assert proc.returncode == 0, proc.stderr
    return records(results)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_on_cuda_converges_on_digits(tmp_path, precision):
    path = tmp_path / f"{precision}.yaml"
    text = re.sub(r"(?m)^random_seed: .*$", "", (RECIPES / "digits-quick.yaml").read_text())
    path.write_text(text + f"device: cuda\nprecision: {precision}\nchannels_last: true\nrandom_seed: 1\n")
    recs = train(path, tmp_path / "r.jsonl")
    start, final = recs[0], recs[-1]
    assert start["device"].startswith("cuda") and start["cudnn_benchmark"] is True and start["tf32"] == "on"
    assert final["event"] == "final" and final["accuracy"] >= 0.95


def test_a_run_resumed_on_the_gpu_takes_the_uninterrupted_runs_steps(tmp_path):
    common = dict(device="cuda", max_iter=20, snapshot=10, display=2, cudnn_benchmark=False, tf32="highest",
                  data={"source": "synthetic", "synthetic_samples": 500, "image_size": 32, "workers": 2})
    whole = write_recipe(tmp_path, "whole", snapshot_prefix=str(tmp_path / "whole" / "w"), **common)
    train(whole, tmp_path / "whole.jsonl")
    first = write_recipe(tmp_path, "part", snapshot_prefix=str(tmp_path / "part" / "w"), **{**common, "max_iter": 10})
    train(first, tmp_path / "part.jsonl")
    rest = write_recipe(tmp_path, "part", snapshot_prefix=str(tmp_path / "part" / "w"), **common)
    train(rest, tmp_path / "part.jsonl")
    loss = lambda p: {r["iter"]: r["loss"] for r in records(p) if r["event"] == "step"}  # noqa: E731
    whole_losses, part_losses = loss(tmp_path / "whole.jsonl"), loss(tmp_path / "part.jsonl")
    assert whole_losses.keys() == part_losses.keys()
    assert all(abs(whole_losses[i] - part_losses[i]) <= 1e-4 * abs(whole_losses[i]) for i in whole_losses)
    a, b = final_weights(tmp_path / "whole" / "w"), final_weights(tmp_path / "part" / "w")
    assert all((a[k] - b[k]).abs().max() <= 1e-4 for k in a)


NCCL_DDP = r"""
import os, torch, torch.distributed as dist
from hpcdl.train.backends.pytorch.gradients import compress_hook
from hpcdl.train.ranks import process_group_backend
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
torch.cuda.set_device(0)
dist.init_process_group(process_group_backend("nccl"), rank=0, world_size=1)
# the loop's bookkeeping is CPU tensors (display sums, the stop flag): Gloo beside NCCL carries them
sums = torch.tensor([3.0, 4.0], dtype=torch.float64)
dist.all_reduce(sums)
flag = torch.tensor([1], dtype=torch.int32)
dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True).wait()
names = [None]
dist.all_gather_object(names, "node")
assert sums.tolist() == [3.0, 4.0] and flag.item() == 1 and names == ["node"]
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 10).cuda(), device_ids=[0], bucket_cap_mb=1,
                                                  gradient_as_bucket_view=True)
model.register_comm_hook(None, compress_hook(torch.bfloat16))
x = torch.randn(32, 64, device="cuda")
model(x).square().mean().backward()
assert model.module.weight.grad.dtype == torch.float32 and torch.isfinite(model.module.weight.grad).all()
dist.barrier()
dist.destroy_process_group()
print("ok")
"""


def test_ddp_over_nccl_on_one_gpu_averages_bf16_compressed_buckets_and_cpu_bookkeeping_goes_over_gloo():
    proc = subprocess.run([sys.executable, "-c", NCCL_DDP], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr


def test_on_a_gpu_node_the_image_checks_cuda_cudnn_nccl_and_gpu_rows_pass():
    """`hpcdl images check`'s GPU rows, for a CUDA spec that asks for what this node's torch was built with
    and for this GPU's architecture (sm_90 on an H100): every row passes, none is "not applicable"."""
    import torch

    from hpcdl.images import check
    from hpcdl.images.spec import load_images

    spec = load_images()["volta-cuda"]
    major, minor = torch.cuda.get_device_capability(0)
    here = spec.model_copy(update={"cuda": spec.cuda.model_copy(
        update={"version": torch.version.cuda, "cudnn": None, "gpu_archs": (f"sm_{major}{minor}",)})})
    rows = {r.check: r for r in check.cuda_results(here)}
    assert set(rows) == {"cuda", "cuda archs", "cudnn", "nccl", "gpu"}
    assert all(r.status == check.PASSED for r in rows.values()), {k: (r.status, r.detail) for k, r in rows.items()}
    assert rows["gpu"].detail == torch.cuda.get_device_name(0)


def test_the_spatial_loop_trains_a_per_pixel_net_on_the_gpu_with_the_recipes_gpu_settings(tmp_path):
    """The spatial/per-pixel loop on CUDA (1 rank: no halo, but the class-weighted per-pixel loss,
    the activation meter and the test pass all on the device), with tf32: highest applied."""
    path = tmp_path / "mesh.yaml"
    path.write_text("name: mesh\nnet: mesh\nbatch_size: 2\nbase_lr: 0.01\nmomentum: 0.9\nmax_iter: 4\ndisplay: 2\n"
                    "device: cuda\nprecision: bf16\ntf32: highest\nclass_weighting: inverse_frequency\n"
                    "data: {source: mesh, image_size: 24, synthetic_samples: 10, holdout_fraction: 0.2}\n")
    recs = train(path, tmp_path / "r.jsonl")
    start, final = recs[0], recs[-1]
    assert start["device"].startswith("cuda") and start["tf32"] == "highest" and start["cudnn_benchmark"] is True
    assert final["event"] == "final" and final["activation_mib_per_rank"] > 0
