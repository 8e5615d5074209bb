"""The image-spec schema: what goes into one container image, as data.

containers/images.yaml holds one entry per image. Unknown keys are refused, so a typo is an
error rather than a setting silently left out of an image. What can be built together is
decided in compat.py; how it is built is in generate.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hpcdl.errors import HpcdlError, validation_message

# The specs ship inside the package (a plain `pip install` lists images and renders modules);
# containers/images.yaml in a checkout is a link to this file.
IMAGES_YAML = Path(__file__).resolve().parent / "images.yaml"

# archspec-style names; the first three x86_64 levels are the psABI's (x86-64, -v3 = AVX2/FMA,
# skylake_avx512 = AVX-512F/CD/BW/DQ/VL, the x86-64-v4 set); neoverse_v2 is Grace (GH200)
CpuTarget = Literal["x86_64", "x86_64_v3", "knl", "skylake_avx512", "ppc64le", "aarch64", "neoverse_v2"]
Arch = Literal["x86_64", "aarch64", "ppc64le"]
#: the architecture (`uname -m`) each CPU target's code runs on
TARGET_ARCH = {"x86_64": "x86_64", "x86_64_v3": "x86_64", "knl": "x86_64", "skylake_avx512": "x86_64",
               "ppc64le": "ppc64le", "aarch64": "aarch64", "neoverse_v2": "aarch64"}

#: (Python, glibc) of the base images' distributions: the Python the image's venvs run and the
#: manylinux level its wheels may have (Ubuntu 22.04: python3 3.10, glibc 2.35; Ubuntu 24.04:
#: 3.12, 2.39; Debian 12: 3.11, 2.36; Rocky/RHEL 9: 3.9, 2.34)
DISTRO_PYTHON = {"ubuntu22.04": ("3.10", "2.35"), "ubuntu24.04": ("3.12", "2.39"), "debian12": ("3.11", "2.36"),
                 "rockylinux9": ("3.9", "2.34")}
# slingshot: HPE Cray EX (Slingshot 11); MPICH and the NCCL/RCCL plugin over libfabric
Fabric = Literal["infiniband", "omnipath", "slingshot", "ethernet"]
MpiFlavour = Literal["openmpi", "mpich"]

_NAME = r"^[a-z0-9][a-z0-9._-]*$"
_VERSION = r"^[0-9][0-9A-Za-z.+-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric parts of a version: '2.8.0+cpu' -> (2, 8, 0), '12.6' -> (12, 6)."""
    parts = []
    for piece in str(version).replace("-", ".").replace("+", ".").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def _arch_names(archs: tuple[str, ...], prefix: str, rest_ok, what: str) -> tuple[str, ...]:
    """Each name is `prefix` followed by what `rest_ok` accepts (sm_90, gfx90a)."""
    for arch in archs:
        rest = arch[len(prefix):]
        if not (arch.startswith(prefix) and rest and rest_ok(rest)):
            raise ValueError(f"{arch!r} is not {what}")
    return archs


class Cuda(_Strict):
    version: str = Field(pattern=_VERSION, description="CUDA toolkit major.minor, e.g. 12.6")
    cudnn: str | None = Field(default=None, pattern=_VERSION, description="cuDNN pinned through pip")
    gpu_archs: tuple[str, ...] = Field(min_length=1, description="sm_70, sm_80, sm_90 ...")

    @field_validator("gpu_archs")
    @classmethod
    def _sm_names(cls, archs: tuple[str, ...]) -> tuple[str, ...]:
        return _arch_names(archs, "sm_", str.isdigit, "a GPU architecture like sm_70")

    @property
    def major(self) -> int:
        return version_tuple(self.version)[0]

    @property
    def compute_capabilities(self) -> tuple[str, ...]:
        """'sm_70' -> '7.0': the spelling TORCH_CUDA_ARCH_LIST and torch.cuda use."""
        return tuple(f"{a[3:-1]}.{a[-1]}" for a in self.gpu_archs)


class Rocm(_Strict):
    version: str = Field(pattern=_VERSION, description="ROCm major.minor, e.g. 6.4")
    gpu_archs: tuple[str, ...] = Field(min_length=1, description="gfx90a (MI250X), gfx942 (MI300) ...")

    @field_validator("gpu_archs")
    @classmethod
    def _gfx_names(cls, archs: tuple[str, ...]) -> tuple[str, ...]:
        return _arch_names(archs, "gfx", str.isalnum, "an AMD GPU architecture like gfx90a")


class NetPlugin(_Strict):
    """The libfabric NCCL/RCCL network plugin (aws-ofi-nccl; built with --with-rocm it is RCCL's,
    librccl-net.so): without it NCCL and RCCL cross Slingshot over TCP sockets."""

    version: str = Field(pattern=_VERSION, description="aws-ofi-nccl release, e.g. 1.19.2")
    prefix: str = Field(default="/opt/aws-ofi-nccl", pattern=r"^/[A-Za-z0-9._/-]+$")


class Mpi(_Strict):
    flavour: MpiFlavour = "openmpi"
    version: str = Field(pattern=_VERSION)
    fabric: Fabric = "infiniband"
    ucx: str | None = Field(default=None, pattern=_VERSION, description="UCX version (InfiniBand)")
    pmix: str | None = Field(default=None, pattern=_VERSION, description="PMIx the MPI is built against")
    pmi2: bool = Field(default=True, description="build Slurm's PMI2 library in, for srun --mpi=pmi2")
    libfabric: str = Field(default="1.22.0", pattern=_VERSION,
                           description="libfabric (Omni-Path: PSM2 provider; Slingshot: the site's own replaces it at run time)")
    source: Literal["build", "distro"] = Field(
        default="build", description="build: from source with hpccm's block; distro: the base distribution's "
        "packages (the same build as a host running that distribution, so the host's srun starts its ranks)")

    @property
    def abi(self) -> str:
        """The ABI family a host MPI swapped in at run time must share."""
        return "mpich" if self.flavour == "mpich" else "openmpi"

    @property
    def pmis(self) -> tuple[str, ...]:
        """Process-management interfaces this MPI can be started through."""
        speaks = []
        if self.pmix:
            speaks.append("pmix")
        if self.pmi2 or self.flavour == "mpich":
            speaks.append("pmi2")
        if self.flavour == "mpich":
            speaks.append("pmi1")  # Hydra and Cray PMI speak the simple PMI wire protocol
        return tuple(speaks)


class Environment(_Strict):
    """One Python virtual environment at /opt/envs/NAME: packages pinned to exact versions."""

    packages: dict[str, str] = Field(min_length=1)
    index_url: str | None = Field(default=None, description="extra index, e.g. PyTorch's cu126 wheels")
    extras: dict[str, str] = Field(default_factory=dict, description="package -> pip extra, e.g. and-cuda")
    local_wheels: bool = Field(default=False, description="pip also looks in the build machine's wheel folder "
                               "(pip's find-links), bound into the build at /var/tmp/wheels")

    @field_validator("packages")
    @classmethod
    def _exact_pins(cls, packages: dict[str, str]) -> dict[str, str]:
        for name, version in packages.items():
            if not str(version)[:1].isdigit():
                raise ValueError(f"{name}: pin an exact version, got {version!r}")
        return {name.lower(): str(version) for name, version in packages.items()}

    def version_of(self, package: str) -> str | None:
        return self.packages.get(package.lower())

    def pip_requirements(self) -> list[str]:
        reqs = []
        for name, version in self.packages.items():
            extra = f"[{self.extras[name]}]" if name in self.extras else ""
            reqs.append(f"{name}{extra}=={version}")
        return reqs


class Horovod(_Strict):
    version: str = Field(pattern=_VERSION)
    frameworks: tuple[Literal["pytorch", "tensorflow", "mxnet"], ...] = ("pytorch",)
    nccl: bool = False
    environment: str = Field(default="main", description="the environment Horovod is built into")


class Bootstrap(_Strict):
    """A base made without a registry: a Debian root file system from the Debian mirror, which
    the builder imports under the image's base_image name (Charliecloud: `ch-image import`)."""

    tool: Literal["mmdebstrap"] = "mmdebstrap"
    suite: str = Field(default="bookworm", pattern=r"^[a-z]+$")
    variant: Literal["minbase", "essential", "apt", "required", "important", "standard"] = "minbase"
    mirror: str = Field(default="http://deb.debian.org/debian", pattern=r"^https?://[A-Za-z0-9._/:-]+$")


class ImageSpec(_Strict):
    name: str = Field(pattern=_NAME)
    description: str
    base_image: str = Field(pattern=r"^[a-z0-9][a-z0-9._/:-]*$")
    bootstrap: Bootstrap | None = Field(default=None, description="make base_image locally where no registry is reachable")
    arch: Arch = Field(default="x86_64", description="the machine architecture the image is for (uname -m)")
    cpu_target: CpuTarget = "x86_64"
    cuda: Cuda | None = None
    rocm: Rocm | None = Field(default=None, description="AMD GPUs: ROCm, with RCCL from the framework wheels")
    nccl: str | None = Field(default=None, pattern=_VERSION)
    net_plugin: NetPlugin | None = Field(
        default=None, description="aws-ofi-nccl built into the image against its libfabric (mpi.fabric: slingshot)")
    mpi: Mpi
    environments: dict[str, Environment]
    horovod: Horovod | None = None
    env: dict[str, str] = Field(default_factory=dict, description="tuned defaults in %environment")
    hpcdl: str = Field(default="source", description="'source' (this checkout, via %files) or a version")
    serves: tuple[str, ...] = Field(
        default=(), description="the sites (SITE or SITE:KIND) the image is meant for; `images compat` must accept each")

    @field_validator("environments")
    @classmethod
    def _has_main(cls, envs: dict[str, Environment]) -> dict[str, Environment]:
        if "main" not in envs:
            raise ValueError("an image needs a 'main' environment (the one on PATH)")
        for name in envs:
            if not name.replace("-", "").isalnum():
                raise ValueError(f"environment name {name!r} must be letters, digits and dashes")
        return envs

    @model_validator(mode="after")
    def _target_fits_arch(self) -> "ImageSpec":
        if TARGET_ARCH[self.cpu_target] != self.arch:
            raise ValueError(f"cpu_target {self.cpu_target} is {TARGET_ARCH[self.cpu_target]} code, "
                             f"but arch is {self.arch}")
        return self

    @property
    def distro(self) -> str | None:
        """The base image's distribution and release, read from its name: ubuntu:22.04,
        nvidia/cuda:12.6.3-devel-ubuntu22.04 and rocm/dev-ubuntu-22.04:6.4.2 are all ubuntu22.04."""
        name = self.base_image.replace("-", "").replace(":", "")
        return next((distro for distro in DISTRO_PYTHON if distro in name), None)

    @property
    def python(self) -> tuple[str, str] | None:
        """(Python version, glibc version) of the base image, None where its name does not say."""
        return DISTRO_PYTHON.get(self.distro) if self.distro else None

    @property
    def gpu(self) -> bool:
        return self.cuda is not None or self.rocm is not None

    @property
    def gpu_archs(self) -> tuple[str, ...]:
        return self.cuda.gpu_archs if self.cuda else self.rocm.gpu_archs if self.rocm else ()

    @property
    def net_plugin_library(self) -> str | None:
        """The file NCCL_NET_PLUGIN names: RCCL's build of the plugin is librccl-net.so (OLCF
        "PyTorch on Frontier"), NCCL's libnccl-net.so."""
        if not self.net_plugin:
            return None
        return f"{self.net_plugin.prefix}/lib/{'librccl-net.so' if self.rocm else 'libnccl-net.so'}"

    def pinned(self, package: str) -> list[tuple[str, str]]:
        """(environment, version) for each environment that pins `package`."""
        return [(n, e.version_of(package)) for n, e in self.environments.items() if e.version_of(package)]


def load_images(path: Path | str = IMAGES_YAML) -> dict[str, ImageSpec]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise HpcdlError(f"{path}: cannot read image specs: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise HpcdlError(f"{path}: images: expected a mapping of image name -> spec")
    specs = {}
    for name, body in doc["images"].items():
        if not isinstance(body, dict):
            raise HpcdlError(f"{path}: images.{name}: expected a mapping")
        try:
            specs[name] = ImageSpec(name=name, **body)
        except ValidationError as exc:
            raise HpcdlError(validation_message(exc, f"{path}: images.{name}")) from None
    return specs


def load_image(name: str, path: Path | str = IMAGES_YAML) -> ImageSpec:
    specs = load_images(path)
    if name not in specs:
        raise HpcdlError(f"image {name!r} is not in {path}; known: {', '.join(sorted(specs))}")
    return specs[name]
