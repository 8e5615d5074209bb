"""The training loop the TensorFlow, MXNet and Horovod backends share, framework-free.

A backend supplies a few verbs (one SGD iteration, predict, sum/max over ranks, its
state as arrays); this loop supplies everything the results must agree on across
frameworks: the Caffe schedule, the data order (one shuffle per epoch dealt to the
ranks), iter_size accumulation, display/test intervals, the JSON-lines records
(start/step/test/final, as the PyTorch backend writes them), and snapshots with resume.
"""

from __future__ import annotations

import glob
import inspect
import math
import os
import re
import sys
import time
import zipfile
from typing import Callable, Protocol

import numpy as np

from hpcdl.caffe.solver_types import SOLVERS
from hpcdl.errors import HpcdlError
from hpcdl.nets.spec import NetSpec
from hpcdl.train.data import Dataset, augment, centre_crop, epoch_order
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter
from hpcdl.train.schedule import learning_rate


class FrameworkTrainer(Protocol):
    framework: str

    def train_step(self, xs: np.ndarray, ys: np.ndarray, lr: float, read: bool = True) -> float | None:
        """One SGD iteration over iter_size micro-batches xs[k], ys[k]; this rank's mean loss.

        With `read` False the loss is not wanted (not a display iteration): the backend may
        return None and skip waiting for the step to finish just to read it.
        """

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The net's output blob (logits, or probabilities if it ends in Softmax)."""

    def sum(self, values: list[float]) -> list[float]: ...

    def max(self, value: float) -> float: ...

    def state(self) -> dict[str, np.ndarray]:
        """Weights and optimizer state, equal on every rank, as named arrays."""

    def load_state(self, arrays: dict[str, np.ndarray]) -> None: ...

    def weights(self) -> list[np.ndarray]:
        """This rank's learned parameters (to check that the ranks agree)."""


# Recipe fields a backend does not implement, with their plain values: a run that asks for
# one is refused rather than trained without it. TensorFlow and MXNet take their step with
# hpcdl.train.update_rule (LARS/LARC, clipping, momentum correction, no_bias_decay) and
# smooth labels and weigh auxiliary heads in their own loss. Horovod takes the PyTorch
# trainer's CaffeSGD step and loss (aux heads included); its recipe checks for the other
# optimizer rules are kept until they are tested there.
# Read with getattr, so recipes from before these fields existed pass.
_OPTIMIZER_FIELDS = {
    # Caffe's solver types are CaffeSGD's own; LARS and LARC are refused
    "type": SOLVERS,
    "label_smoothing": 0.0,
    "no_bias_decay": False,
    "clip_gradients": None,
    "momentum_correction": False,
}
# gradients on the wire (hpcdl.train.backends.pytorch.gradients) are torch.distributed's; Horovod compresses
# to fp16 itself (hvd.Compression.fp16), so only bf16 is refused there (in horovod_torch)
_WIRE_FIELDS = {"gradient_compression": "none", "gradient_lag": False}
UNSUPPORTED = {
    "tensorflow": {**_WIRE_FIELDS},
    "mxnet": {**_WIRE_FIELDS},
    "pytorch with horovod": {**_OPTIMIZER_FIELDS, "gradient_lag": False},
}


def refuse_unsupported(recipe: Recipe, framework: str) -> None:
    for name, plain in UNSUPPORTED.get(framework, {}).items():
        accepted = plain if isinstance(plain, tuple) else (plain,)
        value = getattr(recipe, name, accepted[0])
        if value not in accepted:
            raise HpcdlError(
                f"recipe {recipe.name}: {name}: {value!r} is implemented in the PyTorch trainer with torch.distributed "
                f"only, not in {framework}"
            )


def schedule(recipe: Recipe, max_iter: int, global_batch: int, iters_per_epoch: int) -> Callable[[int], float]:
    """The shared Caffe schedule; linear scaling and warm-up where schedule.py offers them."""
    accepted = inspect.signature(learning_rate).parameters
    extra = {k: v for k, v in (("global_batch", global_batch), ("iters_per_epoch", iters_per_epoch)) if k in accepted}
    return lambda it: learning_rate(recipe, it, max_iter, **extra)


def run_loop(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict, data: Dataset, spec: NetSpec,
             trainer: FrameworkTrainer, final_fields: Callable[[], dict] | None = None) -> dict:
    """Train to max_iter (resuming from the newest snapshot); `final_fields` adds to the final record."""
    label = "pytorch with horovod" if context.get("distributed") == "horovod" else trainer.framework
    refuse_unsupported(recipe, label)
    if getattr(recipe.data, "loader", "hpcdl") != "hpcdl":
        raise HpcdlError(f"recipe {recipe.name}: data.loader: {recipe.data.loader} feeds the PyTorch trainer with "
                         f"torch.distributed on CUDA only, not {label}")
    if getattr(recipe.data, "shuffle", "global") != "global":
        raise HpcdlError(f"recipe {recipe.name}: data.shuffle: node is implemented in the PyTorch trainer with "
                         f"torch.distributed only, not in {trainer.framework}")
    global_batch = recipe.batch_size * me.world_size * recipe.iter_size
    n_train = len(data.train_y)
    max_iter = recipe.max_iter or max(1, math.ceil(recipe.epochs * n_train / global_batch))
    iters_per_epoch = max(1, n_train // (recipe.batch_size * me.world_size))
    rate = schedule(recipe, max_iter, global_batch, iters_per_epoch)
    start_iter, epoch, cursor = 0, 0, 0
    resumed = restore_snapshot(recipe, trainer, start_over=bool(context.get("start_over")), max_iter=max_iter)
    if resumed:
        start_iter, epoch, cursor = resumed
    results.record(
        "start", net=spec.name, parameters=spec.parameter_count, data=data.name, ranks=me.world_size,
        nodes=context.get("nodes", 1), global_batch=global_batch, max_iter=max_iter, site=context.get("site"),
        framework=trainer.framework, distributed=context.get("distributed"), resumed_from=start_iter or None,
        **(trainer.start_fields() if hasattr(trainer, "start_fields") else {}),
    )

    order = epoch_order(n_train, epoch, recipe.random_seed, me.rank, me.world_size)
    started = time.perf_counter()
    window_start, window_images = started, 0
    accuracy, test_loss, loss = float("nan"), float("nan"), float("nan")
    for it in range(start_iter, max_iter):
        lr = rate(it)
        batches = []
        for _ in range(recipe.iter_size):
            if cursor + recipe.batch_size > len(order):
                epoch += 1
                order, cursor = epoch_order(n_train, epoch, recipe.random_seed, me.rank, me.world_size), 0
            batches.append(order[cursor : cursor + recipe.batch_size])
            cursor += recipe.batch_size
        idx = np.stack(batches)
        last = it + 1 == max_iter
        shown = (it + 1) % recipe.display == 0 or last
        loss = trainer.train_step(_transformed(recipe, me, it, _images(data, "train", idx)), data.train_y[idx], lr,
                                  read=shown)
        window_images += recipe.batch_size * recipe.iter_size

        if shown:
            elapsed = time.perf_counter() - window_start
            total_images, loss_sum = trainer.sum([float(window_images), float(loss)])
            slowest = trainer.max(elapsed)
            results.record(
                "step", iter=it + 1, epoch=round((it + 1) / iters_per_epoch, 3), loss=loss_sum / me.world_size, lr=lr,
                images_per_sec_rank=window_images / elapsed, images_per_sec_total=total_images / slowest,
            )
            window_start, window_images = time.perf_counter(), 0
        if (recipe.test_interval and (it + 1) % recipe.test_interval == 0) or last:
            accuracy, test_loss = evaluate(trainer, data, recipe, me, spec)
            results.record("test", iter=it + 1, accuracy=accuracy, loss=test_loss)
            window_start = time.perf_counter()  # testing is not training throughput
        if recipe.snapshot and recipe.snapshot_prefix and (it + 1) % recipe.snapshot == 0:
            write_snapshot(recipe, trainer, me, it + 1, epoch, cursor)

    wall = time.perf_counter() - started
    done = max_iter - start_iter
    images = trainer.sum([float(done * recipe.batch_size * recipe.iter_size)])[0]
    slowest = trainer.max(wall)
    summary = dict(
        iter=max_iter, accuracy=accuracy, test_loss=test_loss, images_per_sec_total=images / slowest,
        images_per_sec_rank=done * recipe.batch_size * recipe.iter_size / wall, time_to_solution_s=slowest,
        nodes=context.get("nodes", 1), ranks=me.world_size, site=context.get("site"), net=spec.name,
        framework=trainer.framework, distributed=context.get("distributed"), global_batch=global_batch,
        plan=context.get("plan_summary"),
    )
    summary["weights_digest_by_rank"] = digests_by_rank(trainer, me)
    summary["weights_equal"] = all(d == summary["weights_digest_by_rank"][0] for d in summary["weights_digest_by_rank"])
    if final_fields:
        summary.update(final_fields())
    results.record("final", **summary)
    return summary


def digests_by_rank(trainer: FrameworkTrainer, me: RankInfo) -> list[list[float]]:
    """Each rank's (sum, sum of squares) of its weights, in float64, gathered through sum().

    Data-parallel ranks must hold bit-identical weights; a rank that drifted shows here.
    Every other rank's slots are zero, so the sum carries each digest exactly.
    """
    flat = np.concatenate([np.asarray(w, dtype=np.float64).ravel() for w in trainer.weights()])
    slots = [0.0] * (2 * me.world_size)
    slots[2 * me.rank : 2 * me.rank + 2] = [float(flat.sum()), float((flat * flat).sum())]
    gathered = trainer.sum(slots)
    return [gathered[2 * r : 2 * r + 2] for r in range(me.world_size)]


def evaluate(trainer: FrameworkTrainer, data: Dataset, recipe: Recipe, me: RankInfo, spec: NetSpec) -> tuple[float, float]:
    """Held-out accuracy and loss; each rank scores every world_size-th image, the sums are reduced."""
    idx = np.arange(len(data.test_y))[me.rank :: me.world_size]
    x, y = centre_crop(_images(data, "test", idx), recipe.data.crop), data.test_y[idx]
    ends_in_softmax = spec.layers[-1].type == "Softmax"
    correct, loss_sum = 0.0, 0.0
    step = recipe.test_batch_size or 256
    for i in range(0, len(x), step):
        out = trainer.predict(x[i : i + step]).astype(np.float64)
        labels = y[i : i + step]
        correct += float((out.argmax(1) == labels).sum())
        log_p = np.log(np.maximum(out, 1e-12)) if ends_in_softmax else _log_softmax(out)
        loss_sum += float(-log_p[np.arange(len(labels)), labels].sum())
    correct, loss_sum, n = trainer.sum([correct, loss_sum, float(len(x))])
    return correct / n, loss_sum / n


def _images(data: Dataset, part: str, idx: np.ndarray) -> np.ndarray:
    """Images by index: from memory, or decoded from files where the data set's split can."""
    split = getattr(data, part, None)
    if split is not None and hasattr(split, "take"):
        if idx.ndim > 1 and getattr(split, "images", None) is None:  # files: decoded micro-batch by micro-batch
            return np.stack([split.take(row) for row in idx])
        return split.take(idx)  # in memory: one copy, (iter_size, batch, C, H, W) for 2-D idx
    return getattr(data, f"{part}_x")[idx]


def _transformed(recipe: Recipe, me: RankInfo, it: int, xs: np.ndarray) -> np.ndarray:
    """Caffe's TRAIN-phase transform_param (crop_size, mirror) on each of the iter_size micro-batches.

    The random crop and flip of micro-batch k = it * iter_size + micro are drawn as the
    PyTorch trainer's Batches draws them, from (seed, k, rank).
    """
    crop, mirror = recipe.data.crop, recipe.data.mirror
    if not (crop or mirror):
        return xs
    return np.stack([
        augment(x, np.random.default_rng((recipe.random_seed, it * recipe.iter_size + micro, me.rank)), crop, mirror)
        for micro, x in enumerate(xs)
    ])


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


# Snapshots: rank 0 writes `<prefix>_<framework>_iter_<N>.npz` (weights, optimizer state and
# where the data order stood) to a temporary name and renames it, so a snapshot file is
# whole or absent. Every rank resumes from the newest one that reads back cleanly.

def snapshot_path(recipe: Recipe, framework: str, iteration: int) -> str:
    return f"{recipe.snapshot_prefix}_{framework}_iter_{iteration}.npz"


def write_snapshot(recipe: Recipe, trainer: FrameworkTrainer, me: RankInfo, iteration: int, epoch: int, cursor: int) -> None:
    arrays = trainer.state()  # every rank takes part: some frameworks gather state collectively
    if me.rank != 0:
        return
    path = snapshot_path(recipe, trainer.framework, iteration)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        # __solver: Caffe's solver type, whose histories the optimizer arrays are, as its index in
        # caffe.solver_types.SOLVERS (SGD 0 ... Adam 5, caffe.proto's SolverType numbers)
        np.savez(f, __iter=iteration, __epoch=epoch, __cursor=cursor, __solver=SOLVERS.index(solver_of(recipe)),
                 **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def solver_of(recipe) -> str:
    """The recipe's Caffe solver type (SGD for recipes from before the other types)."""
    return getattr(recipe, "solver", "SGD")


_COUNTERS = ("__iter", "__epoch", "__cursor", "__solver")  # scalars write_snapshot adds to the arrays


def restore_snapshot(recipe: Recipe, trainer: FrameworkTrainer, start_over: bool = False,
                     max_iter: int | None = None) -> tuple[int, int, int] | None:
    """(iteration, epoch, cursor) of the newest snapshot that reads back, is ours and fits the net.

    Arrays only (np.load refuses pickled objects); a file another user owns, a symbolic link, a
    FIFO, one whose arrays differ in name or shape from this net's, one whose iteration is not
    its name's or beyond `max_iter`, or whose weights are not finite, is reported and the older
    one tried; when snapshots exist and none can be used, training refuses unless `start_over`
    (checkpoint.resume's rules). Sizes are checked from the zip directory and each array's npy
    header before anything is decompressed or allocated.
    """
    if not (recipe.snapshot and recipe.snapshot_prefix):
        return None
    from hpcdl.train import checkpoint

    pattern = re.compile(re.escape(f"{recipe.snapshot_prefix}_{trainer.framework}_iter_") + r"(\d+)\.npz$")
    found = sorted(
        ((int(m.group(1)), p) for p in glob.glob(f"{glob.escape(recipe.snapshot_prefix)}_{trainer.framework}_iter_*.npz")
         if (m := pattern.search(p))),
        reverse=True,
    )
    checkpoint.refuse_folders_named_like_snapshots(path for _, path in found)
    if not found:
        return None
    checkpoint.warn_if_others_can_write(recipe.snapshot_prefix)
    fresh = {k: np.asarray(v) for k, v in trainer.state().items()}  # every rank is here: some gather collectively
    last = None
    for number, path in found:
        try:
            arrays = read_npz_snapshot(path, fresh)
            it, epoch, cursor = (int(arrays[k]) for k in ("__iter", "__epoch", "__cursor"))
            problem = checkpoint.named_iteration_problem(it, number)
            if problem:
                raise ValueError(problem)
            if it < 0 or epoch < 0 or cursor < 0:
                raise ValueError("a negative iteration, epoch or data position")
            if max_iter is not None and it > max_iter:
                raise ValueError(f"iteration {it} is beyond this recipe's max_iter {max_iter}")
            number = int(arrays["__solver"]) if "__solver" in arrays else 0  # older snapshots: SGD's
            theirs = SOLVERS[number] if 0 <= number < len(SOLVERS) else f"number {number}"
            if theirs != solver_of(recipe):
                raise ValueError(f"optimizer state of solver type {theirs}, not {solver_of(recipe)}")
            bad = next((k for k, v in arrays.items() if v.dtype.kind in "fc" and not np.isfinite(v).all()), None)
            if bad:
                raise ValueError(f"weights that are not finite numbers ({bad} holds NaN or infinity)")
        except (checkpoint.CorruptCheckpoint, OSError, ValueError, KeyError, IndexError, TypeError,
                zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
            last = str(exc).removeprefix(f"{path}: ")
            print(f"hpcdl train: skipping snapshot {path}: {last}", file=sys.stderr)
            continue  # truncated, corrupt, foreign, crafted or another net's: fall back to the one before
        checkpoint.refuse_finished(it, max_iter, path)
        trainer.load_state({k: v for k, v in arrays.items() if not k.startswith("__")})
        return it, epoch, cursor
    if not start_over:
        raise HpcdlError(
            f"snapshot_prefix: none of the {len(found)} snapshot(s) at {recipe.snapshot_prefix} can be used "
            f"(the last: {last}); move them away, or pass --start-over to train from iteration 0"
        )
    return None


def read_npz_snapshot(path: str, expected: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays of an .npz snapshot whose every member is one of `expected` (same shape) or a counter.

    Judged before anything is read: the zip directory's sizes (a 2 GiB member in a 2 MiB file
    is a zip bomb) and each member's npy header (a shape claiming 2^40 elements), so a crafted
    file costs no more memory than a good one.
    """
    from numpy.lib import format as npy

    from hpcdl.train import checkpoint

    with checkpoint.open_snapshot(path) as f, zipfile.ZipFile(f) as z:
        members = z.infolist()
        names = [m.filename.removesuffix(".npy") for m in members]
        unknown = [n for n in names if n not in expected and n not in _COUNTERS]
        if unknown:
            raise ValueError(f"arrays of another net ({unknown[0]!r} is not one of this net's)")
        budget = sum(v.nbytes for v in expected.values()) + 4096 * (len(expected) + len(_COUNTERS))
        if sum(m.file_size for m in members) > budget:
            raise ValueError(f"holds {sum(m.file_size for m in members):,} bytes of arrays, more than this net's "
                             f"{budget:,}")
        arrays = {}
        for member, name in zip(members, names):
            with z.open(member) as m:
                version = npy.read_magic(m)
                header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
                shape, _, dtype = header(m)
            want = expected.get(name)
            if dtype.hasobject:
                raise ValueError(f"{name}: holds objects, not numbers")
            if want is None and (shape != () or dtype.kind not in "iu"):
                raise ValueError(f"{name}: not a whole number ({dtype}, shape {shape})")
            if want is not None and tuple(shape) != want.shape:
                raise ValueError(f"arrays of another net ({name}: {tuple(shape)}, this net's is {want.shape})")
            with z.open(member) as m:
                arrays[name] = npy.read_array(m, allow_pickle=False)
    if not set(_COUNTERS[:3]) <= set(arrays):
        raise ValueError("not an hpcdl snapshot (no iteration)")
    missing = sorted(set(expected) - set(arrays))
    if missing:
        raise ValueError(f"arrays of another net (no {missing[0]!r})")
    return arrays
