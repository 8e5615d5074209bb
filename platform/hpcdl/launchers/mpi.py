"""The launchers centres use. Each returns the launch line up to the program."""

from __future__ import annotations

from hpcdl.launchers.base import (Launcher, LaunchPlan, cores_per_rank, gpu_total_uneven, gpus_per_rank, launchers,
                                  slurm_gpu_style)
from hpcdl.shell import Expanding
from hpcdl.sites.schema import NodeKind, Site, mpirun_option_of, option_value, srun_cpu_bind_of

# set by the job script for torch.distributed's rendezvous; launchers that copy only named
# variables to remote nodes must carry these too
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT")

# the file each batch system writes with the job's hosts, one line per slot (launch.hostfile)
HOSTFILE = {"pbs": "${PBS_NODEFILE}", "lsf": "${LSB_DJOB_HOSTFILE}"}


def exported(plan: LaunchPlan) -> set[str]:
    """The variables the job script sets for its ranks: a launcher that copies only named ones names these."""
    return {*plan.env, *plan.env_paths, *RENDEZVOUS_ENV, *(("TMPDIR",) if plan.tmpdir else ())}


@launchers.register("local")
class LocalLauncher(Launcher):
    """hpcdl's own launcher: starts the ranks of one node as processes and watches them."""

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        return ["hpcdl", "launch", "--nproc", str(plan.ranks_per_node), "--"]


@launchers.register("mpirun")
class OpenMpiLauncher(Launcher):
    """Open MPI's mpirun: ranks per node and cores per rank with --map-by ppr:R:node:PE=C."""

    binds_cores = True

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        argv = ["mpirun"]
        if site.launch.mpirun_layout == "command":
            # the centre's own mpirun command lays the ranks out and binds them from its own options and the
            # allocation (N8 CIR Bede: "bede-mpirun --bede-par 1ppg", one process per GPU), and its line names no
            # count, mapping or binding: none is written, and each rank binds itself to its cores from plan.json
            pass
        elif site.launch.mpirun_layout == "count":
            # the centre's line names the rank count alone (JHU ARCH's Rockfish: "mpirun -np 8 bin/gmx_mpi" under
            # "#SBATCH --ntasks-per-node=8"): Open MPI fills each node's slots, the header's tasks
            # (SLURM_TASKS_PER_NODE), node by node, so local rank i is the plan's; no --map-by or --bind-to is
            # written, and each rank binds itself to its cores from plan.json
            argv += ["-np", str(plan.world_size)]
            if (site.defaults.batch_request == "cores" and plan.nodes > 1
                    and not site.launch.ranks_per_node_option):
                # a header of the job's cores as one-CPU tasks (CU Boulder Alpine) gives each node more slots than
                # ranks, and -np alone would fill the first node's: on several nodes the line names each node's
                # ranks (Open MPI's "--map-by ppr:N:node"), still no binding; on one node the count alone, as the
                # centre writes it
                argv += ["--map-by", f"ppr:{plan.ranks_per_node}:node"]
        elif site.launch.mpirun_binds_no_rank:
            argv += ["-np", str(plan.world_size)]
            # the centre's own -bind-to none (PSC's Bridges-2 lines), kept in launch.args as written: mpirun
            # binds no rank and each binds itself to the plan's cores from plan.json, so no PE= either; a
            # mapping of the centre's own (PSC: -map-by slot, filling the slots the header's --ntasks-per-node
            # gives each node) is kept too
            if mpirun_option_of(site.launch.args, "map-by") is None:
                argv += ["--map-by", f"ppr:{plan.ranks_per_node}:node"]
            elif site.scheduler == "slurm" and site.defaults.batch_request == "nodes":
                # a header of nodes alone gives no node its ranks: the line says them, Open MPI's -N ("Launch num
                # processes per node on all allocated nodes"), as EPCC's Cirrus lines do beside -map-by slot
                argv += ["-N", str(plan.ranks_per_node)]
        else:
            argv += ["-np", str(plan.world_size),
                     "--map-by", f"ppr:{plan.ranks_per_node}:node:PE={cores_per_rank(plan)}", "--bind-to", "core"]
        if site.launch.hostfile:
            # an Open MPI without the batch system's launch support knows only the node it starts on
            argv += ["--hostfile", Expanding(HOSTFILE[site.scheduler])]
        if site.launch.ranks_per_node_option:
            # the centre's own launcher takes each node's ranks as an option of its own (HPC-UGent's mympirun:
            # "--hybrid N", "the number of processes started on each available physical node"), or the centre's
            # Open MPI line beside its count names them (CSD3's "mpirun -npernode $mpi_tasks_per_node -np $np"): the
            # plan's
            argv += [site.launch.ranks_per_node_option, str(plan.ranks_per_node)]
        if site.launch.env_list_option:
            # ... and the variables to carry as one comma-separated list, where it takes no -x (mympirun:
            # "--variablesprefix. This option requires a comma-seperated list of strings")
            argv += [site.launch.env_list_option, ",".join(sorted(exported(plan)))]
        else:
            for name in sorted(exported(plan)):
                argv += ["-x", name]
        return argv + list(site.launch.args)


@launchers.register("mpiexec")
class HydraLauncher(Launcher):
    """MPICH/Intel MPI Hydra mpiexec."""

    binds_cores = True

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        argv = ["mpiexec", "-n", str(plan.world_size), "-ppn", str(plan.ranks_per_node)]
        if site.mpi != "intel-mpi":
            # MPICH's Hydra binds with -bind-to; Intel MPI documents its pinning as I_MPI_PIN_* variables
            # (I_MPI_PIN_DOMAIN, set by the plan), one binding language per MPI, never both
            argv += ["-bind-to", f"core:{cores_per_rank(plan)}"]
        argv += ["-genvlist", ",".join(sorted(exported(plan)))]
        return argv + list(site.launch.args)


@launchers.register("srun")
class SrunLauncher(Launcher):
    """Slurm srun: tasks per node, CPUs per task, and the plan's cores and GPUs for each task.

    Where the centre's line is a bare srun under an #SBATCH header that asks the layout
    (`launch.srun_layout: header`: NSC, Princeton, NREL, UQ RCC, Mahidol), the line restates none of it
    (no --nodes, --ntasks, --ntasks-per-node, --cpus-per-task or GPU request): it names only the words
    below that the header cannot give srun, and the job exports SRUN_CPUS_PER_TASK.

    When the plan's ranks sit on consecutive blocks of cores from core 0 (KNL, Perlmutter),
    `--cpus-per-task` with `--cpu-bind=cores` gives exactly them (NERSC affinity guide), with
    `--distribution=block:block` where two ranks share a socket of a multi-socket node (Slurm's
    default hands consecutive tasks cores on alternating sockets). Otherwise
    (reserved cores in the middle, GPUs nearest other cores: Frontier) the plan's own masks are
    passed with `--cpu-bind=mask_cpu:`, as the LUMI-G/Frontier guides do. Where the site's Slurm
    binds tasks itself (`launch.cpu_bind_default`: auto binding, TaskPluginParam=Cores) and the
    centre's lines carry no --cpu-bind (CSCS Alps), the blocks go without one; the planner refuses a
    plan that would need masks there. Where the centre's line is a bare srun and its pages do not say
    how its Slurm binds (`unstated`: SURF, BriCS), or where its Slurm binds no task (`none`: NRIS), the
    line asks no binding and each rank binds itself. GPUs are bound by the
    plan's map with `--gpu-bind=map_gpu:`/`mask_gpu:`, so Slurm gives each task the GPU the plan
    chose, never a different "closest" one, unless the centre's lines say `--gpu-bind=closest` and its
    nearest GPUs are the plan's (`launch.gpu_bind: closest`: Pawsey, NCSA), or none where the centre's launch wrapper
    binds each task's GPU itself (`launch.gpu_bind: wrapper`: EPCC Tursa's gpu_launch.sh). A centre whose own lines say
    `--cpu-bind=none` (JSC) keeps it, in `launch.args`: srun binds no task and each rank binds itself to
    its cores from plan.json; so does a site whose Slurm binds no task and whose lines name no binding
    (`launch.cpu_bind_default: none`, NRIS Olivia), with no binding word at all. A centre whose words say
    `--cpu-bind=cores` (TTU REPACSS) keeps it in `launch.args` beside `launch.rank_cpus: gpu-local`: srun binds each
    task to whole cores, each GPU rank replaces them with whole cores near its GPU, and the line names no
    --distribution of hpcdl's. Where every task sees
    the node's GPUs (`launch.gpu_visibility: node`),
    `--gpu-bind=none`, or nothing where the site's Slurm binds none itself and the centre's lines say
    nothing (`launch.gpu_bind_default: none`: IDRIS).
    """

    binds_cores = True

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        if site.launch.spawner != "none":
            return srun_per_node(plan, site)
        local = plan.local_ranks()
        node = site.node_kinds[plan.node_kind]
        # a bare srun (launch.srun_layout: header) takes the step's nodes, tasks, CPUs per task and GPUs from the
        # #SBATCH header, as the centre's line does: sbatch hands srun the tasks per node and the GPUs
        # (SLURM_NTASKS_PER_NODE, SLURM_GPUS_PER_NODE, a step's GRES "all of the generic resources that have been
        # requested by the job", srun(1)), and the job script exports SRUN_CPUS_PER_TASK for the CPUs
        restate = site.launch.srun_layout == "restate"
        # Slurm's unit: CPUs per core as the site's Slurm counts them (schema: scheduler_cpus_per_core)
        argv = ["srun", *_layout_words(plan, site, plan.ranks_per_node, cores_per_rank(plan) * node.cpus_per_core)]
        if site.defaults.tasks_per_socket and restate:
            # the header's most tasks on one socket, repeated "in every call of srun" (ULHPC), as its Slurm counts sockets
            argv.append(f"--ntasks-per-socket={node.tasks_per_scheduler_socket(min(r.cores) for r in local)}")
        fewer_threads = node.cpus_per_core < node.threads_per_core
        blocks = _in_blocks(plan, site)
        # Slurm hands a task its cores by the second level of --distribution, whose default is cyclic
        # across sockets ("Use the default method for distributing CPUs across sockets (cyclic)",
        # srun(1) 22.05): local task 1 takes socket 1's first cores, not the block after task 0's
        # (unless the site's slurm.conf says CR_Core_Default_Dist_Block, which hpcdl cannot know).
        # The same as the plan's blocks only where no socket holds two ranks.
        if _socket_lays_otherwise(plan, site):
            blocks = False  # the centre's own distribution lays the cores out otherwise: say the plan's masks
        ranks_bind_themselves = _ranks_bind_themselves(plan, site)
        if fewer_threads and (restate or not (blocks or ranks_bind_themselves)):
            # ask for the unit -c was counted in, where that is fewer threads than a core has: the
            # default on Frontier and LUMI-G, what JSC asks of every job ("we strongly recommend
            # --hint=nomultithread (which implies --threads-per-core=1)"), in the centre's words
            # (launch.threads_request); srun takes no --hint beside --cpu-bind, so masks keep the other.
            # A bare srun under the header (srun_layout: header) has it from the header: sbatch's --hint and
            # --threads-per-core reach srun as SLURM_HINT and SLURM_THREADS_PER_CORE (a real slurmd 22.05 bound a
            # bare srun's tasks to one thread of each core under '#SBATCH --hint=nomultithread'); only beside a
            # mask does the line say it
            argv.append(srun_threads_word(plan, site))
        if ranks_bind_themselves:
            # (the centre's own --cpu-bind=cores beside rank_cpus: gpu-local, REPACSS, kept in launch.args as written:
            # each task bound to whole cores, which its rank replaces with whole cores near its GPU)
            # the centre's own --cpu-bind=none (JSC's deep-learning jobs), kept in launch.args as written, a Slurm that
            # binds no task by itself (launch.cpu_bind_default: none, NRIS Olivia), or a bare srun whose centre does not
            # say how its Slurm binds (unstated: SURF, BriCS): srun is asked for no binding, and each rank binds itself
            # to the plan's cores from plan.json, so no layout is asked either
            pass
        elif blocks:
            if ((_shares_a_socket(plan, site) or _spread_by_default(plan, site))
                    and _site_option(site, "--distribution", "-m") is None
                    and site.launch.distribution_default != "block"):
                # consecutive tasks fill a socket before the next, as the plan's blocks do (srun(1): "block
                # ... distribute allocated CPUs consecutively from the same socket for binding to tasks,
                # before using the next consecutive socket"); the first level, block, is srun's own default
                argv.append("--distribution=block:block")
            # (a site whose Slurm lays tasks out in blocks by default, launch.distribution_default: block, gives the
            # plan's blocks with none, as the centre's lines name none)
            if not site.launch.slurm_binds_tasks and not fewer_threads and not site.launch.srun_centre_binds_cores:
                # (the centre's own --cpu-bind=cores in launch.args binds a plan of blocks as this would, beside
                # rank_cpus: gpu-local, on a plan without GPUs: the planner refuses one it would not give)
                # in the unit the centre's line names (launch.cpu_bind_unit: JSC's JUPITER tutorial says sockets),
                # where that unit gives each rank exactly its cores
                unit = site.launch.cpu_bind_unit
                argv.append(f"--cpu-bind={unit}" if unit == "cores" or sockets_binding_misses(plan, site) is None
                            else "--cpu-bind=cores")
            # else the site's Slurm binds each task to its block of cores by itself, as the centre's lines rely on
            # (launch.cpu_bind_default: task/affinity's auto binding or TaskPluginParam=Cores), and the line names
            # no --cpu-bind, as theirs do; or --threads-per-core binds it, which "Implies --cpu-bind=threads"
            # (srun(1)): one thread of each of its cores, the plan's cpus, where --cpu-bind=cores would override
            # that and bind both threads of every core (a real slurmd 22.05, tests/test_slurm_binding.py), as
            # the centres' lines (EPCC's --hint=nomultithread, IDRIS's) name no --cpu-bind
        else:
            argv.append("--cpu-bind=mask_cpu:" + ",".join(_hex_mask(r.cpus) for r in local))
        plugin = srun_mpi_plugin(site)
        if plugin and _site_mpi(site) is None:  # a --mpi= in the site's own launch.args is written there
            argv.append(f"--mpi={plugin}")
        gpus_used = sorted({g for r in local for g in r.gpus})
        if gpus_used and site.defaults.gpu_request != "none":
            # (where the GPUs come with the node, defaults.gpu_request: none, Slurm has no GPU GRES to
            # bind: each rank takes its GPU from plan.json)
            # in the style the centre's submit filter counts (defaults.gpu_request)
            style = slurm_gpu_style(site, plan.nodes, len(gpus_used)) if site.scheduler == "slurm" else None
            if restate:  # (a bare srun's step has the job's GPUs of each node: srun_layout: header)
                argv += _gpu_words(plan, site, style, len(gpus_used))
            per_task = gpus_per_rank(plan)
            if site.launch.gpu_bind == "wrapper":
                # the centre's wrapper binds each task's GPU itself from its local rank (EPCC Tursa: "You must use the
                # gpu_launch.sh wrapper script to get the correct biniding of GPU to MPI processes"), and the
                # centre's line names no --gpu-bind: the step's GPUs reach every task for the wrapper to pick from
                pass
            elif site.launch.gpu_bind == "closest" and closest_gpus_misses(plan, site) is None:
                # Slurm gives each task the GPUs nearest its cores, in the centre's words (Pawsey, NCSA); where
                # those are not the plan's (one rank on every core driving one GPU), the plan's map below
                argv.append("--gpu-bind=closest")
            elif (style == "gpus-per-task" and all(r.gpus == tuple(range(i * per_task, (i + 1) * per_task))
                                                 for i, r in enumerate(local))
                  and (restate or site.defaults.total_gpus
                       or any(d.startswith("--gpu-bind") for d in site.defaults.directives))):
                # Slurm hands local task i its own GPUs in order ("--gpus-per-task is equivalent to
                # setting CUDA_VISIBLE_DEVICES to SLURM_LOCALID", CSCS's GH200 Slurm page): where that
                # is the plan's map, CSCS's line has no --gpu-bind and neither does this one. Not so for a bare
                # srun (launch.srun_layout: header) that only inherits the header's --gpus-per-task: a real slurmd
                # 22.05 gave its tasks no GPU of their own (no CUDA_VISIBLE_DEVICES; tests/test_slurm_shapes.py,
                # msu-icer-gpu: '--ntasks-per-node=4 --gpus-per-task=h200:1') unless the header also says a --gpu-bind
                # (WarpX's Great Lakes job: "#SBATCH --gpu-bind=single:1") or asks the job's total GPUs beside it
                # (defaults.total_gpus, UFRC's HiPerGator: '--gpus=16 --gpus-per-task=1', whose tasks the same slurmd
                # gave their own GPUs), so such a line binds the plan's map below
                pass
            elif site.launch.gpu_visibility == "node":
                # every task sees the node's GPUs: NERSC's Perlmutter examples ask --gpus-per-node
                # with no per-task binding; per-task map binding broke CUDA IPC there (E3SM issue
                # 4834, fixed with --gpu-bind=none, as NERSC staff scripts write it). Where the site's
                # Slurm binds no GPU by itself and the centre's lines say nothing (launch.gpu_bind_default:
                # IDRIS's bare srun), the line says nothing either
                if site.launch.gpu_bind_default != "none":
                    argv.append("--gpu-bind=none")
            elif all(len(r.gpus) == 1 for r in local):
                argv.append("--gpu-bind=map_gpu:" + ",".join(str(r.gpus[0]) for r in local))
            else:
                argv.append("--gpu-bind=mask_gpu:" + ",".join(_hex_mask(r.gpus) for r in local))
        return argv + list(site.launch.args)


def srun_per_node(plan: LaunchPlan, site: Site) -> list[str]:
    """srun starting one task per node, whose per-node launcher (launch.spawner) spawns the node's ranks: NRIS
    Olivia's `srun torchrun ...` under `--ntasks-per-node=1 --cpus-per-task=72 --gpus-per-node=4`. The task holds
    every CPU of the node's ranks and the node's GPUs the plan uses; srun binds nothing (each rank binds itself to
    its cores and drives its GPU from plan.json), and restates the layout unless the line is a bare srun under the
    header (launch.srun_layout: header, as NRIS writes it)."""
    node = site.node_kinds[plan.node_kind]
    restate = site.launch.srun_layout == "restate"
    argv = ["srun", *_layout_words(plan, site, 1, node_task_cpus(plan, site))]
    if restate and node.cpus_per_core < node.threads_per_core:
        argv.append(threads_option(site, node, False))
    plugin = srun_mpi_plugin(site)
    if plugin and _site_mpi(site) is None:
        argv.append(f"--mpi={plugin}")
    gpus_used = sorted({g for r in plan.local_ranks() for g in r.gpus})
    if gpus_used and site.defaults.gpu_request != "none":
        if restate:  # (a bare srun's step has the job's GPUs of each node)
            argv += _gpu_words(plan, site, slurm_gpu_style(site, plan.nodes, len(gpus_used)), len(gpus_used))
        if site.launch.gpu_bind_default != "none":
            argv.append("--gpu-bind=none")  # the one task sees the node's GPUs; each rank drives its own
    return argv + list(site.launch.args)


def _layout_words(plan: LaunchPlan, site: Site, tasks_per_node: int, cpus_per_task: int) -> list[str]:
    """The step's layout on srun's line: all of it where the line restates the #SBATCH header (launch.srun_layout:
    restate), else only the nodes, the tasks, the tasks per node or the CPUs per task a centre's otherwise bare line
    still names (launch.srun_restates)."""
    tasks = plan.nodes * tasks_per_node
    if site.launch.srun_layout == "restate":
        return [f"--nodes={plan.nodes}", f"--ntasks={tasks}", f"--ntasks-per-node={tasks_per_node}",
                f"--cpus-per-task={cpus_per_task}"]
    return [word for name, word in (("nodes", f"--nodes={plan.nodes}"), ("ntasks", f"--ntasks={tasks}"),
                                    ("ntasks-per-node", f"--ntasks-per-node={tasks_per_node}"),
                                    ("cpus-per-task", f"--cpus-per-task={cpus_per_task}"))
            if name in site.launch.srun_restates]


def _gpu_words(plan: LaunchPlan, site: Site, style: str | None, used: int) -> list[str]:
    """The step's GPUs (`used` of each node) in the style the centre's submit filter counts (defaults.gpu_request),
    as Slurm's [type:]number, with the GRES type where the centre names it (CSC: --gres=gpu:a100:4)."""
    node = site.node_kinds[plan.node_kind]
    typed = f"{node.defaults.gpu_type}:" if node.defaults.gpu_type else ""
    if style == "gres":
        return [f"--gres=gpu:{typed}{used}"]
    if style == "gpus-per-task":
        # the header names no GPUs (defaults.batch_request: nodes): the step asks its GPUs per node itself, then
        # each task's ("--gres=gpu:8 --gpus-per-task=1", Pawsey)
        per_node = [f"--gres=gpu:{typed}{used}"] if site.defaults.batch_request == "nodes" else []
        return [*per_node, f"--gpus-per-task={typed}{gpus_per_rank(plan)}"]
    if style == "gpus" and not gpu_total_uneven(plan.nodes, used, len(node.gpus)):
        # the step's total, as the job asks it (PSC Bridges-2: --gpus=v100-32:16 on two nodes); a total Slurm could
        # lay out unevenly (part of each of several nodes) is asked per node
        return [f"--gpus={typed}{used * plan.nodes}"]
    return [f"--gpus-per-node={typed}{used}"]


def node_task_cpus(plan: LaunchPlan, site: Site) -> int:
    """The CPUs of the one task a node's spawner runs in (launch.spawner): every CPU of the node's ranks, in the
    unit the site's Slurm counts (scheduler_cpus_per_core)."""
    return plan.ranks_per_node * cores_per_rank(plan) * site.node_kinds[plan.node_kind].cpus_per_core


def spawner_argv(plan: LaunchPlan, site: Site) -> list[str]:
    """The per-node launcher's words (launch.spawner), between the container runtime and the program; each word from
    the plan or the job's rendezvous, none of one machine.

    torchrun, as the centres publish it under srun (NRIS Olivia: `srun torchrun --nnodes="${SLURM_JOB_NUM_NODES}"
    --nproc_per_node="${SLURM_GPUS_ON_NODE}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_backend=c10d
    --rdzv_endpoint="${head_node}:29500"`): the plan's nodes and ranks per node, the job's id, the c10d rendezvous at
    the job's MASTER_ADDR:MASTER_PORT, and --no-python, since the program is a command (hpcdl train), not a Python
    file ("Skip prepending the training script with 'python' - just execute it directly", torchrun --help); with
    launch.spawner_one_node a one-node job's torchrun takes --standalone, or its job's id and a rendezvous at localhost,
    in place of the rendezvous words; with
    launch.spawner_rendezvous: static its nodes meet statically, each told its rank (SLURM_NODEID, read on the node).
    hpcdl: `hpcdl launch --nproc N --nnodes M --`, its node's rank from SLURM_NODEID."""
    one_node = site.launch.spawner_one_node if plan.nodes == 1 else "rendezvous"
    if site.launch.spawner == "torchrun" and one_node == "standalone":
        # launch.spawner_one_node: standalone (NRIS Saga: `torchrun --standalone --nnodes=1 --nproc_per_node=...`): one
        # node's local rendezvous on a free port ("--standalone: Useful when launching single-node, multi-worker job")
        return ["torchrun", "--standalone", "--nnodes=1", f"--nproc_per_node={plan.ranks_per_node}", "--no-python"]
    if site.launch.spawner == "torchrun" and one_node == "localhost":
        # launch.spawner_one_node: localhost (MIT ORCD: `torchrun --nnodes=1 --nproc_per_node=4 --rdzv_id=$SLURM_JOB_ID
        # --rdzv_endpoint="localhost:1234"`, "Use `localhost` when there is only one node"): no backend named, torchrun's
        # default (static), meeting on the node itself at the job's port
        return ["torchrun", "--nnodes=1", f"--nproc_per_node={plan.ranks_per_node}", Expanding("--rdzv_id=${SLURM_JOB_ID}"),
                Expanding("--rdzv_endpoint=localhost:${MASTER_PORT}"), "--no-python"]
    if site.launch.spawner == "torchrun" and site.launch.spawner_rendezvous == "static":
        # launch.spawner_rendezvous: static (RWTH HPC on CLAIX-2023: `--node_rank ${SLURM_NODEID} --master_addr
        # ${MASTER_ADDR} --master_port ${MASTER_PORT}`): each node's rank is its own SLURM_NODEID, which only the
        # node's task has (the batch shell's is node 0's), so a bash the task runs expands it there, as the centre's
        # `bash -c '... train.sh'` does; the words are the plan's numbers and variable references, nothing else
        words = (f"--nnodes={plan.nodes} --nproc_per_node={plan.ranks_per_node} "
                 '--node_rank="${SLURM_NODEID}" --master_addr="${MASTER_ADDR}" --master_port="${MASTER_PORT}" --no-python')
        return ["/bin/bash", "-c", f'exec torchrun {words} "$@"', "bash"]
    if site.launch.spawner == "torchrun":
        return ["torchrun", f"--nnodes={plan.nodes}", f"--nproc_per_node={plan.ranks_per_node}",
                Expanding("--rdzv_id=${SLURM_JOB_ID}"), "--rdzv_backend=c10d",
                Expanding("--rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT}"), "--no-python"]
    if site.launch.spawner == "hpcdl":
        return ["hpcdl", "launch", "--nproc", str(plan.ranks_per_node), "--nnodes", str(plan.nodes), "--"]
    return []


def srun_threads_word(plan: LaunchPlan, site: Site) -> str | None:
    """The srun option that asks the hardware threads per core Slurm counts for this plan (threads_option), None
    where Slurm counts all of a core's threads; the job's header asks the same (--hint or --threads-per-core)."""
    node = site.node_kinds[plan.node_kind]
    if node.cpus_per_core >= node.threads_per_core:
        return None
    blocks = _in_blocks(plan, site) and not _socket_lays_otherwise(plan, site)
    return threads_option(site, node, blocks or _ranks_bind_themselves(plan, site))


def _ranks_bind_themselves(plan: LaunchPlan, site: Site) -> bool:
    """srun's line asks no binding of hpcdl's and each rank binds itself: srun binds no task (the centre's
    --cpu-bind=none, launch.cpu_bind_default none or unstated), or the ranks find their cores near their GPU at run
    time (launch.rank_cpus: gpu-local), replacing whatever binding the site's Slurm gives by itself (cpu_bind_default
    auto or cores) or the centre's own --cpu-bind=cores gives (whole cores): no plan of cores to lay out, no
    --distribution."""
    return site.launch.srun_binds_no_task or plan.rank_cpus == "gpu-local"


def threads_option(site: Site, node: NodeKind, blocks: bool) -> str:
    """The srun/sbatch option that asks the hardware threads per core Slurm counts, where fewer than the
    core has: --hint=nomultithread where the centre writes it (launch.threads_request: hint) and one is
    asked with no mask beside it, else --threads-per-core=N. Either binds a task to that many threads
    of each of its cores (srun(1): --threads-per-core "Implies --cpu-bind=threads"; a real slurmd 22.05
    bound one thread per core under each)."""
    if (site.launch.threads_request == "hint" and node.cpus_per_core == 1 and blocks
            and srun_cpu_bind_of(site.launch.args) is None  # nor beside the centre's own --cpu-bind=none
            and site.launch.cpu_bind_default != "none"):  # nor where the site's Slurm binds no task
        return "--hint=nomultithread"
    return f"--threads-per-core={node.cpus_per_core}"


def _off_block(plan: LaunchPlan, site: Site):
    """The first local rank not on its block of cores (local rank i on the i-th block of the node's usable
    cores from the first: what Slurm gives a task by --cpus-per-task, the socket layout aside, with no mask)
    and that block; None where every rank is on its own. The blocks skip the node's reserved cores
    (reserved_cores, reserved_cores_per_socket), which Slurm never hands a job (slurm.conf CpuSpecList:
    they are posed so in the test Slurm), so a rank whose cores step over them is still on its block
    (TU Dresden ZIH Capella: "8 cores per node are unavailable for jobs: 6-7, 14-15, 46-47, and 62-63",
    local rank 0 on cores 0-5, 8-13, 16-17)."""
    c = cores_per_rank(plan)
    node = site.node_kinds[plan.node_kind]
    usable = [core for s in range(node.sockets) for core in node.usable_cores_of_socket(s)]
    for i, r in enumerate(plan.local_ranks()):
        block = tuple(usable[i * c:(i + 1) * c])
        if r.cores != block:
            return r, block
    return None


def _in_blocks(plan: LaunchPlan, site: Site) -> bool:
    return _off_block(plan, site) is None


def _shares_a_socket(plan: LaunchPlan, site: Site) -> bool:
    """Two local ranks share a socket of a multi-socket node."""
    node = site.node_kinds[plan.node_kind]
    local = plan.local_ranks()
    return node.sockets > 1 and len({r.socket for r in local}) < len(local)


def _spread_by_default(plan: LaunchPlan, site: Site) -> bool:
    """The site's Slurm deals a task's own CPUs over the sockets in turn (launch.distribution_default:
    fcyclic; srun(1): "Tasks requiring more than one CPU will have each CPUs allocated in a cyclic
    fashion across sockets"), and a local rank holds several cores of one socket of a multi-socket node:
    Slurm would split them between the sockets (TU Dresden ZIH's default "will split the cores
    allocated to a rank between the sockets of a node"), so the line names the distribution."""
    return site.launch.distribution_default == "fcyclic" and _one_socket_ranks(plan, site)


def _one_socket_ranks(plan: LaunchPlan, site: Site) -> bool:
    """A local rank holds several cores, all on one socket of a multi-socket node."""
    node = site.node_kinds[plan.node_kind]
    return node.sockets > 1 and any(len(r.cores) > 1 and len({node.socket_of_core(c) for c in r.cores}) == 1
                                    for r in plan.local_ranks())


def default_binding_misses(plan: LaunchPlan, site: Site) -> str | None:
    """Why the site's Slurm, binding tasks by itself (launch.cpu_bind_default), would not put each
    local rank on the plan's cores; None where it would.

    Auto binding binds each task to its `--cpus-per-task` CPUs where the step holds exactly tasks x
    cpus-per-task whole sockets, cores or threads (srun(1) --cpu-bind, "Auto Binding"), and
    TaskPluginParam=Cores or CpuBind=core binds to cores; either lays the tasks out by
    --distribution, as --cpu-bind=cores does, on the real slurmd 22.05 (tests/test_slurm_binding.py).
    A plan's rank holds whole cores (-c is its cores times the CPUs Slurm counts per core), so the
    step always holds whole cores; where Slurm counts fewer of a core's threads than it has, the line's
    --threads-per-core "Implies --cpu-bind=threads" (srun(1)), one thread of each core. What neither
    gives is a mask: the plan's cores must be consecutive blocks from core 0, laid out over the
    sockets as the line's distribution lays them."""
    if (off := _off_block(plan, site)) is not None:
        rank, block = off
        return (f"the plan puts local rank {rank.local_rank} on cores {_cpu_ranges(list(rank.cores))}, where Slurm's "
                f"default binding gives it cores {_cpu_ranges(list(block))}; only a mask "
                "(--cpu-bind=mask_cpu) gives the plan's")
    if _socket_lays_otherwise(plan, site):
        return (f"the site's own --distribution {_site_option(site, '--distribution', '-m')} lays the ranks' "
                "cores out over the sockets otherwise than the plan's blocks; only a mask (--cpu-bind=mask_cpu) "
                "gives them")
    return None


def sockets_binding_misses(plan: LaunchPlan, site: Site) -> str | None:
    """Why `--cpu-bind=sockets` (launch.cpu_bind_unit) would not bind each local rank to the plan's cores; None
    where it would.

    srun(1): sockets "Automatically generate masks binding tasks to sockets. Only the CPUs on the socket which have
    been allocated to the job will be used": a task is bound to every allocated CPU of each socket its own CPUs lie
    on, as the site's Slurm counts sockets (scheduler_sockets). That is the plan's binding only where each rank's
    cores are every usable core of those sockets: one rank per socket, or per group of whole sockets, never two
    ranks on one socket (each would be bound to both's cores)."""
    node = site.node_kinds[plan.node_kind]
    sockets = node.scheduler_sockets or node.sockets
    per_socket = node.cores // sockets
    usable = {c for s in range(node.sockets) for c in node.usable_cores_of_socket(s)}
    for r in plan.local_ranks():
        touched = sorted({c // per_socket for c in r.cores})
        whole = sorted(c for s in touched for c in range(s * per_socket, (s + 1) * per_socket) if c in usable)
        if whole != sorted(r.cores):
            return (f"local rank {r.local_rank} holds cores {_cpu_ranges(list(r.cores))}, but the usable cores of "
                    f"its socket(s) {','.join(map(str, touched))} are {_cpu_ranges(whole)}")
    return None


def closest_gpus_misses(plan: LaunchPlan, site: Site) -> str | None:
    """Why `--gpu-bind=closest` (launch.gpu_bind) would not give each local rank the plan's GPUs; None where
    it would.

    srun(1): "closest: Bind each task to the GPU(s) which are closest" to its CPUs, by the node's GPU
    affinity (the NUMA domain, or the socket, each GPU sits beside). That is the plan's choice only where
    the GPUs beside a rank's cores are exactly the rank's own: two GPUs beside one rank's cores, for a
    rank that drives one of them, leave the choice to Slurm. Where the profile names each GPU's own cores
    (gpus[].cores, the site's gres.conf Cores=), Slurm's nearest GPUs are those whose cores the rank's
    cores hold (HPE Cray EX235a: one GCD per 8-core L3 region, two per NUMA domain)."""
    node = site.node_kinds[plan.node_kind]
    by_cores = bool(node.gpus) and all(g.cores for g in node.gpus)
    for r in plan.local_ranks():
        if not r.gpus:
            continue
        if by_cores:
            nearest = sorted(i for i, g in enumerate(node.gpus) if set(g.cores) & set(r.cores))
        else:
            beside = {(node.socket_of_core(c), node.domain_of_core(c) if node.domains_per_socket > 1 else None)
                      for c in r.cores}
            nearest = sorted(i for i, g in enumerate(node.gpus)
                             if (g.socket, g.domain if node.domains_per_socket > 1 else None) in beside)
        if nearest != sorted(r.gpus):
            where = ("cores (gpus[].cores)" if by_cores else
                     "NUMA domain" if node.domains_per_socket > 1 else "socket")
            return (f"local rank {r.local_rank} on cores {_cpu_ranges(list(r.cores))} drives GPU(s) "
                    f"{','.join(map(str, r.gpus))}, but the GPU(s) of its {where} are "
                    f"{','.join(map(str, nearest)) or 'none'}")
    return None


def _socket_lays_otherwise(plan: LaunchPlan, site: Site) -> bool:
    """Two local ranks share a socket of a multi-socket node and the site's own --distribution
    hands consecutive tasks cores on other sockets (its second level not block), or it deals each
    task's own CPUs over the sockets (fcyclic) where a rank's cores sit on one socket."""
    site_dist = _site_option(site, "--distribution", "-m")
    if site_dist is None:
        return False
    level = _socket_level(site_dist)
    return ((_shares_a_socket(plan, site) and level != "block")
            or (level == "fcyclic" and _one_socket_ranks(plan, site)))


def _site_mpi(site: Site) -> str | None:
    """The PMI plugin the site's own `launch.args` give srun (`--mpi=X` or `--mpi X`; "" for a bare
    `--mpi` at the end), None where they give none."""
    return _site_option(site, "--mpi")


def _site_option(site: Site, long: str, short: str | None = None) -> str | None:
    """The value the site's own `launch.args` give an srun option (`--long=X`, `--long X`, `-sX`,
    `-s X`; "" where it ends the line bare), None where they do not give it."""
    return option_value(site.launch.args, long, short=short)


def _socket_level(distribution: str) -> str:
    """The second level of an srun --distribution (how a node's CPUs go to its tasks across sockets):
    `block:cyclic` -> cyclic; `*` where it is not given (Slurm's default, cyclic unless the site's
    slurm.conf says otherwise)."""
    levels = distribution.split(",")[0].split(":")
    return levels[1] if len(levels) > 1 and levels[1] else "*"


def srun_mpi_plugin(site: Site) -> str | None:
    """The PMI plugin srun is told to start ranks with (`--mpi=`), None where it is told none.

    The centre's own choice first: `launch.srun_mpi` (`default`: a plain srun, the site's Slurm
    MpiDefault, which hpcdl cannot know) or a `--mpi=` in `launch.args` (SDSC's Expanse guide:
    `srun --mpi=pmi2`); else `pmix` for Open MPI, whose ranks need a PMI Slurm was built with, and
    none for the others (Slurm's default, MPICH's pmi2)."""
    if site.launch.srun_mpi:
        return None if site.launch.srun_mpi == "default" else site.launch.srun_mpi
    return _site_mpi(site) or ("pmix" if site.mpi == "openmpi" else None)


def _hex_mask(ids) -> str:
    return hex(sum(1 << i for i in ids))


@launchers.register("ibrun")
class IbrunLauncher(Launcher):
    """TACC's ibrun takes the task count and layout from the Slurm allocation."""

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        return ["ibrun", *site.launch.args]


@launchers.register("jsrun")
class JsrunLauncher(Launcher):
    """IBM jsrun: resource sets of C cores and G GPUs, R per host, tasks bound packed.

    One resource set per rank when every rank has the same GPUs count (OLCF Summit guide:
    `jsrun -n<6N> -a1 -c7 -g1 -r6 -bpacked:7`); otherwise one per socket holding that
    socket's ranks (the hybrid per-NIC layout: 2 ranks and 3 GPUs per socket), else one per
    node (the guide's `jsrun -r1 -g6 -a6 -c42 -bpacked:7`). `-c` counts physical cores. A resource
    set that holds the whole node gets every core jsrun may give (LBANN's `--cpu_per_rs ALL_CPUS`), so
    each rank's own cores from the plan lie inside it (a resource set is a cgroup); written as the count
    where the ranks use them all, as OLCF writes it.
    """

    binds_cores = True

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        c = cores_per_rank(plan)
        local = plan.local_ranks()
        per_socket: dict[int, list] = {}
        for r in local:
            per_socket.setdefault(r.socket, []).append(r)
        gpus_used = {g for r in local for g in r.gpus}
        cpus = None  # the resource set's -c: its ranks' cores, unless said below
        if site.launch.gpu_visibility == "node" and gpus_used:
            # one resource set per node holding all its GPUs, so every rank reaches every GPU
            # (a resource set is a cgroup): OLCF's DL guidance `jsrun -r1 -g6 -a6 -c42 -bpacked:7`,
            # the Gordon Bell scripts `jsrun -n ${nnodes} -g 6 -c 42 -a 6`, LBANN on Lassen (with
            # `--cpu_per_rs ALL_CPUS`: the set holds every core, the ranks bind to theirs inside it)
            sets_per_node, tasks, gpus = 1, plan.ranks_per_node, len(gpus_used)
            node = site.node_kinds[plan.node_kind]
            usable = node.usable_cores
            cpus = str(c * tasks) if c * tasks == usable else "ALL_CPUS"
        elif len({len(r.gpus) for r in local}) == 1:
            sets_per_node, tasks, gpus = plan.ranks_per_node, 1, len(local[0].gpus)
        elif len({len(rs) for rs in per_socket.values()}) == 1 and len(
            {sum(len(r.gpus) for r in rs) for rs in per_socket.values()}
        ) == 1:
            first = next(iter(per_socket.values()))
            sets_per_node, tasks, gpus = len(per_socket), len(first), sum(len(r.gpus) for r in first)
        else:
            sets_per_node, tasks, gpus = 1, plan.ranks_per_node, len({g for r in local for g in r.gpus})
        cpus = cpus or str(c * tasks)
        argv = [
            "jsrun",
            f"-n{sets_per_node * plan.nodes}",
            f"-a{tasks}",
            f"-c{cpus}",
            f"-g{gpus}",
            f"-r{sets_per_node}",
            f"-bpacked:{c}",
        ]
        if site.mpi == "spectrum-mpi" and gpus_used and plan.distributed in ("horovod", "mpi"):
            # MPI on GPU buffers: "Not using [--smpiargs=\"-gpu\"] might result in confusing
            # segmentation faults" (OLCF Summit guide); LBANN's Lassen launcher passes it
            argv.append("--smpiargs=-gpu")
        return argv + list(site.launch.args)


@launchers.register("pals")
class PalsLauncher(Launcher):
    """HPE Cray PALS mpiexec under PBS Pro: --ppn ranks per node, --depth CPUs per rank.

    ALCF Polaris/Aurora: `mpiexec -n ${NTOTRANKS} --ppn ${NRANKS_PER_NODE} --depth=${NDEPTH}
    --cpu-bind depth`, each rank on `depth` consecutive CPUs; where the plan's cores are not
    consecutive blocks from CPU 0 (reserved cores, GPU-nearest domains) the plan's own CPUs go
    as `--cpu-bind list:a-b:c-d` (ALCF Aurora's `--cpu-bind list:1-8:9-16:...`). PALS passes the
    job's environment to the ranks.
    """

    binds_cores = True

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        local = plan.local_ranks()
        node = site.node_kinds[plan.node_kind]
        c = cores_per_rank(plan)
        smt = min(node.threads_per_core, -(-plan.threads_per_rank // c))
        argv = ["mpiexec", "-n", str(plan.world_size), "--ppn", str(plan.ranks_per_node)]
        cpus = [sorted(cpu for core in r.cores for cpu in node.cpus_of_core(core)[:smt]) for r in local]
        depth = c * smt
        if all(cs == list(range(i * depth, (i + 1) * depth)) for i, cs in enumerate(cpus)):
            argv += [f"--depth={depth}", "--cpu-bind", "depth"]
        else:
            argv += ["--cpu-bind", "list:" + ":".join(_cpu_ranges(cs) for cs in cpus)]
        return argv + list(site.launch.args)


def _cpu_ranges(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(out)


@launchers.register("aprun")
class AprunLauncher(Launcher):
    """Cray ALPS aprun: -n ranks, -N per node, -j hardware threads per core, -d CPUs per rank.

    One hardware thread per core unless the plan runs more threads than cores (ALCF Theta's
    CosmoFlow line: `aprun -n 4N -N 4 -d 32 -j 2 -cc depth`); `-d` then counts those CPUs.
    """

    binds_cores = True

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        cores = cores_per_rank(plan)
        smt = min(_threads_per_core(plan, site), -(-plan.threads_per_rank // cores))
        return [
            "aprun",
            "-n", str(plan.world_size),
            "-N", str(plan.ranks_per_node),
            "-d", str(cores * smt),
            "-j", str(smt),
            "-cc", "depth",
            *site.launch.args,
        ]


def _threads_per_core(plan: LaunchPlan, site: Site) -> int:
    return site.node_kinds[plan.node_kind].threads_per_core
