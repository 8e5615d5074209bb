"""The recipe's GPU speed settings, applied to PyTorch before the first kernel runs.

Two process-wide switches decide much of a convolution net's speed on NVIDIA GPUs:

- ``torch.backends.cudnn.benchmark``: cuDNN times its algorithms for each new input
  shape once and keeps the fastest. A trainer feeds one shape per phase, so the cost is
  a few slow first iterations (and one more for the test batch); PyTorch leaves it off
  because a model whose shapes change every step would pay it each time.
- TF32 (``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32``):
  fp32 tensors multiplied on Ampere and later tensor cores with a 10-bit mantissa, fp32
  accumulation. PyTorch allows it for convolutions but not matmuls by default (since 1.12);
  the recipe's ``tf32: on`` allows both, as TensorFlow and NVIDIA's reference trainers do;
  ``highest`` keeps full fp32 for both.

On a CPU none of this applies, and the record says so.
"""

from __future__ import annotations

import torch

from hpcdl.train.recipe import Recipe


def apply_cuda_settings(recipe: Recipe, device: torch.device) -> dict:
    """Set cuDNN autotuning and TF32 as the recipe asks; what was set, for the start record."""
    if device.type != "cuda":
        return {"cudnn_benchmark": None, "tf32": None}
    tf32 = recipe.tf32 == "on"
    torch.backends.cudnn.benchmark = recipe.cudnn_benchmark
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return {"cudnn_benchmark": recipe.cudnn_benchmark, "tf32": recipe.tf32}
