"""make_plan(site, request) -> Plan. Pure: no I/O, no clock, no environment.

How a node is shared out, in order:
  1. how many ranks a node runs and what each rank is built around (a GPU, a NIC, a socket);
  2. the socket (and NUMA domain, when the profile knows it) of each rank;
  3. the cores of each rank: the usable cores of its socket or domain, split evenly and
     contiguously among the ranks there, the same count for every rank;
  4. its GPUs and NIC, the nearest ones;
  5. the OpenMP threads and the environment that carry this out.
Every rule carries a comment saying where it comes from; docs/sites.md collects the sources.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from hpcdl.errors import HpcdlError
from hpcdl.launchers import launcher_for
from hpcdl.launchers.base import gpu_total_uneven
from hpcdl.launchers.mpi import closest_gpus_misses, default_binding_misses, sockets_binding_misses, spawner_argv
from hpcdl.plan.env import communication_env, intel_mpi_pin_domain, rank_env, threading_env
from hpcdl.plan.model import PathValue, Plan, RankPlacement, RuntimeChoice, SpatialLayout
from hpcdl.plan.runtime import LIBFABRIC_NICS, choose_runtime
from hpcdl.plan.request import JobRequest
from hpcdl.sites.schema import MAX_NODES, Gpu, Nic, NodeKind, Site


@dataclass(frozen=True)
class _Slot:
    """One local rank while the node is being shared out."""

    socket: int
    domain: int | None = None  # NUMA domain its cores come from, when its device has one
    gpus: tuple[int, ...] = ()
    nic: int | None = None  # index into node.nics
    # the node's one rank, on every usable core of every socket (per-node mode); `socket` is its first
    whole_node: bool = False


def check_request(site: Site, request: JobRequest) -> None:
    """Refuse, before any planning, a node count the site does not have or does not take in one job.

    The plan holds a record for every rank, so its cost grows with the node count: these checks
    come first, and cost nothing whatever the count."""
    kind_name, node = site.node_kind(request.node_kind)
    if node.count is not None and request.nodes > node.count:
        raise HpcdlError(
            f"nodes: {request.nodes} is more than site {site.name!r} has of node kind {kind_name!r} ({node.count})"
        )
    if request.nodes > MAX_NODES:
        raise HpcdlError(f"nodes: {request.nodes} is more than any machine has (at most {MAX_NODES})")
    if site.defaults.max_nodes and request.nodes > site.defaults.max_nodes:
        raise HpcdlError(
            f"nodes: {request.nodes} is more than site {site.name!r} allows in one job "
            f"({site.defaults.max_nodes}); ask for at most {site.defaults.max_nodes}"
        )


def make_plan(site: Site, request: JobRequest) -> Plan:
    check_request(site, request)
    kind_name, node = site.node_kind(request.node_kind)
    use_gpus = _use_gpus(site, kind_name, node, request)
    mode = _resolve_mode(site, kind_name, node, request.mode, use_gpus)
    notes: list[str] = []
    if site.retired:  # the profile stays for the published runs made on it; a user should know it no longer runs jobs
        notes.append(f"site {site.name} was retired ({site.retired.date}, {site.retired.source}): "
                     "this plan reproduces how jobs ran there")
    if use_gpus and _given_whole(site, kind_name, request.nodes):
        notes.append(f"a job of {request.nodes} nodes gets them whole from the site's Slurm, though it names no "
                     f"--exclusive (defaults.whole_nodes_from: {site.defaults.whole_nodes_from}): planned as on whole nodes")
    slots = _slots(site, kind_name, node, request, mode, use_gpus, notes)
    if mode == "per-gpu" and site.defaults.gpu_rank_sockets == "even":
        slots = _evenly_over_sockets(node, slots, notes)
    _check_partial_nodes(site, kind_name, node, request, slots)
    cores = _cores_of_slots(site, node, slots, notes, _shared_node(site, kind_name, use_gpus, request.nodes),
                            nodes=request.nodes, kind_name=kind_name)
    if site.launch.nic_choice == "plan":
        slots = [_with_nearest_nic(node, slots, i) for i in range(len(slots))]
    elif node.nics and mode != "per-nic":
        notes.append("each rank's NIC is its communication library's choice (NCCL: the HCA nearest its GPU), as the "
                     "centre's jobs leave it (launch.nic_choice: library): the plan names none per rank")
    if site.launch.rank_order == "cores":
        # local rank i on the i-th block of cores, with the devices nearest it (NERSC: --cpu-bind=cores and the
        # GPU order reversed against the NUMA domains); the pairs themselves do not change
        order = sorted(range(len(slots)), key=lambda i: min(cores[i]))
        slots, cores = [slots[i] for i in order], [cores[i] for i in order]
    if node.cpus_per_core < node.threads_per_core:
        notes.append(
            f"the scheduler counts {node.cpus_per_core} of each core's {node.threads_per_core} hardware threads as "
            f"CPUs (scheduler_cpus_per_core): {_cpu_request_words(site.scheduler, len(cores[0]) * node.cpus_per_core)} "
            f"is {len(cores[0])} cores"
        )
    threads = _threads_per_rank(node, request, len(cores[0]), notes)
    distributed = _resolve_distributed(request, use_gpus)
    ranks_per_node = len(slots)
    gpu_local = use_gpus and site.launch.rank_cpus == "gpu-local"
    if gpu_local:
        notes.append(f"each rank binds itself at run time to {len(cores[0])} cores of those its node reports nearest its "
                     "GPU (launch.rank_cpus: gpu-local, the GPU's local_cpulist): the centre publishes no map of which "
                     "cores go with which GPU, so the plan names none per rank")

    local = [
        dict(
            local_rank=lr,
            socket=slot.socket,
            cores=cores[lr],
            # the hardware threads the scheduler hands a rank: all of a core's, or only the first
            # where it counts physical cores (OLCF Frontier: --threads-per-core=1 by default)
            # (none where each rank finds them near its GPU at run time: launch.rank_cpus: gpu-local)
            cpus=() if gpu_local else tuple(cpu for core in cores[lr] for cpu in node.cpus_of_core(core)[: node.cpus_per_core]),
            gpus=slot.gpus,
            # a port the centre names by neither device nor interface is no rank's; one named by its interface
            # only is the rank's by that name, with no device setting (rank_env): NCCL_IB_HCA and UCX_NET_DEVICES
            # take exact device names, and a guessed one would keep NCCL and UCX off the fabric
            nic=node.nics[slot.nic].name if slot.nic is not None else None,
            omp_num_threads=threads,
        )
        for lr, slot in enumerate(slots)
    ]
    held = tuple(sorted({g for p in local for g in p["gpus"]}))
    ranks = tuple(
        RankPlacement(rank=n * ranks_per_node + p["local_rank"], node=n,
                      env=rank_env(site, node, p["gpus"], p["nic"], site.launch.gpu_visibility, held), **p)
        for n in range(request.nodes)
        for p in local
    )
    runtime = choose_runtime(site, kind_name, request.framework, use_gpus, request.image, request.net_plugin)
    plugin = runtime.net_plugin_from
    env = {
        **threading_env(node, request.framework, threads, len(cores[0])),
        # the plugin's settings go with it; where its provider sets them itself, they are left to it
        **communication_env(site, node, request, distributed, use_gpus, ranks_per_node, threads, mode,
                            net_plugin=plugin is not None and not runtime.plugin_sets_its_env),
        # the site's own settings win: the centre knows its machine best
        **{k: v for k, v in site.env.items() if isinstance(v, str)},
        # ... and the node kind's own, for these nodes only (NHR@FAU: NCCL_IB_HCA on its A100 nodes alone)
        **node.env,
    }
    if "I_MPI_PIN_DOMAIN" in env:  # Intel MPI's domains where the plan put the ranks
        env["I_MPI_PIN_DOMAIN"] = intel_mpi_pin_domain(env["I_MPI_PIN_DOMAIN"], [p["cores"] for p in local],
                                                       [p["cpus"] for p in local])
    if request.net_plugin and runtime.net_plugin_library == request.net_plugin:
        # the user's word on the image they run wins over the profile's
        env["NCCL_NET_PLUGIN"] = request.net_plugin
    elif runtime.net_plugin_library and "NCCL_NET_PLUGIN" not in env:
        # the image's own build of the plugin: "Without this the plugin will not be used!" (OLCF). A
        # centre's NCCL_NET ("AWS Libfabric": BriCS, CSCS) names the network, not where its library is:
        # NCCL still looks for the plugin by this name, and fails to start without it
        env["NCCL_NET_PLUGIN"] = runtime.net_plugin_library
    env_paths = {k: PathValue(v.path, v.prepend, v.append) for k, v in site.env.items() if not isinstance(v, str)}
    modules = _plan_modules(site, use_gpus, env, notes)
    _check_collective_plugin(site, kind_name, node, distributed, use_gpus, request.nodes, runtime)
    if runtime.kind == "user-image" and plugin is None and use_gpus and any(n.kind in LIBFABRIC_NICS for n in node.nics):
        notes.append(f"image {runtime.image!r} is not one hpcdl builds: whether it carries the libfabric NCCL/RCCL "
                     "plugin, and where, cannot be known, so the plan names none; say so with --net-plugin "
                     "LIBRARY (its path inside the image)")
    if (use_gpus and site.scheduler == "slurm" and site.defaults.gpu_request == "gpus"
            and gpu_total_uneven(request.nodes, len(held), len(node.gpus))):
        notes.append(f"defaults.gpu_request: gpus would ask the job's {len(held) * request.nodes} GPUs as one total, "
                     f"which Slurm may lay out unevenly over {request.nodes} nodes the plan uses {len(held)} of "
                     f"{len(node.gpus)} GPUs on: asked per node (--gpus-per-node) instead")
    if use_gpus and site.launch.gpu_visibility == "node":
        notes.append("every rank sees every GPU of its node and drives its own by local rank (HPCDL_GPU), "
                     "so CUDA IPC works between the ranks of a node")
    plan = Plan(
        site=site.name,
        node_kind=kind_name,
        nodes=request.nodes,
        ranks_per_node=ranks_per_node,
        framework=request.framework,
        mode=mode,
        distributed=distributed,
        precision=request.precision,
        threads_per_rank=threads,
        ranks=ranks,
        env=env,
        launcher=site.launcher,
        launcher_argv=(),
        notes=tuple(notes),
        spatial=_spatial_layout(site, kind_name, request, ranks, ranks_per_node, notes),
        modules=modules,
        env_paths=env_paths,
        runtime=runtime,
        ulimit={name: str(value) for name, value in site.launch.ulimit.items()},
        tmpdir=site.filesystems.tmpdir,
        nodes_per_host=node.nodes_per_host,
        rank_cpus="gpu-local" if gpu_local else "plan",
        gpu_ids=site.defaults.gpu_ids if gpu_local else None,
    )
    plan = replace(plan, notes=tuple(notes))
    argv = launcher_for(site.launcher).command(plan, site)
    if site.launch.slurm_binds_tasks and not gpu_local:
        # the srun line names no --cpu-bind there: the plan's cores must be those Slurm binds by itself
        # (with none or unstated, the line names none either, and each rank binds itself to its cores from plan.json;
        # a rank that finds its cores near its GPU, launch.rank_cpus: gpu-local, replaces Slurm's binding likewise)
        if (miss := default_binding_misses(plan, site)) is not None:
            raise HpcdlError(f"launch.cpu_bind_default: {site.launch.cpu_bind_default} binding cannot give this "
                             f"plan's cores: {miss}; ask another layout (--ranks-per-node, --mode), or unset it so "
                             "hpcdl names the binding")
    if site.launcher == "srun" and site.launch.srun_centre_binds_cores and not gpu_local:
        # the centre's own --cpu-bind=cores (launch.args, beside rank_cpus: gpu-local) binds a plan without GPUs too:
        # each task to its block of whole cores, as the line's distribution lays them out
        node_kind = site.node_kinds[plan.node_kind]
        miss = (f"Slurm counts {node_kind.cpus_per_core} of each core's {node_kind.threads_per_core} hardware threads, "
                "where --cpu-bind=cores binds every one" if node_kind.cpus_per_core < node_kind.threads_per_core
                else default_binding_misses(plan, site))
        if miss is not None:
            raise HpcdlError(f"launch.args: --cpu-bind=cores, the centre's binding, cannot give this plan's cores: "
                             f"{miss}; ask another layout (--ranks-per-node, --mode), or run on GPUs")
    if (site.launch.cpu_bind_unit == "sockets" and "--cpu-bind=cores" in argv
            and (miss := sockets_binding_misses(plan, site)) is not None):
        # the line says --cpu-bind=sockets only where each rank holds whole sockets; else the plan's own cores
        plan = replace(plan, notes=(*plan.notes, f"launch.cpu_bind_unit: sockets would not give this plan's cores "
                                    f"({miss}): the line binds them by cores"))
    if site.launch.gpu_bind == "closest" and any(r.gpus for r in plan.ranks):
        # the srun line says --gpu-bind=closest only where Slurm's nearest GPUs are the plan's; else its map
        if (miss := closest_gpus_misses(plan, site)) is not None:
            plan = replace(plan, notes=(*plan.notes, f"launch.gpu_bind: closest would not give this plan's GPUs ({miss}): "
                                        "the line binds them by the plan's map"))
    if site.launch.gpu_bind == "wrapper" and (miss := _wrapper_gpus_miss(plan)) is not None:
        # the wrapper's GPU is the one that runs (it sets CUDA_VISIBLE_DEVICES before plan.json is read)
        raise HpcdlError(f"launch.gpu_bind: wrapper: the centre's wrapper gives local rank i GPU i alone, but this plan "
                         f"gives {miss}; ask one rank per GPU (--mode per-gpu)")
    if site.launch.command:  # the centre's own launcher taking the same options (a site mpirun wrapper)
        argv = [*site.launch.command, *argv[1:]]
    # the centre's per-rank wrapper runs between the launcher and the program, on the host (NCAR's set_gpu_rank)
    wrapper = [*site.launch.wrapper, *(site.launch.gpu_wrapper if any(r.gpus for r in plan.ranks) else ())]
    if site.launch.spawner != "none":
        # srun starts one task per node and the spawner starts the node's ranks (launch.spawner): the ranks, their
        # cores and GPUs are the plan's as ever, each rank binding itself to them from plan.json
        plan = replace(plan, spawner=site.launch.spawner, spawner_argv=tuple(spawner_argv(plan, site)),
                       notes=(*plan.notes, f"srun starts one task per node holding its {plan.ranks_per_node} "
                              f"rank(s)' CPUs and GPUs; {site.launch.spawner} starts the node's ranks "
                              "(launch.spawner), each binding itself to its cores and GPU from plan.json"
                              + (" (its cores found near its GPU: launch.rank_cpus: gpu-local)"
                                 if plan.rank_cpus == "gpu-local" else "")))
    return replace(plan, launcher_argv=(*argv, *wrapper))


def _spatial_layout(site: Site, kind_name: str, request: JobRequest, ranks: tuple[RankPlacement, ...],
                    ranks_per_node: int, notes: list[str]) -> SpatialLayout | None:
    """Consecutive local ranks share a sample: a spatial group never leaves its node.

    Halos are exchanged at every layer, forward and backward, so the group takes the
    nearest GPUs (NVLink inside a node; the LLNL work measured 4-way spatial parallelism on
    Lassen, 4 NVLink-connected V100s per node, Dryden et al. 2019); only the gradient
    all-reduce between groups crosses the network.
    """
    ways = request.spatial_ways
    if ways == 1:
        return None
    if ranks_per_node % ways:
        raise HpcdlError(
            f"spatial_ways: {ways} ranks share a sample (--spatial-ways, or the recipe's spatial.ways) but a "
            f"{_node_of(site.name, kind_name)} runs {ranks_per_node} rank(s); a spatial group must fit inside one node, "
            f"so ask for ways that divide {ranks_per_node}, or a multiple of {ways} ranks per node"
        )
    from hpcdl.train.slabs import Grid

    grid = Grid.of(ways, request.spatial_split)
    groups = tuple(tuple(range(g * ways, (g + 1) * ways)) for g in range(len(ranks) // ways))
    per_node = ranks_per_node // ways
    notes.append(
        f"spatial parallelism: {ways}-way ({grid.rows} x {grid.cols} slabs), {per_node} spatial group(s) per node "
        f"on neighbouring ranks, {len(groups)} data-parallel group(s) in all; halos stay inside a node, "
        "gradients are all-reduced across groups"
    )
    socket_of = {r.rank: r.socket for r in ranks}
    if any(len({socket_of[m] for m in group}) > 1 for group in groups):
        notes.append("a spatial group spans both sockets: its halos cross the inter-socket link")
    return SpatialLayout(ways, request.spatial_split, (grid.rows, grid.cols), groups)


def _cpu_request_words(scheduler: str, cpus: int) -> str:
    """A rank's CPUs as its scheduler writes them: Slurm -c, PBS ncpus (a chunk's share), LSF slots."""
    return {"slurm": f"-c {cpus}", "pbs": f"ncpus {cpus} per rank", "lsf": f"{cpus} slots per rank"}.get(
        scheduler, f"{cpus} CPUs per rank")


def _plan_modules(site: Site, use_gpus: bool, env: dict[str, str], notes: list[str]) -> tuple[str, ...]:
    """GPU-aware Cray MPICH needs its GTL library, which the craype-accel-* module links in: the
    centres set MPICH_GPU_SUPPORT_ENABLED=1 together with that module (OLCF Frontier guide:
    `module load craype-accel-amd-gfx90a rocm` with MPICH_GPU_SUPPORT_ENABLED=1; NERSC
    Perlmutter: craype-accel-nvidia80). Without it MPI fails with "GTL library is not linked",
    so the plan sets both or neither. A centre that turns GPU support off itself
    (`env: {MPICH_GPU_SUPPORT_ENABLED: "0"}`: CSCS, "we recommend not using GPU-aware MPI with
    NCCL ... explicitly set MPICH_GPU_SUPPORT_ENABLED=0") keeps its 0 and needs no GTL module."""
    if site.mpi != "cray-mpich" or not use_gpus:
        return ()
    if site.env.get("MPICH_GPU_SUPPORT_ENABLED") == "0":
        env["MPICH_GPU_SUPPORT_ENABLED"] = "0"
        notes.append("Cray MPICH runs without GPU support, as the profile sets (env: MPICH_GPU_SUPPORT_ENABLED=0)")
        return ()
    if site.modules.gpu_mpi and site.modules.system != "none":
        env["MPICH_GPU_SUPPORT_ENABLED"] = "1"
        return tuple(m for m in site.modules.gpu_mpi if m not in site.modules.load)
    env.pop("MPICH_GPU_SUPPORT_ENABLED", None)
    notes.append("Cray MPICH runs without GPU support: the profile names no GTL module (modules.gpu_mpi)")
    return ()


def _check_collective_plugin(site: Site, kind_name: str, node: NodeKind, distributed: str, use_gpus: bool,
                             nodes: int, runtime: RuntimeChoice) -> None:
    """Refuse collectives between nodes over Slingshot that no libfabric plugin reaches: NCCL and RCCL
    would fall back to TCP sockets, which "does not scale" (OLCF "PyTorch on Frontier"), and CSCS: "If
    the plugin can not be found, applications will fail to start" where NCCL_NET names it."""
    if not (use_gpus and nodes > 1 and distributed in ("nccl", "horovod")):
        return
    if not any(n.kind in LIBFABRIC_NICS for n in node.nics) or runtime.net_plugin_from or runtime.refusal:
        return
    where = f"inside {runtime.runtime}" if runtime.in_container else "in the job's environment"
    raise HpcdlError(
        f"net plugin: {nodes} nodes of {site.name} {kind_name} GPUs over Slingshot need the libfabric NCCL/RCCL plugin "
        f"and nothing brings it {where}; give the image's with --net-plugin, run an image that carries it, or "
        "say how the centre brings it (the runtime's plugin module or hook, APPTAINERENV_LD_LIBRARY_PATH, "
        "environment.net_plugin; docs/sites.md)")


def _use_gpus(site: Site, kind_name: str, node: NodeKind, request: JobRequest) -> bool:
    wants = request.use_gpus if request.use_gpus is not None else (True if request.mode == "per-gpu" else None)
    if wants and not node.gpus:
        others = [k for k, n in site.node_kinds.items() if n.gpus]
        hint = f"use --node-kind {others[0]}" if others else "pick a site with GPUs"
        raise HpcdlError(
            f"GPUs requested but node kind {kind_name!r} of site {site.name!r} has none; "
            f"{hint}, or run on CPUs with --mode per-socket"
        )
    use = bool(node.gpus) if wants is None else wants
    if not use and node.defaults.gpu_jobs_only:
        # the centre allows only GPU jobs here (Cyfronet Athena: "Please use Athena only for GPU-enabled jobs")
        raise HpcdlError(f"GPUs: site {site.name!r} runs only GPU jobs on node kind {kind_name!r} "
                         f"(node_kinds.{kind_name}.defaults.gpu_jobs_only); run with GPUs, or on another machine")
    return use


def _resolve_mode(site: Site, kind_name: str, node: NodeKind, mode: str, use_gpus: bool) -> str:
    if mode == "auto":
        # GPU nodes: one rank per GPU (OLCF Summit guide `jsrun -n6N -g1`, NERSC Perlmutter
        # `--gpus-per-task 1`, Horovod's one-process-per-GPU rule).
        # CPU nodes: ranks per socket from the profile (TACC KNL study, Intel TF-on-CPU guidance).
        return "per-gpu" if use_gpus else "per-socket"
    if mode == "per-gpu" and not use_gpus:
        raise HpcdlError("mode: per-gpu gives each rank a GPU, but this request runs without GPUs; use per-socket")
    if mode == "per-nic" and not node.nics:
        raise HpcdlError(
            f"mode: per-nic needs the NICs of node kind {kind_name!r} of site {site.name!r}, and its profile lists "
            "none; add them under nics, or use per-gpu or per-socket"
        )
    return mode


def _first_core(node: NodeKind, g: int) -> int:
    """The first core beside GPU g: the cores the site's Slurm ties it to (gpus[].cores), else its NUMA domain's,
    else its socket's."""
    if node.gpus[g].cores:
        return min(node.gpus[g].cores)
    domain = node.gpus[g].domain
    return node.cores_of_socket(node.gpus[g].socket)[0] if domain is None else domain * node.cores_per_domain


def _slots(
    site: Site, kind_name: str, node: NodeKind, request: JobRequest, mode: str, use_gpus: bool, notes: list[str]
) -> list[_Slot]:
    asked = request.ranks_per_node
    if mode == "per-gpu":
        # One rank per GPU, ranks spread evenly over the sockets, each on its GPU's socket
        # (Summit: 6 ranks, 3 per socket; Kurth et al. 2018, OLCF `jsrun -n6N -a1 -g1 -r6`).
        rpn = asked or len(node.gpus)
        if rpn > len(node.gpus):
            raise HpcdlError(
                f"ranks_per_node: {rpn} ranks do not fit one rank per GPU on a {_node_of(site.name, kind_name)} with "
                f"{len(node.gpus)} GPUs; ask for at most {len(node.gpus)} ranks per node, or --mode per-socket"
            )
        if rpn < len(node.gpus) and site.launch.gpu_bind == "wrapper":
            # the centre's wrapper gives local rank i GPU i (EPCC Tursa's gpu_launch.sh:
            # CUDA_VISIBLE_DEVICES=$((SLURM_PROCID % SLURM_NTASKS_PER_NODE))), and what it sets wins over plan.json:
            # a node not filled drives its first GPUs, each rank on its GPU's cores, or the plan would not be what runs
            notes.append(f"one rank per GPU: {rpn} of {len(node.gpus)} GPUs, the first ones, as the centre's wrapper "
                         "gives local rank i GPU i (launch.gpu_bind: wrapper)")
            return [_Slot(socket=node.gpus[g].socket, domain=node.gpus[g].domain, gpus=(g,)) for g in range(rpn)]
        # Slurm binds task i to the i-th block of the job's cores itself (launch.cpu_bind_default) or picks its GPUs
        # by them (--gpu-bind=closest), local rank i driving the GPU beside them (rank_order: cores): a node not
        # filled takes the GPUs beside its first cores, not the lowest-numbered
        beside_first_cores = site.launch.rank_order == "cores" and (site.launch.gpu_bind == "closest"
                                                                     or site.launch.slurm_binds_tasks)
        if rpn < len(node.gpus) and _shared_node(site, kind_name, use_gpus, request.nodes):
            # a job that shares its nodes is handed GPUs with their cores, the first free ones, not a spread
            # over the sockets that would hold back every socket's cores from other jobs
            if site.defaults.partial_gpus == "spread":
                # the centre's partial-node jobs ask one task per socket (ULHPC Iris: "--ntasks-per-node 2
                # --ntasks-per-socket 1 -c 7 -G 2"): GPUs spread over the sockets, each still with its share of cores
                notes.append(f"one rank per GPU: {rpn} of {len(node.gpus)} GPUs, spread over the sockets, each with "
                             "its share of the cores, on a node the job shares (defaults.partial_gpus: spread)")
                return [_Slot(socket=node.gpus[g].socket, domain=node.gpus[g].domain, gpus=(g,))
                        for g in _spread(node.gpus, node.sockets, rpn)]
            notes.append(f"one rank per GPU: {rpn} of {len(node.gpus)} GPUs, the first ones with their cores, "
                         "as the batch system hands out a node the job shares (defaults.exclusive: false)")
            if beside_first_cores:
                # ASU Sol: GPU 0 beside cores 18-23, GPU 1 beside 6-11, one GPU's task on 0-11
                order = sorted(range(len(node.gpus)), key=lambda g: (_first_core(node, g), g))
            else:
                order = sorted(range(len(node.gpus)), key=lambda g: (node.gpus[g].socket, g))
            return [_Slot(socket=node.gpus[g].socket, domain=node.gpus[g].domain, gpus=(g,)) for g in order[:rpn]]
        notes.append(f"one rank per GPU: {rpn} of {len(node.gpus)} GPUs, spread evenly over the sockets")
        # as Pawsey's 3 packs on chiplets 0-2 drive the GCDs beside them
        first = functools.partial(_first_core, node) if beside_first_cores else None
        return [_Slot(socket=node.gpus[g].socket, domain=node.gpus[g].domain, gpus=(g,))
                for g in _spread(node.gpus, node.sockets, rpn, first)]
    if mode == "per-nic":
        # The hybrid mode of the Summit Gordon Bell run (Kurth et al. 2018, arXiv:1810.01993):
        # one rank per IB port (Summit: 4 ranks, 2 per socket), each reducing its share of the
        # gradients; NCCL inside the node, MPI across nodes.
        rpn = asked or len(node.nics)
        if rpn > len(node.nics):
            raise HpcdlError(
                f"ranks_per_node: {rpn} ranks do not fit one rank per NIC on a {_node_of(site.name, kind_name)} with "
                f"{len(node.nics)} NIC ports; ask for at most {len(node.nics)}, or --mode per-gpu"
            )
        notes.append(f"one rank per NIC port: {rpn} ranks per node (hybrid: NCCL inside the node, MPI across nodes)")
        slots = [_Slot(socket=node.nics[n].socket, domain=node.nics[n].domain, nic=n)
                 for n in _spread(node.nics, node.sockets, rpn)]
        return _share_gpus(node, slots, notes) if use_gpus else slots
    if mode == "per-node":
        if asked not in (None, 1):
            raise HpcdlError(f"ranks_per_node: per-node mode runs 1 rank per node, not {asked}; use per-socket")
        # the one rank holds the whole node, every socket's cores, as a centre's one task per node does
        # (EPCC ARCHER2's PyTorch on CPU: --ntasks-per-node=1 --cpus-per-task=128 on 2 x 64 cores)
        if node.sockets > 1:
            notes.append(f"one rank per node on the cores of all {node.sockets} sockets; per-socket mode "
                         "runs a rank on each")
        slot = _Slot(socket=0, whole_node=True)
        return _share_gpus(node, [slot], notes) if use_gpus else [slot]
    elif mode == "per-core":
        rpn = asked or node.sockets * node.usable_cores_per_socket
    else:  # per-socket
        # Ranks per socket from the request or the profile: Stampede2 KNL measured best with one
        # rank of 64 threads per node; Intel's CPU guidance runs one rank per socket.
        default = node.default_ranks_per_socket or 1
        rpn = asked or node.sockets * default
        if not asked:
            notes.append(f"{default} rank(s) per socket from the site profile")
    usable = node.sockets * node.usable_cores_per_socket
    if rpn > usable:
        # A CPU centre may advise a task per hardware thread (LRZ SuperMUC-NG: "increase the number of MPI tasks per
        # node from 48 to 96"); a rank here holds whole cores, so where the ranks would fit the node's hardware
        # threads the refusal says where those threads go instead: into each rank, as its own threads
        tpc = node.threads_per_core
        smt = (f" (hpcdl gives a rank whole cores, never one hardware thread of a core: the node's {usable * tpc} "
               f"hardware threads are {usable} cores x {tpc}; a rank may run up to {tpc} threads a core, "
               f"--threads-per-rank)") if tpc > 1 and rpn <= usable * tpc else ""
        raise HpcdlError(
            f"ranks_per_node: {rpn} ranks need a core each but a {_node_of(site.name, kind_name)} has {usable} usable "
            f"cores; ask for at most {usable}{smt}"
        )
    # ranks spread evenly over the sockets, socket-major (ranks 0..k-1 on socket 0, ...)
    per_socket = [rpn // node.sockets + (1 if s < rpn % node.sockets else 0) for s in range(node.sockets)]
    slots = [_Slot(socket=s) for s in range(node.sockets) for _ in range(per_socket[s])]
    return _share_gpus(node, slots, notes) if use_gpus else slots


def _evenly_over_sockets(node: NodeKind, slots: list[_Slot], notes: list[str]) -> list[_Slot]:
    """One rank per GPU laid evenly over the sockets, in order, whatever socket its GPU hangs off, as the centre's
    --ntasks-per-socket lays its tasks (`defaults.gpu_rank_sockets: even`; ULHPC Iris: four GPUs on socket 0,
    "--ntasks-per-node 4 --ntasks-per-socket 2 -c 7 -G 4")."""
    per_socket = [len(slots) // node.sockets + (1 if s < len(slots) % node.sockets else 0) for s in range(node.sockets)]
    sockets = [s for s in range(node.sockets) for _ in range(per_socket[s])]
    if any(slot.socket != s for slot, s in zip(slots, sockets)):
        notes.append("ranks laid evenly over the sockets, not on their GPUs' sockets (defaults.gpu_rank_sockets: even)")
    return [replace(slot, socket=s, domain=None) for slot, s in zip(slots, sockets)]


def _spread(devices: tuple[Gpu, ...] | tuple[Nic, ...], sockets: int, count: int, first=None) -> list[int]:
    """Pick `count` devices, as evenly over the sockets as they allow, listed socket by socket; within a
    socket in the profile's order, or by `first` (a device's first core) where ranks are numbered by cores."""
    by_socket = [sorted((i for i, d in enumerate(devices) if d.socket == s), key=first) for s in range(sockets)]
    chosen: list[int] = []
    while len(chosen) < count:
        for on_socket in by_socket:
            taken = [i for i in on_socket if i in chosen]
            if len(taken) < len(on_socket) and len(chosen) < count:
                chosen.append(on_socket[len(taken)])
    return sorted(chosen, key=lambda i: (devices[i].socket, i))


def _share_gpus(node: NodeKind, slots: list[_Slot], notes: list[str]) -> list[_Slot]:
    """Fewer ranks than GPUs: each rank drives the GPUs nearest it, shared out as evenly as they go."""
    result = []
    for i, slot in enumerate(slots):
        near = _nearest(node.gpus, slot)
        peers = [j for j, other in enumerate(slots) if _nearest(node.gpus, other) == near]
        k, n = peers.index(i), len(peers)
        if len(near) >= n:
            # contiguous shares, the first ranks taking one more when they do not divide
            base, extra = divmod(len(near), n)
            start = k * base + min(k, extra)
            mine = tuple(near[start : start + base + (1 if k < extra else 0)])
        else:
            mine = (near[k % len(near)],) if near else ()
        result.append(replace(slot, gpus=mine))
    if len({len(s.gpus) for s in result}) > 1:
        notes.append("the GPUs of a socket do not divide evenly among its ranks: some ranks drive one more")
    return result


def _nearest(devices: tuple[Gpu, ...] | tuple[Nic, ...], slot: _Slot) -> list[int]:
    """Devices in the slot's NUMA domain, else on its socket, else anywhere on the node (every device
    for the rank that holds the whole node)."""
    if slot.whole_node:
        return list(range(len(devices)))
    if slot.domain is not None:
        same_domain = [i for i, d in enumerate(devices) if d.domain == slot.domain]
        if same_domain:
            return same_domain
    return [i for i, d in enumerate(devices) if d.socket == slot.socket] or list(range(len(devices)))


def _with_nearest_nic(node: NodeKind, slots: list[_Slot], i: int) -> _Slot:
    """Each rank's NIC: the nearest port, shared round-robin among the ranks it is nearest to.

    Summit, 3 ranks per socket on 2 ports per socket: mlx5_0, mlx5_1, mlx5_0 (the Gordon Bell run
    script gives socket-0 ranks mlx5_0, mlx5_1, mlx5_0 through PAMI_IBV_DEVICE_NAME).
    """
    slot = slots[i]
    if slot.nic is not None or not node.nics:
        return slot
    key = replace(slot, gpus=(), nic=None)
    near = _nearest(node.nics, key)
    peers = [j for j, other in enumerate(slots) if _nearest(node.nics, replace(other, gpus=(), nic=None)) == near]
    return replace(slot, nic=near[peers.index(i) % len(near)])


def _check_partial_nodes(site: Site, kind_name: str, node: NodeKind, request: JobRequest, slots: list[_Slot]) -> None:
    """Refuse a GPU job of more nodes than the centre lets a job take in part that leaves some of each node's GPUs
    unused (`defaults.max_nodes_partial`): the centre's submit filter would refuse it (CSD3: "between 1 and 4; must
    be 4 if nodes>1")."""
    limit = site.defaults.max_nodes_partial
    held = {g for slot in slots for g in slot.gpus}
    counts = site.defaults.partial_gpu_counts
    if counts and held and len(held) != len(node.gpus) and len(held) not in counts:
        # SciNet Trillium: "you are only allowed to request exactly 1 GPU or a multiple of 4 GPUs. You cannot request
        # --gpus-per-node=2 or 3": the centre's scheduler would refuse the job after submission
        taken = ", ".join(map(str, sorted(set(counts) | {len(node.gpus)})))
        raise HpcdlError(
            f"ranks_per_node: the job uses {len(held)} of the {len(node.gpus)} GPUs of each "
            f"{_node_of(site.name, kind_name)}, but the site takes {taken} GPU(s) of a node "
            f"(defaults.partial_gpu_counts: {', '.join(map(str, counts))}, or the whole node); ask for one of those"
        )
    if limit is None or request.nodes <= limit or not held or len(held) == len(node.gpus):
        return
    raise HpcdlError(
        f"ranks_per_node: a job of {request.nodes} nodes uses {len(held)} of its {len(node.gpus)} GPUs on each "
        f"{_node_of(site.name, kind_name)}, but the site takes nodes in part only in jobs of at most {limit} "
        f"node(s) (defaults.max_nodes_partial); ask for {len(node.gpus)} ranks per node, or {limit} node(s)"
    )


def _wrapper_gpus_miss(plan: Plan) -> str | None:
    """Where a GPU rank of the plan does not drive GPU <its local rank> alone, as a centre's binding wrapper gives it
    (launch.gpu_bind: wrapper), the first such rank and its GPUs; None where every GPU rank does."""
    for r in plan.local_ranks():
        if r.gpus and r.gpus != (r.local_rank,):
            return f"local rank {r.local_rank} GPU(s) {','.join(map(str, r.gpus))}"
    return None


def _shared_node(site: Site, kind_name: str, use_gpus: bool, nodes: int) -> bool:
    """A GPU job under Slurm or PBS on nodes it does not ask whole (`defaults.exclusive: false`): the centre hands
    a node out by its GPUs, each with its share of the cores (IT4I Karolina: "1 GPU and 16 cores"; CSC Mahti:
    "no more than 32 CPU cores per GPU"), and the other GPUs' cores go to other jobs. PBS alike, whose chunk
    asks the ranks' cores as ncpus (NCAR Casper, "where nodes are typically shared and individual CPU cores are
    scheduled": two of a node's eight V100 with all 36 cores would leave the other six no core to run beside).
    Not a job of so many nodes that the site's scheduler gives them whole anyway (`defaults.whole_nodes_from`;
    OSC: "if you request > 1 nodes, it doesn't matter how many cores you request - you get the whole node")."""
    if not use_gpus or site.job_defaults(kind_name).exclusive or _given_whole(site, kind_name, nodes):
        return False
    # a PBS queue that hands every chunk its node's CPUs (pbs_request: processes, AIST ABCI 3.0's rt_HF) shares no cores
    return site.scheduler == "slurm" or (site.scheduler == "pbs" and site.defaults.pbs_request != "processes")


def _given_whole(site: Site, kind_name: str, nodes: int) -> bool:
    """A job on nodes it does not ask whole that is large enough for the site's scheduler to give them whole
    anyway (`defaults.whole_nodes_from`)."""
    whole_from = site.defaults.whole_nodes_from
    return bool(whole_from) and nodes >= whole_from and not site.job_defaults(kind_name).exclusive


def _cores_of_slots(site: Site, node: NodeKind, slots: list[_Slot], notes: list[str],
                    shared_node: bool = False, nodes: int = 1, kind_name: str = "",
                    by_domain_order: set[int] | None = None) -> list[tuple[int, ...]]:
    """Split the usable cores of each socket (or NUMA domain) evenly and contiguously among its ranks.

    Every rank gets the same number of cores, so one launcher line (`-c7`, `--cpus-per-task`)
    describes them all. Reserved cores are left to the OS and MPI progress (Summit: one per
    socket, so 42 of 44; Stampede2 KNL: 64 of 68; Frontier: the first core of each L3 region).
    """
    reserved = node.reserved_cores_per_socket * node.sockets + len(node.reserved_cores)
    if any(slot.whole_node for slot in slots):
        if reserved:
            notes.append(f"{reserved} core(s) per node left to the OS and MPI progress (site profile)")
        return [tuple(c for socket in range(node.sockets) for c in node.usable_cores_of_socket(socket))]
    # group by NUMA domain only where every rank of the socket has one; a domain pool and the
    # whole socket's pool would overlap
    whole_socket = {s.socket for s in slots if s.domain is None}
    # A socket whose ranks leave some of its NUMA domains empty (JSC JUWELS Booster: 4 GPUs on
    # 8 domains of 6 cores, and the centre runs 12 cores per GPU rank) shares out the whole
    # socket, in the order of the ranks' domains, so no core idles and each rank's block still
    # holds its device's domain; where the blocks would miss a rank's domain, domains it is.
    # GPU ranks sized by the node, not their GPU's socket (defaults.gpu_rank_cores: node, with launch.rank_cpus:
    # gpu-local, each finding its cores near its GPU at run time): each takes its share of the node's cores, one pool
    # over the node (Warwick's Sulis: "128 [cores] which does not divide equally over the 3 A100 GPUs ... request 42
    # CPUs per task", three such tasks on a node), where the sockets the profile assumes for its GPUs would give two
    # ranks of one socket 32 each
    node_wide = (site.defaults.gpu_rank_cores == "node" and site.launch.rank_cpus == "gpu-local" and bool(slots)
                 and all(slot.gpus for slot in slots))
    if node_wide:
        by_domain_order = set()
    elif by_domain_order is None:
        by_domain_order = _sockets_shared_by_domain_order(node, slots)
    whole_socket |= by_domain_order
    said: list[str] = []  # notes, kept until the cores are settled
    groups: dict[tuple[int, int | None], list[int]] = {}
    for i, slot in enumerate(slots):
        domain = None if slot.socket in whole_socket else slot.domain
        groups.setdefault((-1, None) if node_wide else (slot.socket, domain), []).append(i)

    def usable(key: tuple[int, int | None]) -> tuple[int, ...]:
        socket, domain = key
        if socket < 0:  # the node's one pool (node_wide)
            return tuple(c for s in range(node.sockets) for c in node.usable_cores_of_socket(s))
        return node.usable_cores_of_socket(socket) if domain is None else node.usable_cores_of_domain(domain)

    per_rank = min(len(usable(key)) // len(members) for key, members in groups.items())
    if node.default_cores_per_rank and per_rank > node.default_cores_per_rank:
        per_rank = node.default_cores_per_rank
        said.append(f"{per_rank} cores per rank from the site profile")
    if shared_node and node.gpus and all(slot.gpus for slot in slots):
        # a rank on a node the job shares takes the cores that come with its GPUs, not its socket's
        per_gpu = node.usable_cores // len(node.gpus)
        share = per_gpu * min(len(slot.gpus) for slot in slots)
        if 0 < share < per_rank:
            per_rank = share
            said.append(f"{per_gpu} cores per GPU: the job shares its nodes (defaults.exclusive: false), and each "
                        "GPU comes with its share of the node's cores")
    cap = node.defaults.max_job_cpus
    if cap:
        # the centre's cap on a job's CPUs (UAB Cheaha: "up to 64 cpus per job"): each rank its share, whole cores
        ranks = nodes * len(slots)
        capped = cap // ranks // node.cpus_per_core
        if capped < 1:
            raise HpcdlError(f"ranks_per_node: {ranks} ranks of a job on {site.name} need a core each, more than "
                             f"the {cap} CPUs a job may hold (node_kinds.{kind_name}.defaults.max_job_cpus {cap}); "
                             "ask for fewer ranks or nodes")
        if capped < per_rank:
            per_rank = capped
            said.append(f"{per_rank} cores per rank: a job holds at most {cap} CPUs on this node kind "
                        f"(node_kinds.{kind_name}.defaults.max_job_cpus), {ranks} ranks share them")
    if per_rank < 1:
        key, members = min(groups.items(), key=lambda kv: len(usable(kv[0])) / len(kv[1]))
        where = ("the node's sockets" if key[0] < 0
                 else f"socket {key[0]}" + (f" (NUMA domain {key[1]})" if key[1] is not None else ""))
        raise HpcdlError(
            f"ranks_per_node: {len(members)} ranks on {where} of a {site.name} node but it has "
            f"{len(usable(key))} usable cores; ask for fewer ranks per node"
        )
    cores: list[tuple[int, ...]] = [()] * len(slots)
    for key, members in groups.items():
        pool = usable(key)
        if key[1] is None and key[0] in by_domain_order:
            # each rank's share of the socket, in the order of its device's domain
            members = sorted(members, key=lambda i: slots[i].domain)
            share = len(pool) // len(members)
            for k, i in enumerate(members):
                cores[i] = pool[k * share : k * share + per_rank]
            continue
        for k, i in enumerate(members):
            cores[i] = pool[k * per_rank : (k + 1) * per_rank]
    # A block narrower than the socket's share (a job on part of a node the job shares, IT4I Karolina's one GPU
    # with its 16 cores; a profile's cores per rank) can miss its rank's domain, or hold only part of it beside
    # another's: that socket's ranks keep to their own domains after all
    def holds_its_domain(i: int) -> bool:
        block, domain = set(cores[i]), set(node.usable_cores_of_domain(slots[i].domain))
        if domain <= block or block <= domain:
            return True
        # ranks whose devices share the domain: their blocks together hold it (_blocks_hold_domain)
        if node.shared_domain_cores != "spill":
            return False
        mates = [j for j in range(len(slots)) if slots[j].socket == slots[i].socket and slots[j].domain == slots[i].domain]
        return len(mates) > 1 and domain <= {c for j in mates for c in cores[j]}

    missed = {slots[i].socket for i in range(len(slots)) if slots[i].socket in by_domain_order and not holds_its_domain(i)}
    for socket in sorted(missed if node.shared_domain_cores == "spill" else ()):
        runs = _domain_runs(node, slots, socket, per_rank)
        if runs is not None:  # ranks sharing a domain: a run of blocks that holds it (a node the job shares)
            for i, block in runs.items():
                cores[i] = block
            missed.discard(socket)
    if missed:
        return _cores_of_slots(site, node, slots, notes, shared_node, nodes, kind_name, by_domain_order - missed)
    notes.extend(said)
    if reserved:
        notes.append(f"{reserved} core(s) per node left to the OS and MPI progress (site profile)")
    idle = node.sockets * node.usable_cores_per_socket - per_rank * len(slots)
    if idle > 0:
        notes.append(f"{per_rank} cores per rank; {idle} usable core(s) per node stay idle so every rank gets the same")
    return cores


def _sockets_shared_by_domain_order(node: NodeKind, slots: list[_Slot]) -> set[int]:
    """Sockets whose ranks all have a NUMA domain but leave some of its domains without a rank, and
    where sharing the socket's cores out contiguously, in the order of the ranks' domains, gives
    every rank a block that holds cores of its own domain."""
    found = set()
    for socket in {s.socket for s in slots}:
        members = [s for s in slots if s.socket == socket]
        if any(s.domain is None for s in members):
            continue
        domains = range(socket * node.domains_per_socket, (socket + 1) * node.domains_per_socket)
        if all(any(s.domain == d for s in members) for d in domains):
            continue  # every domain has a rank: each rank keeps to its own domain
        pool = node.usable_cores_of_socket(socket)
        share = len(pool) // len(members)
        ordered = sorted(members, key=lambda s: s.domain)
        if not share:
            continue
        if node.shared_domain_cores == "spill":
            blocks: dict[int, set[int]] = {}  # each domain's ranks' blocks together
            for k, s in enumerate(ordered):
                blocks.setdefault(s.domain, set()).update(pool[k * share:(k + 1) * share])
            if all(_blocks_hold_domain(node, d, block, sum(s.domain == d for s in members))
                   for d, block in blocks.items()):
                found.add(socket)
            elif len({s.domain for s in members}) < len(members):
                # ranks share a domain: once the cores per rank are known, each domain's ranks take a run of blocks
                # that holds it (_domain_runs; NHR@FAU Alex's three GPUs of a node the job shares, two on domain 3
                # and one on domain 1, 16 cores each); where no run fits, the ranks keep to their domains after all
                found.add(socket)
        elif all(any(node.domain_of_core(c) == s.domain for c in pool[k * share:(k + 1) * share])
                 for k, s in enumerate(ordered)):
            found.add(socket)
    return found


def _domain_runs(node: NodeKind, slots: list[_Slot], socket: int, per_rank: int) -> dict[int, tuple[int, ...]] | None:
    """With `shared_domain_cores: spill`, where a socket's share-out misses a domain that several ranks' devices
    share (NHR@FAU Alex: a job of two A100 on a node it shares, both GPUs nearest NUMA domain 3, 16 cores each):
    each domain's ranks take one run of blocks of the socket's cores that ends with the domain's last core, so the
    run holds the domain, rank by rank (Alex: 32-47 and 48-63). None where no domain is shared, or the runs would
    overlap or miss their domain: the ranks then keep to their domains."""
    members = [i for i, slot in enumerate(slots) if slot.socket == socket]
    by_domain: dict[int, list[int]] = {}
    for i in members:
        by_domain.setdefault(slots[i].domain, []).append(i)
    if all(len(group) == 1 for group in by_domain.values()):
        return None
    pool = list(node.usable_cores_of_socket(socket))
    runs: dict[int, tuple[int, ...]] = {}
    taken: set[int] = set()
    for domain, group in by_domain.items():
        cores = list(node.usable_cores_of_domain(domain))
        length = per_rank * len(group)
        end = pool.index(cores[-1]) + 1
        start = max(0, end - length)
        run = pool[start:start + length]
        if len(run) < length or taken & set(run) or not (set(cores) <= set(run) or set(run) <= set(cores)):
            return None
        taken |= set(run)
        for k, i in enumerate(group):
            runs[i] = tuple(run[k * per_rank:(k + 1) * per_rank])
    return runs


def _blocks_hold_domain(node: NodeKind, domain: int, block: set[int], ranks: int) -> bool:
    """With `shared_domain_cores: spill`, whether the socket's share-out gives a NUMA domain's ranks its
    cores: one rank's block holds cores of its domain; the blocks of several ranks whose devices share a
    domain (NHR@FAU Alex: two A100 on each of four of a socket's domains) hold the whole domain between
    them, one rank on it and the others on the empty domains beside it."""
    cores = set(node.usable_cores_of_domain(domain))
    return bool(block & cores) if ranks == 1 else cores <= block


def _threads_per_rank(node: NodeKind, request: JobRequest, cores_per_rank: int, notes: list[str]) -> int:
    # the hardware threads the batch system gives the rank: Slurm's -c unit (scheduler_cpus_per_core)
    hw_threads = cores_per_rank * node.cpus_per_core
    if request.threads_per_rank is not None:
        threads = request.threads_per_rank
    elif node.default_threads_per_rank is not None:
        threads = min(node.default_threads_per_rank, cores_per_rank)
        notes.append(f"{threads} OpenMP threads per rank from the site profile")
    else:
        # One thread per physical core: on Stampede2 KNL, MKL-DNN was fastest with 64 threads on
        # 64 cores and more hardware threads per core were slower; Intel's CPU guidance sets
        # OMP_NUM_THREADS = intra-op threads = physical cores.
        threads = cores_per_rank
    if threads > hw_threads:
        raise HpcdlError(
            f"threads_per_rank: {threads} threads but each rank has {cores_per_rank} cores x {node.cpus_per_core} "
            f"hardware threads = {hw_threads}; ask for at most {cores_per_rank} (one per core, the fastest on "
            "Stampede2 KNL) or fewer ranks per node"
        )
    if threads > cores_per_rank:
        notes.append(
            f"{threads} threads on {cores_per_rank} cores share cores through SMT; one thread per core was faster "
            "for MKL-DNN on KNL"
        )
    return threads


def _node_of(site_name: str, kind_name: str) -> str:
    """'local node', 'perlmutter gpu node': a kind called `node` is not named twice."""
    return f"{site_name} node" if kind_name == "node" else f"{site_name} {kind_name} node"


def _resolve_distributed(request: JobRequest, use_gpus: bool) -> str:
    if request.framework == "tensorflow" and request.distributed == "horovod":
        from hpcdl.train.backends import HOROVOD_TF_INSTEAD_PLAN, HOROVOD_TF_PROBLEM  # the trainer says it later

        raise HpcdlError(f"distributed: {HOROVOD_TF_PROBLEM}; {HOROVOD_TF_INSTEAD_PLAN}")
    if request.distributed != "auto":
        if request.distributed == "nccl" and not use_gpus:
            raise HpcdlError("distributed: nccl needs GPUs; use gloo or mpi on CPU nodes")
        return request.distributed
    return "nccl" if use_gpus else "gloo"
