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
    source: Literal["synthetic", "digits", "cifar10", "imagefolder", "tar"] = "synthetic"
    path: str | None = None
    image_size: int | None = Field(default=None, ge=4, description="side the images are resized to")
    crop: int | None = Field(default=None, ge=4)
    mirror: bool = False
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
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    channels_last: bool = False

    @model_validator(mode="after")
    def _needs_a_length(self) -> "Recipe":
        if self.max_iter is None and self.epochs is None:
            raise ValueError("give max_iter or epochs")
        if self.lr_policy == "step" and self.stepsize is None:
            raise ValueError("lr_policy step needs stepsize")
        if self.lr_policy == "multistep" and not self.stepvalue:
            raise ValueError("lr_policy multistep needs stepvalue")
        return self


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
