"""`make bench`: the trainer's speed as ratios measured in one run on this machine.

    python -m hpcdl.bench --out docs/performance.md

1. trainer vs a bare PyTorch loop on the same net, batch and threads (goal >= 0.97):
   cifar10_quick at 32 px and resnet50 at a small image size;
2. channels_last vs NCHW (resnet50, trainer);
3. 2 ranks x 1 thread vs 1 rank x 2 threads at the same global batch (cifar10_quick);
4. spatial vs sample parallelism at a fixed mini-batch (the mesh net), and the activation
   memory per rank at 1, 2 and 4 ways.
5. the PyTorch, TensorFlow and MXNet trainers against their bare loops, window by window in one
   process, in CPU seconds (hpcdl.bench.frameworks);
6. on a GPU node, ResNet-50, the JPEG pipeline and LARC (hpcdl.bench.gpu); skipped elsewhere.

`--only frameworks` or `--only gpu` measures that section alone and keeps the other
figures of the previous run (the .json beside the report).

Every measurement is a fresh process with its thread count fixed, run back to back and
interleaved (bare, trainer, bare, trainer...). Each process times several windows of
iterations after a warm-up and reports its best window, and each side of a ratio is the
best of its repeats: on a shared machine other work only ever slows a window down, so the
best window is the closest to what the code itself costs (timeit's reasoning). The load
average before and after is written next to the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

BARE_LOOP = r"""
import json, sys, time
import torch
from hpcdl.bench.frameworks import Case, bare_pytorch
net, size, batch, threads, warmup, timed, channels_last, compile = sys.argv[1:9]
size, batch, threads, warmup, timed = int(size), int(batch), int(threads), int(warmup), int(timed)
torch.set_num_threads(threads)
# the interleaved section's bare loop (same net, images, SGD), here in a process of its own, windows of
# `warmup` iterations timed in wall seconds
window = bare_pytorch(Case(net, size, batch, window=warmup, windows=timed // warmup), channels_last == "1", compile)
window()
windows = []
for _ in range(timed // warmup):
    start = time.perf_counter()
    window()
    windows.append(batch * warmup / (time.perf_counter() - start))
print(json.dumps({"images_per_sec": max(windows), "windows": windows}))
"""


@dataclass(frozen=True)
class Case:
    net: str
    size: int
    batch: int           # per rank
    threads: int         # per rank
    warmup: int
    timed: int
    ranks: int = 1
    channels_last: bool = False
    compile: str = "none"  # a torch.compile mode: the trainer's `compile:`, the bare loop at its best


def _env(threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HPCDL_PROGRESS": "plain"}
    env.pop("HPCDL_INTRA_OP_THREADS", None)
    return env


def bare_loop(case: Case) -> float:
    out = subprocess.run(
        [sys.executable, "-c", BARE_LOOP, case.net, str(case.size), str(case.batch), str(case.threads),
         str(case.warmup), str(case.timed), "1" if case.channels_last else "0", case.compile],
        capture_output=True, text=True, env=_env(case.threads), check=True, timeout=1800,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_sec"]


def trainer(case: Case, workdir: Path) -> float:
    """The trainer's measured total images/s over the timed iterations (after the warm-up)."""
    recipe = {
        "name": "bench", "net": case.net, "batch_size": case.batch, "base_lr": 0.001, "momentum": 0.9,
        "weight_decay": 0.0005, "max_iter": case.warmup + case.timed, "display": case.warmup,
        "channels_last": case.channels_last, "compile": case.compile,
        "data": {"source": "synthetic", "image_size": case.size, "num_classes": 10,
                 "synthetic_samples": max(4 * case.batch * case.ranks, 256), "holdout_fraction": 0.05},
    }
    if case.timed % case.warmup:
        raise ValueError("timed iterations must be a multiple of the warm-up (the display interval)")
    path = workdir / f"bench-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    results = path.with_suffix(".jsonl")
    train = [sys.executable, "-m", "hpcdl.train", str(path), "--results", str(results)]
    argv = train if case.ranks == 1 else [sys.executable, "-m", "hpcdl", "launch", "-n", str(case.ranks), "--", *train]
    subprocess.run(argv, capture_output=True, text=True, env=_env(case.threads), check=True, timeout=1800)
    steps = {r["iter"]: r for r in map(json.loads, results.read_text().splitlines()) if r["event"] == "step"}
    # wall time between consecutive display records after the warm-up: everything the trainer
    # does in between (its records and checks included) counts against it
    marks = [steps[it]["time"] for it in range(case.warmup, case.warmup + case.timed + 1, case.warmup)]
    return max(case.warmup * case.batch * case.ranks / (b - a) for a, b in zip(marks, marks[1:]))


def spatial_trainer(ways: int, ranks: int, size: int, batch: int, warmup: int, timed: int,
                    workdir: Path) -> tuple[float, float]:
    """Samples/s (best window after the warm-up) and activation MiB per rank of a mesh run."""
    recipe = {
        "name": "bench-spatial", "net": "mesh", "batch_size": batch, "base_lr": 0.001, "momentum": 0.9,
        "max_iter": warmup + timed, "display": warmup, "class_weighting": "inverse_frequency",
        "data": {"source": "mesh", "image_size": size, "synthetic_samples": 4 * batch * ranks // ways + 1,
                 "holdout_fraction": 0.01},
        "test_iter": 1, "test_batch_size": 1,
    }
    if ways > 1:
        recipe["spatial"] = {"ways": ways, "split": "rows"}
    path = workdir / f"spatial-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    results = path.with_suffix(".jsonl")
    train = [sys.executable, "-m", "hpcdl.train", str(path), "--results", str(results)]
    argv = train if ranks == 1 else [sys.executable, "-m", "hpcdl", "launch", "-n", str(ranks), "--", *train]
    subprocess.run(argv, capture_output=True, text=True, env=_env(1), check=True, timeout=1800)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    steps = {r["iter"]: r for r in rows if r["event"] == "step"}
    final = next(r for r in rows if r["event"] == "final")
    marks = [steps[it]["time"] for it in range(warmup, warmup + timed + 1, warmup)]
    groups = ranks // ways
    best = max(warmup * batch * groups / (b - a) for a, b in zip(marks, marks[1:])) if len(marks) > 1 else 0.0
    return best, final["activation_mib_per_rank"]


def compiled_section(work: Path, quick: bool) -> dict:
    """The compiled step (`compile: default`, inductor's C++ backend on this CPU) against the eager one,
    and the compiled trainer against the bare loop at its best (compiled, fused SGD)."""
    reps = 1 if quick else 3
    eager = Case("cifar10_quick", 32, 64, 1, warmup=5, timed=25 if not quick else 10)
    best = Case("cifar10_quick", 32, 64, 1, warmup=5, timed=25 if not quick else 10, compile="default")
    print("bench: compiled step (torch.compile, inductor) vs eager, trainer and bare loop, cifar10_quick", flush=True)
    bare_eager, bare_compiled = interleaved(lambda: bare_loop(eager), lambda: bare_loop(best), reps)
    ours_eager, ours_compiled = interleaved(lambda: trainer(eager, work), lambda: trainer(best, work), reps)
    section = {"measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load": load(),
               "net": best.net, "image_size": best.size, "batch": best.batch, "threads": best.threads,
               "bare_eager": bare_eager, "bare_compiled": bare_compiled,
               "trainer_eager": ours_eager, "trainer_compiled": ours_compiled,
               "compiled_vs_eager": max(ours_compiled) / max(ours_eager),
               "trainer_vs_bare_compiled": max(ours_compiled) / max(bare_compiled)}
    print(f"  trainer compiled/eager {section['compiled_vs_eager']:.3f}, "
          f"compiled trainer/compiled bare {section['trainer_vs_bare_compiled']:.3f}", flush=True)
    return section


def spatial_section(work: Path, quick: bool) -> dict:
    """Sample vs spatial parallelism on the mesh net at a fixed mini-batch, and memory per rank."""
    size, batch = 192, 2
    warmup, timed = 2, 2 if quick else 4
    print(f"bench: mesh {size}px, mini-batch {batch} on 2 ranks: sample parallel vs 2-way spatial", flush=True)
    sample, spatial = interleaved(lambda: spatial_trainer(1, 2, size, 1, warmup, timed, work)[0],
                                  lambda: spatial_trainer(2, 2, size, batch, warmup, timed, work)[0],
                                  1 if quick else 2)
    print(f"  sample {sample}  spatial {spatial}", flush=True)
    mem_size = 256
    memory = {}
    for ways in (1, 2, 4):
        memory[ways] = spatial_trainer(ways, ways, mem_size, batch, 1, 1, work)[1]
    print(f"  activation MiB per rank at {mem_size}px: {memory}", flush=True)
    return {"measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load": load(),
            "net": "mesh", "image_size": size, "mini_batch": batch, "sample_parallel": sample,
            "spatial_2way": spatial, "ratio": max(spatial) / max(sample),
            "memory_image_size": mem_size, "activation_mib": {str(k): v for k, v in memory.items()}}


def prediction_section(work: Path) -> dict:
    """`hpcdl validate --site local --checks collectives,scaling`: each p > 1 point measured beside predicted."""
    from hpcdl.predict.validation import AGREEMENT

    print("bench: validation scaling on this machine, measured beside hpcdl predict's figure", flush=True)
    out = work / "predict-run"
    env = {**os.environ, "HPCDL_LOCAL_JOBS": str(work / "predict-jobs")}
    subprocess.run([sys.executable, "-m", "hpcdl", "validate", "--site", "local", "--checks", "collectives,scaling",
                    "-o", str(out)], env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=1800, check=False)
    points = []
    results = out / "results.jsonl"
    for line in results.read_text().splitlines() if results.exists() else []:
        m = json.loads(line)
        if m.get("series") == "scaling" and m.get("p", 1) > 1 and m.get("predicted_images_per_sec"):
            # the measured figure is the steady state the prediction was held against (the whole run's where
            # the job had too few windows): hpcdl.predict.validation.steady
            m = {**m, "images_per_sec": m.get("prediction_measured_images_per_sec") or m["images_per_sec"]}
            points.append({k: m.get(k) for k in ("mode", "p", "images_per_sec", "predicted_images_per_sec",
                                                 "prediction_error", "prediction_within", "cpu_share",
                                                 "core_scaling")})
            print(f"  {m['mode']} p={m['p']}: measured {m['images_per_sec']:.0f}, predicted "
                  f"{m['predicted_images_per_sec']:.0f} ({m['prediction_error']:+.0%})", flush=True)
    return {"measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load": load(), "agreement": AGREEMENT,
            "points": points}


def interleaved(measure_a, measure_b, repeats: int) -> tuple[list[float], list[float]]:
    a, b = [], []
    for _ in range(repeats):
        a.append(measure_a())
        b.append(measure_b())
    return a, b


def load() -> float:
    return os.getloadavg()[0]


def run(out: Path, quick: bool = False, frameworks: bool = True) -> dict:
    # one thread per process for the ratios: on a loaded machine a 2-thread process loses whole
    # time slices when one of its threads is descheduled, which swamps the difference measured
    threads = 1
    reps = 1 if quick else 3
    results = {"machine": _machine(), "load_before": load(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cifar = Case("cifar10_quick", 32, 64, threads, warmup=5, timed=25 if not quick else 10)
        rn_size = 64
        resnet = Case("resnet50", rn_size, 16, threads, warmup=2, timed=8 if not quick else 2)
        rows = []
        for case, repeats in ((cifar, reps), (resnet, max(1, reps - 1))):
            print(f"bench: {case.net} {case.size}px batch {case.batch}, {case.threads} threads: bare loop vs trainer", flush=True)
            bare, ours = interleaved(lambda c=case: bare_loop(c), lambda c=case: trainer(c, work), repeats)
            rows.append({"net": case.net, "image_size": case.size, "batch": case.batch, "threads": case.threads,
                         "bare": bare, "trainer": ours, "ratio": max(ours) / max(bare)})
            print(f"  bare {bare}  trainer {ours}  ratio {rows[-1]['ratio']:.3f}", flush=True)
        results["trainer_vs_bare"] = rows

        print("bench: resnet50 channels_last vs NCHW (trainer)", flush=True)
        cl = Case("resnet50", rn_size, 16, threads, warmup=2, timed=8 if not quick else 2, channels_last=True)
        nchw, chl = interleaved(lambda: trainer(resnet, work), lambda: trainer(cl, work), max(1, reps - 1))
        results["channels_last"] = {"net": "resnet50", "image_size": rn_size, "batch": 16, "threads": threads,
                                    "nchw": nchw, "channels_last": chl,
                                    "ratio": max(chl) / max(nchw)}
        print(f"  NCHW {nchw}  channels_last {chl}", flush=True)

        print("bench: 2 ranks x 1 thread vs 1 rank x 2 threads (cifar10_quick, global batch 64)", flush=True)
        one = Case("cifar10_quick", 32, 64, 2, warmup=5, timed=25 if not quick else 10)
        two = Case("cifar10_quick", 32, 32, 1, warmup=5, timed=25 if not quick else 10, ranks=2)
        a, b = interleaved(lambda: trainer(one, work), lambda: trainer(two, work), reps)
        results["ranks_vs_threads"] = {"one_rank_two_threads": a, "two_ranks_one_thread": b,
                                       "ratio": max(b) / max(a)}
        print(f"  1x2 {a}  2x1 {b}", flush=True)
        results["compiled"] = compiled_section(work, quick)
        results["spatial"] = spatial_section(work, quick)
        results["prediction"] = prediction_section(work)
    if frameworks:
        from hpcdl.bench.frameworks import framework_rows

        print("bench: PyTorch, TensorFlow and MXNet trainers vs bare loops, interleaved", flush=True)
        results["frameworks"] = framework_rows()
    results["gpu"] = _gpu_section()
    results["load_after"] = load()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out.parent.mkdir(parents=True, exist_ok=True)
    # the raw figures first: a report can be redrawn from them (--from-json) without re-measuring
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    write_report(results, out)
    return results


def _gpu_section() -> dict:
    from hpcdl.bench.gpu import gpu_rows

    print("bench: GPU section (ResNet-50 bf16/fp16, JPEG pipeline, LARC)", flush=True)
    gpu = gpu_rows()
    if "skipped" in gpu:
        print(f"bench: GPU section skipped: {gpu['skipped']}", flush=True)
    return gpu


def run_only(section: str, out: Path, gpu_json: Path | None = None) -> dict:
    """Measure one section again; the rest of the report keeps the previous run's figures.

    `gpu_json`: the GPU section's figures as `python -m hpcdl.bench.gpu --json` wrote them on a GPU
    node, merged part by part (a part that run did not measure keeps its earlier figures, marked)."""
    previous = out.with_suffix(".json")
    if not previous.exists():
        raise SystemExit(f"bench --only {section}: no earlier figures in {previous}; run the whole bench first")
    results = json.loads(previous.read_text())
    if section == "prediction":
        with tempfile.TemporaryDirectory() as tmp:
            results["prediction"] = prediction_section(Path(tmp))
    elif section == "compiled":
        with tempfile.TemporaryDirectory() as tmp:
            results["compiled"] = compiled_section(Path(tmp), quick=False)
    elif section == "frameworks":
        from hpcdl.bench.frameworks import framework_rows

        results["frameworks"] = framework_rows()
        results["frameworks_measured"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    else:
        from hpcdl.bench.gpu import merge

        new_gpu = json.loads(gpu_json.read_text()) if gpu_json else _gpu_section()
        results["gpu"] = merge(results.get("gpu"), new_gpu)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    write_report(results, out)
    return results


def _machine() -> str:
    import torch

    from hpcdl.bench.machine import cpu_model

    return f"{os.cpu_count()} CPUs ({cpu_model()}), torch {torch.__version__}"


def write_report(r: dict, out: Path) -> None:
    from hpcdl.files import write_atomically

    plot = out.with_suffix(".png")
    _plot(r, plot)
    med = max  # best of the repeats (see the module docstring)
    lines = [
        "# Performance of the bundled trainer",
        "",
        "Generated by `make bench` (`python -m hpcdl.bench --out docs/performance.md`); do not edit by hand.",
        "",
        f"Machine: {r['machine']}. Run {r['started']} to {r['finished']}.",
        f"Load average (1 min) {r['load_before']:.2f} before and {r['load_after']:.2f} after: this machine is shared",
        "with other work, so absolute images/s move from run to run; the ratios are the result.",
        "Each process reports its best window of iterations after a warm-up, each side the best",
        "of its repeats, measured back to back and interleaved (other work only slows a window down).",
        "",
        "## Trainer vs a bare PyTorch loop (same net, batch, threads; goal >= 0.97)",
        "",
        "The bare loop is the few lines everyone writes: `torch.optim.SGD`, a random in-memory",
        "batch, forward, backward, step. The trainer adds Caffe's solver (lr_mult/decay_mult,",
        "momentum inside the velocity), schedule, the stop-signal check, display records and",
        "timing. Both build the same `hpcdl.nets` model; synthetic data, fp32. Here each side is its own",
        "process, timed in wall seconds, so the machine's load moves a ratio by a few per cent from run to",
        "run; the interleaved section further down times both sides in one process, window by window, in",
        "CPU seconds, which that load does not inflate.",
        "",
        "| net | image | batch | threads | bare loop img/s | trainer img/s | trainer / bare |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in r["trainer_vs_bare"]:
        lines.append(f"| {row['net']} | {row['image_size']} px | {row['batch']} | {row['threads']} | "
                     f"{med(row['bare']):.1f} ({_runs(row['bare'])}) | {med(row['trainer']):.1f} ({_runs(row['trainer'])}) | "
                     f"**{row['ratio']:.3f}** |")
    spreads = ", ".join(
        f"{row['net']} bare loop {_spread(row['bare']):.2f}x, trainer {_spread(row['trainer']):.2f}x"
        for row in r["trainer_vs_bare"])
    lines += [
        "",
        f"Spread between identical repeats (best / worst): {spreads}. A ratio whose distance",
        "from 1 is inside that spread measures the machine's load, not the trainer; read it",
        "together with the load average above, and re-run `make bench` on a quiet machine for",
        "a figure to quote.",
    ]
    c = r["channels_last"]
    rt = r["ranks_vs_threads"]
    lines += [
        "",
        "## channels_last vs NCHW",
        "",
        f"{c['net']} at {c['image_size']} px, batch {c['batch']}, {c['threads']} threads, trainer: "
        f"NCHW {med(c['nchw']):.1f} img/s ({_runs(c['nchw'])}), channels_last {med(c['channels_last']):.1f} img/s "
        f"({_runs(c['channels_last'])}): **{c['ratio']:.2f}x**.",
        "",
        "## 2 ranks x 1 thread vs 1 rank x 2 threads",
        "",
        "cifar10_quick at 32 px, global batch 64 (2 x 32 or 1 x 64), torch.distributed gloo on this node:",
        f"1 rank x 2 threads {med(rt['one_rank_two_threads']):.1f} img/s ({_runs(rt['one_rank_two_threads'])}), "
        f"2 ranks x 1 thread {med(rt['two_ranks_one_thread']):.1f} img/s ({_runs(rt['two_ranks_one_thread'])}): "
        f"**{rt['ratio']:.2f}x**. The images/s of 2 ranks is the measured total (images summed over",
        "ranks over the slowest rank's time), not rank 0 times 2.",
        "",
        f"![trainer throughput]({plot.name})",
        "",
    ]
    if r.get("compiled"):
        lines += _compiled_report(r["compiled"])
    if r.get("spatial"):
        lines += _spatial_report(r["spatial"])
    if r.get("prediction"):
        lines += _prediction_report(r["prediction"])
    if r.get("frameworks"):
        from hpcdl.bench.frameworks import markdown_table

        lines += [markdown_table(r["frameworks"])]
        if r.get("frameworks_measured"):
            lines += [f"(These rows measured again on {r['frameworks_measured']}, with `--only frameworks`; "
                      "the PyTorch rows above are from the run dated at the top.)", ""]
    from hpcdl.bench.gpu import markdown

    lines += [markdown(r.get("gpu"))]
    write_atomically(out, "\n".join(lines))


def _compiled_report(c: dict) -> list[str]:
    med = max
    return [
        "## The compiled step (`compile: default`) on this CPU",
        "",
        f"{c['net']} at {c['image_size']} px, batch {c['batch']}, {c['threads']} thread, synthetic data. torch.compile",
        "with inductor's C++/OpenMP backend; the bare loop at its best is compiled too and takes SGD's fused",
        "update (`fused=True`); the compiled trainer takes Caffe's update as the same fused kernel per group",
        "(learning rate 1, dampening 1 - rate). The first steps, which compile, are the warm-up and are not timed.",
        "",
        *([f"Measured {c['measured']}, load average {c['load']:.2f}.", ""] if "measured" in c else []),
        "| | eager img/s | compiled img/s | compiled / eager |",
        "| --- | --- | --- | --- |",
        f"| bare loop | {med(c['bare_eager']):.1f} ({_runs(c['bare_eager'])}) | "
        f"{med(c['bare_compiled']):.1f} ({_runs(c['bare_compiled'])}) | "
        f"{med(c['bare_compiled']) / med(c['bare_eager']):.3f} |",
        f"| trainer | {med(c['trainer_eager']):.1f} ({_runs(c['trainer_eager'])}) | "
        f"{med(c['trainer_compiled']):.1f} ({_runs(c['trainer_compiled'])}) | **{c['compiled_vs_eager']:.3f}** |",
        "",
        f"Compiled trainer / compiled bare loop: **{c['trainer_vs_bare_compiled']:.3f}**.",
        "",
    ]


def _spatial_report(sp: dict) -> list[str]:
    mem = sp["activation_mib"]
    one = mem["1"]
    return [
        "## Spatial vs sample parallelism (mesh net)",
        "",
        f"Measured {sp['measured']}, load average {sp['load']:.2f}.",
        "",
        f"The mesh net (18 channels, per-pixel output) at {sp['image_size']} x {sp['image_size']}, a fixed "
        f"mini-batch of {sp['mini_batch']} samples on 2 ranks x 1 thread: sample parallelism (1 sample per rank) "
        f"{max(sp['sample_parallel']):.2f} samples/s ({_runs(sp['sample_parallel'])}), 2-way spatial (both samples, "
        f"half of each per rank) {max(sp['spatial_2way']):.2f} samples/s ({_runs(sp['spatial_2way'])}): "
        f"**{sp['ratio']:.2f}x**.",
        "",
        f"Activation memory per rank (autograd's saved tensors after the first forward pass) at "
        f"{sp['memory_image_size']} x {sp['memory_image_size']}, mini-batch {sp['mini_batch']}:",
        "",
        "| ways | MiB per rank | of 1 way | 1/ways |",
        "| --- | --- | --- | --- |",
        *[f"| {w} | {mem[w]:.1f} | {mem[w] / one:.3f} | {1 / int(w):.3f} |" for w in sorted(mem, key=int)],
        "",
        "Above 1/ways by the halo rows each slab copies for its edge convolutions (1 row each side of",
        "a 3x3 layer, 2 of the 5x5): the smaller the slab, the larger that share. On 2 shared CPU",
        "cores the timing can only show the cost of the halo exchange and of smaller convolutions,",
        "not a speed-up: both layouts keep the same 2 cores busy. The gain the LLNL work measured",
        "(at least 2x for 4-way at a fixed mini-batch on Lassen's V100s, where sample parallelism",
        "runs out of samples per GPU) is still to be measured on GPUs.",
        "",
    ]


def _prediction_report(pr: dict) -> list[str]:
    bound = f"{pr['agreement']:.0%}"
    rows = [f"| {m['mode']} | {m['p']} | {m['images_per_sec']:.0f} | {m['predicted_images_per_sec']:.0f} | "
            f"{m['prediction_error']:+.1%} | {m['cpu_share'] if m['cpu_share'] is not None else 1:.2f} | "
            f"{m['core_scaling'] if m.get('core_scaling') is not None else 1:.2f} | "
            f"{'yes' if m['prediction_within'] else 'no'} |" for m in pr["points"]]
    return [
        "## Predicted vs measured (the validation suite's scaling check)",
        "",
        f"Measured {pr['measured']}, load average {pr['load']:.2f}. `hpcdl validate --site local --checks "
        "collectives,scaling`: every point beyond one rank predicted by `hpcdl predict`'s model from the same",
        "run's one-rank point and collectives check only (the p > 1 throughput is never an input), with the",
        "share of a core other work left each thread and the host's measured core scaling. The bound the",
        f"report states is {bound}.",
        "",
        f"| scaling | ranks | measured img/s | predicted img/s | error | share of a core | core scaling | within {bound} |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *(rows or ["| - | - | - | - | the run made no prediction | - | - | - |"]),
        "",
    ]


def _spread(values: list[float]) -> float:
    return max(values) / min(values) if values and min(values) > 0 else float("nan")


def _runs(values: list[float]) -> str:
    return "runs " + ", ".join(f"{v:.1f}" for v in values)


def _plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = max
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    ax = axes[0]
    labels = [f"{row['net']}\n{row['image_size']} px" for row in r["trainer_vs_bare"]]
    ratios = [row["ratio"] for row in r["trainer_vs_bare"]]
    ax.bar(labels, ratios, color=["#4c72b0" if v >= 0.97 else "#dd8452" for v in ratios])
    ax.axhline(0.97, color="k", ls="--", lw=1, label="goal 0.97")
    ax.set_ylim(0, max(1.1, max(ratios) * 1.1))
    ax.set_title("trainer / bare PyTorch loop")
    ax.legend(loc="lower right")
    c = r["channels_last"]
    axes[1].bar(["NCHW", "channels_last"], [med(c["nchw"]), med(c["channels_last"])], color=["#8c8c8c", "#55a868"])
    axes[1].set_title(f"resnet50 {c['image_size']} px: images/s")
    rt = r["ranks_vs_threads"]
    axes[2].bar(["1 rank x 2 threads", "2 ranks x 1 thread"],
                [med(rt["one_rank_two_threads"]), med(rt["two_ranks_one_thread"])], color=["#8c8c8c", "#c44e52"])
    axes[2].set_title("cifar10_quick, global batch 64: images/s")
    fig.suptitle(f"hpcdl trainer, {r['machine']} (load {r['load_before']:.1f} -> {r['load_after']:.1f})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/performance.md"))
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer steps (a smoke run)")
    parser.add_argument("--from-json", type=Path, help="redraw the report from a earlier run's figures")
    parser.add_argument("--only", choices=("frameworks", "gpu", "prediction", "compiled"),
                        help="measure one section, keep the other figures")
    parser.add_argument("--gpu-json", type=Path,
                        help="with --only gpu: take the figures a GPU node wrote (python -m hpcdl.bench.gpu --json) "
                             "instead of measuring here")
    args = parser.parse_args(argv)
    if args.gpu_json and args.only != "gpu":
        parser.error("--gpu-json goes with --only gpu")
    if args.only:
        r = run_only(args.only, args.out, args.gpu_json)
    elif args.from_json:
        r = json.loads(args.from_json.read_text())
        write_report(r, args.out)
    else:
        r = run(args.out, quick=args.quick)
    print(f"bench: wrote {args.out} and {args.out.with_suffix('.png')}")
    for row in r["trainer_vs_bare"]:
        print(f"  {row['net']}: trainer / bare = {row['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
