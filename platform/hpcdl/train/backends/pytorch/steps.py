"""The steps of PyTorch training that the data-parallel and the spatial loops share.

The process group (Distributed), the device, the optimizer and its precision, resuming from
and writing snapshots, a rank's batches, one update, the loss and the held-out evaluation:
each a small piece hpcdl.train.backends.pytorch.trainer.train() and
hpcdl.train.backends.pytorch.spatial.loop.train() call in their own order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from hpcdl.errors import HpcdlError
from hpcdl.nets.torch_build import parameter_multipliers
from hpcdl.train import checkpoint
from hpcdl.train.backends.pytorch.gradients import GradientLag, ddp_kwargs, register_compression
from hpcdl.train.backends.pytorch.optim import CaffeSGD, ParamSlot
from hpcdl.train.data import Batches, Dataset, centre_crop, node_seed
from hpcdl.train.ranks import RankInfo, gpu_index, process_group_backend
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter
from hpcdl.train.schedule import Schedule
from hpcdl.train.update_rule import caffe_clip_bound


class Distributed:
    """The process group, or a stand-in for one process.

    The verbs a backend of distribution offers the loop: wrap(model), sum(values),
    max(value), any_async(flag) -> handle with .wait() -> bool, close(). Horovod is not
    one of these: it is a backend of its own (hpcdl.train.backends.horovod.trainer, chosen by
    hpcdl.train.backends.backend_for), since it replaces the optimizer, not the process group.
    """

    def __init__(self, me: RankInfo, backend: str, timeout_s: float = 300):
        self.me = me
        self.backend = backend
        self.active = me.world_size > 1
        if self.active:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            dist.init_process_group(process_group_backend(backend), rank=me.rank, world_size=me.world_size,
                                    timeout=timedelta(seconds=timeout_s))

    def wrap(self, model: torch.nn.Module, device: torch.device, recipe: Recipe | None = None) -> torch.nn.Module:
        if not self.active:
            return model
        ids = [device.index] if device.type == "cuda" else None
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **(ddp_kwargs(recipe) if recipe else {}))
        if recipe:
            register_compression(ddp, recipe)
        return ddp

    def sum(self, values: list[float]) -> list[float]:
        if not self.active:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def max(self, value: float) -> float:
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def any_async(self, flag: bool):
        """Start agreeing on 'did any rank get a stop signal'; overlaps with the iteration."""
        return _Agreement(flag, self.active)

    def close(self):
        if self.active:
            dist.barrier()
            dist.destroy_process_group()
            self.active = False


class _Agreement:
    def __init__(self, flag: bool, active: bool):
        self.t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        self.work = dist.all_reduce(self.t, op=dist.ReduceOp.MAX, async_op=True) if active else None

    def wait(self) -> bool:
        if self.work is not None:
            self.work.wait()
        return bool(self.t.item())


class StopRequest:
    """SIGUSR1/SIGTERM (a scheduler's warning before the time limit) asks for a snapshot and exit."""

    def __init__(self):
        self.signal: int | None = None
        self._previous = {}
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (a test harness): no handler
                pass

    def _handle(self, signum, _frame):
        self.signal = signum

    def restore(self):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def choose_device(recipe: Recipe, me: RankInfo) -> torch.device:
    if recipe.device == "cuda" or (recipe.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise HpcdlError("device: cuda asked for, but PyTorch sees no GPU here")
        device = torch.device("cuda", gpu_index(me, torch.cuda.device_count()))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def compiled(model: torch.nn.Module, recipe: Recipe) -> torch.nn.Module:
    """The training step's module under torch.compile, in the recipe's mode (as is for `none`).

    What is compiled is the module the loop calls (DistributedDataParallel's, where there is
    one: TorchDynamo then splits the graph at DDP's buckets so the allreduce still overlaps
    backward). The net's own module, which evaluation and snapshots use, stays the eager one and
    shares its parameters; the shapes are static, so no step compiles twice.
    """
    if recipe.compile == "none":
        return model
    mode = None if recipe.compile == "default" else recipe.compile
    return torch.compile(model, mode=mode, dynamic=False)


def choose_backend(recipe: Recipe, device: torch.device) -> str:
    if recipe.distributed != "auto":
        return recipe.distributed
    return "nccl" if device.type == "cuda" else "gloo"


def make_comm(recipe: Recipe, me: RankInfo, backend: str):
    if backend == "horovod":
        raise HpcdlError("distributed: horovod is trained by hpcdl.train.backends.horovod.trainer; start it with `hpcdl train`")
    if backend == "mpi" and not dist.is_mpi_available():
        raise HpcdlError("distributed: mpi, but this PyTorch was built without MPI; use gloo or nccl")
    return Distributed(me, backend, recipe.collective_timeout_s)


def iteration_spread(seconds: list[float]) -> dict:
    """`iteration_cv`: the spread of this rank's single iterations in a window (standard deviation over
    mean), what synchronous SGD's wait for the slowest rank grows with; none with fewer than 3. A
    window's mean hides it: 37 iterations of independent spread s average to s / 6."""
    if len(seconds) < 3 or statistics.mean(seconds) <= 0:
        return {}
    return {"iteration_cv": statistics.stdev(seconds) / statistics.mean(seconds)}


class IterationEnd:
    """What both PyTorch loops (train above, hpcdl.train.backends.pytorch.spatial.loop) do after an update.

    The display step (losses averaged over the window and over the replicas, images per
    second), the progress line, the test interval, the snapshot interval, and the stop a
    SIGUSR1/SIGTERM asked for (snapshot, a `preempted` record, leave the loop). A replica is
    a copy of the model: every rank here, a spatial group of `ways` ranks there, whose ranks
    each count the group's samples.
    """

    def __init__(self, recipe: Recipe, me: RankInfo, results: ResultsWriter, comm, schedule: Schedule,
                 stop: StopRequest, model, *, max_iter: int, iters_per_epoch: int, samples_per_iter: int,
                 replicas: int, evaluate, snapshot, ways: int = 1):
        self.recipe, self.me, self.results, self.comm, self.schedule = recipe, me, results, comm, schedule
        self.stop, self.model, self.max_iter, self.iters_per_epoch = stop, model, max_iter, iters_per_epoch
        self.samples_per_iter, self.replicas, self.ways = samples_per_iter, replicas, ways
        self.evaluate, self.snapshot = evaluate, snapshot
        self.window_start, self.window_samples, self.window_losses = time.perf_counter(), 0, []
        self.window_iterations: list[float] = []  # each iteration's own time, this window
        self.train_time, self.trained = 0.0, 0
        self.accuracy, self.test_loss, self.loss = float("nan"), float("nan"), float("nan")
        self.preempted = False

    def after(self, done: int, iter_start: float, loss_sum, lr: float, agreement) -> bool:
        """Iteration `done` is over (it started at `iter_start`); True: leave the loop, pre-empted."""
        recipe, results, comm = self.recipe, self.results, self.comm
        # on a CPU the step is done when the loop gets here; on a GPU its kernels may still be queued
        self.window_iterations.append(time.perf_counter() - iter_start)
        # losses stay tensors until a display step: reading one waits for a GPU to finish
        self.window_losses.append(loss_sum)
        self.window_samples += self.samples_per_iter
        self.trained += self.samples_per_iter
        if done % recipe.display == 0 or done == self.max_iter:
            self.loss = float(loss_sum)
            self.train_time += time.perf_counter() - iter_start
            iter_start = None
            elapsed = time.perf_counter() - self.window_start
            mean_loss = float(torch.stack(self.window_losses).mean())
            # a spatial group's loss is the sum of its ranks' parts; the run's, the mean over replicas
            total, loss_total, window_loss = comm.sum([float(self.window_samples), self.loss, mean_loss])
            slowest = comm.max(elapsed)
            results.record(
                "step", iter=done, epoch=round(done / self.iters_per_epoch, 3), loss=loss_total / self.replicas,
                loss_window=window_loss / self.replicas, lr=lr,
                images_per_sec_rank=self.window_samples / elapsed / self.ways,
                images_per_sec_total=total / self.ways / slowest, **iteration_spread(self.window_iterations),
            )
            self.window_start, self.window_samples, self.window_losses = time.perf_counter(), 0, []
            self.window_iterations = []
        if iter_start is not None:
            self.train_time += time.perf_counter() - iter_start
        results.advance(done, loss=self.loss, lr=lr)
        if (recipe.test_interval and done % recipe.test_interval == 0) or done == self.max_iter:
            self.accuracy, self.test_loss = self.evaluate()
            results.record("test", iter=done, accuracy=self.accuracy, loss=self.test_loss)
            self.model.train()
            self.window_start = time.perf_counter()  # testing is not training throughput
        stop_now = agreement.wait()
        if recipe.snapshot_prefix and ((recipe.snapshot and done % recipe.snapshot == 0) or stop_now
                                       or done == self.max_iter):
            self.snapshot(done)
        if stop_now and done < self.max_iter:
            self.preempted = True
            results.record("preempted", iter=done, signal=int(self.stop.signal or 0), lr=self.schedule.rate(done),
                           snapshot=str(checkpoint.snapshot_path(recipe.snapshot_prefix, done))
                           if recipe.snapshot_prefix else None)
        return self.preempted

    def totals(self, done: int, wall: float) -> dict:
        """The summary's figures over all ranks: the slowest rank's times, the last loss."""
        comm = self.comm
        total, loss_total = comm.sum([float(self.trained), self.loss])
        slowest_train, slowest_wall = comm.max(self.train_time), comm.max(wall)
        return dict(
            iter=done, accuracy=self.accuracy, test_loss=self.test_loss,
            loss=loss_total / self.replicas,  # the last iteration's loss over the global batch
            images_per_sec_total=total / self.ways / slowest_train if slowest_train else 0.0,
            images_per_sec_rank=self.trained / self.train_time / self.ways if self.train_time else 0.0,
            time_to_solution_s=slowest_wall, train_time_s=slowest_train,
        )


def caffe_sgd(net, recipe: Recipe) -> CaffeSGD:
    """Caffe's solver (SGD or the recipe's other type) over the net's blobs, with the recipe's rate
    rule, trust ratio and clipping; a compiled step (`compile:`) takes plain SGD's update fused."""
    return CaffeSGD(param_slots(net, recipe), recipe.momentum, recipe.weight_decay, recipe.rule,
                    trust=recipe.trust, eps=recipe.larc_eps, clip_gradients=caffe_clip_bound(recipe),
                    momentum_correction=recipe.momentum_correction, solver=recipe.solver,
                    momentum2=recipe.momentum2, delta=recipe.delta, rms_decay=recipe.rms_decay,
                    regularization=recipe.regularization_type, fused=recipe.compile != "none")


def resume(recipe: Recipe, net, optimizer: CaffeSGD, precision: "Precision", schedule: Schedule,
           results: ResultsWriter, context: dict, schedule_end: int | None = None) -> int:
    """The iteration to start from: 0, or the newest usable snapshot's, its weights, velocities and
    loss scale loaded (checkpoint.resume's rules for which one is usable)."""
    if not recipe.snapshot_prefix:
        return 0
    # a read-only or full folder is said now, not at the first snapshot an interval of work later
    checkpoint.check_folder(recipe.snapshot_prefix, 2 * checkpoint.snapshot_bytes(net))
    resumed = checkpoint.resume(recipe.snapshot_prefix,
                                lambda s: checkpoint.state_fits(s, net, optimizer, max_iter=schedule_end),
                                start_over=bool(context.get("start_over")))
    if not resumed:
        return 0
    state, path = resumed
    checkpoint.refuse_finished(state["iter"], schedule_end, path)
    net.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    precision.load_state_dict(state.get("precision", {}))
    results.record("resume", iter=state["iter"], snapshot=str(path), lr=schedule.rate(state["iter"]))
    return state["iter"]


def rank_batches(recipe: Recipe, data: Dataset, me: RankInfo, comm: Distributed, nodes: int) -> Batches:
    """This rank's micro-batches: from one global shuffle, or from its node's shard.

    With `data.shuffle: node` each node holds only its shard (staged with --shard) and
    shuffles it with its own seed each epoch, dealing to its ranks (placed in blocks, as the
    rendered launch lines place them). The smallest shard sets every node's epoch length,
    so all ranks take the same number of steps.
    """
    crop, mirror = recipe.data.crop, recipe.data.mirror
    if recipe.data.shuffle == "global" or nodes <= 1:
        return Batches(data.train, recipe.batch_size, recipe.random_seed, me.rank, me.world_size, crop, mirror)
    per_node = me.world_size // nodes
    if per_node * nodes != me.world_size:
        raise HpcdlError(f"data.shuffle: node needs the same ranks on every node, not {me.world_size} over {nodes}")
    node, local = divmod(me.rank, per_node)
    smallest = int(-comm.max(-float(len(data.train))))
    if comm.max(float(data.num_classes)) != -comm.max(-float(data.num_classes)):
        raise HpcdlError("data.shuffle: node: the nodes' shards hold different sets of classes; every shard needs "
                         "every class (stage image folders with hpcdl stage --shard, which splits each class)")
    return Batches(data.train, recipe.batch_size, node_seed(recipe.random_seed, node), local, per_node, crop, mirror,
                   samples=smallest)


def take_step(optimizer: CaffeSGD, precision: "Precision", lag: GradientLag | None, lr: float) -> None:
    """The update, with the gradients of this step or, under gradient lag, of the step before."""
    if lag is not None:
        lagged = lag.exchange()
        if lagged is None:
            return  # the first step: nothing averaged yet
        lag.load_into_grads(lagged)
    if precision.on_device and optimizer.fused:  # fp16 with a fused step: skipped there, no host sync
        found = precision.unscale(optimizer)
        optimizer.step(lr, skip_if=found)
        precision.settle_on_device(found)
    elif precision.unscale_and_check(optimizer):
        optimizer.step(lr)


def param_slots(net, recipe: Recipe) -> list[ParamSlot]:
    """Caffe's per-blob lr_mult/decay_mult; `no_bias_decay` also frees 1-D tensors of decay."""
    slots = []
    for name, tensor, lr_mult, decay_mult in parameter_multipliers(net):
        if recipe.no_bias_decay and tensor.dim() <= 1:
            decay_mult = 0.0  # biases and batch-norm gamma/beta (DLE RN50, Goyal et al.)
        slots.append(ParamSlot(name, tensor, lr_mult, decay_mult))
    return slots


def criterion(output, y, spec, recipe: Recipe):
    if isinstance(output, tuple):  # main and auxiliary classifiers, Caffe's loss_weight
        main, aux = output
        loss = F.cross_entropy(main, y, label_smoothing=recipe.label_smoothing)
        for (_, weight), out in zip(spec.aux_outputs, aux):
            loss = loss + weight * F.cross_entropy(out, y, label_smoothing=recipe.label_smoothing)
        return loss
    return F.cross_entropy(output, y, label_smoothing=recipe.label_smoothing)


class Precision:
    """fp32, bf16 (autocast) or fp16 (autocast with loss scaling, for GPUs).

    Dynamic loss scaling as in NVIDIA's mixed-precision guide: scale the loss, unscale the
    gradients, skip the step and halve the scale on inf/NaN, double it after 2000 clean
    steps. DDP has already averaged the gradients, so every rank takes the same decision.
    """

    #: NVIDIA's rule: double the scale after this many clean steps in a row
    GROWTH_INTERVAL = 2000

    def __init__(self, recipe: Recipe, device: torch.device, on_device: bool = False):
        self.device = device
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[recipe.precision]
        self.scaling = recipe.precision == "fp16"
        self.dynamic = recipe.loss_scale == "dynamic"
        self.scale = 65536.0 if self.dynamic else float(recipe.loss_scale)
        self.good_steps = 0
        self.skipped = 0
        # `on_device` (a fused step that skips itself): the scale, the clean steps and the skips live on
        # the device and are updated there (torch._amp_update_scale_, GradScaler's own kernel), so a
        # step never waits for the GPU; they are read back only for a snapshot
        self.on_device = on_device and self.scaling
        if self.on_device:
            self._scale = torch.full((1,), self.scale, dtype=torch.float32, device=device)
            self._tracker = torch.zeros(1, dtype=torch.int32, device=device)
            self._skipped = torch.zeros(1, dtype=torch.float32, device=device)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss):
        if not self.scaling:
            loss.backward()
        else:
            (loss * (self._scale.reshape(()) if self.on_device else self.scale)).backward()

    def unscale(self, optimizer: CaffeSGD) -> torch.Tensor:
        """The gradients unscaled in place, and a 1-element flag on the device: non-zero where one
        of them is inf or NaN. One fused pass per dtype (a rank's net is on one device), as
        torch.amp.GradScaler does; nothing is read back."""
        by_dtype: dict = {}
        for s in optimizer.slots:
            if s.tensor.grad is not None:
                by_dtype.setdefault(s.tensor.grad.dtype, []).append(s.tensor.grad)
        found = torch.zeros(1, device=self.device)
        inverse = (self._scale.reciprocal() if self.on_device
                   else torch.full((1,), 1.0 / self.scale, device=self.device))
        for grads in by_dtype.values():
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inverse)
        return found

    def unscale_and_check(self, optimizer: CaffeSGD) -> bool:
        """Whether to take the step: unscaled, then one flag read (one host-device synchronisation a
        step, as GradScaler's with an optimizer that cannot skip itself)."""
        if not self.scaling:
            return True
        if self.on_device:
            raise RuntimeError("Precision: on_device scaling is settled with settle_on_device, not read back")
        if self.unscale(optimizer).item():
            self.skipped += 1
            if self.dynamic:
                self.scale /= 2.0
                self.good_steps = 0
            return False
        self.good_steps += 1
        if self.dynamic and self.good_steps % self.GROWTH_INTERVAL == 0:
            self.scale *= 2.0
        return True

    def settle_on_device(self, found: torch.Tensor) -> None:
        """After a step that skipped itself where `found`: count the skip, and under dynamic scaling
        halve the scale on a skip or double it after GROWTH_INTERVAL clean steps, on the device."""
        self._skipped += found
        if self.dynamic:
            torch._amp_update_scale_(self._scale, self._tracker, found, 2.0, 0.5, self.GROWTH_INTERVAL)

    def state_dict(self) -> dict:
        if self.on_device:  # the clean steps since the scale last changed: what decides its next doubling
            return {"scale": float(self._scale.item()), "good_steps": int(self._tracker.item()),
                    "skipped": int(self._skipped.item())}
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.scale = state.get("scale", self.scale)
        self.good_steps = state.get("good_steps", 0)
        self.skipped = state.get("skipped", 0)
        if self.on_device:
            self._scale.fill_(self.scale)
            self._tracker.fill_(self.good_steps % self.GROWTH_INTERVAL)
            self._skipped.fill_(self.skipped)


def write_snapshot(recipe, me, net, optimizer, precision, done, schedule, results) -> None:
    """Rank 0 writes (the weights and velocities are the same on every rank)."""
    if me.rank == 0:
        state = {"iter": done, "model": net.state_dict(), "optimizer": optimizer.state_dict(),
                 "precision": precision.state_dict(), "recipe": recipe.model_dump(mode="json"),
                 "lr_next": schedule.rate(done)}
        try:
            path = checkpoint.save(state, checkpoint.snapshot_path(recipe.snapshot_prefix, done))
        except HpcdlError as exc:
            if recipe.snapshot_failure != "continue":
                raise
            print(f"hpcdl train: snapshot at iteration {done} not written, going on (snapshot_failure: continue): {exc}",
                  file=sys.stderr)
            results.record("snapshot_failed", iter=done, error=str(exc))
            return
        checkpoint.prune(recipe.snapshot_prefix, recipe.snapshot_keep)
        results.record("snapshot", iter=done, path=str(path))


@torch.no_grad()
def evaluate(net, data: Dataset, recipe: Recipe, me: RankInfo, comm, device, memory_format, precision) -> tuple[float, float]:
    """Held-out accuracy and loss, each rank testing its share (Caffe's TEST phase)."""
    net.eval()
    n = len(data.test)
    step = recipe.test_batch_size or 256
    if recipe.test_iter:
        n = min(n, recipe.test_iter * step * me.world_size)
    idx = np.arange(n)[me.rank :: me.world_size]
    correct, loss_sum = 0.0, 0.0
    for i in range(0, len(idx), step):
        rows = idx[i : i + step]
        x = torch.from_numpy(centre_crop(data.test.take(rows), recipe.data.crop)).to(device).contiguous(memory_format=memory_format)
        y = torch.from_numpy(data.test.labels[rows]).to(device)
        with precision.autocast():
            out = net(x)
        out = out.float()
        correct += float((out.argmax(1) == y).sum())
        loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
    correct, loss_sum, n = comm.sum([correct, loss_sum, float(len(idx))])
    return correct / max(n, 1), loss_sum / max(n, 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run the trainer with: python -m hpcdl.train RECIPE")
