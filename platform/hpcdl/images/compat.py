"""Refuse image specs that cannot work, naming the reason.

Each rule is a small function registered in RULES; `check_image` runs them all on a spec,
`check_site` asks whether an image's MPI can be started by a site's launcher. The facts
behind each rule are cited beside it.
"""

from __future__ import annotations

from typing import Callable

from hpcdl.errors import HpcdlError
from hpcdl.images.spec import ImageSpec, version_tuple
from hpcdl.launchers.mpi import srun_mpi_plugin
from hpcdl.sites.schema import Site

ImageRule = Callable[[ImageSpec], "str | None"]
RULES: dict[str, ImageRule] = {}


def rule(name: str):
    def add(fn: ImageRule) -> ImageRule:
        RULES[name] = fn
        return fn

    return add


@rule("cuda-arch")
def cuda_13_cannot_target_volta(spec: ImageSpec) -> str | None:
    # CUDA 13.0 release notes: offline compilation and library support for Maxwell, Pascal
    # and Volta (compute capability < 7.5) were removed; stay on CUDA 12.x (<= 12.9) for them.
    if not spec.cuda or spec.cuda.major < 13:
        return None
    old = [a for a in spec.cuda.gpu_archs if int(a[3:]) < 75]
    if old:
        return (f"cuda.version {spec.cuda.version} cannot target {', '.join(old)}: CUDA 13 removed "
                "support for compute capability < 7.5 (Volta sm_70 and older); use CUDA 12.x (<= 12.9)")
    return None


@rule("cudnn-arch")
def cudnn_911_dropped_volta(spec: ImageSpec) -> str | None:
    # cuDNN 9.11 dropped sm_70 (Quansight/open-gpu-server#69, citing conda-forge)
    if not (spec.cuda and spec.cuda.cudnn) or version_tuple(spec.cuda.cudnn)[:2] < (9, 11):
        return None
    if any(int(a[3:]) < 75 for a in spec.cuda.gpu_archs):
        return f"cuda.cudnn {spec.cuda.cudnn} has no sm_70 kernels (cuDNN 9.11 dropped Volta); pin cuDNN < 9.11"
    return None


@rule("horovod-tensorflow")
def horovod_0281_predates_tf_216(spec: ImageSpec) -> str | None:
    # Horovod 0.28.1 (2023) builds against TF <= 2.15; TF 2.16 brought Keras 3 and XLA headers
    # that need highwayhash, which its TensorFlow target fails to compile (frameworks.md, sec. 4).
    hvd = spec.horovod
    if not hvd or "tensorflow" not in hvd.frameworks or version_tuple(hvd.version) > (0, 28, 1):
        return None
    for env_name, tf in spec.pinned("tensorflow") + spec.pinned("tensorflow-cpu"):
        if env_name == hvd.environment and version_tuple(tf) >= (2, 16):
            return (f"horovod {hvd.version} cannot be built for tensorflow {tf} (environment {env_name}): "
                    "Horovod 0.28.1 supports TensorFlow < 2.16; build Horovod for pytorch only or pin TF <= 2.15")
    return None


@rule("ipex-torch")
def ipex_needs_its_own_torch(spec: ImageSpec) -> str | None:
    # intel-extension-for-pytorch checks at import time that torch's major.minor equals its own
    # and exits otherwise; its wheel metadata does not pin torch (frameworks.md, sec. 6).
    for env_name, env in spec.environments.items():
        ipex = env.version_of("intel-extension-for-pytorch")
        if not ipex:
            continue
        torch = env.version_of("torch")
        if not torch or version_tuple(torch)[:2] != version_tuple(ipex)[:2]:
            want = ".".join(map(str, version_tuple(ipex)[:2]))
            return (f"environments.{env_name}: intel-extension-for-pytorch {ipex} needs torch {want}.*, "
                    f"the environment has torch {torch or '(none)'}")
    return None


@rule("mxnet-numpy")
def mxnet_19_needs_old_numpy(spec: ImageSpec) -> str | None:
    # MXNet 1.9 uses np.bool, removed in numpy 1.24; its metadata allows numpy < 2, so pip picks
    # 1.26 and `import mxnet` fails (frameworks.md, sec. 5). The pin must be explicit.
    for env_name, env in spec.environments.items():
        mx = env.version_of("mxnet")
        if not mx or version_tuple(mx)[:1] != (1,):
            continue
        numpy = env.version_of("numpy")
        if not numpy or version_tuple(numpy) >= (1, 24):
            return (f"environments.{env_name}: mxnet {mx} needs numpy < 1.24 in the same environment "
                    f"(it uses np.bool), the environment has numpy {numpy or '(unpinned, pip picks >= 1.24)'}")
    return None


@rule("horovod-nccl")
def horovod_nccl_needs_cuda_and_nccl(spec: ImageSpec) -> str | None:
    if spec.horovod and spec.horovod.nccl and not (spec.cuda and spec.nccl):
        return "horovod.nccl needs cuda and nccl in the image"
    if spec.horovod and spec.horovod.environment not in spec.environments:
        return f"horovod.environment {spec.horovod.environment!r} is not one of the image's environments"
    if spec.nccl and not spec.cuda:
        return "nccl needs cuda in the image"
    return None


@rule("gpu-stack")
def one_gpu_stack(spec: ImageSpec) -> str | None:
    if spec.cuda and spec.rocm:
        return "cuda and rocm: an image is built for NVIDIA or for AMD GPUs, not both"
    return None


@rule("net-plugin")
def net_plugin_needs_gpus_and_libfabric(spec: ImageSpec) -> str | None:
    # aws-ofi-nccl is built against libfabric and CUDA or ROCm (its configure: --with-libfabric,
    # --with-cuda / --with-rocm); the image builds libfabric only for mpi.fabric slingshot/omnipath
    if not spec.net_plugin:
        return None
    if not spec.gpu:
        return "net_plugin: the NCCL/RCCL network plugin needs cuda or rocm in the image"
    if spec.mpi.fabric not in ("slingshot", "omnipath") or spec.mpi.source != "build":
        return (f"net_plugin: aws-ofi-nccl is built against the image's libfabric, which mpi.fabric "
                f"{spec.mpi.fabric} does not build; use mpi.fabric: slingshot")
    return None


@rule("openmpi-pmi2")
def openmpi_5_has_no_pmi2(spec: ImageSpec) -> str | None:
    # Open MPI 5 removed its PMI-1/PMI-2 components; it starts only through PMIx.
    if spec.mpi.flavour == "openmpi" and version_tuple(spec.mpi.version) >= (5,):
        if spec.mpi.pmi2:
            return f"mpi.pmi2: Open MPI {spec.mpi.version} cannot use Slurm PMI2 (removed in Open MPI 5); set pmi2: false"
        if not spec.mpi.pmix:
            return f"mpi.pmix: Open MPI {spec.mpi.version} needs an external PMIx"
    return None


def image_problems(spec: ImageSpec) -> list[str]:
    return [msg for fn in RULES.values() if (msg := fn(spec))]


def check_image(spec: ImageSpec) -> None:
    problems = image_problems(spec)
    if problems:
        raise HpcdlError(f"image {spec.name}: " + "; ".join(problems))


# ---- image MPI x site launcher ------------------------------------------------------------

#: MPI flavours a site can name, by the ABI family their libmpi belongs to. MPICH, Cray MPICH,
#: Intel MPI and MVAPICH2 keep the MPICH ABI (the 2014 MPICH ABI initiative, Shifter docs).
SITE_ABI = {"openmpi": "openmpi", "spectrum-mpi": "openmpi", "mpich": "mpich", "cray-mpich": "mpich",
            "mvapich2": "mpich", "intel-mpi": "mpich", "parastation-mpi": "mpich"}


def launcher_needs(site: Site) -> tuple[str | None, str | None, str]:
    """(ABI family, PMI, how) the site's launcher and MPI expect of a container's MPI; `how` is a
    noun phrase naming the way ranks start ("srun --mpi=pmix"), for messages."""
    abi = SITE_ABI.get(site.mpi)
    if site.mpi == "cray-mpich" or site.launcher == "aprun":
        # Cray sites swap their own libmpi into the image at run time (Shifter/podman-hpc
        # mpich module, ARCHER2 Singularity guide): the image must be MPICH ABI.
        return "mpich", "pmi2", "Cray MPICH swapped into the image at run time"
    if site.launcher == "srun":
        # the srun launcher asks for --mpi=pmix for Open MPI, Slurm's pmi2 otherwise, unless the
        # site's launch.args name their own --mpi= (launchers/mpi.py)
        pmi = srun_mpi_plugin(site)
        if pmi is None and site.launch.srun_mpi != "default":
            pmi = "pmi2"  # Slurm's own default plugin for the MPICH family
        how = f"srun --mpi={pmi}" if pmi else "srun with the site's Slurm MpiDefault (launch.srun_mpi: default)"
        if abi == "mpich":
            # an Intel MPI, MVAPICH or ParaStation site reaches its fabric through its own libmpi,
            # bound into the image in place of the image's (the hybrid model): MPICH ABI only
            return abi, pmi, f"{how} and the host's {site.mpi} bound in (hybrid model)"
        return None, pmi, how
    if site.launcher == "jsrun":
        return "openmpi", "pmix", "jsrun (Spectrum MPI's PMIx)"
    if site.launcher == "mpirun":
        return abi, "pmix" if abi == "openmpi" else None, f"the host's {site.mpi} mpirun (hybrid model)"
    if site.launcher in ("mpiexec", "ibrun", "pals"):
        return abi, None, f"{site.launcher} of the host's {site.mpi} (hybrid model)"
    return None, None, f"launcher {site.launcher}"


# ---- image architecture x site hardware -----------------------------------------------------

#: CPU targets whose code only AVX-512 CPUs run; -march=knl adds AVX-512ER/PF, which only Xeon Phi has
AVX512_TARGETS = ("knl", "skylake", "cascadelake", "icelake", "sapphirerapids", "zen4", "zen5")

#: x86 CPUs older than the x86-64-v3 level (no AVX2/FMA/BMI2): Intel before Haswell, AMD before
#: Excavator; a node named only "x86_64" is taken at its word as unknown, so not refused
BELOW_X86_64_V3 = ("x86_64_v2", "core2", "nehalem", "westmere", "sandybridge", "ivybridge", "bulldozer", "piledriver",
                   "steamroller", "k10", "nocona")

#: compute capability of NVIDIA GPU models, by a word of the model name (NVIDIA CUDA GPUs list)
#: (longer names first: "A100" before "A10")
NVIDIA_SM = (("GH200", "sm_90"), ("H200", "sm_90"), ("H100", "sm_90"), ("L40", "sm_89"), ("L4", "sm_89"),
             ("A100", "sm_80"), ("A30", "sm_80"), ("A40", "sm_86"), ("A10", "sm_86"), ("T4", "sm_75"),
             ("V100", "sm_70"), ("P100", "sm_60"), ("GB200", "sm_100"), ("B200", "sm_100"))


def cpu_family(target: str) -> str:
    """The instruction set a target belongs to: what `uname -m` says on such a node."""
    t = target.lower()
    if t.startswith(("ppc64", "power")):
        return "ppc64le"
    if t.startswith(("aarch64", "arm", "neoverse", "a64fx", "graviton", "thunderx")):
        return "aarch64"
    return "x86_64"


def gpu_sm(model: str) -> str | None:
    upper = model.upper()
    return next((sm for word, sm in NVIDIA_SM if word in upper), None)


#: AMD GPU architecture by a word of the model name (ROCm "GPU architecture specs" table);
#: an MI250X GCD is gfx90a, MI300A/MI300X gfx942
AMD_GFX = (("MI300", "gfx942"), ("MI325", "gfx942"), ("MI250", "gfx90a"), ("MI210", "gfx90a"),
           ("MI100", "gfx908"), ("MI50", "gfx906"), ("MI60", "gfx906"), ("MI355", "gfx950"), ("MI350", "gfx950"))


def gpu_gfx(model: str) -> str | None:
    upper = model.upper()
    return next((gfx for word, gfx in AMD_GFX if word in upper), None)


def _runs_sass(built: tuple[str, ...], sm: str) -> bool:
    """CUDA machine code for sm_XY runs on GPUs of the same major version and minor >= Y."""
    major, minor = divmod(int(sm[3:]), 10)
    return any(divmod(int(a[3:]), 10)[0] == major and divmod(int(a[3:]), 10)[1] <= minor for a in built)


#: the oldest driver each CUDA major version runs on under minor-version compatibility (NVIDIA,
#: "CUDA Compatibility", Minor Version Compatibility, Table 1: CUDA 11.x >= 450, 12.x >= 525,
#: 13.x >= 580; https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
#: An older driver fails at the first CUDA call ("driver version is insufficient").
CUDA_DRIVER_FLOOR = {11: 450, 12: 525, 13: 580}


def cuda_driver_floor(spec: ImageSpec) -> int | None:
    """The oldest NVIDIA driver branch (R525, R580) the image's CUDA runs on; None without CUDA."""
    return CUDA_DRIVER_FLOOR.get(spec.cuda.major) if spec.cuda else None


def hardware_problems(spec: ImageSpec, site: Site, kind: str | None = None) -> list[str]:
    """Why the image cannot run on the site's node kind (its default where `kind` is None): its CPU
    family and ISA level, its GPUs (none, another vendor, another architecture, an old driver).
    An x86_64 image cannot start on POWER9 (Summit, Lassen); CUDA code built for sm_90 does not run
    on a V100 (sm_70); a CUDA 13 image needs an R580 driver."""
    kind, node = site.node_kind(kind)
    where = f"site {site.name} ({kind}: {node.cpu_model or node.cpu_target})"
    image_family, node_family = spec.arch, cpu_family(node.cpu_target)
    if image_family != node_family:
        return [f"the image is built for {image_family} ({spec.cpu_target}) but {where} is {node_family}"]
    problems = []
    if spec.cpu_target == "knl" and node.cpu_target != "knl":
        problems.append(f"the image is compiled with -march=knl (AVX-512ER/PF, Xeon Phi only) but {where} is not a KNL")
    elif spec.cpu_target == "x86_64_v3" and node.cpu_target in BELOW_X86_64_V3:
        problems.append(f"the image is compiled for x86-64-v3 (AVX2, FMA) but {where} ({node.cpu_target}) lacks it")
    elif spec.cpu_target == "skylake_avx512" and not node.cpu_target.startswith(AVX512_TARGETS[1:] + ("x86_64_v4",)):
        problems.append(f"the image is compiled for AVX-512 (skylake_avx512) but {where} lacks it")
    elif spec.cpu_target == "neoverse_v2" and node.cpu_target not in ("neoverse_v2", "grace"):
        problems.append(f"the image is compiled for Neoverse V2 (Grace) but {where} is {node.cpu_target}")
    if spec.gpu and not node.gpus:
        stack = "CUDA" if spec.cuda else "ROCm"
        problems.append(f"the image is built for {stack} GPUs but {where} has none: a CPU image serves it")
        return problems
    if not node.gpus or not spec.gpu:
        return problems
    gpu = node.gpus[0]
    if spec.rocm is not None:
        if gpu.vendor != "amd":
            problems.append(f"the image is built with ROCm but {where} has {gpu.vendor.upper()} GPUs ({gpu.model})")
            return problems
        # ROCm code objects are built per gfx target and run only on that one (no PTX-like fallback)
        gfx = gpu_gfx(gpu.model)
        if gfx and gfx not in spec.rocm.gpu_archs:
            problems.append(f"the image's ROCm code is built for {', '.join(spec.rocm.gpu_archs)} but {where} has "
                            f"{gpu.model} ({gfx})")
        return problems
    if gpu.vendor != "nvidia":
        problems.append(f"the image is built with CUDA but {where} has {gpu.vendor.upper()} GPUs ({gpu.model})")
        return problems
    sm = gpu_sm(gpu.model)
    if sm and not _runs_sass(spec.cuda.gpu_archs, sm):
        problems.append(f"the image's CUDA code is built for {', '.join(spec.cuda.gpu_archs)} but {where} has "
                        f"{gpu.model} ({sm})")
    floor = cuda_driver_floor(spec)
    if floor and node.gpu_driver and version_tuple(node.gpu_driver)[0] < floor:
        problems.append(f"the image's CUDA {spec.cuda.version} needs an NVIDIA driver >= {floor} (minor-version "
                        f"compatibility) but {where} runs driver {node.gpu_driver}")
    # a driver runs the CUDA it reports and, by minor-version compatibility, any later minor of the same
    # major; a newer major needs a newer driver (nvidia-smi's "CUDA Version: 12.4" runs no CUDA 13 image)
    if node.gpu_driver_cuda and spec.cuda.major > version_tuple(node.gpu_driver_cuda)[0]:
        problems.append(f"the image's CUDA {spec.cuda.version} needs a driver of CUDA {spec.cuda.major} or newer but "
                        f"{where} runs a driver of CUDA {node.gpu_driver_cuda}")
    return problems


def mpi_problems(spec: ImageSpec, site: Site) -> list[str]:
    """Why the site's launcher cannot start, or its MPI cannot stand in for, the image's MPI."""
    abi, pmi, how = launcher_needs(site)
    problems = []
    if abi and spec.mpi.abi != abi:
        problems.append(f"the image's MPI is {spec.mpi.flavour} ({spec.mpi.abi} ABI) but site {site.name} runs "
                        f"ranks through {how}, which needs the {abi} ABI")
    if pmi and pmi not in spec.mpi.pmis:
        problems.append(f"the image's {spec.mpi.flavour} {spec.mpi.version} is built without {pmi.upper()} "
                        f"but site {site.name} starts ranks through {pmi.upper()} ({how})")
    # Open MPI keeps its ABI only within a major version (open-mpi/ompi wiki, "Container
    # Versioning"), and the host's mpirun (ORTE in 4, PRRTE in 5) must speak to the image's
    # library; Apptainer's MPI guide: the container's MPI "must be compatible with the version of
    # MPI available on the host"
    host = version_tuple(site.mpi_version or "")
    if (spec.mpi.flavour == "openmpi" and SITE_ABI.get(site.mpi) == "openmpi" and host
            and site.launcher in ("mpirun", "mpiexec", "jsrun")
            and version_tuple(spec.mpi.version)[0] != host[0]):
        problems.append(f"the image's Open MPI {spec.mpi.version} is another major version than site {site.name}'s "
                        f"{site.mpi} {site.mpi_version}, whose {site.launcher} starts it (Open MPI keeps its ABI "
                        "only within a major version)")
    return problems


#: the fabrics an image's MPI stack is built for (images.spec Fabric) that reach only their own kind of
#: port: UCX over verbs for InfiniBand (the image's OFED), PSM2 for Omni-Path, libfabric's cxi provider (the
#: site's own libfabric, swapped in at run time) for Slingshot. An `ethernet` image speaks TCP everywhere.
FABRIC_PORTS = ("infiniband", "omnipath", "slingshot")


def fabric_mismatch(spec: ImageSpec, site: Site, kind: str | None = None) -> str | None:
    """Why the image's MPI cannot use the node kind's network ports, or None: an image built for one fabric
    has none of the user-space drivers of another (a Slingshot image carries libfabric and the libfabric NCCL
    plugin but no verbs; an InfiniBand image UCX and OFED but no cxi provider), so between nodes its MPI falls
    back to TCP sockets. It still runs, so compat does not refuse it; the runtime decision takes an image
    built for the node's fabric before it. A node that names no such port (or only Ethernet) fits any image."""
    kind, node = site.node_kind(kind)
    ports = sorted({n.kind for n in node.nics if n.kind in FABRIC_PORTS})
    if spec.mpi.fabric not in FABRIC_PORTS or not ports or spec.mpi.fabric in ports:
        return None
    return (f"the image's MPI is built for {spec.mpi.fabric} but site {site.name} ({kind}) reaches other nodes "
            f"over {', '.join(ports)}")


def site_problems(spec: ImageSpec, site: Site, kind: str | None = None) -> list[str]:
    """Why the image cannot run on one node kind of the site (its default kind where None):
    hardware (CPU family and ISA, GPU vendor, architecture, driver) and MPI (ABI family, PMI,
    Open MPI major version). Empty: nothing known stops it."""
    return hardware_problems(spec, site, kind) + mpi_problems(spec, site)


def compat(spec: ImageSpec, site: Site | None = None, kind: str | None = None) -> list[str]:
    """Every reason, one sentence each, why `spec` cannot serve node kind `kind` of `site` (the
    site's default kind where None), or cannot be built at all: the image's own rules (RULES)
    and, given a site, site_problems. An empty list means the image serves that node kind.

    This is the question the runtime authority asks for each node kind it plans: call it for
    each candidate image and take one whose list is empty, or refuse with the reasons. It reads
    only the spec and the profile (no files, no network), so it is cheap to call in a loop.
    """
    return image_problems(spec) + (site_problems(spec, site, kind) if site is not None else [])


def check_site(spec: ImageSpec, site: Site, kind: str | None = None) -> None:
    problems = site_problems(spec, site, kind)
    if problems:
        raise HpcdlError(f"image {spec.name} on site {site.name}: " + "; ".join(problems))
