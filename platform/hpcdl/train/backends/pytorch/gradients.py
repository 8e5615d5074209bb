"""How gradients cross the wire: DDP's buckets, compression, and one-step gradient lag.

- Buckets: DDP allreduces gradients in buckets of `bucket_cap_mb` as backward produces
  them, so communication overlaps the rest of backward (Li et al., VLDB 2020, "PyTorch
  Distributed"; 25 MB is DDP's default, Horovod's fusion buffer is 64 MB). With
  `gradient_as_bucket_view` the gradients live inside the buckets: one copy less per
  step, and one gradient-sized allocation less.
- Compression: the gradients are cast to fp16 or bf16 for the allreduce and back after,
  halving the bytes on the wire, as the 2018 Summit climate run did (Kurth et al.,
  arXiv:1810.01993: fp16 gradients before the allreduce). The hook here is a few lines
  of our own rather than torch's bf16 hook, which needs NCCL; it works on gloo as well.
- Gradient lag: step t applies the gradients averaged at step t-1, so that allreduce runs
  while step t computes, hiding communication entirely at the price of one step of
  staleness (Kurth et al. 2018 used this lag on 27,360 V100s). The lagged gradients
  are part of the snapshot, so a resumed run continues with the same lag.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

WIRE_DTYPES = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def compress_hook(dtype: torch.dtype):
    """A DDP comm hook: average the bucket in `dtype` on the wire, keep the gradients fp32."""
    def hook(group, bucket):
        world = dist.get_world_size(group)
        wire = bucket.buffer().to(dtype).div_(world)
        future = dist.all_reduce(wire, group=group, async_op=True).get_future()

        def back(done):
            buffer = bucket.buffer()
            buffer.copy_(done.value()[0])
            return buffer

        return future.then(back)

    hook.__name__ = f"{dtype}_compress_hook".replace("torch.", "")
    return hook


def ddp_kwargs(recipe) -> dict:
    """DistributedDataParallel's keyword arguments from the recipe."""
    kwargs = {"gradient_as_bucket_view": recipe.gradient_as_bucket_view}
    if recipe.bucket_cap_mb is not None:
        kwargs["bucket_cap_mb"] = recipe.bucket_cap_mb
    return kwargs


def register_compression(model, recipe) -> None:
    dtype = WIRE_DTYPES[recipe.gradient_compression]
    if dtype is not None and hasattr(model, "register_comm_hook"):
        model.register_comm_hook(None, compress_hook(dtype))


class GradientLag:
    """Step t's update uses the gradients averaged over the ranks at step t-1.

    After backward, `exchange()` starts averaging this step's gradients (one flat buffer,
    an asynchronous allreduce) and returns the previous step's, now averaged, or None on
    the first step. The model must not be wrapped in DDP: the ranks start from the same
    seed, and apply the same averaged gradients, so their weights stay equal.
    """

    def __init__(self, params, world_size: int, wire: str = "none"):
        self.params = [p for p in params if p.requires_grad]
        self.world_size = world_size
        self.wire = WIRE_DTYPES[wire]
        self.pending: tuple | None = None  # (work or None, flat buffer)

    def exchange(self) -> torch.Tensor | None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        if self.wire is not None:
            flat = flat.to(self.wire)
        flat.div_(self.world_size)
        previous = self.wait()
        work = dist.all_reduce(flat, async_op=True) if self.world_size > 1 else None
        self.pending = (work, flat)
        return previous

    def wait(self) -> torch.Tensor | None:
        if self.pending is None:
            return None
        work, flat = self.pending
        if work is not None:
            work.wait()
        self.pending = None
        return flat

    def load_into_grads(self, flat: torch.Tensor) -> None:
        """The averaged gradients back into each parameter's .grad."""
        offset = 0
        for p in self.params:
            n = p.numel()
            chunk = flat[offset:offset + n].view_as(p).to(p.dtype)
            if p.grad is None:
                p.grad = chunk.clone()
            else:
                p.grad.copy_(chunk)
            offset += n

    def state_dict(self) -> dict:
        flat = self.wait()
        if flat is not None:
            self.pending = (None, flat)
        return {"lagged": None if flat is None else flat.float().cpu()}

    def load_state_dict(self, state: dict) -> None:
        lagged = (state or {}).get("lagged")
        if lagged is not None:
            device = self.params[0].device
            self.pending = (None, lagged.to(device=device, dtype=self.wire or torch.float32))
