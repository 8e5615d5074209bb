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


class DaliFeed:
    """Micro-batches first, first+1, ... as CUDA tensors decoded by DALI (feed.DeviceFeed's verbs)."""

    def __init__(self, batches: Batches, first: int, device, memory_format, threads: int):
        check_dali(batches, device)
        dali = import_dali()
        fn, types = dali.fn, dali.types
        from nvidia.dali.plugin.pytorch import feed_ndarray

        self.batches, self.next_k, self.device, self.memory_format = batches, first, device, memory_format
        self._feed_ndarray = feed_ndarray
        loader = batches.split.loader
        self._read = loader.read_bytes
        mean, std, bgr = normalisation(loader)
        size, crop = loader.size, batches.crop or loader.size
        self._crop = crop
        self._k = first

        # pipelined: while the loop trains on micro-batch k, DALI reads and decodes k+1 in its own
        # threads and on the GPU (NVIDIA's DALI docs: exec_pipelined, exec_async, prefetch_queue_depth).
        # It still asks for the plans in order, k, k+1, ..., so the batches are Batches' own; a plan
        # or two past the run's end is read and never used. Unpipelined, each step waited for its
        # decode: 0.79 of the synthetic rate on one H200 (docs/performance.md)
        @dali.pipeline_def(batch_size=batches.batch_size, num_threads=max(1, threads), device_id=device.index or 0,
                           prefetch_queue_depth=2, exec_async=True, exec_pipelined=True)
        def pipeline():
            jpegs, labels, anchor_y, anchor_x, flips = fn.external_source(
                source=self._next_plan, num_outputs=5, batch=True, dtype=[types.UINT8, types.INT64, types.FLOAT,
                                                                           types.FLOAT, types.INT32])
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.BGR if bgr else
                                       (types.RGB if loader.channels == 3 else types.GRAY))
            images = fn.resize(images, resize_shorter=size, interp_type=types.INTERP_LINEAR)
            images = fn.crop(images, crop=(size, size), crop_pos_x=0.5, crop_pos_y=0.5)
            images = fn.crop_mirror_normalize(images, crop=(crop, crop), crop_pos_x=anchor_x, crop_pos_y=anchor_y,
                                              mirror=flips, mean=mean, std=std, dtype=types.FLOAT,
                                              output_layout="CHW")
            return images, labels.gpu()

        self.pipe = pipeline()
        self.pipe.build()
        import torch

        self._copy = torch.cuda.Stream(device)

    def _next_plan(self):
        plan = batch_plan(self.batches, self._k)
        self._k += 1
        room = max(1, plan["size"] - plan["crop"])
        # per sample: the encoded bytes, the label as a 1-element array, and 0-d arguments
        return ([np.frombuffer(self._read(f), dtype=np.uint8) for f in plan["files"]],
                [np.array([label], dtype=np.int64) for label in plan["labels"]],
                [np.array(t / room, dtype=np.float32) for t in plan["tops"]],
                [np.array(x / room, dtype=np.float32) for x in plan["lefts"]],
                [np.array(f, dtype=np.int32) for f in plan["flips"]])

    def next(self):
        import torch

        images, labels = self.pipe.run()  # micro-batch k, decoded while k-1 trained; k+1 is scheduled
        # copied out on a stream of our own, and waited for: DALI refills its output buffers once the
        # next batch is asked for, so the copy must not sit behind the training step's kernels. The
        # tensors are the copy stream's, and marked as used by the training stream for the allocator
        with torch.cuda.stream(self._copy):
            x = torch.empty(images.as_tensor().shape(), dtype=torch.float32, device=self.device)
            y = torch.empty(labels.as_tensor().shape(), dtype=torch.int64, device=self.device)
            self._feed_ndarray(images.as_tensor(), x, cuda_stream=self._copy)
            self._feed_ndarray(labels.as_tensor(), y, cuda_stream=self._copy)
        self._copy.synchronize()
        training = torch.cuda.current_stream(self.device)
        x.record_stream(training)
        y.record_stream(training)
        self.next_k += 1
        return x.contiguous(memory_format=self.memory_format), y.reshape(-1)

    def prefetch(self) -> None:
        """DALI's pipeline stages the next micro-batch itself: nothing to do here."""

    def close(self) -> None:
        self.pipe = None
