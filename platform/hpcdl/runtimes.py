"""Container runtimes: one small class each, one verb: the argv that runs a program in the image."""

from __future__ import annotations

from hpcdl.errors import HpcdlError
from hpcdl.launchers.base import LaunchPlan
from hpcdl.registry import Registry
from hpcdl.shell import Expanding, RuntimeExpands, leading_variable, with_braces
from hpcdl.sites.schema import Site


class Runtime:
    name = "base"
    #: the runtime's words are options of srun itself (a SPANK plugin's, or CSCS's --environment), not a command of
    #: their own: they go on srun's option list, so nothing may stand between srun and them, and no command run
    #: outside srun (a module's framework wrapper) can carry them
    srun_options = False

    def command(self, plan: LaunchPlan, site: Site, image: str | None) -> list[str]:
        raise NotImplementedError

    def with_overlays(self, argv: list[str], overlays) -> list[str]:
        """`argv` (this runtime's command) with the centre's overlay images over its image
        (environment.overlays). Only Apptainer and Singularity take them: a profile naming them under another
        runtime is refused when it loads (as its Apptainer-only container.workdir is), so here they are none."""
        return argv

    def files(self, plan: LaunchPlan, site: Site, image: str | None) -> dict[str, str]:
        """Files the job writes before the launch for the runtime to read (name -> text)."""
        return {}

    def binds(self, site: Site) -> list[str]:
        """Host folders the job uses inside the image: scratch and node-local storage, and the
        host library folders the site's environment puts on LD_LIBRARY_PATH (host_library_dirs).

        Their $VARIABLES (Summit's /mnt/bb/$USER) expand in the job, not at render time.
        """
        before, after = host_library_dirs(site)
        paths = (site.filesystems.scratch, site.filesystems.node_local, *before, *after)
        # the folders the centre's runtime binds into every container itself (container.system_binds) need no bind
        system = [b.rstrip("/") or "/" for b in site.container.system_binds]
        return [Expanding(p) for p in dict.fromkeys(p.rstrip("/") or "/" for p in paths if p)
                if not any(p == b or p.startswith(b.rstrip("/") + "/") for b in system)
                and not _system_bound_variable(p, site.container.system_bound_env)]


def _system_bound_variable(path: str, bound: dict[str, str]) -> bool:
    """Whether `path` starts with a variable the centre sets to a folder its runtime mounts by itself
    (container.system_bound_env: Purdue RCAC's $RCAC_SCRATCH, under /scratch), alone or followed by a folder."""
    return leading_variable(path) in bound


#: the library path a site's environment extends with host folders
LIBRARY_PATH = "LD_LIBRARY_PATH"


def host_library_dirs(site: Site) -> tuple[list[str], list[str]]:
    """The host folders the profile puts before and after LD_LIBRARY_PATH (env: LD_LIBRARY_PATH:
    {prepend: [...]}: ALCF's aws-ofi-nccl plugin folder on Polaris). The job exports them on the host;
    a container runtime that does not pass the host's LD_LIBRARY_PATH through (Apptainer resets it
    to /.singularity.d/libs) or whose image sets its own (ch-run --set-env) must bind them and put
    them on the container's library path itself."""
    value = site.env.get(LIBRARY_PATH)
    if value is None or isinstance(value, str):
        return [], []
    return list(value.prepend), list(value.append)


def container_library_path(before: list[str], after: list[str]) -> str | None:
    """LD_LIBRARY_PATH inside the container: the host folders (host_library_dirs) around the container's
    own value, which the runtime expands ($LD_LIBRARY_PATH, inside the container); None without any."""
    if not before and not after:
        return None
    return ":".join([*before, f"${LIBRARY_PATH}", *after])


# How each runtime names an image: a file in the image folder, or a registry tag.
# pyxis takes "a path to a squashfs file" as --container-image (NVIDIA/pyxis wiki, Usage), the enroot image that
# `enroot import -o NAME.sqsh` writes ("Name of the output image file (defaults to "URI.sqsh")", enroot's import.md)
IMAGE_FILE_SUFFIX = {"apptainer": ".sif", "singularity": ".sif", "charliecloud": ".sqfs", "pyxis": ".sqsh"}


def image_dir(site: Site, prefix: str) -> str:
    return site.defaults.image_dir or f"{prefix.rstrip('/')}/images"


def image_reference(site: Site, prefix: str, image_name: str) -> str:
    if site.defaults.image and "/" in site.defaults.image:
        return site.defaults.image  # a full path in the profile wins
    suffix = IMAGE_FILE_SUFFIX.get(site.runtime)
    if suffix is None:  # shifter, podman-hpc: the image is a registry tag the centre pulled
        return f"hpcdl/{image_name}:latest"
    return f"{image_dir(site, prefix)}/{image_name}{suffix}"


runtimes: Registry[Runtime] = Registry("container runtime")


def runtime_for(name: str) -> Runtime:
    return runtimes.get(name)


def _gpu_vendor(plan: LaunchPlan, site: Site) -> str | None:
    node = site.node_kinds[plan.node_kind]
    if not any(r.gpus for r in plan.ranks):
        return None
    return node.gpus[0].vendor


def runtime_modules(plan: LaunchPlan, site: Site) -> list[str]:
    """The runtime modules of this job: the site's, and its GPU ones when the job uses GPUs."""
    return runtime_modules_for(site, bool(_gpu_vendor(plan, site)))


def runtime_modules_for(site: Site, use_gpus: bool) -> list[str]:
    modules = list(site.container.modules)
    if use_gpus:
        gpu = site.container.gpu_modules if site.container.gpu_modules is not None else ("gpu",)
        modules += [m for m in gpu if m not in modules]
    return modules


def _named(image: str | None, site: Site) -> str:
    """The image a runtime runs: the plan's runtime decision names it; there is no placeholder."""
    if not image:
        raise HpcdlError(f"runtime: site {site.name!r} runs {site.runtime} but no image was chosen for the job")
    return image


@runtimes.register("none")
class NoRuntime(Runtime):
    name = "none"

    def command(self, plan, site, image):
        return []


@runtimes.register("apptainer")
class ApptainerRuntime(Runtime):
    name = program = "apptainer"

    def command(self, plan, site, image):
        # exec starts the program alone; run starts the image's runscript, which then runs it (container.command:
        # KISTI Neuron's NGC images, "singularity run --nv <image> python ...")
        argv = [self.program, site.container.command]
        vendor = _gpu_vendor(plan, site)
        if vendor == "nvidia":
            # --nv binds the host's driver libraries in; --nvccli has nvidia-container-cli set the container up
            argv.append(f"--{site.container.nvidia}")
        elif vendor == "amd":
            argv.append("--rocm")
        if site.container.workdir:
            # the runtime's /tmp on the folder the centre names (node-local disk), expanded in the job
            argv += ["--workdir", Expanding(site.container.workdir)]
        for path in self.binds(site):
            argv += ["--bind", path]
        before, after = host_library_dirs(site)
        library_path = container_library_path(before, after)
        if library_path:
            # Apptainer sets the container's LD_LIBRARY_PATH to /.singularity.d/libs, not the host's;
            # --env NAME="\$NAME..." sets it from the container's own value ("Environment and Metadata").
            # (The profile already refuses a ':' in a folder: the path list's own separator.)
            for path in (*before, *after):
                if "," in path:
                    raise HpcdlError(f"env.{LIBRARY_PATH}: {path!r}: {self.program}'s --bind and --env lists split "
                                     "on ','; name a folder without it")
            argv += ["--env", RuntimeExpands(f"{LIBRARY_PATH}={library_path}")]
        return argv + list(site.container.args) + [_named(image, site)]

    def with_overlays(self, argv, overlays):
        # before the image, each read-only: several ranks open it at once, and a writable ext3 overlay is locked by
        # the first (NYU: "For production jobs to run, the overlay image should be open in read-only mode")
        words = [w for path in overlays for w in ("--overlay", Expanding(f"{path}:ro"))]
        return [*argv[:-1], *words, argv[-1]] if words else argv


@runtimes.register("singularity")
class SingularityRuntime(ApptainerRuntime):
    name = program = "singularity"


@runtimes.register("shifter")
class ShifterRuntime(Runtime):
    """NERSC Shifter: the image is named at submit time; GPU support is the gpu module."""

    def command(self, plan, site, image):
        argv = ["shifter", f"--image={_named(image, site)}"]
        modules = runtime_modules(plan, site)
        if modules:
            # NERSC's launcher page: --module=gpu,nccl-plugin (the Slingshot NCCL plugin)
            argv.append("--module=" + ",".join(modules))
        return argv + list(site.container.args)


#: what the job script sets for the ranks besides the plan's environment
JOB_ENV = ("HPCDL_JOB_DIR", "HPCDL_JOB_ID", "HPCDL_JOB_NAME", "MASTER_ADDR", "MASTER_PORT")


@runtimes.register("podman-hpc")
class PodmanHpcRuntime(Runtime):
    """NERSC podman-hpc. Unlike Apptainer, a container starts with a clean environment and
    none of the host's folders, so the job folder, the working directory and every setting
    the ranks need are passed by name (--mpi already passes SLURM_* and PMI_*)."""

    def command(self, plan, site, image):
        argv = ["podman-hpc", "run", "--rm", "--mpi"]
        # podman-hpc's modules are flags: --gpu, and --nccl for the Slingshot NCCL plugin and its
        # settings (NERSC podman-hpc etc/modules.d/nccl.yaml: cli_arg nccl)
        argv += [f"--{m}" for m in runtime_modules(plan, site) if m != "mpi"]
        argv += list(site.container.args)
        for path in [*self.binds(site), Expanding("$HPCDL_JOB_DIR")]:
            argv += ["--volume", Expanding(f"{path}:{path}")]
        argv += ["--workdir", Expanding("$HPCDL_JOB_DIR")]
        for name in sorted({*plan.env, *plan.env_paths, *JOB_ENV}):
            argv += ["--env", name]
        return argv + [_named(image, site)]


@runtimes.register("charliecloud")
class CharliecloudRuntime(Runtime):
    """Charliecloud's ch-run on a SquashFS image (what `hpcdl images build` makes with ch-image).

    ch-run keeps the host's environment (SLURM_*, PMIX_*, the plan's settings reach the ranks
    as they are) and starts no daemon, so the host's `srun --mpi=pmix` starts ranks inside
    directly. `--set-env` adds the image's own ENV (its PATH to /opt/envs/main/bin,
    HPCDL_IMAGE, tuned defaults); the host's Python settings are dropped, since they name the
    host's packages. The job folder is bound and entered; a read-only SquashFS image gets the
    mount points made by ch-run. GPU libraries: `ch-fromhost --nvidia` injects the host's
    driver libraries into an image directory before it is converted (Charliecloud's docs);
    a SquashFS image cannot take them at run time, so GPU sites build with them in.
    """

    def command(self, plan, site, image):
        argv = ["ch-run", "--set-env"]
        library_path = container_library_path(*host_library_dirs(site))
        if library_path:
            # after the image's ENV (the bare --set-env, which may set LD_LIBRARY_PATH): ch-run expands
            # $LD_LIBRARY_PATH in a --set-env value to the value set so far (ch-run(1), "Environment variables")
            argv.append(RuntimeExpands(f"--set-env={LIBRARY_PATH}={library_path}"))
        for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
            argv.append(f"--unset-env={name}")
        for path in [*self.binds(site), Expanding("$HPCDL_JOB_DIR")]:
            argv += ["-b", Expanding(f"{path}:{path}")]
        argv += ["--cd", Expanding("$HPCDL_JOB_DIR")]
        return argv + list(site.container.args) + [_named(image, site), "--"]


#: where a container-engine job writes its environment definition file (EDF)
EDF_FILE = "hpcdl-environment.toml"


@runtimes.register("container-engine")
class ContainerEngineRuntime(Runtime):
    """The CSCS container engine: srun starts each rank in the environment an EDF (TOML) describes,
    `srun --environment=FILE`; the EDF names the image, the folders mounted, and the hooks its
    annotations turn on (the aws_ofi_nccl hook mounts the host's Slingshot NCCL plugin: CSCS
    "PyTorch" and EDF pages). The job writes its EDF beside plan.json, so the script shows it whole.
    """

    srun_options = True

    def command(self, plan, site, image):
        _named(image, site)
        return [Expanding(f"--environment=$HPCDL_JOB_DIR/{EDF_FILE}")] + list(site.container.args)

    def files(self, plan, site, image) -> dict[str, str]:
        def toml(value: str) -> str:
            return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

        # the EDF expands ${NAME} only in braces (CSCS: "use curly braces for environment variables")
        mounts = [with_braces(str(p)) for p in self.binds(site)]
        lines = [f"image = {toml(_named(image, site))}",
                 "mounts = [" + ", ".join(toml(m) for m in [*mounts, "${HPCDL_JOB_DIR}"]) + "]",
                 'workdir = "${HPCDL_JOB_DIR}"']
        environment = site.environment_for(plan.node_kind)
        annotations = environment.annotations if environment else {}
        if annotations:
            lines += ["", "[annotations]", *(f"{k} = {toml(v)}" for k, v in annotations.items())]
        return {EDF_FILE: "\n".join(lines)}


@runtimes.register("pyxis")
class PyxisRuntime(Runtime):
    """NVIDIA's pyxis, the SPANK plugin that starts each srun task in an enroot container: "Pyxis being a SPANK
    plugin, the new command-line arguments it introduces are directly added to srun" (NVIDIA/pyxis wiki, Usage).
    `--container-image` takes "a docker image given as an enroot URI, or a path to a squashfs file on the remote host
    filesystem"; `--container-mounts=SRC:DST[:FLAGS][,SRC:DST...]` binds host folders (the same ones every runtime
    binds, and the job folder); `--container-workdir` is where the task starts. The words are srun's own options, so
    they stand on srun's option list, before the program (LRZ's AI Systems: `srun --container-mounts=./:/workspace
    --container-image=IMAGE.sqsh python ...`).
    """

    srun_options = True

    def command(self, plan, site, image):
        # host folders on env.LD_LIBRARY_PATH cannot reach a pyxis container (no option carries them): the
        # profile is refused when it loads (hpcdl.sites.schema), as every runtime trusts a loaded site
        mounts = []
        for path in [*self.binds(site), Expanding("$HPCDL_JOB_DIR")]:
            if "," in path or ":" in path:
                raise HpcdlError(f"filesystems: {str(path)!r}: pyxis's --container-mounts splits its list on ',' and "
                                 "each mount on ':'; name a folder without them")
            mounts.append(f"{path}:{path}")
        return [Expanding(f"--container-image={_named(image, site)}"),
                Expanding("--container-mounts=" + ",".join(mounts)),
                Expanding("--container-workdir=$HPCDL_JOB_DIR"),
                *site.container.args]
