"""Data sources, per-rank sharding and the batches each rank trains on.

A source gives images as float32 (C, H, W) arrays and int64 labels, split into a
training and a held-out part. Small sets (synthetic, digits, CIFAR-10) are held in
memory; image folders and tar shards are indexed once and decoded per batch with Pillow.

Batches are a pure function of (seed, micro-batch number, rank): the k-th micro-batch
of a rank is slot k of an epoch order shared by all ranks. So a resumed run draws the
very batches the uninterrupted run would have drawn, with no loader state to save.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcdl.errors import HpcdlError
from hpcdl.train.recipe import DataSpec

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp")
# ImageNet channel statistics on 0..1 pixels (the values every torchvision/DLE recipe uses)
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


@dataclass
class Split:
    """One part of a data set: in-memory arrays, or files decoded on demand."""

    labels: np.ndarray
    images: np.ndarray | None = None          # (N, C, H, W) float32, when in memory
    loader: "FileImages | None" = None
    indices: np.ndarray | None = None          # rows of `loader` that belong to this split

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, idx: np.ndarray) -> np.ndarray:
        if self.images is not None:
            return self.images[idx]
        return self.loader.decode(self.indices[idx])


@dataclass
class Dataset:
    name: str
    train: Split
    test: Split
    num_classes: int
    shape: tuple[int, int, int]  # C, H, W of the stored images (before cropping)
    classes: tuple[str, ...] = field(default_factory=tuple)

    # the foundation's names, kept for callers that read arrays directly
    @property
    def train_x(self):
        return self.train.images

    @property
    def train_y(self):
        return self.train.labels

    @property
    def test_x(self):
        return self.test.images

    @property
    def test_y(self):
        return self.test.labels


def net_input_size(spec: DataSpec, default: int) -> int:
    """The side of the net's input: Caffe's crop_size, else the image size, else the net's own.

    Images are stored at `image_size`; training crops them (randomly, Caffe's TRAIN phase)
    and testing takes the centre crop, so the net is built for `crop` pixels.
    """
    return spec.crop or spec.image_size or default


CAFFE_SOURCES = ("cifar10", "imagefolder", "tar")  # real pixels, as Caffe's data layers read them


def resolve_transform(spec: DataSpec, net: str | None) -> DataSpec:
    """`transform: auto` made concrete: Caffe's transform_param for a net whose file says
    `input.transform: caffe` (the BVLC nets) on a source of real images, with the net's
    `mean_value` unless the recipe gives one; hpcdl's normalisation otherwise (digits and
    synthetic data, and nets not defined by Caffe such as the v1.5 ResNet-50)."""
    if getattr(spec, "transform", "normalise") != "auto":
        return spec
    from hpcdl.nets.spec import net_input

    declared = net_input(net) if net else {}
    if declared.get("transform") == "caffe" and spec.source in CAFFE_SOURCES:
        update = {"transform": "caffe"}
        if spec.mean_value is None and declared.get("mean_value"):
            update["mean_value"] = tuple(float(v) for v in declared["mean_value"])
        return spec.model_copy(update=update)
    return spec.model_copy(update={"transform": "normalise"})


def caffe_transform(x: np.ndarray, mean: np.ndarray | None, scale: float) -> np.ndarray:
    """Caffe's DataTransformer on 0-255 pixels (N, C, H, W): minus the mean, times scale."""
    if mean is not None:
        x = x - mean
    return (x * scale).astype(np.float32) if scale != 1.0 else x.astype(np.float32)


def _caffe_mean(spec: DataSpec, train_x: np.ndarray) -> np.ndarray:
    """mean_value per channel, else the training images' mean image (Caffe's mean_file)."""
    if spec.mean_value is not None:
        c = train_x.shape[1]
        if len(spec.mean_value) not in (1, c):
            raise HpcdlError(f"data.mean_value: {len(spec.mean_value)} values for {c} channels")
        return np.asarray(spec.mean_value * (c if len(spec.mean_value) == 1 else 1), dtype=np.float32)[:, None, None]
    return train_x.mean(axis=0, dtype=np.float64).astype(np.float32)


def load_dataset(spec: DataSpec, shape: tuple[int, int, int], seed: int, net: str | None = None) -> Dataset:
    """`shape` is what the net takes (C, H, W); sources store images at `data.image_size`.
    `net` decides what `data.transform: auto` means (resolve_transform)."""
    spec = resolve_transform(spec, net)
    loaders = {"digits": _digits, "synthetic": _synthetic, "cifar10": _cifar10, "imagefolder": _imagefolder, "tar": _tar}
    if spec.source not in loaders:
        raise HpcdlError(f"data.source: {spec.source!r}; known: {', '.join(loaders)}")
    if spec.source in ("cifar10", "imagefolder", "tar"):
        if not spec.path:
            raise HpcdlError(f"data.path: source {spec.source} needs the path of the data set")
        path = os.path.expandvars(os.path.expanduser(spec.path))
        if "$" in path:
            raise HpcdlError(f"data.path: {spec.path}: set the environment variable it names to the data set's folder")
        spec = spec.model_copy(update={"path": path})
    return loaders[spec.source](spec, shape, seed)


def _holdout(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * fraction)))
    return order[n_test:], order[:n_test]


def _in_memory(name, x, y, classes, spec: DataSpec, seed: int) -> Dataset:
    train, test = _holdout(len(x), spec.holdout_fraction, seed)
    train_x, test_x = x[train], x[test]
    if getattr(spec, "transform", "normalise") == "caffe":  # x holds 0-255 pixels
        mean = _caffe_mean(spec, train_x)
        train_x, test_x = caffe_transform(train_x, mean, spec.scale), caffe_transform(test_x, mean, spec.scale)
    return Dataset(name, Split(y[train], train_x), Split(y[test], test_x), classes, tuple(x.shape[1:]))


def _digits(spec: DataSpec, shape, seed) -> Dataset:
    """scikit-learn's 1,797 real 8x8 handwritten digits, scaled up to the net's input size."""
    from hpcdl.extras import need

    digits = need("sklearn.datasets", "data.source digits").load_digits()
    c, h, w = shape
    size = spec.image_size or h
    if getattr(spec, "transform", "normalise") == "caffe":  # 0..255 pixels; _in_memory subtracts the mean
        x = resize(digits.images.astype(np.float32) * (255.0 / 16.0), size, size)
        x = np.repeat(x[:, None, :, :], c, axis=1)
        return _in_memory("digits", np.ascontiguousarray(x), digits.target.astype(np.int64), 10, spec, seed)
    images = digits.images.astype(np.float32) / 16.0  # pixel values are 0..16
    x = resize(images, size, size)
    x = (x - x.mean()) / x.std()
    x = np.repeat(x[:, None, :, :], c, axis=1)  # grey -> the net's channels
    y = digits.target.astype(np.int64)
    return _in_memory("digits", np.ascontiguousarray(x), y, 10, spec, seed)


def _synthetic(spec: DataSpec, shape, seed) -> Dataset:
    """Random images whose class shifts the mean: learnable, so accuracy still means something."""
    classes = spec.num_classes or 10
    rng = np.random.default_rng(seed)
    n = spec.synthetic_samples
    c, h, w = shape
    size = spec.image_size or h
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = rng.standard_normal((n, c, size, size), dtype=np.float32)
    x += (y.astype(np.float32) / classes - 0.5)[:, None, None, None] * 2
    return _in_memory("synthetic", x, y, classes, spec, seed)


def _cifar10(spec: DataSpec, shape, seed) -> Dataset:
    """The CIFAR-10 binary version: data_batch_{1..5}.bin and test_batch.bin, 1+3072 bytes a record."""
    root = Path(spec.path)
    train_files = sorted(root.glob("data_batch_*.bin"))
    test_file = root / "test_batch.bin"
    if not train_files:
        raise HpcdlError(f"data.path: {root} holds no CIFAR-10 data_batch_*.bin files")

    def read(files):
        raw = np.concatenate([np.fromfile(f, dtype=np.uint8) for f in files])
        if raw.size % 3073:
            raise HpcdlError(f"data.path: {files[0]} is not CIFAR-10 binary (records are 3073 bytes)")
        rec = raw.reshape(-1, 3073)
        x = rec[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32)
        if caffe:  # 0-255 in the file's channel order, as convert_cifar_data.cpp stores the records
            return x, rec[:, 0].astype(np.int64)
        return _normalise(x / 255.0, CIFAR_MEAN, CIFAR_STD), rec[:, 0].astype(np.int64)

    caffe = getattr(spec, "transform", "normalise") == "caffe"
    x, y = read(train_files)
    if spec.image_size and spec.image_size != 32:
        x = np.stack([resize(x[:, ch], spec.image_size, spec.image_size) for ch in range(3)], axis=1)
    if test_file.exists():
        tx, ty = read([test_file])
        if spec.image_size and spec.image_size != 32:
            tx = np.stack([resize(tx[:, ch], spec.image_size, spec.image_size) for ch in range(3)], axis=1)
        if caffe:  # the mean of the training images (Caffe's mean.binaryproto), or mean_value
            mean = _caffe_mean(spec, x)
            x, tx = caffe_transform(x, mean, spec.scale), caffe_transform(tx, mean, spec.scale)
        return Dataset("cifar10", Split(y, x), Split(ty, tx), 10, tuple(x.shape[1:]))
    return _in_memory("cifar10", x, y, 10, spec, seed)


# per-channel statistics of the CIFAR-10 training set on 0..1 pixels
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)


def _normalise(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return ((x - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)


class FileImages:
    """Encoded images (JPEG, PNG...) in a folder tree or in tar shards, decoded per batch.

    Each image: decode, resize the shorter side to `size` (bilinear, as Caffe's
    ReadImageToCVMat does with cv::resize's default INTER_LINEAR, and torchvision's Resize),
    cut the centre square, then one affine map per channel on 0-255 pixels in float32,
    in place: hpcdl's /255-mean-over-std, or Caffe's minus-mean-times-scale on BGR.
    This is a decode worker's whole cost per file: 2.5 ms per 320 px JPEG at 224 px on one
    AMD EPYC core, where bicubic and float64 arithmetic took 4.0 (so 14 workers can feed
    about 5,600 images/s where ResNet-50 in bf16 on one H100 is to reach 2,500).
    """

    def __init__(self, read_bytes, names: list, size: int, channels: int, caffe: tuple | None = None):
        """`caffe`: (mean_value or None, scale) for Caffe's transform, else hpcdl's normalisation."""
        self.read_bytes = read_bytes
        self.names = names
        self.size = size
        self.channels = channels
        self.caffe = caffe
        # x * mul + add on 0-255 pixels, per channel
        if caffe is not None:
            mean, scale = caffe
            mean = np.zeros((channels, 1, 1), np.float32) if mean is None else np.asarray(mean, np.float32)
            self._mul = np.full((channels, 1, 1), scale, np.float32)
            self._add = (-mean * np.float32(scale)).reshape(-1, 1, 1).astype(np.float32)
        else:
            std = IMAGENET_STD[:channels].reshape(-1, 1, 1)
            self._mul = (1.0 / (255.0 * std)).astype(np.float32)
            self._add = (-IMAGENET_MEAN[:channels].reshape(-1, 1, 1) / std).astype(np.float32)

    def decode(self, rows: np.ndarray) -> np.ndarray:
        from PIL import Image

        out = np.empty((len(rows), self.channels, self.size, self.size), dtype=np.float32)
        bgr = self.caffe is not None and self.channels == 3   # Caffe reads files as cv::imread does: BGR
        for i, row in enumerate(rows):
            with Image.open(io.BytesIO(self.read_bytes(self.names[int(row)]))) as img:
                img = img.convert("RGB" if self.channels == 3 else "L")
                img = _resize_shorter_then_centre(img, self.size)
                a = np.asarray(img).reshape(self.size, self.size, -1).transpose(2, 0, 1)
            o = out[i]
            o[...] = a[::-1] if bgr else a
            o *= self._mul
            o += self._add
        return out


def _resize_shorter_then_centre(img, size: int):
    """Resize the shorter side to `size` (bilinear), then cut the centre square (the usual ImageNet eval)."""
    from PIL import Image

    w, h = img.size
    scale = size / min(w, h)
    img = img.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.Resampling.BILINEAR)
    w, h = img.size
    left, top = (w - size) // 2, (h - size) // 2
    return img.crop((left, top, left + size, top + size))


def _file_dataset(name, read_bytes, files: list[str], labels: list[str], spec: DataSpec, shape, seed,
                  test_files=None, test_labels=None, folders: tuple[str, ...] = ()) -> Dataset:
    # a class folder with no image (a node's shard may have none of a rare class) still counts
    classes = sorted(set(labels) | set(test_labels or []) | set(folders))
    if len(classes) < 2:
        raise HpcdlError(f"data.path: {spec.path} has fewer than 2 classes (one folder per class)")
    index = {c: i for i, c in enumerate(classes)}
    c, h, _ = shape
    size = spec.image_size or h
    names = list(files) + list(test_files or [])
    caffe = None
    if getattr(spec, "transform", "normalise") == "caffe":
        # no mean image for files (Caffe's mean_file is not read): mean_value, or none
        mean = None
        if spec.mean_value is not None:
            if len(spec.mean_value) not in (1, c):
                raise HpcdlError(f"data.mean_value: {len(spec.mean_value)} values for {c} channels")
            mean = np.asarray(spec.mean_value * (c if len(spec.mean_value) == 1 else 1), dtype=np.float32)[:, None, None]
        caffe = (mean, spec.scale)
    loader = FileImages(read_bytes, names, size, c, caffe)
    y = np.array([index[lab] for lab in labels], dtype=np.int64)
    if test_files:
        ty = np.array([index[lab] for lab in test_labels], dtype=np.int64)
        train = Split(y, loader=loader, indices=np.arange(len(files)))
        test = Split(ty, loader=loader, indices=np.arange(len(files), len(names)))
    else:
        tr, te = _holdout(len(files), spec.holdout_fraction, seed)
        train = Split(y[tr], loader=loader, indices=tr)
        test = Split(y[te], loader=loader, indices=te)
    return Dataset(name, train, test, len(classes), (c, size, size), tuple(classes))


def _imagefolder(spec: DataSpec, shape, seed) -> Dataset:
    """ImageNet layout: ROOT/train/<class>/*.JPEG (and ROOT/val/<class>/...), or ROOT/<class>/*."""
    root = Path(spec.path)
    if not root.is_dir():
        raise HpcdlError(f"data.path: {root} is not a folder")

    def scan(folder: Path):
        files, labels = [], []
        for cls in sorted(p for p in folder.iterdir() if p.is_dir()):
            for f in sorted(cls.rglob("*")):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(str(f))
                    labels.append(cls.name)
        return files, labels

    train_dir = root / "train" if (root / "train").is_dir() else root
    files, labels = scan(train_dir)
    if not files:
        raise HpcdlError(f"data.path: no images under {train_dir} (expected <class>/<image>.jpg)")
    test_files = test_labels = None
    if (root / "val").is_dir():
        test_files, test_labels = scan(root / "val")
    folders = tuple(p.name for p in train_dir.iterdir() if p.is_dir())
    return _file_dataset("imagefolder", lambda f: Path(f).read_bytes(), files, labels, spec, shape, seed,
                         test_files, test_labels, folders)


def _tar(spec: DataSpec, shape, seed) -> Dataset:
    """Tar shards (WebDataset style): DIR/*.tar or one .tar; members <class>/<name>.jpg.

    Members are read by offset from the shard file, so a rank touches only the bytes of the
    images it trains on (no unpacking onto a shared file system).
    """
    root = Path(spec.path)
    shards = sorted(root.glob("*.tar")) if root.is_dir() else [root]
    if not shards or not all(s.is_file() for s in shards):
        raise HpcdlError(f"data.path: {root}: no .tar shards")
    members: list[tuple[str, int, int]] = []
    labels: list[str] = []
    for shard in shards:
        try:
            with tarfile.open(shard) as tf:
                for m in tf.getmembers():
                    if m.isfile() and Path(m.name).suffix.lower() in IMAGE_SUFFIXES and "/" in m.name:
                        members.append((str(shard), m.offset_data, m.size))
                        labels.append(m.name.split("/")[-2])
        except tarfile.TarError as exc:
            raise HpcdlError(f"data.path: {shard}: not a readable tar file ({exc})") from None
    if not members:
        raise HpcdlError(f"data.path: {root}: the shards hold no <class>/<image> members")

    def read_bytes(member):
        path, offset, size = member
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    return _file_dataset("tar", read_bytes, members, labels, spec, shape, seed)


def resize(images: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of (N, h0, w0) images, numpy only."""
    n, h0, w0 = images.shape
    ys = (np.arange(h) + 0.5) * h0 / h - 0.5
    xs = (np.arange(w) + 0.5) * w0 / w - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, h0 - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, w0 - 1)
    y1, x1 = np.clip(y0 + 1, 0, h0 - 1), np.clip(x0 + 1, 0, w0 - 1)
    wy = np.clip(ys - y0, 0, 1)[None, :, None]
    wx = np.clip(xs - x0, 0, 1)[None, None, :]
    top = images[:, y0][:, :, x0] * (1 - wx) + images[:, y0][:, :, x1] * wx
    bottom = images[:, y1][:, :, x0] * (1 - wx) + images[:, y1][:, :, x1] * wx
    return (top * (1 - wy) + bottom * wy).astype(np.float32)


_resize = resize  # the foundation's name


def epoch_order(n: int, epoch: int, seed: int, rank: int, world: int) -> np.ndarray:
    """This rank's sample indices for an epoch: one shuffle shared by all ranks, dealt round-robin.

    Every rank sees the same number of samples (the tail that does not divide is dropped),
    and the ranks together cover the epoch exactly once.
    """
    order = np.random.default_rng(seed * 100_003 + epoch).permutation(n)
    usable = (n // world) * world
    return order[:usable][rank::world]


def node_seed(seed: int, node: int) -> int:
    """The seed of one node's own shuffle (data.shuffle: node), independent of the others'."""
    return int(np.random.SeedSequence((seed, node)).generate_state(1)[0])


class Batches:
    """The micro-batches of one rank, addressed by number, with Caffe's crop and mirror."""

    def __init__(self, split: Split, batch_size: int, seed: int, rank: int, world: int,
                 crop: int | None = None, mirror: bool = False, samples: int | None = None):
        """`rank` of `world` ranks share `split`; `samples` (at most len(split)) sets the epoch's
        length, so ranks reading shards of different sizes still take the same number of steps."""
        self.split, self.batch_size, self.seed, self.rank, self.world = split, batch_size, seed, rank, world
        self.crop, self.mirror = crop, mirror
        self.per_epoch = (min(samples or len(split), len(split)) // world) // batch_size
        if self.per_epoch < 1:
            raise HpcdlError(
                f"batch_size: {batch_size} per rank x {world} ranks is more than the {len(split)} training images")
        self._epoch, self._order = -1, None

    def epoch_of(self, k: int) -> int:
        return k // self.per_epoch

    def indices(self, k: int) -> np.ndarray:
        """Micro-batch k's rows of the split: the epoch's order, its k-th slot."""
        epoch, slot = divmod(k, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, epoch_order(len(self.split), epoch, self.seed, self.rank, self.world)
        return self._order[slot * self.batch_size:(slot + 1) * self.batch_size]

    def augmentation(self, k: int, n: int, h: int, w: int) -> Augmentation:
        """Micro-batch k's crops and flips for `n` images of h x w, drawn from the generator seeded
        with (seed, k, rank): the tops, then the lefts, then the flips, each drawn only where used."""
        return Augmentation.draw(np.random.default_rng((self.seed, k, self.rank)), self.crop, self.mirror, n, h, w)

    def get(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        idx = self.indices(k)
        x, y = self.split.take(idx), self.split.labels[idx]
        if self.crop or self.mirror:
            x = self.augmentation(k, *x.shape[:1], *x.shape[2:]).apply(x)
        return x, y


@dataclass(frozen=True)
class Augmentation:
    """Caffe's TRAIN-phase transform of one micro-batch: a crop of side `crop` at (tops, lefts) and
    a mirror where `flips` (None: no crop, no mirror)."""

    crop: int | None
    tops: np.ndarray | None
    lefts: np.ndarray | None
    flips: np.ndarray | None

    @classmethod
    def draw(cls, rng: np.random.Generator, crop: int | None, mirror: bool, n: int, h: int, w: int) -> "Augmentation":
        """The tops, then the lefts, then the flips, each drawn only where used."""
        tops = lefts = flips = None
        if crop and (crop < h or crop < w):
            if crop > h or crop > w:
                raise HpcdlError(f"data.crop: {crop} is larger than the {h}x{w} images")
            tops = rng.integers(0, h - crop + 1, size=n)
            lefts = rng.integers(0, w - crop + 1, size=n)
        else:
            crop = None
        if mirror:
            flips = rng.random(n) < 0.5
        return cls(crop, tops, lefts, flips)

    def apply(self, x: np.ndarray) -> np.ndarray:
        if self.crop:
            c = self.crop
            x = np.stack([x[i, :, t:t + c, l:l + c] for i, (t, l) in enumerate(zip(self.tops, self.lefts))])
        if self.flips is not None:
            x = np.array(x)  # a view of in-memory data must not be flipped in place
            x[self.flips] = x[self.flips][:, :, :, ::-1]
        return np.ascontiguousarray(x)


def augment(x: np.ndarray, rng: np.random.Generator, crop: int | None, mirror: bool) -> np.ndarray:
    """Caffe's TRAIN-phase transform: a random crop of side `crop` and a coin-flip mirror."""
    return Augmentation.draw(rng, crop, mirror, x.shape[0], *x.shape[2:]).apply(x)


def centre_crop(x: np.ndarray, crop: int | None) -> np.ndarray:
    """Caffe's TEST-phase transform: the centre crop."""
    if not crop:
        return x
    h, w = x.shape[2:]
    if crop > h or crop > w:
        raise HpcdlError(f"data.crop: {crop} is larger than the {h}x{w} images")
    t, l = (h - crop) // 2, (w - crop) // 2
    return np.ascontiguousarray(x[:, :, t:t + crop, l:l + crop])
