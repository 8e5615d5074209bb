"""Feeding a rank: micro-batches decoded ahead by worker processes, and on the device early.

The loop asks for micro-batch k, k+1, ... (hpcdl.train.data.Batches, a pure function of
(seed, k, rank)). Two stages keep the next batch ready before the step that needs it:

1. `AheadOfTime`: worker processes (forked, numpy and Pillow only: they never touch
   torch or the GPU) compute `batches.get(k)` for the next `depth` micro-batches into
   shared-memory slots. A slot goes back to the workers only when the loop has moved past
   the batch it holds, so the loop reads it in place, with no copy and no pickling. With
   0 workers the loop's own thread decodes, as before.
2. `DeviceFeed`: on a GPU, batch k is copied from a pinned (page-locked) buffer to the
   device on a side CUDA stream while step k-1 computes, and the compute stream waits on
   that stream, not the host. From pageable memory, `non_blocking=True` is a plain
   synchronous copy; pinned memory is what lets the copy overlap. On a CPU the tensors
   are the shared slots themselves (no pinning: there is no device to copy to).

Since every batch is still `batches.get(k)`, a resumed run draws exactly the batches the
uninterrupted run would have drawn: the pipeline holds no state worth saving.

3. `ResidentFeed`: a training split held in memory (synthetic, digits, CIFAR-10) that fits in
   a small part of the GPU's memory is put there once, and each micro-batch is gathered,
   cropped and mirrored there: the same rows, crops and flips `batches.get(k)` takes (its
   `indices` and `augmentation`), with no host work and no copy per step. A synthetic
   benchmark then measures the GPU, as a loop over a tensor already on the device does,
   rather than the host's memory bandwidth (a ResNet-50 batch of 256 is 154 MB).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import queue
import traceback
from multiprocessing import shared_memory

import numpy as np
import torch

from hpcdl.errors import HpcdlError
from hpcdl.train.data import Batches


def default_workers(requested: int | None, device: torch.device, cores: int | None = None) -> int:
    """Decode workers for one rank: the recipe's number, else from the rank's cores.

    The plan binds each rank to its cores (hpcdl.train.binding), so the CPU affinity mask
    is the rank's share. On a GPU the training thread needs one core and the others decode
    (the 2018 Summit run found ingestion decisive at scale); on a CPU the cores are the
    compute threads, and a decode process would take them from the net.
    """
    if requested is not None:
        return requested
    if device.type != "cuda":
        return 0
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


SHM = "/dev/shm"


def slot_count(workers: int, slot_bytes: int, depth: int | None = None, shm: str = SHM) -> int:
    """Shared-memory slots for `workers` decode processes: 2 per worker and one the loop holds,
    as many as half of /dev/shm's free space takes (a ResNet-50 batch of 256 at 224 px is
    154 MB, so 29 slots would be 4.5 GB; container runtimes often give /dev/shm 64 MB).
    Fewer than 2 (one decoding, one the loop reads) is refused, naming data.workers."""
    want = depth or 2 * workers + 1
    try:
        st = os.statvfs(shm)
    except OSError:
        return want
    free = st.f_bavail * st.f_frsize
    fits = int(free // 2 // max(1, slot_bytes))
    if fits < 2:
        raise HpcdlError(f"data.workers: {workers} decode workers need 2 micro-batches of {slot_bytes / 2**20:.0f} MiB "
                         f"in {shm}, which has {free / 2**20:.0f} MiB free; use data.workers: 0, a smaller batch, "
                         f"or a larger {shm}")
    return min(want, fits)


def _worker(batches: Batches, tasks, done, slots: list[tuple[str, str]]) -> None:
    """Decode micro-batch k into slot s for each (k, s) until told to stop (None)."""
    shms = [(shared_memory.SharedMemory(name=x), shared_memory.SharedMemory(name=y)) for x, y in slots]
    try:
        while True:
            task = tasks.get()
            if task is None:
                return
            k, s, x_shape, y_shape, x_dtype, y_dtype = task
            try:
                x, y = batches.get(k)
                if x.shape != x_shape or y.shape != y_shape:
                    raise HpcdlError(f"micro-batch {k} has shape {x.shape}, the first had {x_shape}")
                np.ndarray(x_shape, x_dtype, buffer=shms[s][0].buf)[...] = x
                np.ndarray(y_shape, y_dtype, buffer=shms[s][1].buf)[...] = y
                done.put((k, s, None))
            except BaseException as exc:  # the loop raises it: a worker's traceback is no use to a user
                message = str(exc) if isinstance(exc, HpcdlError) else traceback.format_exc(limit=3)
                done.put((k, s, message))
    finally:
        for a, b in shms:
            a.close()
            b.close()


class AheadOfTime:
    """Micro-batches first, first+1, ... as numpy arrays, decoded ahead by `workers` processes."""

    def __init__(self, batches: Batches, first: int, workers: int, depth: int | None = None):
        self.batches, self.next_k, self.workers = batches, first, workers
        self._procs: list = []
        if workers <= 0:
            return
        x0, y0 = batches.get(first)  # the first batch fixes the slots' shape, and is not wasted
        self._first = (first, x0, y0)
        self.shape = (x0.shape, y0.shape, x0.dtype, y0.dtype)
        self.depth = slot_count(workers, x0.nbytes + y0.nbytes, depth)
        self._shms = [(shared_memory.SharedMemory(create=True, size=max(1, x0.nbytes)),
                       shared_memory.SharedMemory(create=True, size=max(1, y0.nbytes))) for _ in range(self.depth)]
        ctx = mp.get_context("fork")  # the workers inherit the data set's index, unpickled
        self._tasks, self._done = ctx.Queue(), ctx.Queue()
        names = [(a.name, b.name) for a, b in self._shms]
        self._procs = [ctx.Process(target=_worker, args=(batches, self._tasks, self._done, names), daemon=True)
                       for _ in range(workers)]
        for p in self._procs:
            p.start()
        atexit.register(self.close)  # a loop that raises still stops its workers and frees the slots
        self._ready: dict[int, int] = {}
        self._held: int | None = None   # the slot the loop is reading now
        self._issued = first + 1
        self._free = list(range(self.depth))
        while self._free:
            self._issue()

    def _issue(self) -> None:
        s = self._free.pop()
        self._tasks.put((self._issued, s, *self.shape))
        self._issued += 1

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        k = self.next_k
        self.next_k += 1
        if self.workers <= 0:
            return self.batches.get(k)
        if self._held is not None:      # the loop is done with the previous batch: reuse its slot
            self._free.append(self._held)
            self._held = None
            self._issue()
        if self._first is not None and self._first[0] == k:
            _, x, y = self._first
            self._first = None
            return x, y
        while k not in self._ready:
            try:
                got, s, error = self._done.get(timeout=5)
            except queue.Empty:
                if not all(p.is_alive() for p in self._procs):
                    raise HpcdlError("data: a decode worker died (out of memory?); see the rank's log") from None
                continue
            if error:
                raise HpcdlError(f"data: decoding micro-batch {got}: {error}")
            self._ready[got] = s
        s = self._ready.pop(k)
        self._held = s
        xs, ys, xd, yd = self.shape
        return (np.ndarray(xs, xd, buffer=self._shms[s][0].buf), np.ndarray(ys, yd, buffer=self._shms[s][1].buf))

    def close(self) -> None:
        for _ in self._procs:
            self._tasks.put(None)
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()
        self._procs = []
        for a, b in getattr(self, "_shms", []):
            for shm in (a, b):
                shm.close()
                shm.unlink()
        self._shms = []


class DeviceFeed:
    """Micro-batches as device tensors, the next one copied while the current one trains.

    The loop calls `prefetch()` once the step's kernels are queued (after backward): the
    host's share of staging (taking the decoded batch, filling the pinned buffer) then runs
    while the GPU computes. Staged at the top of the step instead, it would run while the
    GPU waits wherever the host has just synchronised with it (fp16's overflow check reads
    a flag every step; display steps read the loss). `next()` stages itself if no
    prefetch came.
    """

    def __init__(self, source: AheadOfTime, device: torch.device, memory_format=torch.contiguous_format):
        self.source, self.device, self.memory_format = source, device, memory_format
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.stream = torch.cuda.Stream(device)
            self._pinned: list = [None, None]   # two page-locked buffers, used in turn
            self._copied: list = [None, None]   # the event after each buffer's last copy
            self._turn = 0
            self._next = self._stage()

    def _stage(self):
        """Start copying the source's next batch to the device on the side stream; the device tensors."""
        x, y = self.source.next()
        t = self._turn
        self._turn ^= 1
        if self._copied[t] is not None:
            self._copied[t].synchronize()  # that buffer's previous copy must be done before it is refilled
        if self._pinned[t] is None or self._pinned[t][0].shape != x.shape:
            self._pinned[t] = (torch.empty(x.shape, dtype=torch.from_numpy(x[:0]).dtype).pin_memory(),
                               torch.empty(y.shape, dtype=torch.from_numpy(y[:0]).dtype).pin_memory())
        px, py = self._pinned[t]
        px.copy_(torch.from_numpy(x))
        py.copy_(torch.from_numpy(y))
        with torch.cuda.stream(self.stream):
            dx = px.to(self.device, non_blocking=True).contiguous(memory_format=self.memory_format)
            dy = py.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._copied[t] = event
        return dx, dy

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.cuda:
            x, y = self.source.next()
            return torch.from_numpy(x).contiguous(memory_format=self.memory_format), torch.from_numpy(y)
        x, y = self._next if self._next is not None else self._stage()
        self._next = None
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)      # the GPU waits for the copy; the host does not
        x.record_stream(current)              # allocated on the side stream, used on this one
        y.record_stream(current)
        return x, y

    def prefetch(self) -> None:
        """Stage the next micro-batch now (on a CPU there is nothing to stage)."""
        if self.cuda and self._next is None:
            self._next = self._stage()

    def close(self) -> None:
        self.source.close()


#: the part of a GPU's memory a resident training split may take
RESIDENT_SHARE = 0.125


def resident_fits(batches: Batches, device: torch.device) -> bool:
    """Whether `batches`' split can live on `device`: in memory already, and within RESIDENT_SHARE of it."""
    images = batches.split.images
    if device.type != "cuda" or images is None:
        return False
    return images.nbytes <= RESIDENT_SHARE * torch.cuda.get_device_properties(device).total_memory


class ResidentFeed:
    """Micro-batches first, first+1, ... gathered on the device from a split held there (DeviceFeed's verbs)."""

    def __init__(self, batches: Batches, first: int, device: torch.device, memory_format=torch.contiguous_format):
        split = batches.split
        self.batches, self.k, self.device, self.memory_format = batches, first, device, memory_format
        self.images = torch.from_numpy(np.ascontiguousarray(split.images)).to(device)
        self.labels = torch.from_numpy(np.ascontiguousarray(split.labels)).to(device)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        k, self.k = self.k, self.k + 1
        idx = self.batches.indices(k)
        n, _, h, w = self.images.shape
        a = self.batches.augmentation(k, len(idx), h, w)
        rows = torch.from_numpy(idx).to(self.device, non_blocking=True)
        y = self.labels[rows]
        if a.crop is None and a.flips is None:
            x = self.images[rows]
        else:  # one gather: sample i's rows tops[i] + r and columns lefts[i] + c, reversed where it flips
            side_h, side_w = (a.crop, a.crop) if a.crop else (h, w)
            tops = np.zeros(len(idx), dtype=np.int64) if a.tops is None else a.tops
            lefts = np.zeros(len(idx), dtype=np.int64) if a.lefts is None else a.lefts
            ys = tops[:, None] + np.arange(side_h)[None, :]
            cols = np.arange(side_w)[None, :]
            if a.flips is not None:
                cols = np.where(a.flips[:, None], side_w - 1 - cols, cols)
            xs = lefts[:, None] + cols
            t = lambda v: torch.from_numpy(np.ascontiguousarray(v)).to(self.device, non_blocking=True)  # noqa: E731
            channels = torch.arange(self.images.shape[1], device=self.device)
            x = self.images[rows[:, None, None, None], channels[None, :, None, None], t(ys)[:, None, :, None],
                            t(xs)[:, None, None, :]]
        return x.contiguous(memory_format=self.memory_format), y

    def prefetch(self) -> None:
        """The batch is gathered on the device when asked for: nothing to stage."""

    def close(self) -> None:
        self.images = self.labels = None
