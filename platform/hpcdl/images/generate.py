"""Render an image spec to a Singularity definition and a Dockerfile.

The MPI stack (OFED, UCX, PMIx, Slurm PMI2, libfabric, Open MPI or MPICH), NCCL and Python
come from hpccm's building blocks, which know each component's build and its distro
packages; the steps no block covers (virtual environments, Horovod's C++17 patch, hpcdl
itself, %help and %test) are jinja2 templates in images/templates/. One spec, two outputs.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import hpccm
import jinja2
from hpccm.building_blocks import generic_autotools, mpich, nccl, ofed, openmpi, packages, pmix, python, slurm_pmi2, ucx
from hpccm.primitives import baseimage, comment, copy, environment, label, raw, runscript, shell

from hpcdl import __version__
from hpcdl.images.compat import check_image
from hpcdl.images.frameworks import ENVS
from hpcdl.images.spec import ImageSpec, version_tuple
from hpcdl.shell import quote

CONTAINERS = Path(__file__).resolve().parents[3] / "containers"
FORMATS = {"singularity": ".def", "docker": ".Dockerfile"}

# multi-section output (repeated %post/%environment) needs Singularity >= 3.1 (hpccm #95);
# 3.2 also enables multi-stage should an image grow a runtime stage (hpccm #193)
SINGULARITY_VERSION = "3.10"
HPCDL_HOME = "/opt/hpcdl"
# where the build machine's wheel folder is bound for environments with local_wheels
# (ch-image build -b, apptainer build --bind)
WHEELS = "/var/tmp/wheels"
# where the builder binds a wheel of Horovod it has for the image (hpcdl.images.build.horovod_wheels)
HOROVOD_WHEELS = "/var/tmp/horovod-wheels"
# set by the builder (hpcdl images build); a plain `apptainer build` or `podman build` gets these
BUILD_ARGS = {"HPCDL_CREATED": "unknown", "HPCDL_REVISION": "unknown", "HPCDL_SOURCE": "unknown"}

# -march for the code the image compiles itself (Horovod); hpccm passes cpu_target only to
# compiler blocks, so the flag is spelt here. x86_64_v3 is the AVX2 level most Xeons have.
ARCH_FLAGS = {
    "knl": "-march=knl",
    "skylake_avx512": "-march=skylake-avx512",
    "x86_64_v3": "-march=x86-64-v3",
    "x86_64": "-march=x86-64",
    "ppc64le": "-mcpu=power8",
    "aarch64": "-march=armv8-a",
    # Grace (GH200): Neoverse V2, Armv9.0-A with SVE2 (GCC >= 13; Ubuntu 24.04's GCC 13 has it)
    "neoverse_v2": "-mcpu=neoverse-v2",
}

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("hpcdl.images", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=False,
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters["q"] = quote


def _lines(template: str, **context) -> list[str]:
    text = _templates.get_template(template).render(**context)
    return [line for line in text.splitlines() if line.strip()]


def mpi_blocks(spec: ImageSpec) -> list:
    """The fabric, process-management and MPI layers, bottom up."""
    mpi = spec.mpi
    cuda = spec.gpu
    blocks: list = []
    if mpi.source == "distro":
        # the distribution's own build: on a host of the same release (Debian 12: Open MPI 4.1.4
        # with external PMIx 4.2), the host's srun --mpi=pmix starts the image's ranks
        names = {"openmpi": (["openmpi-bin", "libopenmpi-dev"], ["openmpi", "openmpi-devel"]),
                 "mpich": (["mpich", "libmpich-dev"], ["mpich", "mpich-devel"])}[mpi.flavour]
        return [packages(apt=names[0], yum=names[1])]
    with_opts: dict[str, str | bool] = {}
    if mpi.fabric == "infiniband":
        blocks.append(ofed())
        if mpi.ucx:
            blocks.append(ucx(version=mpi.ucx, cuda=cuda, ofed=True, knem=False, xpmem=False, gdrcopy=False))
    elif mpi.fabric == "omnipath":
        # Omni-Path wants PSM2 (or the libfabric provider over it); UCX gains nothing there
        # (easybuild-framework#4560). hpccm has no PSM2 or libfabric block.
        blocks.append(packages(apt=["libpsm2-dev", "libnuma-dev"], yum=["libpsm2-devel", "numactl-devel"]))
        blocks.append(libfabric_block(mpi.libfabric, ["--enable-psm2=yes", "--enable-verbs=no", "--enable-psm3=no"]))
    elif mpi.fabric == "slingshot":
        # Slingshot's provider (cxi) needs HPE's libcxi and driver, which only the machine has: the
        # image builds MPICH and the NCCL/RCCL plugin against upstream libfabric (same soname,
        # libfabric.so.1), and at run time the site puts its own libfabric first (OLCF's
        # apptainer-enable-mpi module, NERSC podman-hpc's mpich and nccl modules bind
        # /opt/cray/libfabric), so both reach the NIC through the host's cxi provider.
        blocks.append(libfabric_block(mpi.libfabric, []))
    if mpi.pmix:
        blocks.append(pmix(version=mpi.pmix))
    if mpi.pmi2 and mpi.flavour == "openmpi":
        blocks.append(slurm_pmi2())
    if mpi.flavour == "openmpi":
        if mpi.fabric == "omnipath":
            with_opts.update(with_psm2=True, with_ofi="/usr/local/libfabric")
        if mpi.pmi2:
            with_opts["with_pmi"] = "/usr/local/slurm-pmi2"
        if mpi.pmix:
            # an external PMIx must share Open MPI's libevent and hwloc, so all three are external
            with_opts.update(with_libevent="/usr", with_hwloc="/usr")
        if version_tuple(mpi.version) >= (5,):
            # Open MPI 5 launches through PRRTE: hpccm's default orterun option is unknown there
            with_opts["configure_opts"] = ["--disable-getpwuid", "--enable-prte-prefix-by-default"]
        blocks.append(openmpi(
            version=mpi.version,
            cuda=cuda,
            infiniband=mpi.fabric == "infiniband",
            ucx="/usr/local/ucx" if mpi.ucx else False,
            pmix="/usr/local/pmix" if mpi.pmix else False,
            with_slurm=True,
            **with_opts,
        ))
    else:
        # MPICH ABI: the library a Cray site (or Intel MPI, MVAPICH2) swaps in at run time
        device = "ch4:ofi" if mpi.fabric in ("omnipath", "slingshot") else "ch4:ucx" if mpi.ucx else "ch4:ofi"
        opts = [f"--with-device={device}", "--disable-fortran"]
        if mpi.fabric in ("omnipath", "slingshot"):
            opts.append("--with-libfabric=/usr/local/libfabric")
        if mpi.ucx:
            opts.append("--with-ucx=/usr/local/ucx")
        blocks.append(mpich(version=mpi.version, configure_opts=opts))
    return blocks


def libfabric_block(version: str, configure_opts: list[str]):
    return generic_autotools(
        url=f"https://github.com/ofiwg/libfabric/releases/download/v{version}/libfabric-{version}.tar.bz2",
        prefix="/usr/local/libfabric",
        configure_opts=configure_opts,
        devel_environment={"PATH": "/usr/local/libfabric/bin:$PATH",
                           "LD_LIBRARY_PATH": "/usr/local/libfabric/lib:$LD_LIBRARY_PATH"},
    )


def net_plugin_block(spec: ImageSpec):
    """aws-ofi-nccl from its release tarball, built against the image's libfabric and CUDA or ROCm.

    The flags are the ones OLCF publishes for Frontier ("PyTorch on Frontier", manual RCCL network
    plugin build: aws-ofi-nccl 1.19.2, `./configure --with-libfabric=... --with-rocm=${ROCM_PATH}`,
    then `ln -s librccl-net.so libnccl-net.so` "that some versions of RCCL need to find the plugin")
    and the ones aws-ofi-nccl's README names (--with-libfabric, --with-cuda, --disable-tests: its
    tests need an MPI launch between hosts). hpccm has no block for it.
    """
    plugin = spec.net_plugin
    opts = ["--with-libfabric=/usr/local/libfabric", "--disable-tests"]
    post: list[str] = []
    if spec.rocm:
        opts.append("--with-rocm=/opt/rocm")
        post.append(f"ln -sf librccl-net.so {plugin.prefix}/lib/libnccl-net.so")
    else:
        opts.append("--with-cuda=/usr/local/cuda")
        # newer releases install libnccl-net-ofi.so; the name NCCL_NET_PLUGIN gives is libnccl-net.so
        lib = f"{plugin.prefix}/lib"
        post.append(f"test -e {lib}/libnccl-net.so || ln -s libnccl-net-ofi.so {lib}/libnccl-net.so")
    return generic_autotools(
        url=f"https://github.com/aws/aws-ofi-nccl/releases/download/v{plugin.version}/aws-ofi-nccl-{plugin.version}.tar.gz",
        prefix=plugin.prefix,
        configure_opts=opts,
        postinstall=post,
    )


def nccl_block(spec: ImageSpec):
    """NCCL built from source for the image's CUDA and GPUs.

    hpccm's package install defaults to cuda='13.2', which cannot drive sm_70 (CUDA 13 dropped
    Volta), so the CUDA version is always passed and only the spec's architectures are compiled.
    """
    gencode = " ".join(f"-gencode=arch=compute_{a[3:]},code={a}" for a in spec.cuda.gpu_archs)
    return nccl(build=True, version=spec.nccl, cuda=spec.cuda.version,
                make_variables={"NVCC_GENCODE": f'"{gencode}"'})


def labels(spec: ImageSpec) -> dict[str, str]:
    out = {"org.hpcdl.image": spec.name, "org.hpcdl.base": spec.base_image,
           "org.hpcdl.arch": spec.arch, "org.hpcdl.cpu_target": spec.cpu_target,
           "org.hpcdl.mpi": f"{spec.mpi.flavour}-{spec.mpi.version}", "org.hpcdl.fabric": spec.mpi.fabric}
    if spec.mpi.ucx:
        out["org.hpcdl.ucx"] = spec.mpi.ucx
    if spec.mpi.pmix:
        out["org.hpcdl.pmix"] = spec.mpi.pmix
    if spec.mpi.fabric in ("omnipath", "slingshot"):
        out["org.hpcdl.libfabric"] = spec.mpi.libfabric
    if spec.cuda:
        out["org.hpcdl.cuda"] = spec.cuda.version
        out["org.hpcdl.gpu_archs"] = ",".join(spec.cuda.gpu_archs)
        if spec.cuda.cudnn:
            out["org.hpcdl.cudnn"] = spec.cuda.cudnn
    if spec.rocm:
        out["org.hpcdl.rocm"] = spec.rocm.version
        out["org.hpcdl.gpu_archs"] = ",".join(spec.rocm.gpu_archs)
    if spec.nccl:
        out["org.hpcdl.nccl"] = spec.nccl
    if spec.net_plugin:
        # what `hpcdl images check` and the plan read: the plugin and the file NCCL_NET_PLUGIN names
        out["org.hpcdl.net_plugin"] = f"aws-ofi-nccl-{spec.net_plugin.version}"
        out["org.hpcdl.net_plugin.library"] = spec.net_plugin_library
    for env_name, env in spec.environments.items():
        for package, version in env.packages.items():
            out[f"org.hpcdl.{env_name}.{package}"] = version
    if spec.horovod:
        # label values stay free of spaces: Dockerfile LABEL lines are not quoted by hpccm
        out["org.hpcdl.horovod"] = spec.horovod.version
        out["org.hpcdl.horovod.frameworks"] = ",".join(spec.horovod.frameworks + (("nccl",) if spec.horovod.nccl else ()))
    # the version hpcdl was built from (the checkout's, for images that copy it in), not "source"
    out["org.hpcdl.hpcdl"] = __version__ if spec.hpcdl == "source" else spec.hpcdl
    out["org.hpcdl.mpi.source"] = spec.mpi.source
    # OCI's standard keys; created, revision and source differ per build, so they are build
    # arguments (Dockerfile ARG, Apptainer %arguments) the builder fills in
    out["org.opencontainers.image.title"] = f"hpcdl-{spec.name}"
    out["org.opencontainers.image.version"] = out["org.hpcdl.hpcdl"]
    return out


def build_arg_labels(container_format: str) -> dict[str, str]:
    ref = (lambda v: "${" + v + "}") if container_format == "docker" else (lambda v: "{{ " + v + " }}")
    return {"org.opencontainers.image.created": ref("HPCDL_CREATED"),
            "org.opencontainers.image.revision": ref("HPCDL_REVISION"),
            "org.opencontainers.image.source": ref("HPCDL_SOURCE")}


LABELS_JSON = "/.singularity.d/labels.json"


def labels_json_step(spec: ImageSpec) -> str:
    """Every label, the per-build ones included, into /.singularity.d/labels.json, where Apptainer
    keeps them (its %labels) and `apptainer inspect` and hpcdl's image check read them. Builders
    from the Dockerfile need it: Charliecloud 0.31 drops LABEL (its issue #781), and podman keeps
    labels only in the image config, which a SquashFS or SIF made from the tree loses."""
    args = {key: value[2:-1] for key, value in build_arg_labels("docker").items()}
    program = ('import json, os, sys; labels = json.loads(sys.argv[1]); '
               'labels.update({k: os.environ.get(v) or "unknown" for k, v in json.loads(sys.argv[2]).items()}); '
               'os.makedirs(os.path.dirname(sys.argv[3]), exist_ok=True); '
               'json.dump(labels, open(sys.argv[3], "w"), indent=2, sort_keys=True)')
    # POSIX quoting (shlex), not bash's $'...': RUN lines run under /bin/sh, which is dash on Debian
    words = [program, json.dumps(labels(spec), sort_keys=True), json.dumps(args, sort_keys=True), LABELS_JSON]
    return "RUN python3 -c " + " ".join(shlex.quote(w) for w in words)


#: Apptainer's run-time files in an image (apptainer/apptainer internal/pkg/build/sources/
#: base_environment.go): it sources /.singularity.d/env/*.sh in order before `exec`, `run` and
#: `shell`, and `run` runs /.singularity.d/runscript. `apptainer build` writes them from the
#: .def's %environment and %runscript; an image built from the Dockerfile (Charliecloud, podman)
#: gets them from this step, so `apptainer exec IMAGE.sif hpcdl ...` finds hpcdl on PATH.
APPTAINER_ENV = "/.singularity.d/env/90-environment.sh"
APPTAINER_RUNSCRIPT = "/.singularity.d/runscript"


def _train_line() -> str:
    train = f'"{ENVS}/${{HPCDL_IMAGE_ENV:-main}}/bin/hpcdl" train'
    return f'cat {HPCDL_HOME}/banner >&2; exec {train} "$@"'


def apptainer_files(spec: ImageSpec) -> dict[str, str]:
    """{path in the image: text} of the environment and runscript Apptainer reads."""
    lines = ["#!/bin/sh", f"# hpcdl image {spec.name}: its environment, as %environment gives it"]
    for key, value in runtime_environment(spec).items():
        # a trailing :$PATH expands when the file is sourced; everything else is quoted inert
        if value.endswith(":$PATH"):
            lines.append(f'export {key}={shlex.quote(value[:-len(":$PATH")])}:"$PATH"')
        else:
            lines.append(f"export {key}={shlex.quote(value)}")
    return {APPTAINER_ENV: "\n".join(lines) + "\n", APPTAINER_RUNSCRIPT: "#!/bin/sh\n" + _train_line() + "\n"}


def apptainer_files_step(spec: ImageSpec) -> str:
    """A Dockerfile RUN line writing apptainer_files (mode 755, as Apptainer's build makes them)."""
    # one line (a Dockerfile instruction ends at the newline), POSIX-quoted for dash's /bin/sh;
    # a second argument names another root, so a test can run the same program on a folder
    program = ('import json, os, sys; root = sys.argv[2] if len(sys.argv) > 2 else "/"; '
               'files = {os.path.join(root, k.lstrip("/")): v for k, v in json.loads(sys.argv[1]).items()}; '
               '[(os.makedirs(os.path.dirname(p), exist_ok=True), open(p, "w").write(t), os.chmod(p, 0o755)) '
               'for p, t in files.items()]')
    return "RUN python3 -c " + " ".join(shlex.quote(w) for w in (program, json.dumps(apptainer_files(spec), sort_keys=True)))


def runtime_environment(spec: ImageSpec) -> dict[str, str]:
    env = {
        "PATH": f"{ENVS}/main/bin:$PATH",
        "HPCDL_IMAGE": spec.name,
    }
    # The fabric's own settings (PSM2_*, UCX_NET_DEVICES, NCCL_IB_HCA, FI_PROVIDER) come from the
    # site's plan at run time: forcing psm2 or ib here would break %test on a build host without them.
    env.update(spec.env)
    return env


def python_environments(spec: ImageSpec, part: str) -> list[str]:
    """part 'pins': the venvs with their pinned packages; 'deps': hpcdl's requirements into each,
    pins held; 'hpcdl': hpcdl itself (the source with --no-deps, or a released version)."""
    return _lines("environments.sh.j2", spec=spec, envs=ENVS, part=part, wheels=WHEELS,
                  cudnn=_cudnn_requirement(spec), hpcdl_home=HPCDL_HOME, build_backend=BUILD_BACKEND,
                  requirements=hpcdl_requirements() if part == "deps" else ())


#: what builds hpcdl's source (pyproject.toml's [build-system] requires, which a test holds this to):
#: written here, not read from pyproject, so an installed hpcdl renders the same definitions
BUILD_BACKEND = "hatchling>=1.26"


#: the extras every image carries (pyproject.toml): the digits the examples train on, the report's plots
IMAGE_EXTRAS = ("digits", "reports")


def hpcdl_requirements() -> tuple[str, ...]:
    """hpcdl's own run-time requirements, as its pyproject.toml names them (the checkout's, which
    the image copies in; an installed hpcdl's metadata where there is no checkout).

    Both sources are normalised the same way (packaging's spelling, sorted by name): an installed
    hpcdl's metadata lists them in another order and spells `pydantic>=2.5,<3` as
    `pydantic<3,>=2.5`, and the same spec must give the same bytes, hence the same cache key.
    """
    pyproject = CONTAINERS.parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text())["project"]
        # an image trains and reports: the digits and the plots come along (IMAGE_EXTRAS)
        found = [*project["dependencies"], *(r for e in IMAGE_EXTRAS for r in project["optional-dependencies"][e])]
    else:
        from importlib.metadata import requires

        from packaging.requirements import Requirement

        # the metadata's markers are quoted as its build backend writes them: evaluate, never match text
        found = [r for r in (requires("hpcdl") or ())
                 if (m := Requirement(r).marker) is None or any(m.evaluate({"extra": e}) for e in IMAGE_EXTRAS)]
    return normalised_requirements(found)


def normalised_requirements(requirements) -> tuple[str, ...]:
    """Each requirement in packaging's canonical spelling (name normalised, specifiers sorted), sorted
    by name; an installed hpcdl's extras carry their `extra == ...` marker, which the image does not need."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    reqs = [Requirement(r) for r in requirements]
    for r in reqs:
        if r.marker is not None and "extra" in str(r.marker):
            r.marker = None
        # the name as PEP 503 spells it: hatchling writes `pyyaml` into the metadata for pyproject's `PyYAML`
        r.name = canonicalize_name(r.name)
    return tuple(str(r) for r in sorted(reqs, key=lambda r: (r.name, str(r))))


def _cudnn_requirement(spec: ImageSpec) -> str | None:
    if not (spec.cuda and spec.cuda.cudnn):
        return None
    return f"nvidia-cudnn-cu{spec.cuda.major}=={spec.cuda.cudnn}"


def horovod_build(spec: ImageSpec) -> list[str]:
    """Horovod into its environment: the build machine's own wheel of it where the builder
    offers one (bound at HOROVOD_WHEELS, see hpcdl.images.build.horovod_wheels) and pip takes
    it, else built from source (the patched release, minutes of compiling)."""
    build = _lines("horovod.sh.j2", spec=spec, hvd=spec.horovod, envs=ENVS,
                   arch_flags=ARCH_FLAGS[spec.cpu_target],
                   cuda_cc=",".join(a[3:] for a in spec.cuda.gpu_archs) if spec.cuda else "")
    pip = quote(f"{ENVS}/{spec.horovod.environment}/bin/pip")
    wheel = f"{HOROVOD_WHEELS}/horovod-{spec.horovod.version}-*.whl"  # a glob: left unquoted, no blanks in it
    return [f'if [ -n "$(ls {wheel} 2>/dev/null)" ] && {pip} install --no-cache-dir {wheel}; then '
            f'echo "Horovod {spec.horovod.version}: the build machine\'s wheel"; else '
            + " && ".join(build) + "; fi"]


def stage(spec: ImageSpec, container_format: str) -> hpccm.Stage:
    check_image(spec)
    hpccm.config.set_container_format(container_format)
    hpccm.config.set_singularity_version(SINGULARITY_VERSION)
    hpccm.config.set_cpu_target(spec.cpu_target if spec.cpu_target != "ppc64le" else "power8")
    s = hpccm.Stage()
    # the architecture is named, never guessed: hpccm would otherwise take the machine rendering
    # the file, and the checked-in definitions would differ between an x86 and an Arm laptop
    base = {"_arch": spec.arch}
    if spec.base_image.startswith("debian"):
        # hpccm knows no Debian; its apt-based Ubuntu 22.04 steps are the ones that fit Debian 12
        base["_distro"] = "ubuntu22"
    elif "ubuntu-22.04" in spec.base_image or "ubuntu-24.04" in spec.base_image:
        # AMD's rocm/dev-ubuntu-XX.04 tags: hpccm reads the distribution only from ubuntu:XX.04 names
        base["_distro"] = "ubuntu24" if "24.04" in spec.base_image else "ubuntu22"
    s += baseimage(image=spec.base_image, **base)
    s += comment(f"hpcdl image {spec.name}: {spec.description}. Generated by `make containers` "
                 "from containers/images.yaml; edit the spec, not this file.")
    s += label(metadata=labels(spec))
    s += raw(singularity="%help\n" + "\n".join(_lines("help.txt.j2", spec=spec)),
             docker="\n".join("# " + line for line in _lines("help.txt.j2", spec=spec)))
    s += python(python2=False, devel=True)
    s += packages(ospackages=["python3-venv", "build-essential", "cmake", "git", "wget", "ca-certificates",
                              "patch", "libnuma-dev", "numactl", "hwloc", "libhwloc-dev", "libevent-dev"])
    for block in mpi_blocks(spec):
        s += block
    if spec.cuda and spec.nccl:
        s += nccl_block(spec)
    if spec.net_plugin:
        s += net_plugin_block(spec)
    s += shell(commands=python_environments(spec, "pins"))
    if spec.horovod:
        s += shell(commands=horovod_build(spec))
    if spec.hpcdl == "source":
        # hpcdl's requirements before its source: a change to the source alone reuses this step
        s += shell(commands=python_environments(spec, "deps"))
    # hpcdl's source last, so a change to it rebuilds only what follows (layer caches).
    # One copy per item with a full destination: Docker's COPY of a folder copies its contents,
    # Singularity's %files the folder itself; naming the destination makes both agree.
    # hpcdl's package data (the image specs, site profiles) goes in with it.
    for item in ("pyproject.toml", "README.md", "platform"):
        s += copy(src=item, dest=f"{HPCDL_HOME}/src/{item}")
    s += shell(commands=python_environments(spec, "hpcdl")
               + _lines("banner.sh.j2", spec=spec, envs=ENVS, hpcdl_home=HPCDL_HOME))
    s += environment(variables=runtime_environment(spec))
    if container_format == "docker":
        s += raw(docker=apptainer_files_step(spec))
    # the per-build labels last: a build argument that changes every build (the time) would
    # otherwise make every later step a miss in ch-image's and Docker's layer caches
    if container_format == "docker":
        s += raw(docker="\n".join(f"ARG {k}={v}" for k, v in BUILD_ARGS.items()))
    else:
        s += raw(singularity="%arguments\n" + "\n".join(f"    {k}={v}" for k, v in BUILD_ARGS.items()))
    s += label(metadata=build_arg_labels(container_format))
    if container_format == "docker":
        s += raw(docker=labels_json_step(spec))
    if container_format == "singularity":
        # one line: a multi-line %runscript reads back (spython) as an opaque script
        s += runscript(commands=[_train_line()], _args=False, _exec=False)
    else:
        # exec form cannot expand HPCDL_IMAGE_ENV; a shell in front does, and passes "$@" on
        s += raw(docker='ENTRYPOINT ["/bin/sh", "-c", ' + json.dumps(_train_line()) + ', "hpcdl"]')
    test = _lines("test.sh.j2", spec=spec, envs=ENVS)
    s += raw(singularity="%test\n" + "\n".join(test),
             docker="# %test (Singularity) runs, and on podman-hpc/Shifter run it by hand:\n"
                    + "\n".join("#   " + line for line in test))
    return s


def render(spec: ImageSpec, container_format: str) -> str:
    if container_format not in FORMATS:
        raise ValueError(f"unknown container format {container_format!r}")
    try:
        text = str(stage(spec, container_format))
    finally:
        hpccm.config.set_container_format("docker")
        hpccm.config.set_cpu_target(None)
    return text.rstrip("\n") + "\n"


def output_paths(name: str, folder: Path = CONTAINERS) -> dict[str, Path]:
    return {fmt: folder / f"{name}{suffix}" for fmt, suffix in FORMATS.items()}
