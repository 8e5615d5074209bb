"""PyTorch with Horovod (`--dist horovod`): the seed papers' data parallelism, a legacy path.

Horovod averages gradients with ring allreduce over MPI or Gloo (NCCL on GPUs), batching
small tensors into one fusion buffer (Tensor Fusion: HOROVOD_FUSION_THRESHOLD bytes every
HOROVOD_CYCLE_TIME ms; the plan sets both, and Horovod's C++ core reads them at hvd.init(),
after binding.apply_plan put them in the environment). HPCDL_FP16_ALLREDUCE=1 casts the
gradients to fp16 on the wire (hvd.Compression.fp16, as Kurth et al. 2018 did on Summit),
halving the bytes. Rank 0's initial weights and optimizer state are broadcast, so every
rank starts equal whatever its seed.

Horovod 0.28.1 (June 2023) is the last release; `make horovod` builds it for PyTorch with
the C++17 fix that never shipped. torch.distributed is the maintained path.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from hpcdl.errors import HpcdlError
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter


def import_horovod():
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise HpcdlError(f"distributed: horovod is not installed here ({exc}); make horovod builds it") from None
    return hvd


# the run-time knobs the planner may set (plan/env.py communication_env)
PLAN_KNOBS = ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY",
              "HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TIMELINE",
              "HOROVOD_AUTOTUNE", "HOROVOD_MPI_THREADS_DISABLE")


class HorovodTrainer:
    """The verbs framework_loop needs, with hvd.DistributedOptimizer doing the allreduce."""

    framework = "pytorch"

    def __init__(self, hvd, model: torch.nn.Module, recipe: Recipe, fp16_allreduce: bool):
        self.hvd, self.model, self.recipe = hvd, model, recipe
        sgd = torch.optim.SGD(model.parameters(), lr=recipe.base_lr, momentum=recipe.momentum,
                              weight_decay=recipe.weight_decay)
        self.optimizer = hvd.DistributedOptimizer(
            sgd, named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none,
            backward_passes_per_step=recipe.iter_size, op=hvd.Average,
        )
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        self._calls = 0

    def train_step(self, xs, ys, lr):
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        self.optimizer.zero_grad()
        total = 0.0
        for k in range(len(xs)):
            loss = F.cross_entropy(self.model(torch.from_numpy(xs[k])), torch.from_numpy(ys[k])) / len(xs)
            loss.backward()
            total += float(loss.item())
        self.optimizer.step()
        return total

    @torch.no_grad()
    def predict(self, x):
        self.model.eval()
        return self.model(torch.from_numpy(x)).numpy()

    def _name(self, what: str) -> str:
        self._calls += 1  # Horovod matches collectives across ranks by name
        return f"hpcdl.{what}.{self._calls}"

    def sum(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return self.hvd.allreduce(t, op=self.hvd.Sum, name=self._name("sum")).tolist()

    def max(self, value):
        gathered = self.hvd.allgather(torch.tensor([float(value)], dtype=torch.float64), name=self._name("max"))
        return float(gathered.max())

    def weights(self):
        return [p.detach().numpy() for p in self.model.parameters()]

    def state(self):
        arrays = {f"p:{k}": v.detach().numpy().copy() for k, v in self.model.state_dict().items()}
        for i, p in enumerate(self.model.parameters()):
            buf = self.optimizer.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                arrays[f"m:{i}"] = buf.numpy().copy()
        return arrays

    def load_state(self, arrays):
        self.model.load_state_dict({k[2:]: torch.from_numpy(v) for k, v in arrays.items() if k.startswith("p:")})
        for i, p in enumerate(self.model.parameters()):
            if f"m:{i}" in arrays:
                self.optimizer.state[p]["momentum_buffer"] = torch.from_numpy(arrays[f"m:{i}"]).clone()


def train(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict) -> dict:
    hvd = import_horovod()
    hvd.init()
    if (hvd.rank(), hvd.size()) != (me.rank, me.world_size):
        raise HpcdlError(
            f"distributed: Horovod sees rank {hvd.rank()} of {hvd.size()} but the launcher ({me.launcher}) "
            f"says {me.rank} of {me.world_size}; start the ranks with horovodrun or mpirun"
        )
    from hpcdl.nets import load_net
    from hpcdl.nets.torch_build import build_torch
    from hpcdl.train.data import load_dataset
    from hpcdl.train.framework_loop import run_loop

    threads = int(os.environ.get("HPCDL_INTRA_OP_THREADS", os.environ.get("OMP_NUM_THREADS", "0")) or 0)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(recipe.random_seed + me.rank)  # differing seeds: the broadcast must make them equal
    spec0 = load_net(recipe.net)
    size = recipe.data.image_size or spec0.input_shape[1]
    shape = (spec0.input_shape[0], size, size)
    data = load_dataset(recipe.data, shape, recipe.random_seed)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=size, channels=shape[0])
    model = build_torch(spec)
    if recipe.weights:
        from hpcdl.caffe.weights import read_caffemodel, to_torch

        to_torch(model, read_caffemodel(recipe.weights))  # Caffe's --weights
    fp16 = os.environ.get("HPCDL_FP16_ALLREDUCE", "0") == "1" or recipe.gradient_compression == "fp16"
    if recipe.gradient_compression == "bf16":
        raise HpcdlError("gradient_compression: bf16 is not one of Horovod's compressions (hvd.Compression.fp16 is)")
    trainer = HorovodTrainer(hvd, model, recipe, fp16)
    context = {**context, "distributed": "horovod"}

    def horovod_settings() -> dict:
        # what the Horovod core ran with: the plan's HOROVOD_* knobs, and the controller
        knobs = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_") and k in PLAN_KNOBS}
        return {"horovod_controller": "mpi" if hvd.mpi_enabled() else "gloo", "fp16_allreduce": fp16, "horovod_env": knobs}

    summary = run_loop(recipe, me, results, context, data, spec, trainer, final_fields=horovod_settings)
    hvd.shutdown()
    return summary
