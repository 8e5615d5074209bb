"""Where a rank's framework, MPI and network plugin come from: the one place that decides.

For a site, a node kind and a request, `choose_runtime` returns the runtime the job runs in:
  - an hpcdl image that the compatibility check (hpcdl.images.compat) accepts for that node kind,
  - the centre's own environment (its container with the runtime's hooks and modules, a module
    set, a conda environment, a uenv or a venv, profile field `environment`), into which hpcdl
    installs only itself,
  - or a refusal, one line naming what would serve the request.
The plan carries the answer (Plan.runtime); `plan`, `render`, `modulefiles render` and
`validate` read it from there, so they never disagree. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from hpcdl.images.compat import cpu_family, fabric_mismatch, launcher_needs, site_problems
from hpcdl.images.frameworks import image_frameworks, image_spec_named, image_specs
from hpcdl.plan.model import (
    CE_HOOK_PLUGIN, CE_PLUGIN_HOOK, IMAGE, NATIVE_KINDS, REFUSED, SITE_CONTAINER, USER_IMAGE, RuntimeChoice,
)
from hpcdl.runtimes import host_library_dirs, runtime_modules_for
from hpcdl.sites.schema import Site

#: NIC kinds whose collectives between nodes need the libfabric NCCL/RCCL plugin (aws-ofi-nccl):
#: without it NCCL falls back to TCP sockets, which "does not scale" (OLCF "PyTorch on Frontier")
LIBFABRIC_NICS = ("slingshot",)

#: the runtime modules that bring the network plugin into the container, as each runtime documents:
#: podman-hpc's `nccl` module (NERSC podman-hpc etc/modules.d/nccl.yaml), Shifter's `nccl-plugin`
#: module (NERSC docs: --module=gpu,nccl-plugin)
PLUGIN_RUNTIME_MODULES = {"podman-hpc": ("nccl",), "shifter": ("nccl-plugin",)}
#: Apptainer/Singularity carry a host setting into the container only under these prefixes
CONTAINER_ENV_PREFIXES = ("APPTAINERENV_", "SINGULARITYENV_")
#: the runtimes that bind the host folders a profile puts on LD_LIBRARY_PATH and put them on the
#: container's library path (hpcdl.runtimes: --bind and --env, ch-run -b and --set-env, podman-hpc
#: --volume and --env LD_LIBRARY_PATH)
LIBRARY_PATH_RUNTIMES = ("apptainer", "singularity", "charliecloud", "podman-hpc")


def compat_problems(spec, site: Site, kind: str) -> list[str]:
    """The compatibility check's reasons against running `spec` on node kind `kind` of `site`: the
    one call into hpcdl.images.compat (it judges the site's default kind, so the kind is made that)."""
    return site_problems(spec, site.model_copy(update={"default_node_kind": kind}))


def _claims(spec, site: Site, kind: str) -> bool:
    """Whether an image spec names this site, or this node kind of it, among those it serves."""
    return site.name in spec.serves or f"{site.name}:{kind}" in spec.serves


def _serves(env, kind: str, framework: str) -> bool:
    return env is not None and (not env.node_kinds or kind in env.node_kinds) and framework in env.frameworks


def choose_runtime(site: Site, kind: str, framework: str = "pytorch", use_gpus: bool = False,
                   image: str | None = None, net_plugin: str | None = None) -> RuntimeChoice:
    """The runtime of a job on node kind `kind` of `site`; `image` is the one the user names (--image)."""
    own = site.environment_for(kind)
    env = own if _serves(own, kind, framework) else None
    choice: RuntimeChoice | None = None
    asked = image or site.defaults.image
    if asked and site.runtime != "none" and not (env and env.prefer and not image):
        spec = image_spec_named(asked)
        whose = "--image" if image else "defaults.image"
        if spec is None:
            choice = RuntimeChoice(USER_IMAGE, site.runtime, asked, framework_from=f"the image {asked} ({whose})",
                                   mpi_from=_container_mpi(site, None), verdict=f"not an hpcdl image: unchecked ({whose})")
        else:
            problems = compat_problems(spec, site, kind)
            if problems:
                return _refused(site, f"{whose} {asked}: {problems[0]}")
            choice = _image_choice(site, spec, asked if "/" in asked or image else spec.name, framework)
    elif env is not None and (env.prefer or site.runtime == "none"):
        choice = _environment_choice(site, env)
    elif site.runtime == "none":
        choice = _native_choice(site, framework)
    else:
        fitting, refused = [], {}
        for name, spec in image_specs().items():
            # a GPU job needs a GPU build; a CPU job takes a CPU build (a CUDA or ROCm stack does not
            # load without the GPU driver)
            if use_gpus != spec.gpu:
                continue
            if framework not in image_frameworks(spec).frameworks:
                refused[name] = f"it holds no {framework}"
                continue
            if not _claims(spec, site, kind) and any(e.local_wheels for e in spec.environments.values()):
                # built from the build machine's own wheel folder: no centre can build it
                refused[name] = "it is built from one machine's own wheels and serves only the sites it names"
                continue
            problems = compat_problems(spec, site, kind)
            (refused.__setitem__(name, problems[0]) if problems else fitting.append(spec))
        # the image meant for this site or node kind (its `serves`) first, then one built for the node's
        # fabric (another's MPI falls back to TCP between nodes: compat.fabric_mismatch), then the specs' order
        fitting.sort(key=lambda spec: (not _claims(spec, site, kind), fabric_mismatch(spec, site, kind) is not None))
        if fitting:
            choice = _image_choice(site, fitting[0], fitting[0].name, framework)
        elif env is not None:
            choice = _environment_choice(site, env)
        elif framework in site.modules.frameworks:
            choice = _framework_module_choice(site, framework)
        else:
            # the closest is one built for the node's CPU family where any is (an aarch64 image refused for its MPI
            # says more to a GH200 site than an x86_64 image refused for its CPU), then the shortest reason
            family = cpu_family(site.node_kinds[kind].cpu_target)
            specs = image_specs()
            closest = min(refused.items(), key=lambda kv: (getattr(specs.get(kv[0]), "arch", None) != family,
                                                           len(kv[1]))) if refused else None
            build = "GPU" if use_gpus else "CPU"
            why = f" (closest: {closest[0]}: {closest[1]})" if closest else f" (hpcdl ships no {build} image)"
            return _refused(site, f"no hpcdl image runs {framework} on node kind {kind} of site {site.name}{why}; "
                                  f"what would serve: the centre's own environment (profile field environment, "
                                  f"docs/sites.md) or an image that fits, named with --image")
    return _with_net_plugin(site, kind, choice, use_gpus, net_plugin)


def _refused(site: Site, why: str) -> RuntimeChoice:
    return RuntimeChoice(REFUSED, site.runtime, verdict="refused", refusal=why)


def _container_mpi(site: Site, spec) -> str:
    _, _, why = launcher_needs(site)
    if spec is None:
        return f"the image's own MPI under {site.launcher} ({why})"
    return f"the image's {spec.mpi.flavour} {spec.mpi.version} ({spec.mpi.abi} ABI) under {site.launcher} ({why})"


def _image_choice(site: Site, spec, reference: str, framework: str) -> RuntimeChoice:
    version = image_frameworks(spec).frameworks.get(framework)
    return RuntimeChoice(IMAGE, site.runtime, reference,
                         framework_from=f"the {spec.name} image ({framework} {version or 'not in it'})",
                         mpi_from=_container_mpi(site, spec), verdict=f"images compat accepts {spec.name}")


def _environment_choice(site: Site, env) -> RuntimeChoice:
    if env.kind == "container":
        return RuntimeChoice(SITE_CONTAINER, site.runtime, env.image, modules=tuple(env.modules),
                             framework_from=(f"the centre's image {env.image}"
                                             + "".join(f", overlay {o} (read-only)" for o in env.overlays)
                                             + (f", activated by sourcing {env.source}" if env.source else "")
                                             + ", hpcdl installed into it"),
                             mpi_from=_container_mpi(site, None), verdict="the centre's own container (profile environment)")
    what = {"modules": "modules " + ", ".join(env.modules), "conda": f"conda environment {env.activate or 'base'}",
            "uenv": f"uenv {env.activate}", "venv": f"venv {env.activate}"}[env.kind]
    if env.modules and env.kind != "modules":
        what += " (after module load " + " ".join(env.modules) + ")"
    return RuntimeChoice(env.kind, "none", modules=tuple(env.modules),
                         framework_from=f"the centre's {what}, hpcdl installed into it",
                         mpi_from=f"the host's {site.mpi}, started by {site.launcher}",
                         verdict="the centre's own environment (profile environment)")


def _framework_module_choice(site: Site, framework: str) -> RuntimeChoice:
    module = site.modules.frameworks[framework]
    return RuntimeChoice("modules", "none", modules=(module,),
                         framework_from=f"the centre's module {module} (modules.frameworks)",
                         mpi_from=f"the host's {site.mpi}, started by {site.launcher}",
                         verdict="the centre's own framework module (modules.frameworks)")


def _native_choice(site: Site, framework: str) -> RuntimeChoice:
    if framework in site.modules.frameworks:
        return _framework_module_choice(site, framework)
    return RuntimeChoice("venv", "none", framework_from=f"{framework} installed beside hpcdl (pip install 'hpcdl[torch]')",
                         mpi_from=f"the host's {site.mpi}, started by {site.launcher}",
                         verdict="no container (runtime: none)")


def _with_net_plugin(site: Site, kind: str, choice: RuntimeChoice, use_gpus: bool,
                     net_plugin: str | None) -> RuntimeChoice:
    """Where the libfabric NCCL/RCCL plugin reaches the ranks from, on a Slingshot GPU node. Only what
    reaches the process counts: inside a container, the image's own build, the runtime's plugin module
    or hook, or a library path carried in by the runtime; outside, the environment's declared plugin or
    the profile's NCCL_NET_PLUGIN or library path. A host module's name says nothing of either."""
    node = site.node_kinds[kind]
    if not (use_gpus and any(n.kind in LIBFABRIC_NICS for n in node.nics)):
        return choice
    if net_plugin:
        return replace(choice, net_plugin_from=f"the library the request names (--net-plugin {net_plugin})",
                       net_plugin_library=net_plugin)
    env = site.environment_for(kind) if choice.kind in (SITE_CONTAINER, *NATIVE_KINDS) else None
    if choice.in_container:
        modules = [m for m in runtime_modules_for(site, True) if m in PLUGIN_RUNTIME_MODULES.get(site.runtime, ())]
        if modules:
            return replace(choice, net_plugin_from=f"the {site.runtime} {modules[0]} module")
        if env is not None and env.annotations.get(CE_PLUGIN_HOOK) == "true":
            return replace(choice, net_plugin_from=CE_HOOK_PLUGIN)
        if "NCCL_NET_PLUGIN" in site.env:
            return replace(choice, net_plugin_from="NCCL_NET_PLUGIN in the profile's env (a path inside the image)")
        carried = [k for k in site.env if k.startswith(CONTAINER_ENV_PREFIXES) and k.endswith("LD_LIBRARY_PATH")]
        if carried and site.runtime in ("apptainer", "singularity"):
            return replace(choice, net_plugin_from=f"the host's plugin, carried into the container by {carried[0]}")
        if "NCCL_NET" in site.env and any(host_library_dirs(site)) and site.runtime in LIBRARY_PATH_RUNTIMES:
            return replace(choice, net_plugin_from=f"the plugin folder the profile puts on LD_LIBRARY_PATH (with NCCL_NET), "
                                                   f"bound into the container and put on its library path by {site.runtime}")
        if choice.kind == IMAGE:
            spec = image_spec_named(choice.image)
            if spec is not None and spec.net_plugin_library:
                return replace(choice, net_plugin_from=f"the {spec.name} image's own aws-ofi build",
                               net_plugin_library=spec.net_plugin_library)
        return choice
    if env is not None and env.net_plugin:
        return replace(choice, net_plugin_from=env.net_plugin)
    if "NCCL_NET_PLUGIN" in site.env:
        return replace(choice, net_plugin_from="NCCL_NET_PLUGIN in the profile's env")
    paths = [k for k, v in site.env.items() if not isinstance(v, str) and k == "LD_LIBRARY_PATH"]
    if paths and "NCCL_NET" in site.env:
        return replace(choice, net_plugin_from="the plugin folder the profile puts on LD_LIBRARY_PATH (with NCCL_NET)")
    return choice
