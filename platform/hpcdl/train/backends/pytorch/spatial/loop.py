"""Training with spatial (and sample) parallelism, and per-pixel (segmentation) training.

The story of hpcdl.train.backends.pytorch.trainer.train, with three changes: the ranks are laid out as
data-parallel replicas of spatial groups (hpcdl.train.backends.pytorch.spatial.parallel), each rank feeds its
slab of every sample through SpatialNet, and the gradients are summed inside a spatial group
and averaged across replicas in one all-reduce after the backward pass. A recipe with a
per-pixel data source (`mesh`) and no `spatial` trains here too, as plain sample parallelism
(ways 1), which is what spatial parallelism is measured against.
"""

from __future__ import annotations

import functools
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from hpcdl.errors import HpcdlError
from hpcdl.launch import PREEMPTED_EXIT
from hpcdl.nets import load_net
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.backends.pytorch.cuda_settings import apply_cuda_settings
from hpcdl.train.backends.pytorch.spatial.net import SpatialNet
from hpcdl.train.backends.pytorch.spatial.parallel import Layout, loss_part, make_layout, reduce_gradients
from hpcdl.train.backends.pytorch.steps import (
    IterationEnd,
    Precision,
    StopRequest,
    caffe_sgd,
    choose_device,
    make_comm,
    resume,
    write_snapshot,
)
from hpcdl.train.data import Batches, centre_crop, load_dataset
from hpcdl.train.mesh_data import MeshBatches, MeshSamples, inverse_frequency_weights
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter
from hpcdl.train.schedule import Schedule


def train(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict) -> dict:
    started = time.perf_counter()
    threads = int(os.environ.get("HPCDL_INTRA_OP_THREADS", os.environ.get("OMP_NUM_THREADS", "0")) or 0)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(recipe.random_seed)  # the same initial weights on every rank
    device = choose_device(recipe, me)
    # the recipe's cudnn_benchmark and tf32, as torch_backend.train applies them: without this a GPU
    # would run PyTorch's defaults (no cuDNN autotuning, TF32 convolutions even under tf32: highest)
    cuda_settings = apply_cuda_settings(recipe, device)
    backend = recipe.distributed if recipe.distributed != "auto" else (
        context.get("distributed") or ("nccl" if device.type == "cuda" else "gloo"))
    comm = make_comm(recipe, me, backend)
    spatial = recipe.spatial
    ways, split = (spatial.ways, spatial.split) if spatial else (1, "rows")
    _check_plan(context.get("plan_spatial"), ways, split)
    layout = make_layout(ways, split, me.rank, me.world_size) if comm.active else make_layout(1, split, 0, 1)
    if me.world_size == 1 and ways > 1:
        raise HpcdlError(f"spatial.ways: {ways} ranks share a sample, but this run has 1 rank; launch {ways} or more")
    stop = StopRequest()

    spec0 = load_net(recipe.net)
    size = recipe.data.image_size or spec0.input_shape[1]
    channels = spec0.input_shape[0]
    data = _data(recipe, channels, size, layout)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=size, channels=channels)
    net = build_torch(spec).to(device)
    model = SpatialNet(net, layout.sg, overlap=spatial.overlap if spatial else True)
    if model.split_output != data.per_pixel:
        raise HpcdlError(f"net {spec.name}: its output is {'per pixel' if model.split_output else 'one per sample'} "
                         f"but data source {recipe.data.source} gives {'per-pixel' if data.per_pixel else 'per-sample'} "
                         "targets")
    optimizer = caffe_sgd(net, recipe)
    precision = Precision(recipe, device)
    params = [s.tensor for s in optimizer.slots]
    weights = torch.from_numpy(data.class_weights).to(device) if data.class_weights is not None else None
    pixels = size * size

    global_batch = recipe.batch_size * layout.data_groups * recipe.iter_size
    iters_per_epoch = max(1, data.batches.per_epoch // recipe.iter_size)
    max_iter = recipe.max_iter or max(1, math.ceil(recipe.epochs * iters_per_epoch))
    schedule = Schedule.from_recipe(recipe, max_iter, global_batch, iters_per_epoch)
    first_iter = resume(recipe, net, optimizer, precision, schedule, results, context, max_iter)

    results.record(
        "start", net=spec.name, parameters=spec.parameter_count, data=recipe.data.source, ranks=me.world_size,
        nodes=context.get("nodes", 1), global_batch=global_batch, max_iter=max_iter, site=context.get("site"),
        framework="pytorch", distributed=backend, device=str(device), precision=recipe.precision,
        iter=first_iter, plan=context.get("plan_summary"), launcher=me.launcher, binding=context.get("binding"),
        threads=torch.get_num_threads(), image_size=size, spatial_ways=ways, spatial_split=split,
        spatial_grid=[layout.sg.grid.rows, layout.sg.grid.cols], data_parallel_groups=layout.data_groups,
        class_weights=None if weights is None else [round(float(w), 6) for w in weights], **cuda_settings,
    )
    results.begin_progress(first_iter, max_iter)

    book = IterationEnd(
        recipe, me, results, comm, schedule, stop, model, max_iter=max_iter, iters_per_epoch=iters_per_epoch,
        samples_per_iter=recipe.batch_size * recipe.iter_size, replicas=layout.data_groups, ways=ways,
        # bound now, not looked up when called: model and optimizer are let go of before the group closes
        evaluate=functools.partial(evaluate, model, data, recipe, layout, comm, device, weights, pixels),
        snapshot=functools.partial(write_snapshot, recipe, me, net, optimizer, precision, schedule=schedule,
                                   results=results),
    )
    done = first_iter
    activation_bytes = 0
    model.train()
    for it in range(first_iter, max_iter):
        iter_start = time.perf_counter()
        agreement = comm.any_async(stop.signal is not None)
        lr = schedule.rate(it)
        optimizer.zero_grad()
        loss_sum = torch.zeros((), device=device)
        for micro in range(recipe.iter_size):
            x, y = data.batches.get(it * recipe.iter_size + micro)
            x = torch.from_numpy(x).to(device)
            y = torch.from_numpy(y).to(device)
            with precision.autocast(), _ActivationMeter(measure=it == first_iter and micro == 0) as meter:
                out = model(x)
            part = loss_part(out.float(), y, layout, model.split_output, pixels, weights,
                             recipe.label_smoothing) / recipe.iter_size
            precision.backward(part)
            loss_sum += part.detach()
            if meter.measure:
                activation_bytes = meter.bytes
                _check_budget(recipe, comm.max(activation_bytes), ways)
        reduce_gradients(params, layout)
        if precision.unscale_and_check(optimizer):
            optimizer.step(lr)
        done = it + 1
        if book.after(done, iter_start, loss_sum, lr, agreement):
            break

    preempted = book.preempted
    totals = book.totals(done, time.perf_counter() - started)
    activation_mib = comm.max(activation_bytes) / 2**20
    summary = dict(
        **totals, nodes=context.get("nodes", 1),
        ranks=me.world_size, site=context.get("site"), net=spec.name, framework="pytorch", distributed=backend,
        device=str(device), precision=recipe.precision, global_batch=global_batch, plan=context.get("plan_summary"),
        recipe=recipe.name, preempted=preempted, spatial_ways=ways, data_parallel_groups=layout.data_groups,
        activation_mib_per_rank=activation_mib,
    )
    results.end_progress()
    if not preempted:
        results.record("final", **summary)
    stop.restore()
    del book, model, optimizer  # as torch_backend.train does, before the process group goes
    comm.close()
    if preempted:
        summary["exit_status"] = PREEMPTED_EXIT
    return summary


class _ActivationMeter:
    """Bytes of the tensors autograd keeps for the backward pass (the activations), counted
    once per storage: what a rank must hold at the end of a forward pass, on any device."""

    def __init__(self, measure: bool):
        self.measure, self.bytes, self._seen, self._hooks = measure, 0, set(), None

    def _pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        if storage.data_ptr() not in self._seen:
            self._seen.add(storage.data_ptr())
            self.bytes += storage.nbytes()
        return t

    def __enter__(self):
        if self.measure:
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
            self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        if self._hooks is not None:
            self._hooks.__exit__(*exc)
        return False


class _Data:
    """What the loop needs of a data source: batches of this rank's slabs, the test part, weights."""

    def __init__(self, batches, test, num_classes: int, per_pixel: bool, class_weights=None):
        self.batches, self.test, self.num_classes = batches, test, num_classes
        self.per_pixel, self.class_weights = per_pixel, class_weights


def _data(recipe: Recipe, channels: int, size: int, layout: Layout) -> _Data:
    seed, spec = recipe.random_seed, recipe.data
    rect = layout.sg.grid.owned(layout.sg.index, size, size)
    if spec.source == "mesh":
        n_test = max(1, int(round(spec.synthetic_samples * spec.holdout_fraction)))
        train = MeshSamples(channels, size, seed, spec.synthetic_samples - n_test)
        test = MeshSamples(channels, size, seed, n_test, first=len(train))
        weights = None
        if recipe.class_weighting == "inverse_frequency":
            weights = inverse_frequency_weights(train.class_frequencies())
        batches = MeshBatches(train, recipe.batch_size, seed, layout.data_index, layout.data_groups, rect)
        return _Data(batches, test, 2, True, weights)
    data = load_dataset(spec, (channels, size, size), seed, net=recipe.net)
    batches = Batches(data.train, recipe.batch_size, seed, layout.data_index, layout.data_groups,
                      crop=spec.crop, mirror=spec.mirror)
    return _Data(_Slabs(batches, rect), data.test, data.num_classes, False)


class _Slabs:
    """Whole-image batches cut to this rank's slab (the targets are one label per sample)."""

    def __init__(self, batches: Batches, rect):
        self.inner, self.rect, self.per_epoch = batches, rect, batches.per_epoch

    def get(self, k: int):
        x, y = self.inner.get(k)
        (r0, r1), (c0, c1) = self.rect
        return np.ascontiguousarray(x[:, :, r0:r1, c0:c1]), y


def _check_budget(recipe: Recipe, activation_bytes: float, ways: int) -> None:
    """Stop, before the backward pass, a run whose activations exceed the per-rank budget:
    the memory of the GPU it is meant for, tried on any machine."""
    budget = recipe.activation_budget_mib
    if budget is not None and activation_bytes > budget * 2**20:
        need = activation_bytes / 2**20
        raise HpcdlError(
            f"activation_budget_mib: the first forward pass keeps {need:.0f} MiB of activations per rank, more than "
            f"the budget of {budget:g} MiB; split each sample over more ranks (spatial.ways, now {ways}: about "
            f"{need * ways / budget:.1f} ways would fit), or lower batch_size or data.image_size")


def _check_plan(plan_spatial: dict | None, ways: int, split: str) -> None:
    """The job's plan and the recipe must agree on who shares a sample."""
    if plan_spatial and (plan_spatial.get("ways") != ways or plan_spatial.get("split") != split):
        raise HpcdlError(f"spatial: the recipe asks for {ways}-way {split} but the job was planned for "
                         f"{plan_spatial.get('ways')}-way {plan_spatial.get('split')}; render the job from this recipe")


@torch.no_grad()
def evaluate(model: SpatialNet, data: _Data, recipe: Recipe, layout: Layout, comm, device, weights, pixels):
    """Held-out accuracy (per pixel for segmentation) and loss, each replica testing its share."""
    model.eval()
    step = recipe.test_batch_size or max(1, recipe.batch_size)
    n = len(data.test)
    if recipe.test_iter:
        n = min(n, recipe.test_iter * step * layout.data_groups)
    idx = np.arange(n)[layout.data_index::layout.data_groups]
    rect = layout.sg.grid.owned(layout.sg.index, *model.net.spec.input_shape[1:])
    correct = loss_sum = count = 0.0
    for i in range(0, len(idx), step):
        rows = idx[i:i + step]
        if data.per_pixel:
            x, y = data.test.slab(rows, rect)
        else:
            x = centre_crop(data.test.take(rows), recipe.data.crop)
            (r0, r1), (c0, c1) = rect
            x, y = np.ascontiguousarray(x[:, :, r0:r1, c0:c1]), data.test.labels[rows]
        x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        out = model(x).float()
        per = F.cross_entropy(out, y, reduction="none")
        if data.per_pixel and weights is not None:
            per = per * weights[y]
        # a replicated classifier output is counted once per group, by its first rank
        counts = data.per_pixel or layout.sg.index == 0
        correct += float((out.argmax(1) == y).sum()) if counts else 0.0
        loss_sum += float(per.sum()) if counts else 0.0
        count += float(y.numel()) if counts else 0.0
    correct, loss_sum, count = comm.sum([correct, loss_sum, count])
    return correct / max(count, 1), loss_sum / max(count, 1)
