"""site (+ install prefix + image table) -> the modules and wrapper scripts for that site, as data.

Pure: no I/O. The single-rank CPU tuning comes from the planner, the container argv from the
runtime registry, so a module and a job script on the same site never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcdl import __version__
from hpcdl.errors import HpcdlError
from hpcdl.images.frameworks import ImageFrameworks
from hpcdl.modules.images import frameworks_for_site
from hpcdl.modules.model import BINDS_SLOT, IMAGE_SLOT, ModulePath, ModuleSpec, Wrapper
from hpcdl.plan import JobRequest, make_plan
from hpcdl.plan.runtime import choose_runtime
from hpcdl.runtimes import image_dir, image_reference, runtime_for
from hpcdl.sites.project import with_project
from hpcdl.sites.schema import Site

DEFAULT_PREFIX = "/opt/hpcdl"

# The settings a framework module exports for one process on a login or compute node: what the
# planner gives one rank alone on a node (Intel OpenMP on KNL/Xeon: KMP_AFFINITY, KMP_BLOCKTIME).
CPU_TUNING = ("OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME")

FRAMEWORK_TITLES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "mxnet": "MXNet"}
# torchrun is PyTorch's own launcher; the others start with python. No `hpcdl` wrapper: the host's
# hpcdl (the hpcdl module) must stay first on PATH, since submit, status and cancel need the login
# node's scheduler commands; inside the image the trainer is `python -m hpcdl`.
FRAMEWORK_COMMANDS = {"pytorch": ("python", "torchrun"), "tensorflow": ("python",), "mxnet": ("python",)}
FRAMEWORK_URLS = {"pytorch": "https://pytorch.org", "tensorflow": "https://www.tensorflow.org",
                  "mxnet": "https://mxnet.apache.org"}
FRAMEWORK_KEYWORDS = {"pytorch": ("torch",), "tensorflow": ("keras",), "mxnet": ("gluon",)}




@dataclass(frozen=True)
class FrameworkModule:
    module: ModuleSpec
    wrappers_dir: str  # relative to the module tree
    wrappers: tuple[Wrapper, ...]
    image: str | None  # the image reference; None for a native install
    image_name: str  # e.g. volta-cuda; "native" for a native install


@dataclass(frozen=True)
class SiteModules:
    site: str
    runtime: str
    prefix: str
    hpcdl: ModuleSpec
    frameworks: tuple[FrameworkModule, ...]


def site_modules(site: Site, prefix: str = DEFAULT_PREFIX, images: ImageFrameworks | None = None) -> SiteModules:
    prefix = prefix.rstrip("/") or "/"
    images = images or frameworks_for_site(site)
    frameworks = tuple(
        _framework_module(site, prefix, images, framework, version)
        for framework, version in (images.frameworks.items() if images else ())
    )
    hpcdl = _hpcdl_module(site, prefix, has_frameworks=bool(frameworks))
    return SiteModules(site=site.name, runtime=site.runtime, prefix=prefix, hpcdl=hpcdl, frameworks=frameworks)


def _hpcdl_module(site: Site, prefix: str, has_frameworks: bool = True) -> ModuleSpec:
    init = f"\nIn batch jobs, make `module` exist first: source {site.modules.init}" if site.modules.init else ""
    if not has_frameworks:
        kind, node = site.node_kind()
        choice = choose_runtime(site, kind, use_gpus=bool(node.gpus))
        if choice.refusal:
            init += "\nNo framework module: " + choice.refusal
        else:
            init += f"\nNo framework module: jobs take the framework from {choice.framework_from}."
    help_text = (
        f"hpcdl {__version__}: deep learning on {site.name} (site profiles, rank placement, job scripts,\n"
        f"container images, a distributed trainer and validation jobs).\n"
        f"\n"
        f"First try:  hpcdl plan --site {site.name}      (the node map of a one-node job)\n"
        f"Then:       hpcdl sites show {site.name}; module avail pytorch tensorflow mxnet{init}"
    )
    return ModuleSpec(
        name="hpcdl",
        version=__version__,
        description=f"hpcdl {__version__}: deep learning platform for {site.name}",
        help=help_text,
        family="hpcdl",
        paths=(
            ModulePath("PATH", f"{prefix}/bin"),
            # a centre's own or corrected profiles, found before the ones shipped in the package
            ModulePath("HPCDL_SITE_PATH", f"{prefix}/sites"),
        ),
        env={"HPCDL_SITE": site.name, "HPCDL_IMAGE_DIR": image_dir(site, prefix)},
        category="tools, machine learning",
        url=_hpcdl_url(),
        keywords=("deep learning", "machine learning", "HPC", "job script", "validation"),
    )


def _hpcdl_url() -> str:
    """The project URL hpcdl's own package metadata declares (pyproject [project.urls]), if any."""
    from importlib import metadata

    try:
        urls = metadata.metadata("hpcdl").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return ""
    return urls[0].split(",", 1)[-1].strip() if urls else ""


def single_rank_tuning(site: Site, framework: str) -> dict[str, str]:
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=1, framework=framework))
    return {k: plan.env[k] for k in CPU_TUNING if k in plan.env}


def _framework_module(site: Site, prefix: str, images: ImageFrameworks, framework: str, version: str) -> FrameworkModule:
    title = FRAMEWORK_TITLES.get(framework, framework)
    commands = FRAMEWORK_COMMANDS.get(framework, ("python",))
    wrappers_dir = f"wrappers/{framework}-{version}"
    env = {"HPCDL_FRAMEWORK": framework, **single_rank_tuning(site, framework)}
    if site.runtime == "none":
        image = None
        where = f"installed natively in {prefix}"
        wrappers = tuple(Wrapper(command=c, argv=(f"{prefix}/bin/{c}",), native=True) for c in commands)
    else:
        image = image_reference(site, prefix, images.name)
        where = f"in the {images.name} image, run with {site.runtime}"
        env["HPCDL_IMAGE"] = image
        argv, binds = container_argv(site)
        # a framework outside the image's `main` environment runs from its own environment's bin
        wrappers = tuple(Wrapper(command=c, argv=(*argv, images.command(framework, c)), binds=binds) for c in commands)
    depends = (site.modules.runtime,) if site.modules.runtime and site.runtime != "none" else ()
    help_text = (
        f"{title} {version} on {site.name}, {where}.\n"
        f"\n"
        f"Puts wrapper scripts first on PATH: {', '.join(commands)}. Each is a script, not a shell\n"
        f"function, so srun, jsrun, ibrun and mpirun can start it on every node.\n"
        + (
            f"Each runs its command inside the image with {site.runtime}, binding the scratch and\n"
            f"node-local folders that exist on the node. HPCDL_IMAGE names the image; set it to use another.\n"
            if image
            else ""
        )
        + f"\nOMP_NUM_THREADS and friends are the planner's settings for one process per node;\n"
        f"job scripts from `hpcdl render` set them per rank.\n"
        f"\n"
        f"First try:  python -c 'import {_import_name(framework)}'"
    )
    module = ModuleSpec(
        name=framework,
        version=version,
        description=f"{title} {version} for {site.name} ({where})",
        help=help_text,
        # all framework modules put their own `python` on PATH, so only one is loaded at a time
        family="hpcdl_framework",
        depends_on=depends,
        paths=(ModulePath("PATH", wrappers_dir, in_tree=True),),
        env=env,
        category="library, machine learning",
        url=FRAMEWORK_URLS.get(framework, ""),
        keywords=tuple(dict.fromkeys(("deep learning", "machine learning", _import_name(framework),
                                      *FRAMEWORK_KEYWORDS.get(framework, ())))),
        extensions=tuple(f"{p}/{v}" for p, v in images.extensions.get(framework, {}).items()),
        # the centre's own module for this framework (Summit's open-ce) is in no hpcdl family
        conflicts=tuple(dict.fromkeys(m.split("/")[0] for m in site.modules.frameworks.values())),
    )
    return FrameworkModule(module=module, wrappers_dir=wrappers_dir, wrappers=wrappers, image=image, image_name=images.name)


def _import_name(framework: str) -> str:
    from hpcdl.train.preflight import FRAMEWORK_MODULES

    return FRAMEWORK_MODULES.get(framework, framework)


def container_argv(site: Site) -> tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """The runtime registry's argv for one rank on one node, split into the fixed part (with
    IMAGE_SLOT for the image) and the binds.

    The binds come out because a wrapper adds each only where its folder exists: /mnt/bb/$USER
    on Summit exists only inside jobs that asked for the NVMe, and apptainer refuses to start
    with a missing bind source, which would break `python` on a login node.
    """
    try:
        # a project folder ({project}) is the job's project: Slurm sets the account it charged in
        # $SLURM_JOB_ACCOUNT, less the node kind's account suffix (NCSA DeltaAI: abcd-dtai-gh, /work/hdd/abcd),
        # and outside a job the folder does not exist, so the wrapper leaves it unbound
        site = with_project(site, None, account_suffix=site.node_kind()[1].defaults.account_suffix)
    except HpcdlError:
        pass
    # the job's work folder ($SLURM_TMPDIR) is the job's too: a wrapper also runs on a login node, outside any job,
    # where the runtime's own default serves
    site = site.model_copy(update={"container": site.container.model_copy(update={"workdir": None})})
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=1))
    runtime = runtime_for(site.runtime)
    argv = list(runtime.command(plan, site, IMAGE_SLOT))
    binds, first = [], None
    for path in runtime.binds(site):
        for i in range(1, len(argv)):
            if argv[i] in (path, f"{path}:{path}"):
                binds.append((argv[i - 1], argv[i], path))
                del argv[i - 1 : i + 1]
                first = i - 1 if first is None else min(first, i - 1)
                break
    if first is not None:
        argv.insert(first, BINDS_SLOT)
    return tuple(argv), tuple(binds)

