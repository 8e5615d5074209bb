"""Which frameworks an image holds, and the image a reference names: facts read from the image specs.

The facts come from containers/images.yaml through hpcdl.images.spec: each image's
environments pin the frameworks, so a module's version is the version that image really holds,
and the runtime decision (hpcdl.plan.runtime) reads from here what an image can run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath

from hpcdl.images.spec import IMAGES_YAML, ImageSpec, load_images

# Where an image's virtual environments live: the definitions install them there
# (hpcdl.images.generate) and the modules' wrappers run them from there; here, so that rendering
# modules does not import hpccm.
ENVS = "/opt/envs"

# pip package -> framework module; tensorflow-cpu is the CPU build of the same framework
FRAMEWORK_PACKAGES = {"torch": "pytorch", "tensorflow": "tensorflow", "tensorflow-cpu": "tensorflow", "mxnet": "mxnet"}
FRAMEWORK_ORDER = ("pytorch", "tensorflow", "mxnet")


@dataclass(frozen=True)
class ImageFrameworks:
    """An image (or, for runtime `none`, a native install) and the framework versions it holds."""

    name: str
    frameworks: dict[str, str]  # framework -> version, e.g. {"pytorch": "2.13.0"}
    # framework -> the image's bin folder that holds it, where that is not the `main` environment
    # on the image's PATH (TensorFlow and MXNet get their own environments where their pins clash)
    bin_dirs: dict[str, str] = field(default_factory=dict)
    # framework -> the other packages importable beside it (its environment, and Horovod where built for it)
    extensions: dict[str, dict[str, str]] = field(default_factory=dict)

    def command(self, framework: str, program: str) -> str:
        """How a wrapper names `program` inside the image: bare when on PATH, else its full path."""
        folder = self.bin_dirs.get(framework)
        return f"{folder}/{program}" if folder else program


def image_frameworks(spec: ImageSpec) -> ImageFrameworks:
    """The frameworks an image spec pins, each with the environment it lives in."""
    found: dict[str, tuple[str, str]] = {}
    # `main` first, so a framework pinned in main and elsewhere is run from the PATH one
    for env_name in sorted(spec.environments, key=lambda n: n != "main"):
        for package, version in spec.environments[env_name].packages.items():
            framework = FRAMEWORK_PACKAGES.get(package)
            if framework and framework not in found:
                found[framework] = (env_name, version)
    ordered = sorted(found, key=lambda f: FRAMEWORK_ORDER.index(f))
    extensions = {}
    for f in ordered:
        packages = {p: v for p, v in spec.environments[found[f][0]].packages.items() if p not in FRAMEWORK_PACKAGES}
        if spec.horovod and f in spec.horovod.frameworks and spec.horovod.environment == found[f][0]:
            packages["horovod"] = spec.horovod.version
        extensions[f] = dict(sorted(packages.items()))
    return ImageFrameworks(
        name=spec.name,
        frameworks={f: found[f][1] for f in ordered},
        bin_dirs={f: f"{ENVS}/{found[f][0]}/bin" for f in ordered if found[f][0] != "main"},
        extensions=extensions,
    )


def image_specs() -> dict[str, ImageSpec]:
    """Every image spec hpcdl ships, in the order images.yaml lists them."""
    return _specs(IMAGES_YAML)


@lru_cache(maxsize=4)
def _specs(path: Path | str) -> dict[str, ImageSpec]:
    return load_images(path)


@lru_cache(maxsize=4)
def load_image_table(path: Path | str = IMAGES_YAML) -> dict[str, ImageFrameworks]:
    """Image name -> its frameworks, read from containers/images.yaml (hpcdl.images.spec.IMAGES_YAML:
    the checkout's, which an editable install finds)."""
    return {name: image_frameworks(spec) for name, spec in load_images(path).items()}


def images_table() -> dict[str, ImageFrameworks]:
    return load_image_table(IMAGES_YAML)


# Runtime `none`: the frameworks installed in the prefix (pip install '.[torch,tensorflow]'),
# pinned in pyproject.toml (torch 2.13.0, tensorflow-cpu 2.21.0); one environment, so all on PATH.
NATIVE = ImageFrameworks("native", {"pytorch": "2.13.0", "tensorflow": "2.21.0"})


def image_stem(image: str) -> str:
    """The image name a reference spells: registry/path/volta-cuda:0.1, /sw/images/volta-cuda.sif and a
    build from hpcdl's cache, volta-cuda-<16 hex key>.sif (hpcdl.images.build), all -> volta-cuda."""
    stem = PurePosixPath(str(image)).name.split(":")[0].split(".")[0]
    built = re.fullmatch(r"(.+)-[0-9a-f]{16}", stem)
    if built and built.group(1) in _specs(IMAGES_YAML):
        return built.group(1)
    return stem


def image_spec_named(image: str) -> ImageSpec | None:
    """The spec of the image a user names (--image, defaults.image): by its name or the name of its
    built file; None for an image hpcdl does not know."""
    return _specs(IMAGES_YAML).get(image_stem(image))
