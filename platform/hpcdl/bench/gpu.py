"""`make bench`, GPU section: runs where PyTorch sees a CUDA GPU, and says it was skipped elsewhere.

1. ResNet-50 at 224 px, batch 256 per GPU, bf16 and fp16, channels_last: the trainer
   against the bare loop everyone writes (torch.optim.SGD, autocast, GradScaler for fp16,
   channels_last, cudnn.benchmark), same run, synthetic data on the device;
2. a JPEG folder the benchmark writes, through hpcdl's loader (decode workers, pinned
   buffers) against torch's DataLoader with the same number of workers, and the trainer
   on that folder against the trainer on synthetic data;
3. a LARC training step against an SGD one (the trainer, bf16, `type: LARC`), and the update
   alone (hpcdl.train.backends.pytorch.optim.CaffeSGD on ResNet-50's parameters) for what LARC adds to it.

Targets (issue 14): trainer >= 0.97 of the bare loop; bf16 >= 2,500 images/s on one H100;
the JPEG pipeline >= 0.9 of the synthetic rate with 14 workers; LARC <= 1.05 of SGD.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Scale:
    """How big the section's runs are. Windows are `warmup` iterations long; each rate is the best window."""

    net: str = "resnet50"
    size: int = 224
    batch: int = 256
    warmup: int = 10
    timed: int = 30          # a multiple of warmup: the timed windows after the warm-up one
    workers: int = 14
    jpegs: int = 4096
    jpeg_side: int = 320     # ImageNet's typical JPEG: the decode cost is what is measured
    loader_batches: int = 40
    optimizer_steps: int = 50
    # the compiled pair (torch.compile: the trainer's `compile:`, the bare loop with fused SGD);
    # "none" skips it: the rehearsal on a CPU would spend minutes compiling what test_compiled_step covers
    compile: str = "default"


#: issue 14's sizes: ResNet-50 at 224 px, batch 256 per GPU, 14 decode workers
FULL = Scale()
#: every path of the section at toy sizes: CI runs it on the CPU (the CUDA path has no other test
#: there), and a GPU node runs it first, in seconds, before the full run
REHEARSAL = Scale(net="cifar10_quick", size=32, batch=8, warmup=2, timed=4, workers=2, jpegs=48, jpeg_side=40,
                  loader_batches=4, optimizer_steps=3, compile="none")

#: the step everyone writes (autocast, GradScaler for fp16, SGD), shared by the measuring scripts below
BARE_STEP = r"""
import torch, torch.nn.functional as F
def bare_step(model, opt, x, y, dev, precision):
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step
"""

BARE_LOOP = BARE_STEP + r"""
import json, sys, time
from hpcdl.nets import load_net
from hpcdl.nets.torch_build import build_torch
net, device, precision = sys.argv[1:4]
size, batch, window, timed = map(int, sys.argv[4:8])
compile_mode = sys.argv[8] if len(sys.argv) > 8 else "none"
dev = torch.device(device)
if dev.type == "cuda":
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
model = build_torch(load_net(net, num_classes=1000, image_size=size)).to(dev, memory_format=torch.channels_last)
# at its best when compiled: SGD's fused multi-tensor update and the model under torch.compile
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=compile_mode != "none" or None)
if compile_mode != "none":
    model = torch.compile(model, mode=None if compile_mode == "default" else compile_mode, dynamic=False)
x = torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=dev)
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
step = bare_step(model, opt, x, y, dev, precision)
marks = []
for i in range(window + timed):
    if i >= window and (i - window) % window == 0:
        sync()
        marks.append(time.perf_counter())
    step()
sync()
marks.append(time.perf_counter())
windows = [batch * window / (b - a) for a, b in zip(marks, marks[1:])]
print(json.dumps({"images_per_sec": max(windows), "windows": windows}))
"""


def available() -> bool:
    import torch

    return torch.cuda.is_available()


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def device_info(device: str = "cuda") -> dict:
    import torch

    if device != "cuda":
        import os

        from hpcdl.bench.machine import cpu_model

        return {"name": f"{os.cpu_count()} CPUs ({cpu_model()})", "memory_gib": None, "driver": "-", "cuda": None,
                "cudnn": None, "torch": torch.__version__}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1), "driver": driver_version(),
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__}


def driver_version(proc_file: str = "/proc/driver/nvidia/version") -> str:
    """The NVIDIA driver's version: nvidia-smi's, else the kernel module's (NVIDIA driver README,
    "procfs"), else "?". A container can hold the GPU without nvidia-smi (the NVIDIA container
    toolkit mounts it only with the `utility` capability); that must not stop the run."""
    try:
        lines = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
        if lines and lines[0].strip():
            return lines[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        first = Path(proc_file).read_text().splitlines()[0]
    except (OSError, IndexError):
        return "?"
    return next((w for w in first.split() if w[:1].isdigit() and "." in w), "?")


def _run(what: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """A measuring process; its stderr in the error when it fails (a GPU run is too dear to rerun blind)."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"bench gpu: the {what} ran past its {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"bench gpu: the {what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def bare_loop(precision: str, scale: Scale = FULL, device: str = "cuda", compile: str = "none",
              timeout: float = 1200) -> float:
    args = [scale.net, device, precision, *map(str, (scale.size, scale.batch, scale.warmup, scale.timed)), compile]
    out = _run(f"{precision} bare loop{'' if compile == 'none' else ' (compiled)'}",
               [sys.executable, "-c", BARE_LOOP, *args], timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_sec"]


def trainer(precision: str, work: Path, scale: Scale = FULL, device: str = "cuda", data: dict | None = None,
            workers: int | None = None, timeout: float = 1800, **fields) -> float:
    """The trainer's best display window after the warm-up one (the bare loop's measure), images/s.
    `fields`: more recipe fields (`type="LARC"`)."""
    recipe = {
        "name": "bench-gpu", "net": scale.net, "batch_size": scale.batch, "base_lr": 0.1, "momentum": 0.9,
        "weight_decay": 1e-4, "max_iter": scale.warmup + scale.timed, "display": scale.warmup, "device": device,
        "precision": precision, "channels_last": True, "loss_scale": "dynamic", **fields,
        "data": data or {"source": "synthetic", "image_size": scale.size, "num_classes": 1000,
                         "synthetic_samples": 2 * scale.batch, "holdout_fraction": 0.01},
    }
    if workers is not None:
        recipe["data"]["workers"] = workers
    path = work / f"gpu-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    results = path.with_suffix(".jsonl")
    _run(f"trainer ({path.name})", [sys.executable, "-m", "hpcdl.train", str(path), "--results", str(results)],
         timeout=timeout)
    steps = [r for r in map(json.loads, results.read_text().splitlines()) if r["event"] == "step"]
    return max(r["images_per_sec_rank"] for r in steps[1:])


def write_jpegs(root: Path, count: int = FULL.jpegs, classes: int = 16, side: int = FULL.jpeg_side) -> Path:
    """A folder of JPEGs (`classes` class folders) of `side` px, as an ImageNet training folder is laid out."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    for i in range(count):
        folder = root / "train" / f"c{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.roll(base, i, axis=1)).save(folder / f"{i}.jpg", quality=90)
    return root


def timed_rate(step, items: int, repeats: int, device: str, warmup: int = 3) -> float:
    """Items per second over `repeats` calls of `step` after `warmup` calls, the device drained at both ends."""
    for _ in range(warmup):
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    _sync(device)
    return items * repeats / (time.perf_counter() - start)


def jpeg_dataset(root: Path, scale: Scale = FULL):
    """The JPEG folder as the feeds measured alone read it: resized to the scale's side, 1 % held out."""
    from hpcdl.train.data import load_dataset
    from hpcdl.train.recipe import DataSpec

    return load_dataset(DataSpec(source="imagefolder", path=str(root), image_size=scale.size, holdout_fraction=0.01),
                        (3, scale.size, scale.size), 1)


def loader_rates(root: Path, scale: Scale = FULL, device: str = "cuda") -> dict:
    """Images/s through hpcdl's feed and through torch's DataLoader, same decode, same workers."""
    import numpy as np
    import torch

    from hpcdl.train.backends.pytorch.feed import AheadOfTime, DeviceFeed
    from hpcdl.train.data import Batches

    data = jpeg_dataset(root, scale)
    dev = torch.device(device)

    feed = DeviceFeed(AheadOfTime(Batches(data.train, scale.batch, 1, 0, 1), 0, scale.workers), dev,
                      torch.channels_last)
    def our_next():  # as the training loop asks: the batch, then the next one staged behind it
        feed.next()
        feed.prefetch()

    try:
        ours = timed_rate(our_next, scale.batch, scale.loader_batches, device)
    finally:
        feed.close()

    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return len(data.train)

        def __getitem__(self, i):
            return torch.from_numpy(data.train.take(np.array([i]))[0]), int(data.train.labels[i])

    loader = torch.utils.data.DataLoader(Images(), batch_size=scale.batch, shuffle=True, num_workers=scale.workers,
                                         pin_memory=device == "cuda", drop_last=True, persistent_workers=True)
    it = iter(loader)

    def torch_next():
        nonlocal it
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(loader)
            x, _ = next(it)
        x.to(dev, non_blocking=True)

    theirs = timed_rate(torch_next, scale.batch, scale.loader_batches, device)
    it = loader = None  # stops the DataLoader's persistent workers now, not at exit
    return {"hpcdl_loader": ours, "torch_dataloader": theirs, "ratio": ours / theirs}


def dali_feed_rate(root: Path, scale: Scale = FULL, device: str = "cuda") -> float:
    """Images/s through the DALI feed alone, no training: what it can deliver on this node."""
    import torch

    from hpcdl.train.backends.pytorch.dali_feed import DaliFeed
    from hpcdl.train.data import Batches

    feed = DaliFeed(Batches(jpeg_dataset(root, scale).train, scale.batch, 1, 0, 1), 0, torch.device(device), torch.channels_last,
                    threads=scale.workers)
    try:
        return timed_rate(feed.next, scale.batch, scale.loader_batches, device)
    finally:
        feed.close()


def optimizer_step_ms(rule: str, scale: Scale = FULL, device: str = "cuda") -> float:
    """One CaffeSGD step on the net's parameters (momentum, weight decay; LARC's trust ratio for larc_clip), ms."""
    import torch

    from hpcdl.nets import load_net
    from hpcdl.nets.torch_build import build_torch, parameter_multipliers
    from hpcdl.train.backends.pytorch.optim import CaffeSGD, ParamSlot

    net = build_torch(load_net(scale.net, num_classes=1000, image_size=scale.size)).to(device)
    slots = [ParamSlot(n, t, lr, d) for n, t, lr, d in parameter_multipliers(net)]
    opt = CaffeSGD(slots, 0.9, 1e-4, rule, trust=0.02, eps=1e-8)
    for s in slots:
        s.tensor.grad = torch.randn_like(s.tensor) * 1e-3
    return 1e3 / timed_rate(lambda: opt.step(0.1), 1, scale.optimizer_steps, device, warmup=5)


#: the section's parts in the order a full run takes them; `--sections` picks and orders them, so a GPU
#: node lent for minutes measures what matters most first
SECTIONS = ("eager", "compiled", "loader", "dali", "larc", "profile")


class Deadline:
    """Seconds left for the whole run: each measuring process gets at most what is left, and a part
    that would start with less than its `need` is skipped and said so, not half measured."""

    def __init__(self, seconds: float | None):
        self.end = None if not seconds else time.monotonic() + seconds

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()


def gpu_rows(scale: Scale = FULL, device: str = "cuda", sections: tuple[str, ...] = SECTIONS,
             deadline: float | None = None, progress=None) -> dict:
    """The section's figures; `device="cpu"` (with REHEARSAL) runs the same paths where no GPU is.

    Each part is measured on its own: one that fails keeps its error under `errors` and the
    others go on (a GPU node's minutes are too dear to stop at the first failure); `progress`
    is called with the figures so far after each part, so a run cut short still leaves them."""
    if device == "cuda" and not available():
        return {"skipped": "no CUDA GPU on this machine"}
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ValueError(f"bench gpu: unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    out: dict = {"device": device_info(device), "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rows": []}
    if scale != FULL:
        out["rehearsal"] = f"{scale.net} at {scale.size} px, batch {scale.batch} on {device}: toy sizes, not figures"
    clock = Deadline(deadline)
    parts = {"eager": _eager, "compiled": _compiled, "loader": _loader, "dali": _dali, "larc": _larc,
             "profile": _profile}
    with tempfile.TemporaryDirectory() as tmp:
        run = _Run(Path(tmp), scale, device, clock, out)
        for name in sections:
            need = NEED[name] if scale == FULL else 0  # the rehearsal's toy parts take seconds
            if clock.left() <= need:
                out.setdefault("not_run", {})[name] = f"{clock.left():.0f} s left of the deadline, {NEED[name]} s needed"
                print(f"bench gpu: {name} not run: {out['not_run'][name]}", flush=True)
                continue
            started = time.monotonic()
            try:
                parts[name](run)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                out.setdefault("errors", {})[name] = str(exc)[-1500:]
                print(f"bench gpu: {name} failed: {str(exc).splitlines()[0]}", flush=True)
            out.setdefault("seconds", {})[name] = round(time.monotonic() - started, 1)
            if progress:
                progress(out)
    return out


#: about how long each part takes on one H100 (seconds), for the deadline: the compiled pair is
#: mostly the compiler's work (four compilations of ResNet-50's forward and backward)
NEED = {"eager": 90, "compiled": 240, "loader": 90, "dali": 90, "larc": 60, "profile": 45}


@dataclass
class _Run:
    work: Path
    scale: Scale
    device: str
    clock: Deadline
    out: dict

    def trainer(self, precision: str, data: dict | None = None, workers: int | None = None, **fields) -> float:
        return trainer(precision, self.work, self.scale, self.device, data, workers, timeout=self._timeout(1800),
                       **fields)

    def bare(self, precision: str, compile: str = "none") -> float:
        return bare_loop(precision, self.scale, self.device, compile, timeout=self._timeout(1200))

    def _timeout(self, default: float) -> float:
        left = self.clock.left()
        if left <= 1:
            raise RuntimeError("bench gpu: the deadline passed")
        return min(default, left)

    def synthetic(self) -> float:
        """The bf16 trainer on synthetic data: the eager part's figure, or measured now."""
        rows = [r for r in self.out["rows"] if r["precision"] == "bf16"]
        if not rows:
            self.out.setdefault("synthetic_bf16", self.trainer("bf16"))
            return self.out["synthetic_bf16"]
        return rows[0]["trainer"]

    def jpegs(self) -> Path:
        root = self.work / "jpegs"
        if not root.exists():
            write_jpegs(root, self.scale.jpegs, side=self.scale.jpeg_side)
        return root

    def folder(self, loader: str = "hpcdl") -> dict:
        data = {"source": "imagefolder", "path": str(self.jpegs()), "image_size": self.scale.size,
                "holdout_fraction": 0.01}
        if loader != "hpcdl":
            data["loader"] = loader
        return data


def _eager(run: _Run) -> None:
    for precision in ("bf16", "fp16"):
        bare, ours = run.bare(precision), run.trainer(precision)
        run.out["rows"].append({"precision": precision, "bare": bare, "trainer": ours, "ratio": ours / bare})
        print(f"bench gpu: {precision} bare {bare:.0f} trainer {ours:.0f} img/s", flush=True)


def _compiled(run: _Run) -> None:
    if run.scale.compile != "none":
        run.out["compiled"] = compiled_rows(run)


def _loader(run: _Run) -> None:
    root = run.jpegs()
    run.out["loader"] = loader_rates(root, run.scale, run.device)
    print(f"bench gpu: JPEG loader {run.out['loader']['hpcdl_loader']:.0f} img/s, "
          f"torch DataLoader {run.out['loader']['torch_dataloader']:.0f}", flush=True)
    synthetic = run.synthetic()
    folder = run.trainer("bf16", run.folder(), workers=run.scale.workers)
    run.out["jpeg_vs_synthetic"] = {"jpeg": folder, "synthetic": synthetic, "ratio": folder / synthetic}
    print(f"bench gpu: JPEG folder {folder:.0f} img/s against {synthetic:.0f} synthetic", flush=True)


def _dali(run: _Run) -> None:
    """The trainer on the JPEG folder through DALI (nvJPEG on the GPU, `workers` CPU threads) against
    hpcdl's decode workers (the same number of worker processes) and against synthetic data."""
    try:
        import nvidia.dali as nvidia_dali
    except ImportError:
        run.out["dali"] = {"skipped": "NVIDIA DALI is not installed on this node"}
        print("bench gpu: DALI not installed here", flush=True)
        return
    synthetic = run.synthetic()
    ours = (run.out.get("jpeg_vs_synthetic") or {}).get("jpeg") or run.trainer("bf16", run.folder(),
                                                                               workers=run.scale.workers)
    dali = run.trainer("bf16", run.folder("dali"), workers=run.scale.workers)
    alone = dali_feed_rate(run.jpegs(), run.scale, run.device)
    run.out["dali"] = {"dali": dali, "hpcdl": ours, "synthetic": synthetic, "vs_synthetic": dali / synthetic,
                       "vs_hpcdl": dali / ours, "feed_alone": alone, "workers": run.scale.workers,
                       "version": nvidia_dali.__version__}
    print(f"bench gpu: JPEG folder through DALI {dali:.0f} img/s, hpcdl's workers {ours:.0f}, "
          f"synthetic {synthetic:.0f}; DALI's feed alone {alone:.0f}", flush=True)


def _larc(run: _Run) -> None:
    """LARC's price in a training step (what its per-layer norms used to stall), and in the update alone."""
    synthetic = run.synthetic()
    larc_train = run.trainer("bf16", type="LARC")
    sgd, larc = optimizer_step_ms("sgd", run.scale, run.device), optimizer_step_ms("larc_clip", run.scale, run.device)
    run.out["larc_vs_sgd"] = {"sgd_train": synthetic, "larc_train": larc_train, "step_ratio": synthetic / larc_train,
                              "sgd_ms": sgd, "larc_ms": larc, "ratio": larc / sgd}
    print(f"bench gpu: LARC training {larc_train:.0f} img/s; update alone LARC {larc:.2f} ms vs SGD {sgd:.2f} ms",
          flush=True)


def _profile(run: _Run) -> None:
    s = run.scale
    args = [s.net, run.device, str(s.size), str(s.batch), str(max(2, s.warmup // 2))]
    proc = _run("kernel profile", [sys.executable, "-c", PROFILE, *args], timeout=run._timeout(600))
    run.out["profile"] = json.loads(proc.stdout.strip().splitlines()[-1])
    bf, fp = (run.out["profile"][p]["total_ms"] for p in ("bf16", "fp16"))
    print(f"bench gpu: kernel time per iteration bf16 {bf:.1f} ms, fp16 {fp:.1f} ms", flush=True)


#: where an eager bf16 step spends its time against an fp16 one: the device's kernels (the host's
#: operators on a CPU), summed per iteration and sorted into kinds by their names
PROFILE = BARE_STEP + r"""
import json, sys
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from hpcdl.nets import load_net
from hpcdl.nets.torch_build import build_torch
net, device = sys.argv[1:3]
size, batch, iters = map(int, sys.argv[3:6])
dev = torch.device(device)
cuda = dev.type == "cuda"
if cuda:
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
model = build_torch(load_net(net, num_classes=1000, image_size=size)).to(dev, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=dev)
KINDS = (("batch norm", ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "bn_", "native_batch")),
         ("convolution", ("conv", "xmma", "implicit", "dgrad", "wgrad", "cudnn", "sm90", "sm80", "cutlass", "gemm", "mm")),
         ("optimizer", ("sgd", "foreach", "multi_tensor", "_amp_", "unscale")),
         ("copies", ("copy", "memcpy", "memset", "fill")),
         ("reductions", ("reduce", "sum", "norm")),
         ("elementwise", ("elementwise", "vectorized", "relu", "threshold", "add", "mul", "pool", "softmax", "nll")))
def kind(name):
    low = name.lower()
    return next((k for k, words in KINDS if any(w in low for w in words)), "other")
out = {}
for precision in ("bf16", "fp16"):
    step = bare_step(model, opt, x, y, dev, precision)
    for _ in range(3):
        step()
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(iters):
            step()
        if cuda:
            torch.cuda.synchronize()
    kernels = {}
    for e in prof.key_averages():
        if cuda:  # the kernels alone: a host operator's device time is its kernels' again
            if e.device_type != DeviceType.CUDA:
                continue
            us = e.self_device_time_total
        else:
            us = e.self_cpu_time_total if e.key.startswith("aten::") else 0
        if us > 0:
            kernels[e.key] = (kernels.get(e.key, (0.0, 0))[0] + us / 1e3 / iters, e.count // iters)
    kinds = {}
    for name, (ms, _) in kernels.items():
        kinds[kind(name)] = kinds.get(kind(name), 0.0) + ms
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:12]
    out[precision] = {"total_ms": sum(kinds.values()), "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
                      "top": [{"name": n[:160], "ms": ms, "calls": c} for n, (ms, c) in top]}
out["iterations"] = iters
print(json.dumps(out))
"""


def compiled_rows(run: _Run) -> list[dict]:
    """The trainer with `compile:` against the bare loop at its best (compiled, fused SGD), per precision.

    A row that fails keeps its error and the others go on: the first compiled run on a new GPU
    and driver is where a compiler problem shows, and the eager figures must survive it."""
    rows, mode = [], run.scale.compile
    for precision in ("bf16", "fp16"):
        try:
            bare = run.bare(precision, compile=mode)
            ours = run.trainer(precision, compile=mode)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            rows.append({"precision": precision, "compile": mode, "error": str(exc)[-600:]})
            print(f"bench gpu: compiled {precision} failed: {str(exc).splitlines()[0]}", flush=True)
            continue
        rows.append({"precision": precision, "compile": mode, "bare": bare, "trainer": ours, "ratio": ours / bare})
        run.out["compiled"] = rows
        print(f"bench gpu: compiled {precision} bare {bare:.0f} trainer {ours:.0f} img/s", flush=True)
    return rows


#: the optional GPU JPEG decoder, where no figure was taken: it needs its own wheel on the GPU node
DALI_NOTE = ("NVIDIA DALI (`data.loader: dali`, JPEGs decoded on the GPU) against hpcdl's decode workers on the same "
             "folder is still to be measured: it needs DALI on the GPU node (`pip install nvidia-dali-cuda120` or `-cuda130`), "
             "which hpcdl does not install.")

#: the figures each part leaves, for merging a part measured on its own into an earlier report
PART_KEYS = {"eager": ("rows",), "compiled": ("compiled",), "loader": ("loader", "jpeg_vs_synthetic"),
             "dali": ("dali",), "larc": ("larc_vs_sgd",), "profile": ("profile",)}


def merge(earlier: dict | None, new: dict) -> dict:
    """`new`'s parts over `earlier`'s: a part `new` did not measure keeps its earlier figures, marked
    with the device and date they were measured on (`earlier_parts`)."""
    if not earlier or "skipped" in earlier or "skipped" in new:
        return new
    merged = dict(new)
    for part, keys in PART_KEYS.items():
        if any(new.get(k) for k in keys) or not any(earlier.get(k) for k in keys):
            continue
        for k in keys:
            merged[k] = earlier.get(k)
        source = earlier.get("earlier_parts", {}).get(part) or {"device": earlier["device"],
                                                                "measured": earlier.get("measured", "an earlier run")}
        merged.setdefault("earlier_parts", {})[part] = source
    return merged


def _measured_on(gpu: dict, part: str) -> str:
    other = gpu.get("earlier_parts", {}).get(part)
    if not other:
        return ""
    d = other["device"]
    return f"Measured in an earlier run ({other['measured']}) on {d['name']}, driver {d['driver']}, torch {d['torch']}: "


def markdown(gpu: dict | None) -> str:
    lines = ["## GPU: ResNet-50, data pipeline, LARC", ""]
    if not gpu or "skipped" in gpu:
        reason = (gpu or {}).get("skipped", "not run")
        return "\n".join(lines + [
            f"Skipped: {reason}. The GPU figures (ResNet-50 at 224 px, batch 256, bf16/fp16 channels_last: trainer "
            "vs bare loop; JPEG folder through hpcdl's loader vs torch's DataLoader with 14 workers; LARC vs SGD "
            "step) are still to be measured: run `tools/gpu-node.sh bench OUT` on a GPU node (docs/trainer.md).", "", DALI_NOTE, ""])
    d = gpu["device"]
    if gpu.get("rehearsal"):
        lines += [f"Rehearsal ({gpu['rehearsal']}): the paths ran; these are not the section's figures.", ""]
    memory = f" ({d['memory_gib']} GiB)" if d.get("memory_gib") else ""
    when = f", measured {gpu['measured']}" if gpu.get("measured") else ""
    lines += [f"Device: {d['name']}{memory}, driver {d['driver']}, CUDA {d['cuda']}, "
              f"cuDNN {d['cudnn']}, torch {d['torch']}{when}.", ""]
    if gpu.get("rows"):
        lines += [f"{_measured_on(gpu, 'eager')}ResNet-50, {FULL.size} px, batch {FULL.batch}, channels_last, synthetic "
                  "data on the device, eager (goals: trainer/bare >= 0.97, bf16 >= 2,500 img/s):", "",
                  "| precision | bare loop img/s | trainer img/s | trainer / bare |", "| --- | --- | --- | --- |"]
        for r in gpu["rows"]:
            lines.append(f"| {r['precision']} | {r['bare']:.0f} | {r['trainer']:.0f} | **{r['ratio']:.3f}** |")
        lines.append("")
    if gpu.get("compiled"):
        lines += [f"{_measured_on(gpu, 'compiled')}Compiled (`compile:` in the recipe; the bare loop compiled with "
                  "fused SGD, both torch.compile; goals: trainer >= 0.97 of the compiled bare loop, bf16 >= 5,000 "
                  "img/s and within 3 % of fp16):", "",
                  "| precision | compiled bare loop img/s | compiled trainer img/s | trainer / bare |",
                  "| --- | --- | --- | --- |"]
        for r in gpu["compiled"]:
            if "error" in r:
                lines.append(f"| {r['precision']} | failed: {r['error'].splitlines()[-1][:120]} | | |")
            else:
                lines.append(f"| {r['precision']} | {r['bare']:.0f} | {r['trainer']:.0f} | **{r['ratio']:.3f}** |")
        done = {r["precision"]: r for r in gpu["compiled"] if "error" not in r}
        if {"bf16", "fp16"} <= set(done):
            ratio = done["bf16"]["trainer"] / done["fp16"]["trainer"]
            lines += ["", f"The compiled trainer in bf16 runs at **{ratio:.3f}** of its fp16 rate (goal: at least 0.97)."]
        lines.append("")
    if gpu.get("profile"):
        pr = gpu["profile"]
        kinds = list(dict.fromkeys([*pr["bf16"]["kinds"], *pr["fp16"]["kinds"]]))
        lines += [f"{_measured_on(gpu, 'profile')}Where an eager step's time goes (torch.profiler, the device's "
                  f"kernels summed over {pr['iterations']} iterations, sorted into kinds by name), ms per iteration:", "",
                  "| kind | bf16 | fp16 | bf16 - fp16 |", "| --- | --- | --- | --- |"]
        for k in kinds + ["total"]:
            b = pr["bf16"]["total_ms"] if k == "total" else pr["bf16"]["kinds"].get(k, 0.0)
            f = pr["fp16"]["total_ms"] if k == "total" else pr["fp16"]["kinds"].get(k, 0.0)
            lines.append(f"| {k} | {b:.2f} | {f:.2f} | {b - f:+.2f} |")
        lines += ["", "The longest bf16 kernels: " + "; ".join(
            f"`{t['name'][:90]}` {t['ms']:.2f} ms" for t in pr["bf16"]["top"][:4]) + ".", ""]
    if gpu.get("loader"):
        ld, jp = gpu["loader"], gpu["jpeg_vs_synthetic"]
        lines += [f"{_measured_on(gpu, 'loader')}JPEG folder, {FULL.workers} workers: hpcdl's loader "
                  f"{ld['hpcdl_loader']:.0f} img/s, torch DataLoader {ld['torch_dataloader']:.0f} img/s "
                  f"(**{ld['ratio']:.2f}x**); the trainer on the folder {jp['jpeg']:.0f} img/s against "
                  f"{jp['synthetic']:.0f} on synthetic data (**{jp['ratio']:.2f}**, goal >= 0.9).", ""]
    dali = gpu.get("dali") or {}
    if "dali" in dali:
        lines += [f"{_measured_on(gpu, 'dali')}The trainer on the same JPEG folder through NVIDIA DALI {dali['version']} "
                  f"(`data.loader: dali`, nvJPEG on the GPU, {dali['workers']} CPU threads): {dali['dali']:.0f} img/s, "
                  f"**{dali['vs_synthetic']:.2f}** of synthetic data (goal >= 0.95) and **{dali['vs_hpcdl']:.2f}x** "
                  f"hpcdl's {dali['workers']} decode workers ({dali['hpcdl']:.0f} img/s)."
                  + (f" DALI's feed alone, with no training, delivers {dali['feed_alone']:.0f} img/s."
                     if "feed_alone" in dali else ""), ""]
    lr = gpu.get("larc_vs_sgd")
    if lr and "step_ratio" in lr:
        lines += [f"{_measured_on(gpu, 'larc')}LARC (clip, trust 0.02) against SGD in a bf16 training step: "
                  f"{lr['larc_train']:.0f} against {lr['sgd_train']:.0f} img/s, a LARC step "
                  f"**{lr['step_ratio']:.3f}x** as long (goal <= 1.05). The update alone on ResNet-50's parameters: "
                  f"SGD {lr['sgd_ms']:.2f} ms, LARC {lr['larc_ms']:.2f} ms ({lr['ratio']:.2f}x: two fused norm passes "
                  "and a rate per layer, with no host synchronisation).", ""]
    elif lr:
        lines += [f"Optimizer step on ResNet-50's parameters: SGD {lr['sgd_ms']:.2f} ms, LARC {lr['larc_ms']:.2f} ms "
                  f"(**{lr['ratio']:.2f}x**, goal <= 1.05).", ""]
    for part, why in {**gpu.get("not_run", {}), **gpu.get("errors", {})}.items():
        if not any(gpu.get(k) for k in PART_KEYS[part]):
            lines += [f"Not measured in this run: {part} ({why.strip().splitlines()[-1][:200]}).", ""]
    if "dali" not in dali:
        lines += [DALI_NOTE + (f" ({dali['skipped']}.)" if dali.get("skipped") else ""), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.bench.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--rehearsal", action="store_true", help="every path at toy sizes (seconds): a smoke run")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu only makes sense with --rehearsal")
    parser.add_argument("--json", type=Path, help="write the figures here too, after each part")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"the parts to measure, in this order (default {','.join(SECTIONS)})")
    parser.add_argument("--deadline", type=float, default=0,
                        help="seconds for the whole run: parts that would not fit are skipped and said so")
    args = parser.parse_args(argv)
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    if unknown := [s for s in sections if s not in SECTIONS]:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")

    def progress(figures: dict) -> None:
        if args.json:
            tmp = args.json.with_suffix(".partial")
            tmp.write_text(json.dumps(figures, indent=2) + "\n")
            tmp.replace(args.json)

    gpu = gpu_rows(REHEARSAL if args.rehearsal else FULL, args.device, sections, args.deadline or None, progress)
    progress(gpu)
    print(json.dumps(gpu, indent=2))
    print(markdown(gpu))
    return 1 if "skipped" in gpu or gpu.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
