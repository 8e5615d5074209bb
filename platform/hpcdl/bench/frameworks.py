"""Benchmark rows for the PyTorch, TensorFlow and MXNet backends: the trainer against a bare loop.

For each framework and net, in one process: the bundled trainer trains a recipe while a
bare training loop written directly in that framework (same net, batch, images, SGD with
the same momentum and weight decay, same thread count) runs one window of iterations
each time the trainer writes a display record. So trainer and bare loop alternate window
by window and a busy spell of the shared machine falls on both alike. Each side is timed
in the process's CPU seconds; the figure is each side's best window (timeit's reasoning:
other work only ever slows a window down), with the median beside it. The ratio
trainer/bare is the overhead the trainer adds. MXNet runs from its own venv, so each
framework is measured in a child process of the right Python.

    from hpcdl.bench.frameworks import framework_rows, markdown_table
    rows = framework_rows()           # list of dicts, one per framework and net
    text = markdown_table(rows)       # a section for docs/performance.md

or `python -m hpcdl.bench.frameworks --framework pytorch` for that framework's rows as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Case:
    net: str
    size: int      # image side, px
    batch: int
    window: int    # iterations per timed window (the trainer's display interval)
    windows: int   # timed windows per side; one more is run first as warm-up and dropped


# the PyTorch section's nets and sizes (hpcdl.bench): cifar10_quick at 32 px, resnet50 at 64 px; with 24
# and 16 windows the best window still moved a ratio by 3 % between runs of the same code here
CASES = (Case("cifar10_quick", 32, 64, window=10, windows=40), Case("resnet50", 64, 16, window=2, windows=24))
LR, MOMENTUM, WEIGHT_DECAY = 0.001, 0.9, 0.0005


def _clock() -> float:
    """The process's CPU seconds (all its threads): unlike the wall clock, it does not count the
    time other work on a shared machine holds the core, so a one-thread ratio stays a ratio
    of the code's own costs (what the machine's load moved by +-30 % here in wall time)."""
    return time.process_time()


def _recipe(case: Case) -> dict:
    return {
        "name": f"bench-{case.net}", "net": case.net, "batch_size": case.batch, "base_lr": LR, "momentum": MOMENTUM,
        "weight_decay": WEIGHT_DECAY, "max_iter": case.window * (case.windows + 1), "display": case.window,
        "data": _data(case),
    }


def _data(case: Case) -> dict:
    return {"source": "synthetic", "image_size": case.size, "num_classes": 10,
            "synthetic_samples": max(4 * case.batch, 256), "holdout_fraction": 0.05}


def _images(case: Case):
    """The very images the trainer trains on (values matter: tiny ones run slower as denormals)."""
    from hpcdl.train.data import load_dataset
    from hpcdl.train.recipe import DataSpec

    data = load_dataset(DataSpec(**_data(case)), (3, case.size, case.size), 1)
    return data.train.images, data.train.labels


def bare_pytorch(case: Case, channels_last: bool = False, compile: str = "none"):
    """The few lines everyone writes: torch.optim.SGD, a random in-memory batch per step.

    With `compile` (a torch.compile mode) the loop at its best: the model compiled, and SGD's
    fused multi-tensor update (`fused=True`), so a compiled trainer is measured against the
    best loop, not the eager one."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from hpcdl.nets import load_net
    from hpcdl.nets.torch_build import build_torch

    torch.manual_seed(1)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = build_torch(load_net(case.net, num_classes=10, image_size=case.size)).to(memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY,
                                fused=compile != "none" or None)
    if compile != "none":
        model = torch.compile(model, mode=None if compile == "default" else compile, dynamic=False)
    images, labels = _images(case)
    rng = np.random.default_rng(1)
    model.train()

    def window():
        for _ in range(case.window):
            idx = rng.integers(0, len(images), case.batch)
            optimizer.zero_grad(set_to_none=True)
            x = torch.from_numpy(images[idx]).contiguous(memory_format=fmt)
            loss = F.cross_entropy(model(x), torch.from_numpy(labels[idx]))
            loss.backward()
            optimizer.step()
        return float(loss.detach())  # one read per window, as the trainer's display record

    return window


def bare_tensorflow(case: Case):
    """The few lines everyone writes: Keras SGD, a compiled step, a random in-memory batch per step."""
    import keras
    import numpy as np
    import tensorflow as tf

    from hpcdl.nets import load_net
    from hpcdl.nets.keras_build import build_keras

    model = build_keras(load_net(case.net, num_classes=10, image_size=case.size))
    optimizer = keras.optimizers.SGD(learning_rate=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    images, labels = _images(case)
    rng = np.random.default_rng(1)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x, training=True)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    def window():
        for _ in range(case.window):
            idx = rng.integers(0, len(images), case.batch)
            loss = step(tf.constant(images[idx]), tf.constant(labels[idx]))
        return float(loss)  # one read per window, as the trainer's display record

    return window


def bare_mxnet(case: Case):
    """The few lines everyone writes: a hybridized Gluon net, gluon.Trainer's SGD, a random batch per step."""
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    from hpcdl.nets import load_net
    from hpcdl.nets.gluon_build import build_gluon

    net = build_gluon(load_net(case.net, num_classes=10, image_size=case.size))
    net.initialize()
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": LR, "momentum": MOMENTUM, "wd": WEIGHT_DECAY}, kvstore="local")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images, labels = _images(case)
    rng = np.random.default_rng(1)

    def window():
        for _ in range(case.window):
            idx = rng.integers(0, len(images), case.batch)
            x, y = mx.nd.array(images[idx]), mx.nd.array(labels[idx])
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(case.batch)
        return float(loss.mean().asscalar())  # one read per window (it waits for the work), as the trainer's

    return window


BARE = {"pytorch": bare_pytorch, "tensorflow": bare_tensorflow, "mxnet": bare_mxnet}


def measure_case(framework: str, case: Case) -> dict:
    """Trainer and bare loop windows, interleaved in this process (which must import the framework)."""
    from hpcdl.train.backends import backend_for
    from hpcdl.train.ranks import RankInfo
    from hpcdl.train.recipe import recipe_from_dict
    from hpcdl.train.results import ResultsWriter

    if framework == "tensorflow":  # size TensorFlow's pools before the bare loop starts its runtime
        import tensorflow as tf

        from hpcdl.train.backends.tensorflow.trainer import configure_threads, thread_counts

        configure_threads(tf, *thread_counts(os.environ))
    elif framework == "pytorch":  # the trainer's ranks get their count from the plan; one pool for both here
        import torch

        torch.set_num_threads(int(os.environ["HPCDL_INTRA_OP_THREADS"]))
    bare_window = BARE[framework](case)
    bare_window()  # tracing and first allocations, before any window is timed
    trainer_s: list[float] = []
    bare_s: list[float] = []

    class Interleaved(ResultsWriter):
        """At each display record: close the trainer's window, run and time one bare window."""

        mark = 0.0

        def record(self, event: str, **fields) -> None:
            super().record(event, **fields)
            if event == "start":
                self.mark = _clock()
            elif event == "step":
                trainer_s.append(_clock() - self.mark)
                start = _clock()
                bare_window()
                bare_s.append(_clock() - start)
                self.mark = _clock()

    recipe = recipe_from_dict(_recipe(case), f"bench-{framework}-{case.net}")
    writer = Interleaved(None, enabled=True, stream=io.StringIO(), progress=False)
    context = {"site": "none", "nodes": 1, "distributed": None, "plan_summary": None, "start_over": False}
    backend_for(framework, None)(recipe, RankInfo(0, 1, 0, "none"), writer, context)
    trainer_s, bare_s = trainer_s[1:], bare_s[1:]  # the first window traces the trainer's step
    rate = lambda seconds: case.window * case.batch / seconds  # noqa: E731
    trainer, bare = rate(min(trainer_s)), rate(min(bare_s))
    return {"framework": framework, "net": case.net, "image_size": case.size, "batch": case.batch,
            "window": case.window, "windows": len(trainer_s), "threads": int(os.environ["HPCDL_INTRA_OP_THREADS"]),
            "trainer_images_per_sec": round(trainer, 1), "bare_images_per_sec": round(bare, 1),
            "ratio": round(trainer / bare, 3),
            "median_ratio": round(rate(statistics.median(trainer_s)) / rate(statistics.median(bare_s)), 3),
            "trainer_windows_s": [round(s, 4) for s in trainer_s], "bare_windows_s": [round(s, 4) for s in bare_s]}


def measure(framework: str, cases=CASES) -> list[dict]:
    """This framework's rows, measured in this process."""
    # one thread by default: on a shared machine a second OpenMP thread that waits for a core
    # swamps the ratio; HPCDL_INTRA_OP_THREADS=N measures N
    threads = int(os.environ.get("HPCDL_INTRA_OP_THREADS", "1"))
    os.environ.update({"OMP_NUM_THREADS": str(threads), "HPCDL_INTRA_OP_THREADS": str(threads),
                       "HPCDL_INTER_OP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "MXNET_CPU_WORKER_NTHREADS": "1"})
    return [measure_case(framework, case) for case in cases]


def framework_rows(mxnet_python: str | None = None) -> list[dict]:
    """PyTorch and TensorFlow (this venv) and MXNet (.venv-mxnet) rows, each framework from a child process."""
    pythons = {"pytorch": sys.executable, "tensorflow": sys.executable,
               "mxnet": mxnet_python or str(ROOT / ".venv-mxnet" / "bin" / "python")}
    rows = []
    for framework, python in pythons.items():
        load = os.getloadavg()  # uptime's 1, 5 and 15 minute load averages, before and after
        path = os.pathsep.join(filter(None, (str(ROOT / "platform"), os.environ.get("PYTHONPATH"))))
        proc = subprocess.run([python, "-W", "ignore", "-m", "hpcdl.bench.frameworks", "--framework", framework],
                              capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHONPATH": path})
        if proc.returncode != 0:
            rows.append({"framework": framework, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]})
            continue
        for row in json.loads(proc.stdout.strip().splitlines()[-1]):
            row.update(load_before=[round(v, 2) for v in load], load_after=[round(v, 2) for v in os.getloadavg()])
            rows.append(row)
            print(f"bench: {framework} {row['net']}: trainer/bare = {row['ratio']} (median {row['median_ratio']})",
                  file=sys.stderr, flush=True)
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "## PyTorch, TensorFlow and MXNet: trainer against a bare loop, interleaved",
        "",
        "One process per framework. The trainer trains the recipe (synthetic images, SGD with momentum 0.9 and "
        "weight decay 0.0005, a display record every window) while, at each display record, a bare loop written "
        "directly in the framework runs one window of its own: the same net, batch and images (a random batch "
        "from memory each step), SGD with the same momentum and weight decay (torch.optim.SGD; Keras' SGD with a "
        "`tf.function` step; Gluon's Trainer on a net hybridized with static_alloc and static_shape), its loss read once per "
        "window. Trainer and bare loop thus alternate window by window; each is timed in the process's CPU "
        "seconds, which other work on a shared machine does not inflate, and each side's figure is its best "
        "window after a first one of warm-up (the median ratio beside it). One thread each. The load averages "
        "beside the rows are the whole machine's (2 cores shared with other work): CPU seconds keep the ratio "
        "apart from it, not the absolute rates. MXNet's trainer can beat its bare loop: it takes its step in "
        "fused kernels of up to 32 tensors, where Gluon's Trainer aggregates 4 (MXNET_OPTIMIZER_AGGREGATION_SIZE).",
        "",
        "| framework | net | image | batch | timed windows | trainer img/s | bare loop img/s | trainer / bare "
        "| median trainer / bare | load (1 min) before, after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['framework']} | - | - | - | - | - | - | not measured: {r['error']} | - | - |")
            continue
        # rows of an earlier bench (one whole-run figure per side) lack the window fields
        image = f"{r['image_size']} px" if "image_size" in r else "-"
        windows = f"{r['windows']} x {r['window']} it" if "windows" in r else "-"
        lines.append(f"| {r['framework']} | {r.get('net', '-')} | {image} | {r.get('batch', '-')} | {windows} | "
                     f"{r['trainer_images_per_sec']} | {r['bare_images_per_sec']} | **{r['ratio']}** | "
                     f"{r.get('median_ratio', '-')} | {_load(r.get('load_before'))}, {_load(r.get('load_after'))} |")
    return "\n".join(lines) + "\n"


def _load(values) -> str:
    return str(values[0]) if isinstance(values, list) and values else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.bench.frameworks")
    parser.add_argument("--framework", choices=("pytorch", "tensorflow", "mxnet"), help="measure its rows here, print JSON")
    parser.add_argument("--net", choices=[c.net for c in CASES], help="only this net")
    args = parser.parse_args(argv)
    if args.framework:
        print(json.dumps(measure(args.framework, [c for c in CASES if args.net in (None, c.net)])))
    else:
        print(markdown_table(framework_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
