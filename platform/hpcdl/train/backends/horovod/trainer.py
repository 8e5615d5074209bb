"""PyTorch with Horovod (`--dist horovod`): the seed papers' data parallelism, a legacy path.

Horovod averages gradients with ring allreduce over MPI or Gloo (NCCL on GPUs), batching
small tensors into one fusion buffer (Tensor Fusion: HOROVOD_FUSION_THRESHOLD bytes every
HOROVOD_CYCLE_TIME ms; the plan sets both, and Horovod's C++ core reads them at hvd.init(),
after binding.apply_plan put them in the environment). HPCDL_FP16_ALLREDUCE=1 casts the
gradients to fp16 on the wire (hvd.Compression.fp16, as Kurth et al. 2018 did on Summit),
halving the bytes. Rank 0's initial weights are broadcast, so every rank starts equal
whatever its seed (the velocities start at zero, as Caffe's do).

Horovod 0.28.1 (June 2023) is the last release; `make horovod` builds it for PyTorch with
the C++17 fix that never shipped. torch.distributed is the maintained path.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from hpcdl.errors import HpcdlError
from hpcdl.train.backends.pytorch.steps import choose_device, criterion
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
    """The verbs framework_loop needs: Horovod averages the gradients, CaffeSGD takes the step.

    hvd.DistributedOptimizer is kept for what Horovod does well (allreduce started from
    backward hooks, Tensor Fusion, fp16 compression) around a torch SGD that is never
    stepped: `synchronize()` leaves the averaged gradients in `.grad`, and the update is
    hpcdl.train.backends.pytorch.optim.CaffeSGD, the PyTorch trainer's own, so Horovod runs Caffe's
    momentum convention (the rate inside the velocity) and the net's lr_mult/decay_mult.
    hvd.broadcast_optimizer_state is not called: on a fresh optimizer it runs one
    `step()` with zero gradients to create the state (Horovod 0.28.1 torch/functions.py),
    which with weight decay shrinks every weight by 1 - lr * weight_decay and leaves
    momentum at weight_decay * w before training starts. Caffe's velocities start at zero
    on every rank, so there is nothing to broadcast.
    """

    framework = "pytorch"

    def __init__(self, hvd, model: torch.nn.Module, recipe: Recipe, fp16_allreduce: bool, spec=None,
                 device: torch.device | None = None):
        from hpcdl.train.backends.pytorch.cuda_settings import apply_cuda_settings
        from hpcdl.train.backends.pytorch.steps import Precision, caffe_sgd

        # the rank's device, memory format, precision and GPU settings, as the torch.distributed trainer's
        self.device = device or torch.device("cpu")
        self.memory_format = torch.channels_last if recipe.channels_last else torch.contiguous_format
        self.cuda_settings = apply_cuda_settings(recipe, self.device)
        self.precision = Precision(recipe, self.device)
        # the parameters stay contiguous: Horovod's collectives take only `is_contiguous()` tensors
        # (horovod/torch/mpi_ops.py _check_function), which channels_last weights and their gradients
        # are not; channels_last inputs still get the NHWC convolutions (PyTorch follows the input)
        model = model.to(device=self.device)
        self.hvd, self.model, self.recipe = hvd, model, recipe
        self.spec = spec if spec is not None else getattr(model, "spec", None)
        carrier = torch.optim.SGD(model.parameters(), lr=0.0)  # holds Horovod's hooks; never stepped
        self.allreduce = hvd.DistributedOptimizer(
            carrier, named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none,
            backward_passes_per_step=recipe.iter_size, op=hvd.Average,
        )
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.optimizer = caffe_sgd(model, recipe)
        self._calls = 0

    def start_fields(self) -> dict:
        """What the start record says of the rank's device, as the torch.distributed trainer's does."""
        return {"device": str(self.device), "precision": self.recipe.precision,
                "channels_last": self.recipe.channels_last, **self.cuda_settings}

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a).to(self.device)
        return t.contiguous(memory_format=self.memory_format) if t.dim() == 4 else t

    def train_step(self, xs, ys, lr, read=True):  # the loss is read in any case (one .item() per micro-batch)
        self.model.train()
        self.allreduce.zero_grad()
        total = 0.0
        for k in range(len(xs)):
            with self.precision.autocast():
                loss = criterion(self.model(self._tensor(xs[k])), self._tensor(ys[k]), self.spec, self.recipe) / len(xs)
            self.precision.backward(loss)
            total += float(loss.item())
        self.allreduce.synchronize()  # the gradients, averaged over the ranks, are in .grad now
        # every rank sees the same averaged gradients, so every rank takes (or skips) the step alike
        if self.precision.unscale_and_check(self.optimizer):
            self.optimizer.step(lr)
        return total

    @torch.no_grad()
    def predict(self, x):
        self.model.eval()
        with self.precision.autocast():
            return self.model(self._tensor(x)).float().cpu().numpy()

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
        return [p.detach().cpu().numpy() for p in self.model.parameters()]

    def state(self):
        arrays = {f"p:{k}": v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}
        for i, v in enumerate(self.optimizer.velocity):
            arrays[f"m:{i}"] = v.detach().cpu().numpy().copy()  # Caffe's history, the rate inside
        arrays["m_last_lr"] = np.float64(np.nan if self.optimizer.last_lr is None else self.optimizer.last_lr)
        for i, h in enumerate(self.optimizer.history2):  # AdaDelta's and Adam's second history
            arrays[f"m_h2_{i}"] = h.detach().cpu().numpy().copy()
        arrays["m_t"] = np.int64(self.optimizer.t)
        for key, value in self.precision.state_dict().items():  # fp16's loss scale goes on where it was
            arrays[f"precision:{key}"] = np.float64(value)
        return arrays

    def load_state(self, arrays):
        self.model.load_state_dict({k[2:]: torch.from_numpy(v) for k, v in arrays.items() if k.startswith("p:")})
        for i, v in enumerate(self.optimizer.velocity):
            if f"m:{i}" in arrays:
                v.copy_(torch.from_numpy(arrays[f"m:{i}"]))
        last = arrays.get("m_last_lr")
        self.optimizer.last_lr = None if last is None or np.isnan(last) else float(last)
        for i, h in enumerate(self.optimizer.history2):
            if f"m_h2_{i}" in arrays:
                h.copy_(torch.from_numpy(arrays[f"m_h2_{i}"]))
        self.optimizer.t = int(arrays.get("m_t", self.optimizer.t))
        saved = {k.split(":", 1)[1]: float(v) for k, v in arrays.items() if k.startswith("precision:")}
        if saved:
            self.precision.load_state_dict({"scale": saved["scale"], "good_steps": int(saved.get("good_steps", 0)),
                                            "skipped": int(saved.get("skipped", 0))})


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
    from hpcdl.train.data import load_dataset, net_input_size
    from hpcdl.train.framework_loop import run_loop

    threads = int(os.environ.get("HPCDL_INTRA_OP_THREADS", os.environ.get("OMP_NUM_THREADS", "0")) or 0)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(recipe.random_seed + me.rank)  # differing seeds: the broadcast must make them equal
    spec0 = load_net(recipe.net)
    # the net's input size follows the data: Caffe's crop_size, else the image size (the
    # images are stored at image_size; framework_loop crops and mirrors them)
    size = net_input_size(recipe.data, spec0.input_shape[1])
    shape = (spec0.input_shape[0], size, size)
    data = load_dataset(recipe.data, shape, recipe.random_seed, net=recipe.net)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=size, channels=shape[0],
                    aux_heads=recipe.aux_heads)
    model = build_torch(spec)
    if recipe.weights:
        from hpcdl.caffe.weights import read_caffemodel, to_torch

        to_torch(model, read_caffemodel(recipe.weights))  # Caffe's --weights
    device = choose_device(recipe, me)  # the plan's GPU for this rank (HPCDL_GPU), else its local rank's
    fp16 = os.environ.get("HPCDL_FP16_ALLREDUCE", "0") == "1" or recipe.gradient_compression == "fp16"
    if recipe.gradient_compression == "bf16":
        raise HpcdlError("gradient_compression: bf16 is not one of Horovod's compressions (hvd.Compression.fp16 is)")
    trainer = HorovodTrainer(hvd, model, recipe, fp16, device=device)
    context = {**context, "distributed": "horovod"}

    def horovod_settings() -> dict:
        # what the Horovod core ran with: the plan's HOROVOD_* knobs, and the controller
        knobs = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_") and k in PLAN_KNOBS}
        return {"horovod_controller": "mpi" if hvd.mpi_enabled() else "gloo", "fp16_allreduce": fp16, "horovod_env": knobs}

    summary = run_loop(recipe, me, results, context, data, spec, trainer, final_fields=horovod_settings)
    hvd.shutdown()
    return summary
