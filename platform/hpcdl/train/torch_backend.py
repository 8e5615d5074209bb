"""The PyTorch backend: data-parallel training with torch.distributed, read top to bottom."""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from hpcdl.nets import load_net
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.data import Dataset, epoch_order, load_dataset
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter
from hpcdl.train.schedule import learning_rate


class Distributed:
    """The process group, or a stand-in for one process."""

    def __init__(self, me: RankInfo, backend: str):
        self.me = me
        self.active = me.world_size > 1
        if self.active:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            dist.init_process_group(backend, rank=me.rank, world_size=me.world_size)

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

    def close(self):
        if self.active:
            dist.barrier()
            dist.destroy_process_group()
            self.active = False


def train(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict) -> dict:
    torch.manual_seed(recipe.random_seed)
    threads = int(os.environ.get("HPCDL_INTRA_OP_THREADS", os.environ.get("OMP_NUM_THREADS", "0")) or 0)
    if threads:
        torch.set_num_threads(threads)
    comm = Distributed(me, backend=context.get("distributed", "gloo"))

    spec0 = load_net(recipe.net)
    shape = (spec0.input_shape[0], recipe.data.image_size or spec0.input_shape[1], recipe.data.image_size or spec0.input_shape[2])
    data = load_dataset(recipe.data, shape, recipe.random_seed)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=shape[1], channels=shape[0])
    model = build_torch(spec)
    if comm.active:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.base_lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)

    global_batch = recipe.batch_size * me.world_size * recipe.iter_size
    max_iter = recipe.max_iter or max(1, math.ceil(recipe.epochs * len(data.train_x) / global_batch))
    iters_per_epoch = max(1, len(data.train_x) // (recipe.batch_size * me.world_size))
    results.record(
        "start", net=spec.name, parameters=spec.parameter_count, data=data.name, ranks=me.world_size,
        nodes=context.get("nodes", 1), global_batch=global_batch, max_iter=max_iter, site=context.get("site"),
    )

    train_x, train_y = torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)
    started = time.perf_counter()
    window_start, window_images = started, 0
    epoch, order, cursor = 0, epoch_order(len(train_x), 0, recipe.random_seed, me.rank, me.world_size), 0
    accuracy, test_loss = float("nan"), float("nan")
    model.train()
    for it in range(max_iter):
        lr = learning_rate(recipe, it, max_iter)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        for _ in range(recipe.iter_size):
            if cursor + recipe.batch_size > len(order):
                epoch += 1
                order, cursor = epoch_order(len(train_x), epoch, recipe.random_seed, me.rank, me.world_size), 0
            idx = torch.from_numpy(order[cursor : cursor + recipe.batch_size])
            cursor += recipe.batch_size
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx]) / recipe.iter_size
            loss.backward()
        optimizer.step()
        window_images += recipe.batch_size * recipe.iter_size

        last = it + 1 == max_iter
        if (it + 1) % recipe.display == 0 or last:
            elapsed = time.perf_counter() - window_start
            total_images, loss_sum = comm.sum([float(window_images), float(loss.item()) * recipe.iter_size])
            slowest = comm.max(elapsed)
            results.record(
                "step", iter=it + 1, epoch=round((it + 1) / iters_per_epoch, 3), loss=loss_sum / me.world_size, lr=lr,
                images_per_sec_rank=window_images / elapsed, images_per_sec_total=total_images / slowest,
            )
            window_start, window_images = time.perf_counter(), 0
        if (recipe.test_interval and (it + 1) % recipe.test_interval == 0) or last:
            accuracy, test_loss = evaluate(model, data, recipe, me, comm)
            results.record("test", iter=it + 1, accuracy=accuracy, loss=test_loss)
            model.train()
            window_start = time.perf_counter()  # testing is not training throughput

    wall = time.perf_counter() - started
    images = comm.sum([float(max_iter * recipe.batch_size * recipe.iter_size)])[0]
    slowest = comm.max(wall)
    summary = dict(
        iter=max_iter, accuracy=accuracy, test_loss=test_loss, images_per_sec_total=images / slowest,
        images_per_sec_rank=max_iter * recipe.batch_size * recipe.iter_size / wall, time_to_solution_s=slowest,
        nodes=context.get("nodes", 1), ranks=me.world_size, site=context.get("site"), net=spec.name,
        framework="pytorch", global_batch=global_batch, plan=context.get("plan_summary"),
    )
    results.record("final", **summary)
    # DDP holds the process group: drop it before the group goes, or gloo may abort at exit
    del model, optimizer
    comm.close()
    return summary


@torch.no_grad()
def evaluate(model, data: Dataset, recipe: Recipe, me: RankInfo, comm: Distributed) -> tuple[float, float]:
    model.eval()
    idx = np.arange(len(data.test_x))[me.rank :: me.world_size]
    x, y = torch.from_numpy(data.test_x[idx]), torch.from_numpy(data.test_y[idx])
    correct, loss_sum = 0.0, 0.0
    step = recipe.test_batch_size or 256
    for i in range(0, len(x), step):
        out = model(x[i : i + step])
        correct += float((out.argmax(1) == y[i : i + step]).sum())
        loss_sum += float(F.cross_entropy(out, y[i : i + step], reduction="sum"))
    correct, loss_sum, n = comm.sum([correct, loss_sum, float(len(x))])
    return correct / n, loss_sum / n
