"""Training recipes: Caffe's solver vocabulary plus the large-batch practice of the seed papers."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hpcdl.errors import HpcdlError, validation_message


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataSpec(_Strict):
    """Caffe's data layer and TransformationParameter (crop_size, mirror) in one place."""

    source: Literal["synthetic", "digits", "cifar10", "imagefolder", "tar"] = "synthetic"
    path: str | None = None
    image_size: int | None = Field(default=None, ge=4, description="side the images are resized to")
    crop: int | None = Field(default=None, ge=4, description="Caffe crop_size: random crop in training, centre crop in test")
    mirror: bool = Field(default=False, description="Caffe mirror: random horizontal flips in training")
    num_classes: int | None = Field(default=None, ge=2)
    holdout_fraction: float = Field(default=0.2, gt=0, lt=1)
    synthetic_samples: int = Field(default=1024, ge=1)
    stage: bool = Field(default=False, description="copy the data set to node-local storage first")


class Recipe(_Strict):
    name: str
    net: str
    data: DataSpec = DataSpec()
    batch_size: int = Field(ge=1, description="images per rank per iteration")
    test_batch_size: int | None = Field(default=None, ge=1)
    # Caffe solver (caffe.proto SolverParameter)
    base_lr: float = Field(gt=0)
    lr_policy: Literal["fixed", "step", "multistep", "exp", "inv", "poly", "sigmoid", "cosine"] = "fixed"
    gamma: float = 0.1
    power: float = 1.0
    stepsize: int | None = Field(default=None, ge=1)
    stepvalue: tuple[int, ...] = ()
    momentum: float = Field(default=0.9, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0)
    max_iter: int | None = Field(default=None, ge=1)
    epochs: float | None = Field(default=None, gt=0)
    iter_size: int = Field(default=1, ge=1)
    test_interval: int | None = Field(default=None, ge=1)
    test_iter: int | None = Field(default=None, ge=1)
    snapshot: int | None = Field(default=None, ge=1)
    snapshot_prefix: str | None = None
    display: int = Field(default=20, ge=1)
    random_seed: int = 1
    clip_gradients: float | None = Field(default=None, ge=0, description="Caffe: bound on the global gradient L2 norm")
    # Large-batch practice of the seed papers
    type: Literal["SGD", "LARS", "LARC"] = Field(default="SGD", description="Caffe solver type, plus LARS and LARC")
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
    # How it runs
    framework: Literal["pytorch", "tensorflow", "mxnet"] = "pytorch"
    distributed: Literal["auto", "gloo", "nccl", "mpi", "horovod"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    loss_scale: float | Literal["dynamic"] = "dynamic"
    channels_last: bool = False
    snapshot_keep: int = Field(default=3, ge=1, description="snapshots kept on disk (older ones are removed)")
    collective_timeout_s: float = Field(default=300, gt=0, description="a rank waiting longer than this on a peer fails")

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
            raise ValueError("stepvalue must increase")
        if self.warmup_iter is not None and self.warmup_epochs is not None:
            raise ValueError("give warmup_iter or warmup_epochs, not both")
        if self.data.crop and self.data.image_size and self.data.crop > self.data.image_size:
            raise ValueError("data.crop is larger than data.image_size")
        return self

    @property
    def rule(self) -> str:
        """The optimizer's rate rule (hpcdl.train.optim.RULES)."""
        return {"SGD": "sgd", "LARS": "lars", "LARC": f"larc_{self.larc_mode}"}[self.type]

    @property
    def trust(self) -> float:
        if self.trust_coefficient is not None:
            return self.trust_coefficient
        # LARS paper: eta = 0.001; apex LARC default trust_coefficient = 0.02
        return 0.001 if self.type == "LARS" else 0.02


def load_recipe(path: str | Path) -> Recipe:
    path = Path(path)
    if not path.is_file():
        raise HpcdlError(f"recipe {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise HpcdlError(f"recipe {path}: not valid YAML: {exc}") from None
    return recipe_from_dict(data, str(path), default_name=path.stem)


def recipe_from_dict(data, where: str, default_name: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise HpcdlError(f"recipe {where}: must be a YAML mapping of solver fields")
    data.setdefault("name", default_name)
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise HpcdlError(validation_message(exc, f"recipe {where}")) from None
