"""`data.loader: dali`: JPEG decoding on the GPU with NVIDIA DALI (optional, PyTorch on CUDA only).

The loop still asks for micro-batch k, k+1, ... and the batches are still chosen as
hpcdl.train.data.Batches chooses them: `batch_plan(batches, k)` gives micro-batch k's
files, labels and Caffe crop offsets and mirror flips, drawn from the same (seed, k, rank)
generator in the same order as `Batches.get`, and DALI's `external_source` is fed that plan.
DALI then decodes on the GPU (`decoders.image`, device "mixed": nvJPEG), resizes the
shorter side and cuts the centre square, and applies the crop, flip and normalisation
(`crop_mirror_normalize`). So a resumed run draws the same images with the same crops and
flips; both resize bilinearly, but the pixel values differ slightly from Pillow's (another
filter implementation and JPEG decoder, and where a side rounds to the other pixel).

DALI is not part of hpcdl's install (its wheel is several hundred MB): `pip install
nvidia-dali-cuda120` or `nvidia-dali-cuda130` on the GPU nodes, for the CUDA major version
PyTorch was built with (NVIDIA's DALI installation guide). A recipe that asks for it where
it is missing, or on a rank without a GPU, is refused with one line naming `data.loader`.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from hpcdl.errors import HpcdlError
from hpcdl.train.data import IMAGENET_MEAN, IMAGENET_STD, Batches, FileImages


def dali_package(cuda: str | None = None) -> str:
    """DALI's wheel for a CUDA version (NVIDIA publishes nvidia-dali-cuda120 and -cuda130); PyTorch's by default."""
    if cuda is None:
        import torch

        cuda = torch.version.cuda
    major = (cuda or "12").split(".")[0]
    return f"nvidia-dali-cuda{major}0"


def import_dali():
    """nvidia.dali, or one line saying what to install."""
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
        import nvidia.dali.types  # noqa: F401
    except ImportError as exc:
        raise HpcdlError(
            f"data.loader: dali needs NVIDIA DALI, which is not installed here ({exc}); install it on the GPU nodes "
            f"with pip install {dali_package()} (for PyTorch's CUDA), or use data.loader: hpcdl"
        ) from None
    return dali


def check_device(device) -> None:
    """Refuse a rank without a GPU, then a GPU node without DALI: before the data set is read."""
    if getattr(device, "type", str(device)) != "cuda":
        raise HpcdlError(f"data.loader: dali decodes JPEGs on an NVIDIA GPU and this rank runs on {device}; "
                         "use data.loader: hpcdl")
    import_dali()


def check_dali(batches: Batches, device) -> None:
    """Refuse what DALI cannot do here: a rank without a GPU, images in memory."""
    check_device(device)
    if not isinstance(batches.split.loader, FileImages):
        raise HpcdlError("data.loader: dali decodes image files (data.source imagefolder or tar), not images in memory")


def batch_plan(batches: Batches, k: int) -> dict:
    """Micro-batch k as DALI is to build it: encoded files, labels, crop offsets, mirror flips.

    The same choices `Batches.get(k)` makes: the epoch order's slot, then `augment`'s draws
    (tops, then lefts, then flips) from the generator seeded with (seed, k, rank).
    """
    split, loader = batches.split, batches.split.loader
    idx = batches.indices(k)
    n, size = len(idx), loader.size
    a = batches.augmentation(k, n, size, size)
    none = np.zeros(n, dtype=np.int64)
    return {"files": [loader.names[int(split.indices[i])] for i in idx], "labels": split.labels[idx],
            "tops": none if a.tops is None else a.tops, "lefts": none if a.lefts is None else a.lefts,
            "flips": np.zeros(n, dtype=bool) if a.flips is None else a.flips, "size": size,
            "crop": a.crop or size}


def normalisation(loader: FileImages) -> tuple[list[float], list[float], bool]:
    """(mean, std, bgr) on 0-255 pixels for crop_mirror_normalize: hpcdl's transform or Caffe's."""
    c = loader.channels
    if loader.caffe is not None:  # (x - mean) * scale, BGR as cv::imread reads files
        mean, scale = loader.caffe
        m = [0.0] * c if mean is None else [float(v) for v in np.asarray(mean).ravel()]
        return m, [1.0 / scale] * c, c == 3
    return [float(v) * 255 for v in IMAGENET_MEAN[:c]], [float(v) * 255 for v in IMAGENET_STD[:c]], False


class PlanColumns:
    """DALI's source: micro-batch first, first+1, ... as the columns `external_source` takes.

    Each call gives the next micro-batch's encoded files (one uint8 array a sample), labels (n, 1),
    crop anchors as fractions of the room to move (n,) and mirror flips (n,), from `batch_plan`.
    DALI calls its source on the training loop's own thread, so the files of the micro-batch after
    this one are read in a thread of their own meanwhile: the loop no longer reads a batch's files
    (256 for ResNet-50) between queueing two steps. The plans are drawn on the calling thread, in
    order, as Batches draws them.
    """

    def __init__(self, batches: Batches, first: int):
        self.batches, self.k = batches, first
        self._read = batches.split.loader.read_bytes
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hpcdl-dali-read")
        self._ahead = None

    def _start(self, k: int):
        """Micro-batch k's plan, and its files being read in the reader thread."""
        plan, read = batch_plan(self.batches, k), self._read
        return plan, self._reader.submit(lambda: [np.frombuffer(read(f), dtype=np.uint8) for f in plan["files"]])

    def __call__(self):
        plan, encoded = self._ahead or self._start(self.k)
        self.k += 1
        self._ahead = self._start(self.k)
        room = max(1, plan["size"] - plan["crop"])
        return (encoded.result(), plan["labels"].astype(np.int64).reshape(-1, 1),
                (plan["tops"] / room).astype(np.float32), (plan["lefts"] / room).astype(np.float32),
                plan["flips"].astype(np.int32))

    def close(self) -> None:
        self._reader.shutdown(wait=True, cancel_futures=True)


class DaliFeed:
    """Micro-batches first, first+1, ... as CUDA tensors decoded by DALI (feed.DeviceFeed's verbs)."""

    def __init__(self, batches: Batches, first: int, device, memory_format, threads: int):
        check_dali(batches, device)
        dali = import_dali()
        fn, types = dali.fn, dali.types
        import torch
        from nvidia.dali.plugin.pytorch import feed_ndarray

        self.batches, self.next_k, self.device, self.memory_format = batches, first, device, memory_format
        self._feed_ndarray = feed_ndarray
        loader = batches.split.loader
        mean, std, bgr = normalisation(loader)
        size, crop = loader.size, batches.crop or loader.size
        self._plans = PlanColumns(batches, first)
        # a channels_last step takes DALI's HWC output as it is (NHWC is channels_last's memory order);
        # CHW, then a transpose on the training stream, cost a pass over the batch a step
        self._hwc = memory_format == torch.channels_last

        # pipelined: while the loop trains on micro-batch k, DALI reads and decodes k+1 in its own
        # threads and on the GPU (NVIDIA's DALI docs: exec_pipelined, exec_async, prefetch_queue_depth).
        # It still asks for the plans in order, k, k+1, ..., so the batches are Batches' own; a few
        # plans past the run's end are read and never used. Unpipelined, each step waited for its
        # decode: 0.79 of the synthetic rate on one H200 (docs/performance.md)
        @dali.pipeline_def(batch_size=batches.batch_size, num_threads=max(1, threads), device_id=device.index or 0,
                           prefetch_queue_depth=2, exec_async=True, exec_pipelined=True)
        def pipeline():
            jpegs, labels, anchor_y, anchor_x, flips = fn.external_source(
                source=self._plans, num_outputs=5, batch=True, dtype=[types.UINT8, types.INT64, types.FLOAT,
                                                                           types.FLOAT, types.INT32])
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.BGR if bgr else
                                       (types.RGB if loader.channels == 3 else types.GRAY))
            images = fn.resize(images, resize_shorter=size, interp_type=types.INTERP_LINEAR)
            images = fn.crop(images, crop=(size, size), crop_pos_x=0.5, crop_pos_y=0.5)
            images = fn.crop_mirror_normalize(images, crop=(crop, crop), crop_pos_x=anchor_x, crop_pos_y=anchor_y,
                                              mirror=flips, mean=mean, std=std, dtype=types.FLOAT,
                                              output_layout="HWC" if self._hwc else "CHW")
            return images, labels.gpu()

        self.pipe = pipeline()
        self.pipe.build()
        self._copy = torch.cuda.Stream(device)
        self._copied = None  # the event of the last copy out of DALI's buffers

    def next(self):
        import torch

        # DALI refills the buffers of the batch it handed out last once the next one is asked for, so
        # the copy out of them must be done by then; it ran beside the last step, so this rarely waits
        if self._copied is not None:
            self._copied.synchronize()
        outputs = self.pipe.run()  # micro-batch k, decoded while k-1 trained; k+1 is scheduled
        images, labels = (out.as_tensor() for out in outputs)  # each list as one tensor, once
        # copied out on a stream of our own, which the training stream waits for on the device: the
        # host goes on queueing the step. The tensors are the copy stream's, and marked as used by the
        # training stream for the allocator
        with torch.cuda.stream(self._copy):
            x = torch.empty(images.shape(), dtype=torch.float32, device=self.device)
            y = torch.empty(labels.shape(), dtype=torch.int64, device=self.device)
            self._feed_ndarray(images, x, cuda_stream=self._copy)
            self._feed_ndarray(labels, y, cuda_stream=self._copy)
            self._copied = torch.cuda.Event()
            self._copied.record(self._copy)
        training = torch.cuda.current_stream(self.device)
        training.wait_event(self._copied)
        x.record_stream(training)
        y.record_stream(training)
        self.next_k += 1
        x = x.permute(0, 3, 1, 2) if self._hwc else x.contiguous(memory_format=self.memory_format)
        return x, y.reshape(-1)

    def prefetch(self) -> None:
        """DALI's pipeline stages the next micro-batch itself: nothing to do here."""

    def close(self) -> None:
        self.pipe = None
        self._plans.close()
