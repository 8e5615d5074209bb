"""`make bench`, GPU section: runs where PyTorch sees a CUDA GPU, and says it was skipped elsewhere.

1. ResNet-50 at 224 px, batch 256 per GPU, bf16 and fp16, channels_last: the trainer
   against the bare loop everyone writes (torch.optim.SGD, autocast, GradScaler for fp16,
   channels_last, cudnn.benchmark), same run, synthetic data on the device;
2. a JPEG folder the benchmark writes, through hpcdl's loader (decode workers, pinned
   buffers) against torch's DataLoader with the same number of workers, and the trainer
   on that folder against the trainer on synthetic data;
3. a LARC step against an SGD step (hpcdl.train.optim.CaffeSGD on ResNet-50's parameters).

Targets (issue 14): trainer >= 0.97 of the bare loop; bf16 >= 2,500 images/s on one H100;
the JPEG pipeline >= 0.9 of the synthetic rate with 14 workers; LARC <= 1.05 of SGD.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

NET, SIZE, BATCH = "resnet50", 224, 256
WARMUP, TIMED = 10, 30
WORKERS = 14

BARE_LOOP = r"""
import json, sys, time
import torch, torch.nn.functional as F
from hpcdl.nets import load_net
from hpcdl.nets.torch_build import build_torch
net, size, batch, precision, warmup, timed = sys.argv[1], *map(int, sys.argv[2:4]), sys.argv[4], *map(int, sys.argv[5:7])
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
dev = torch.device("cuda")
model = build_torch(load_net(net, num_classes=1000, image_size=size)).to(dev, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
dtype = torch.bfloat16 if precision == "bf16" else torch.float16
scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
x = torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=dev)
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
for _ in range(warmup):
    step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(timed):
    step()
torch.cuda.synchronize()
print(json.dumps({"images_per_sec": batch * timed / (time.perf_counter() - start)}))
"""


def available() -> bool:
    import torch

    return torch.cuda.is_available()


def device_info() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip().splitlines()
    return {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1), "driver": driver[0] if driver else "?",
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__}


def bare_loop(precision: str) -> float:
    out = subprocess.run([sys.executable, "-c", BARE_LOOP, NET, str(SIZE), str(BATCH), precision, str(WARMUP),
                          str(TIMED)], capture_output=True, text=True, check=True, timeout=1200)
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_sec"]


def trainer(precision: str, work: Path, data: dict | None = None, workers: int | None = None) -> float:
    """The trainer's images/s over the display windows after the warm-up window."""
    recipe = {
        "name": "bench-gpu", "net": NET, "batch_size": BATCH, "base_lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4,
        "max_iter": WARMUP + TIMED, "display": WARMUP, "device": "cuda", "precision": precision,
        "channels_last": True, "loss_scale": "dynamic",
        "data": data or {"source": "synthetic", "image_size": SIZE, "num_classes": 1000,
                         "synthetic_samples": 2 * BATCH, "holdout_fraction": 0.01},
    }
    if workers is not None:
        recipe["data"]["workers"] = workers
    path = work / f"gpu-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    results = path.with_suffix(".jsonl")
    subprocess.run([sys.executable, "-m", "hpcdl.train", str(path), "--results", str(results)],
                   capture_output=True, text=True, check=True, timeout=1800)
    steps = [r for r in map(json.loads, results.read_text().splitlines()) if r["event"] == "step"]
    return max(r["images_per_sec_rank"] for r in steps[1:])


def write_jpegs(root: Path, count: int = 4096, classes: int = 16, side: int = 320) -> Path:
    """A folder of JPEGs of ImageNet's typical size (the decode cost is what is measured)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    for i in range(count):
        folder = root / "train" / f"c{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.roll(base, i, axis=1)).save(folder / f"{i}.jpg", quality=90)
    return root


def loader_rates(root: Path, batches: int = 40) -> dict:
    """Images/s through hpcdl's feed and through torch's DataLoader, same decode, same workers."""
    import numpy as np
    import torch

    from hpcdl.train.data import Batches, load_dataset
    from hpcdl.train.feed import AheadOfTime, DeviceFeed
    from hpcdl.train.recipe import DataSpec

    data = load_dataset(DataSpec(source="imagefolder", path=str(root), image_size=SIZE, holdout_fraction=0.01),
                        (3, SIZE, SIZE), 1)
    dev = torch.device("cuda")

    def rate(next_batch) -> float:
        for _ in range(3):
            next_batch()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(batches):
            next_batch()
        torch.cuda.synchronize()
        return BATCH * batches / (time.perf_counter() - start)

    feed = DeviceFeed(AheadOfTime(Batches(data.train, BATCH, 1, 0, 1), 0, WORKERS), dev, torch.channels_last)
    ours = rate(feed.next)
    feed.close()

    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return len(data.train)

        def __getitem__(self, i):
            return torch.from_numpy(data.train.take(np.array([i]))[0]), int(data.train.labels[i])

    loader = torch.utils.data.DataLoader(Images(), batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                                         pin_memory=True, drop_last=True, persistent_workers=True)
    it = iter(loader)

    def torch_next():
        nonlocal it
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        x.to(dev, non_blocking=True)

    theirs = rate(torch_next)
    return {"hpcdl_loader": ours, "torch_dataloader": theirs, "ratio": ours / theirs}


def optimizer_step_ms(rule: str, steps: int = 50) -> float:
    import torch

    from hpcdl.nets import load_net
    from hpcdl.nets.torch_build import build_torch, parameter_multipliers
    from hpcdl.train.optim import CaffeSGD, ParamSlot

    net = build_torch(load_net(NET, num_classes=1000, image_size=SIZE)).cuda()
    slots = [ParamSlot(n, t, lr, d) for n, t, lr, d in parameter_multipliers(net)]
    opt = CaffeSGD(slots, 0.9, 1e-4, rule, trust=0.02, eps=1e-8)
    for s in slots:
        s.tensor.grad = torch.randn_like(s.tensor) * 1e-3
    for _ in range(5):
        opt.step(0.1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        opt.step(0.1)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def gpu_rows() -> dict:
    if not available():
        return {"skipped": "no CUDA GPU on this machine"}
    out: dict = {"device": device_info(), "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for precision in ("bf16", "fp16"):
            bare, ours = bare_loop(precision), trainer(precision, work)
            out["rows"].append({"precision": precision, "bare": bare, "trainer": ours, "ratio": ours / bare})
            print(f"bench gpu: {precision} bare {bare:.0f} trainer {ours:.0f} img/s", flush=True)
        root = write_jpegs(work / "jpegs")
        out["loader"] = loader_rates(root)
        synthetic = out["rows"][0]["trainer"]
        folder = trainer("bf16", work, {"source": "imagefolder", "path": str(root), "image_size": SIZE,
                                        "holdout_fraction": 0.01}, workers=WORKERS)
        out["jpeg_vs_synthetic"] = {"jpeg": folder, "synthetic": synthetic, "ratio": folder / synthetic}
        sgd, larc = optimizer_step_ms("sgd"), optimizer_step_ms("larc_clip")
        out["larc_vs_sgd"] = {"sgd_ms": sgd, "larc_ms": larc, "ratio": larc / sgd}
    return out


#: the optional GPU JPEG decoder has no figure yet: it needs its own wheel on the GPU node
DALI_NOTE = ("NVIDIA DALI (`data.loader: dali`, JPEGs decoded on the GPU) against hpcdl's decode workers on the same "
             "folder is still to be measured: it needs DALI on the GPU node (`pip install nvidia-dali-cuda120`), "
             "which hpcdl does not install.")


def markdown(gpu: dict | None) -> str:
    lines = ["## GPU: ResNet-50, data pipeline, LARC", ""]
    if not gpu or "skipped" in gpu:
        reason = (gpu or {}).get("skipped", "not run")
        return "\n".join(lines + [
            f"Skipped: {reason}. The GPU figures (ResNet-50 at 224 px, batch 256, bf16/fp16 channels_last: trainer "
            "vs bare loop; JPEG folder through hpcdl's loader vs torch's DataLoader with 14 workers; LARC vs SGD "
            "step) are still to be measured: run `make bench` on a GPU node.", "", DALI_NOTE, ""])
    d = gpu["device"]
    lines += [f"Device: {d['name']} ({d['memory_gib']} GiB), driver {d['driver']}, CUDA {d['cuda']}, "
              f"cuDNN {d['cudnn']}, torch {d['torch']}.", "",
              f"ResNet-50, {SIZE} px, batch {BATCH}, channels_last, synthetic data on the device "
              "(goals: trainer/bare >= 0.97, bf16 >= 2,500 img/s):", "",
              "| precision | bare loop img/s | trainer img/s | trainer / bare |", "| --- | --- | --- | --- |"]
    for r in gpu["rows"]:
        lines.append(f"| {r['precision']} | {r['bare']:.0f} | {r['trainer']:.0f} | **{r['ratio']:.3f}** |")
    ld, jp, lr = gpu["loader"], gpu["jpeg_vs_synthetic"], gpu["larc_vs_sgd"]
    lines += ["", f"JPEG folder, {WORKERS} workers: hpcdl's loader {ld['hpcdl_loader']:.0f} img/s, torch DataLoader "
              f"{ld['torch_dataloader']:.0f} img/s (**{ld['ratio']:.2f}x**); the trainer on the folder "
              f"{jp['jpeg']:.0f} img/s against {jp['synthetic']:.0f} on synthetic data (**{jp['ratio']:.2f}**, goal >= 0.9).",
              "", f"Optimizer step on ResNet-50's parameters: SGD {lr['sgd_ms']:.2f} ms, LARC {lr['larc_ms']:.2f} ms "
              f"(**{lr['ratio']:.2f}x**, goal <= 1.05).", "", DALI_NOTE, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(gpu_rows(), indent=2))
