"""The PyTorch backend: data-parallel training with torch.distributed, read top to bottom.

train() is the story: threads and device, process group, data, net, optimizer, schedule,
resume, the loop (micro-batches, gradient averaging, update, display, test, snapshot,
pre-emption), and the summary. Each step it takes is a small piece of
hpcdl.train.backends.pytorch.steps, which the spatial loop calls too.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time

import torch

from hpcdl.launch import PREEMPTED_EXIT
from hpcdl.nets import load_net
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.backends.pytorch.cuda_settings import apply_cuda_settings
from hpcdl.train.backends.pytorch.feed import AheadOfTime, DeviceFeed, ResidentFeed, default_workers, resident_fits
from hpcdl.train.backends.pytorch.gradients import GradientLag
from hpcdl.train.backends.pytorch.steps import (
    IterationEnd,
    Precision,
    StopRequest,
    caffe_sgd,
    choose_backend,
    choose_device,
    compiled,
    criterion,
    evaluate,
    make_comm,
    rank_batches,
    resume,
    take_step,
    write_snapshot,
)
from hpcdl.train.data import load_dataset, net_input_size
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter
from hpcdl.train.schedule import Schedule


def train(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict) -> dict:
    if recipe.spatial is not None or recipe.data.source == "mesh":
        # samples split into slabs over groups of ranks, or per-pixel targets: its own loop
        from hpcdl.train.backends.pytorch.spatial.loop import train as train_spatial

        return train_spatial(recipe, me, results, context)
    started = time.perf_counter()
    threads = int(os.environ.get("HPCDL_INTRA_OP_THREADS", os.environ.get("OMP_NUM_THREADS", "0")) or 0)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(recipe.random_seed)  # the same initial weights on every rank
    device = choose_device(recipe, me)
    dali = getattr(recipe.data, "loader", "hpcdl") == "dali"
    if dali:  # a rank without a GPU, or a node without DALI, is refused before the data set is read
        from hpcdl.train.backends.pytorch.dali_feed import check_device

        check_device(device)
    cuda_settings = apply_cuda_settings(recipe, device)
    # the recipe's choice, else the plan's (the site knows its fabric), else by device
    backend = recipe.distributed if recipe.distributed != "auto" else (
        context.get("distributed") or choose_backend(recipe, device))
    comm = make_comm(recipe, me, backend)
    stop = StopRequest()

    # data and net: the net's input size follows the data (crop, else image size)
    spec0 = load_net(recipe.net)
    size = net_input_size(recipe.data, spec0.input_shape[1])
    data = load_dataset(recipe.data, (spec0.input_shape[0], size, size), recipe.random_seed, net=recipe.net)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=size, channels=spec0.input_shape[0],
                    aux_heads=recipe.aux_heads)
    net = build_torch(spec)
    if recipe.weights:
        from hpcdl.caffe.weights import read_caffemodel, to_torch

        to_torch(net, read_caffemodel(recipe.weights))  # Caffe's --weights (Net::CopyTrainedLayersFrom)
    memory_format = torch.channels_last if recipe.channels_last else torch.contiguous_format
    net = net.to(device=device, memory_format=memory_format)
    # gradient lag averages the gradients itself, a step late; otherwise DDP does, in buckets
    lag = GradientLag(net.parameters(), me.world_size, recipe.gradient_compression) if recipe.gradient_lag else None
    model = compiled(comm.wrap(net, device, recipe) if lag is None else net, recipe)
    optimizer = caffe_sgd(net, recipe)
    optimizer.lag = lag  # its lagged gradients travel in the optimizer's snapshot
    precision = Precision(recipe, device, on_device=optimizer.fused)

    batches = rank_batches(recipe, data, me, comm, context.get("nodes", 1))
    global_batch = recipe.batch_size * me.world_size * recipe.iter_size
    iters_per_epoch = max(1, batches.per_epoch // recipe.iter_size)
    max_iter = recipe.max_iter or max(1, math.ceil(recipe.epochs * iters_per_epoch))
    schedule = Schedule.from_recipe(recipe, max_iter, global_batch, iters_per_epoch)

    workers = default_workers(recipe.data.workers, device)
    first_iter = resume(recipe, net, optimizer, precision, schedule, results, context, max_iter)

    resident = not dali and resident_fits(batches, device)
    if resident:
        workers = 0  # no decode workers: the batches are gathered on the device
    results.record(
        "start", net=spec.name, parameters=spec.parameter_count, data=data.name, ranks=me.world_size,
        nodes=context.get("nodes", 1), global_batch=global_batch, max_iter=max_iter, site=context.get("site"),
        framework="pytorch", distributed=backend, device=str(device), precision=recipe.precision,
        channels_last=recipe.channels_last, compile=recipe.compile, iter=first_iter, plan=context.get("plan_summary"),
        launcher=me.launcher, binding=context.get("binding"), threads=torch.get_num_threads(),
        data_workers=workers, **cuda_settings,
    )
    results.begin_progress(first_iter, max_iter)
    if dali:  # JPEGs decoded on the GPU, the same files, crops and flips as Batches draws
        from hpcdl.train.backends.pytorch.dali_feed import DaliFeed

        feed = DaliFeed(batches, first_iter * recipe.iter_size, device, memory_format, threads=max(1, workers))
    elif resident:  # a small in-memory split: on the GPU once, no host work a step
        feed = ResidentFeed(batches, first_iter * recipe.iter_size, device, memory_format)
    else:
        feed = DeviceFeed(AheadOfTime(batches, first_iter * recipe.iter_size, workers), device, memory_format)

    book = IterationEnd(
        recipe, me, results, comm, schedule, stop, model, max_iter=max_iter, iters_per_epoch=iters_per_epoch,
        samples_per_iter=recipe.batch_size * recipe.iter_size, replicas=me.world_size,
        evaluate=lambda: evaluate(net, data, recipe, me, comm, device, memory_format, precision),
        # bound now, not looked up when called: the optimizer is let go of before the group closes
        snapshot=functools.partial(write_snapshot, recipe, me, net, optimizer, precision, schedule=schedule,
                                   results=results),
    )
    done = first_iter
    model.train()
    for it in range(first_iter, max_iter):
        iter_start = time.perf_counter()
        agreement = comm.any_async(stop.signal is not None)
        lr = schedule.rate(it)
        optimizer.zero_grad()
        loss_sum = 0.0
        for micro in range(recipe.iter_size):
            x, y = feed.next()  # micro-batch it * iter_size + micro, already on the device
            last_micro = micro + 1 == recipe.iter_size
            sync = contextlib.nullcontext() if last_micro or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                with precision.autocast():
                    micro_loss = criterion(model(x), y, spec, recipe) / recipe.iter_size
                precision.backward(micro_loss)
            feed.prefetch()  # the next micro-batch's host work, while the GPU runs this one's kernels
            loss_sum += micro_loss.detach()
        take_step(optimizer, precision, lag, lr)
        done = it + 1
        if book.after(done, iter_start, loss_sum, lr, agreement):
            break

    feed.close()
    if lag is not None:
        lag.wait()  # the last step's allreduce, still in flight where no snapshot waited for it
    preempted = book.preempted
    summary = dict(
        **book.totals(done, time.perf_counter() - started),
        nodes=context.get("nodes", 1), ranks=me.world_size, site=context.get("site"), net=spec.name,
        framework="pytorch", distributed=backend, device=str(device), precision=recipe.precision,
        global_batch=global_batch, plan=context.get("plan_summary"), recipe=recipe.name,
        preempted=preempted,
    )
    results.end_progress()
    if not preempted:
        results.record("final", **summary)
    stop.restore()
    # DDP holds the process group: drop it before the group goes, or gloo may abort at exit (the
    # book holds it too, and the optimizer through its snapshot callback)
    del book, model, optimizer
    comm.close()
    if preempted:
        summary["exit_status"] = PREEMPTED_EXIT
    return summary
