"""Training recipes: Caffe's solver vocabulary plus the large-batch practice of the seed papers."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hpcdl.caffe.solver_types import SOLVER_FIELDS, SOLVERS  # Caffe's solver types, SGD first
from hpcdl.errors import HpcdlError, validation_message
from hpcdl.files import load_yaml_text, read_text


class _Strict(BaseModel):
    # inf and nan are no learning rate, momentum or fraction: refused here, not on the compute node
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


#: the largest image side a recipe may ask for: 8192 x 8192 x 3 fp32 is 768 MiB per image, more
#: than any GPU holds for a batch of a few (spatial parallelism splits larger samples into slabs
#: of one image, which this bounds too)
MAX_IMAGE_SIZE = 8192
#: Caffe's SolverParameter counts (max_iter, test_iter, iter_size, snapshot, display, stepsize ...)
#: are int32 in caffe.proto; a larger value is a typo that would only fail, or never end, later
INT32 = 2**31 - 1
#: more images per rank than any accelerator holds for one step
MAX_BATCH = 2**20
#: more classes than any data set: ImageNet-21k has 21,841 (the last layer of a net with 10^5
#: classes and 4096 inputs is already 1.6 GB of weights)
MAX_CLASSES = 100_000
#: synthetic samples are generated whole in memory (N x 3 x side^2 float32)
MAX_SYNTHETIC_BYTES = 2**37


class DataSpec(_Strict):
    """Caffe's data layer and TransformationParameter (crop_size, mirror) in one place."""

    source: Literal["synthetic", "digits", "cifar10", "imagefolder", "tar", "mesh"] = "synthetic"
    path: str | None = None
    image_size: int | None = Field(default=None, ge=4, le=MAX_IMAGE_SIZE, description="side the images are resized to")
    crop: int | None = Field(default=None, ge=4, le=MAX_IMAGE_SIZE, description="Caffe crop_size: random crop in training, centre crop in test")
    mirror: bool = Field(default=False, description="Caffe mirror: random horizontal flips in training")
    num_classes: int | None = Field(default=None, ge=2, le=MAX_CLASSES)
    holdout_fraction: float = Field(default=0.2, gt=0, lt=1)
    synthetic_samples: int = Field(default=1024, ge=1, le=INT32)
    stage: bool = Field(default=False, description="copy the data set to node-local storage first")
    # global: one shuffle of the whole set each epoch, dealt to all ranks; node: each node
    # shuffles the shard it staged (executors/staging.py) and deals it to its own ranks
    shuffle: Literal["global", "node"] = Field(default="global", description="shuffle the whole set, or each node's shard")
    workers: int | None = Field(default=None, ge=0, le=4096, description="decode processes per rank; default: the rank's cores - 1 on a GPU, 0 on a CPU")
    loader: Literal["hpcdl", "dali"] = Field(
        default="hpcdl", description="hpcdl: Pillow in worker processes; dali: NVIDIA DALI decodes JPEGs on the GPU "
                                     "(PyTorch on CUDA, image files; pip install nvidia-dali-cuda120 or -cuda130)")
    # Caffe's transform_param: pixels 0-255 (BGR for image files, as cv::imread reads them;
    # CIFAR-10's binary order as convert_cifar_data stores it) minus the mean, times scale.
    # hpcdl's own: pixels / 255 standardised by the data set's channel mean and std.
    transform: Literal["auto", "caffe", "normalise"] = Field(
        default="auto", description="caffe: Caffe's transform_param; normalise: /255, minus mean, over std; "
                                    "auto: caffe for a Caffe-defined net on real images (cifar10, imagefolder, tar)")
    mean_value: tuple[float, ...] | None = Field(
        default=None, description="Caffe mean_value, one per channel in the net's channel order; with transform caffe "
                                  "and none given, in-memory sets subtract the training images' mean image (mean_file)")
    scale: float = Field(default=1.0, gt=0, description="Caffe transform_param scale, after the mean is subtracted")

    @model_validator(mode="after")
    def _caffe_fields(self) -> "DataSpec":
        if self.transform == "normalise" and (self.mean_value is not None or self.scale != 1.0):
            raise ValueError("data.mean_value and data.scale are Caffe's transform_param: they need transform caffe (or auto)")
        return self

    @model_validator(mode="after")
    def _dali_decodes_files(self) -> "DataSpec":
        if self.loader == "dali" and self.source not in ("imagefolder", "tar"):
            raise ValueError(f"data.loader: dali decodes image files (source imagefolder or tar), not source {self.source}")
        return self

    @model_validator(mode="after")
    def _synthetic_fits_a_node(self) -> "DataSpec":
        side = self.image_size or 224
        need = self.synthetic_samples * 3 * side * side * 4
        if self.source == "synthetic" and need > MAX_SYNTHETIC_BYTES:
            raise ValueError(f"data.synthetic_samples: {self.synthetic_samples} images of {side}x{side} are "
                             f"{need / 2**30:,.0f} GiB in memory, more than {MAX_SYNTHETIC_BYTES // 2**30} GiB")
        return self

    @model_validator(mode="after")
    def _files_need_a_path(self) -> "DataSpec":
        if self.source in ("cifar10", "imagefolder", "tar") and not self.path:
            raise ValueError(f"data.source {self.source} reads files: give data.path")
        return self


class SpatialSpec(_Strict):
    """Spatial parallelism: the ranks of a spatial group share each sample, one slab each
    (Dryden, Maruyama et al., IPDPS 2019). Groups of `ways` consecutive ranks share a sample;
    the groups are data-parallel replicas, so the global batch is batch_size x ranks / ways."""

    ways: int = Field(default=1, ge=1, description="ranks that share one sample")
    split: Literal["rows", "rows_and_columns"] = Field(default="rows", description="the image axes cut into slabs")
    overlap: bool = Field(default=True, description="convolve a slab's interior while its halo is in flight")


class Recipe(_Strict):
    name: str
    net: str
    data: DataSpec = DataSpec()
    batch_size: int = Field(ge=1, le=MAX_BATCH, description="images per rank per iteration")
    test_batch_size: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    # Caffe solver (caffe.proto SolverParameter)
    base_lr: float = Field(gt=0)
    lr_policy: Literal["fixed", "step", "multistep", "exp", "inv", "poly", "sigmoid", "cosine"] = "fixed"
    gamma: float = 0.1
    power: float = 1.0
    stepsize: int | None = Field(default=None, ge=1, le=INT32)
    stepvalue: tuple[int, ...] = ()
    momentum: float = Field(default=0.9, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0)
    max_iter: int | None = Field(default=None, ge=1, le=INT32)
    epochs: float | None = Field(default=None, gt=0)
    iter_size: int = Field(default=1, ge=1, le=INT32)
    test_interval: int | None = Field(default=None, ge=1, le=INT32)
    test_iter: int | None = Field(default=None, ge=1, le=INT32)
    snapshot: int | None = Field(default=None, ge=1, le=INT32)
    snapshot_prefix: str | None = None
    display: int = Field(default=20, ge=1, le=INT32)
    # torch.manual_seed takes [-2^63, 2^64): Caffe's random_seed is an int64
    random_seed: int = Field(default=1, ge=-(2**63), lt=2**64)
    # Caffe clips the gradient summed over iter_size before dividing by it (ApplyUpdate:
    # ClipGradients, then Normalize); hpcdl does the same (update_rule.caffe_clip_bound).
    clip_gradients: float | None = Field(default=None, ge=0, description="Caffe: bound on the L2 norm of the gradient summed over iter_size")
    # Large-batch practice of the seed papers
    # Caffe's solver types (caffe.proto SolverParameter.type; hpcdl.train.backends.pytorch.optim has their rules)
    type: Literal[SOLVERS + ("LARS", "LARC")] = Field(
        default="SGD", description="Caffe solver type, plus LARS and LARC (Caffe's SGD with per-layer rates)")
    momentum2: float = Field(default=0.999, ge=0, lt=1, description="Caffe: Adam's beta2")
    delta: float = Field(default=1e-8, gt=0, description="Caffe: the epsilon of AdaGrad, RMSProp, AdaDelta and Adam")
    rms_decay: float = Field(default=0.99, ge=0, lt=1, description="Caffe: RMSProp's decay of the squared-gradient history")
    regularization_type: Literal["L2", "L1"] = Field(
        default="L2", description="Caffe: weight decay adds wd * w (L2) or wd * sign(w) (L1) to the gradient")
    larc_mode: Literal["clip", "scale"] = "clip"
    trust_coefficient: float | None = Field(default=None, gt=0, description="LARS eta (0.001) or LARC trust (0.02)")
    larc_eps: float = Field(default=1e-8, ge=0)
    reference_batch: int | None = Field(default=None, ge=1, description="linear scaling: base_lr is for this global batch")
    warmup_iter: int | None = Field(default=None, ge=0)
    warmup_epochs: float | None = Field(default=None, ge=0)
    warmup_start_lr: float | None = Field(default=None, ge=0, description="rate at iteration 0 of the warm-up")
    momentum_correction: bool = Field(default=False, description="scale the velocity by lr_t/lr_t-1 (Goyal 2.1)")
    no_bias_decay: bool = Field(default=False, description="no weight decay on biases and batch-norm parameters")
    label_smoothing: float = Field(default=0.0, ge=0, lt=1)
    aux_heads: bool = Field(default=False, description="train with the net's auxiliary classifiers (GoogLeNet)")
    weights: str | None = Field(default=None, description="Caffe's --weights: start from a .caffemodel's weights, by layer name")
    class_weighting: Literal["none", "inverse_frequency"] = Field(
        default="none", description="per-pixel loss weight of each class (segmentation): 1/frequency, normalised")
    spatial: SpatialSpec | None = None
    activation_budget_mib: float | None = Field(
        default=None, gt=0, description="stop if a rank keeps more activation memory than this (spatial/per-pixel loop)")
    # How it runs
    framework: Literal["pytorch", "tensorflow", "mxnet"] = "pytorch"
    distributed: Literal["auto", "gloo", "nccl", "mpi", "horovod"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    loss_scale: float | Literal["dynamic"] = "dynamic"
    channels_last: bool = False
    # GPU speed settings (ignored on CPUs). cudnn_benchmark times cuDNN's algorithms for each
    # new input shape once and keeps the fastest: a trainer feeds one shape, so this pays off
    # after the first iterations (NVIDIA's performance guide; DeepLearningExamples turn it on).
    cudnn_benchmark: bool = Field(default=True, description="let cuDNN time and pick its fastest convolution algorithms")
    # TF32 runs fp32 matmuls and convolutions on Ampere+ tensor cores with a 10-bit mantissa;
    # NVIDIA and TensorFlow train with it on by default and convergence matches fp32 (NVIDIA
    # "TF32 in the A100 GPU" blog, 2020). "highest" keeps full fp32 for numerics studies.
    tf32: Literal["on", "highest"] = Field(default="on", description="TF32 for fp32 matmuls/convolutions on GPUs")
    # torch.compile's modes (PyTorch docs, torch.compile): "default" fuses the forward and backward
    # into generated kernels (inductor: Triton on GPUs, C++/OpenMP on CPUs); "reduce-overhead" also
    # replays them as CUDA graphs, which pays where a step's kernels are many and short; the update
    # stays the optimizer's own fused multi-tensor step, so Caffe's rule is unchanged.
    compile: Literal["none", "default", "reduce-overhead", "max-autotune"] = Field(
        default="none", description="PyTorch: torch.compile the training step's forward and backward in this mode")
    # Gradients on the wire (hpcdl.train.backends.pytorch.gradients)
    bucket_cap_mb: float | None = Field(default=None, gt=0, le=2**18, description="DDP bucket size in MB (default DDP's 25)")
    gradient_as_bucket_view: bool = Field(default=True, description="DDP: gradients are views into its buckets")
    gradient_compression: Literal["none", "fp16", "bf16"] = Field(default="none", description="cast gradients for the allreduce")
    # a stale gradient adds implicit momentum (Mitliagkas et al. 2016, arXiv:1605.09774): with
    # gradient_lag lower `momentum` (cifar10_quick on digits: 0.5 at base_lr 0.04, not 0.9 at 0.01)
    gradient_lag: bool = Field(default=False, description="apply step t-1's averaged gradients at step t (Kurth et al. 2018)")
    snapshot_keep: int = Field(default=3, ge=1, le=INT32, description="snapshots kept on disk (older ones are removed)")
    snapshot_failure: Literal["stop", "continue"] = Field(
        default="stop", description="a snapshot that cannot be written (disk full) stops training, or is reported "
        "and training goes on to the next one")
    # at most a week: longer than any centre's batch wall-time limit (and inside timedelta's range)
    collective_timeout_s: float = Field(default=300, gt=0, le=7 * 24 * 3600,
                                        description="a rank waiting longer than this on a peer fails")

    @field_validator("weights")
    @classmethod
    def _weights_a_file(cls, weights: str | None) -> str | None:
        # a path that is there and is a device, a FIFO or a folder is refused at render, not on
        # the compute node after the queue wait (one that is not there may live on the cluster only)
        import os

        if weights and os.path.exists(weights) and not os.path.isfile(weights):
            raise ValueError(f"{weights} is not a regular file (a .caffemodel)")
        return weights

    @field_validator("net")
    @classmethod
    def _a_known_net(cls, net: str) -> str:
        # a bundled net's name (checked here, so a typo is refused at render, not on the compute
        # node after the queue wait), or a net file's path: `hpcdl render` checks the file is there
        from hpcdl.nets.spec import list_nets

        if not (net.endswith((".yaml", ".yml")) or "/" in net) and net not in list_nets():
            raise ValueError(f"unknown network {net!r}; known: {', '.join(list_nets())} (or give a net file's path)")
        return net

    @model_validator(mode="after")
    def _needs_a_length(self) -> "Recipe":
        if self.max_iter is None and self.epochs is None:
            raise ValueError("give max_iter or epochs")
        if self.lr_policy == "step" and self.stepsize is None:
            raise ValueError("lr_policy step needs stepsize")
        if self.lr_policy == "sigmoid" and self.stepsize is None:
            raise ValueError("lr_policy sigmoid needs stepsize")
        if self.lr_policy == "multistep" and not self.stepvalue:
            raise ValueError("lr_policy multistep needs stepvalue")
        if list(self.stepvalue) != sorted(self.stepvalue):
            raise ValueError("stepvalue must not decrease")
        if self.warmup_iter is not None and self.warmup_epochs is not None:
            raise ValueError("give warmup_iter or warmup_epochs, not both")
        if self.spatial and self.spatial.ways > 1 and (self.framework != "pytorch" or self.distributed == "horovod"):
            raise ValueError("spatial: spatial parallelism runs on the PyTorch backend with gloo, nccl or mpi")
        if self.compile != "none" and (self.framework != "pytorch" or self.distributed == "horovod"):
            raise ValueError(f"compile: {self.compile} is torch.compile, for the PyTorch backend with gloo, nccl or "
                             "mpi; TensorFlow compiles its own step already")
        if self.compile != "none" and (self.spatial is not None or self.data.source == "mesh"):
            raise ValueError("compile: the spatial and per-pixel loop exchanges halos between layers, which a "
                             "compiled graph cannot hold; leave compile at none there")
        if self.gradient_lag and self.precision == "fp16":
            raise ValueError("gradient_lag with precision fp16: the lagged gradients would be unscaled by the next "
                             "step's loss scale; use bf16 or fp32")
        if self.clip_gradients == 0:
            # Caffe (sgd_solver.cpp ClipGradients) turns clipping off only for a negative value:
            # 0 scales every gradient to 0, which no one means; leaving the field out is "off"
            raise ValueError("clip_gradients: 0 would zero every gradient in Caffe (only a negative value turns "
                             "clipping off there); leave clip_gradients out to train without clipping")
        self._solver_fields()
        if self.data.crop and self.data.image_size and self.data.crop > self.data.image_size:
            raise ValueError("data.crop is larger than data.image_size")
        return self

    def _solver_fields(self) -> None:
        """A solver field set away from its default for a type that does not read it is refused,
        so a recipe never carries a setting that silently does nothing. (Defaults, not "given":
        a recipe written back out with every field must load again.)"""
        uses = {name: tuple(t for t in SOLVERS if name in SOLVER_FIELDS.get(t, ()))
                for name in ("momentum2", "rms_decay", "delta")}
        uses |= {"larc_mode": ("LARC",), "trust_coefficient": ("LARS", "LARC"), "larc_eps": ("LARS", "LARC"),
                 "momentum_correction": ("SGD", "Nesterov", "LARS", "LARC")}
        defaults = {name: type(self).model_fields[name].default for name in uses}
        for name, types in uses.items():
            # the LARS/LARC fields stay accepted (unused) with SGD, as before the other types came
            checked = name in ("momentum2", "rms_decay", "delta") or self.type in SOLVERS[1:]
            if checked and getattr(self, name) != defaults[name] and self.type not in types:
                raise ValueError(f"{name}: is for type {', '.join(types)}; this recipe's type is {self.type}")
        if self.regularization_type == "L1" and self.type in ("LARS", "LARC"):
            raise ValueError(f"regularization_type: L1 with type {self.type}: the trust ratio is defined for L2 "
                             f"weight decay (wd * ||w||)")

    @property
    def solver(self) -> str:
        """Caffe's solver type of the update (LARS and LARC are SGD with per-layer rates)."""
        return "SGD" if self.type in ("LARS", "LARC") else self.type

    @property
    def rule(self) -> str:
        """The optimizer's rate rule (hpcdl.train.backends.pytorch.optim.RULES)."""
        return {"LARS": "lars", "LARC": f"larc_{self.larc_mode}"}.get(self.type, "sgd")

    @property
    def trust(self) -> float:
        if self.trust_coefficient is not None:
            return self.trust_coefficient
        # LARS paper: eta = 0.001; apex LARC default trust_coefficient = 0.02
        return 0.001 if self.type == "LARS" else 0.02


#: the example recipes installed with hpcdl (`hpcdl recipes` lists them)
SHIPPED_RECIPES = Path(__file__).resolve().parent.parent / "recipes"


#: how every verb that takes a recipe describes its argument
RECIPE_HELP = "training recipe: a YAML file, or a shipped recipe's name (`hpcdl recipes` lists them)"


def shipped_recipes() -> dict[str, Path]:
    """Recipe name (file stem) -> its file inside the installed package (hpcdl/recipes/*.yaml)."""
    return {p.stem: p for p in sorted(SHIPPED_RECIPES.glob("*.yaml"))}


def recipe_file(given: str | Path) -> Path:
    """The file a recipe argument means: a file that is there, else a shipped recipe of that name
    (as Spack and conda take a package's name where they take a file)."""
    path = Path(given)
    if path.is_file():
        return path
    shipped = shipped_recipes()
    if path.name == str(given) and path.stem in shipped and path.suffix in ("", ".yaml"):
        return shipped[path.stem]
    raise HpcdlError(f"recipe {given}: no such file, and no shipped recipe of that name "
                     f"(shipped: {', '.join(shipped)}; `hpcdl recipes` lists them)")


def load_recipe(path: str | Path) -> Recipe:
    path = recipe_file(path)
    try:
        text = read_text(path)  # a regular file of a sane size: not a FIFO, not /dev/zero
    except HpcdlError as exc:
        raise HpcdlError(f"recipe {exc}") from None
    data = load_yaml_text(text, f"recipe {path}")
    return recipe_from_dict(data, str(path), default_name=path.stem)


def recipe_from_dict(data, where: str, default_name: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise HpcdlError(f"recipe {where}: must be a YAML mapping of solver fields")
    data.setdefault("name", default_name)
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise HpcdlError(validation_message(exc, f"recipe {where}")) from None
