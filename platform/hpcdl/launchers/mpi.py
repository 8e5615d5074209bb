"""The launchers centres use. Each returns the launch line up to the program."""

from __future__ import annotations

from hpcdl.launchers.base import Launcher, cores_per_rank, launchers
from hpcdl.plan.model import Plan
from hpcdl.sites.schema import Site

# set by the job script for torch.distributed's rendezvous; launchers that copy only named
# variables to remote nodes must carry these too
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT")


@launchers.register("local")
class LocalLauncher(Launcher):
    """hpcdl's own launcher: starts the ranks of one node as processes and watches them."""

    def command(self, plan: Plan, site: Site) -> list[str]:
        return ["hpcdl", "launch", "--nproc", str(plan.ranks_per_node), "--"]


@launchers.register("mpirun")
class OpenMpiLauncher(Launcher):
    """Open MPI's mpirun: ranks per node and cores per rank with --map-by ppr:R:node:PE=C."""

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        argv = [
            "mpirun",
            "-np", str(plan.world_size),
            "--map-by", f"ppr:{plan.ranks_per_node}:node:PE={cores_per_rank(plan)}",
            "--bind-to", "core",
        ]
        for name in sorted({*plan.env, *RENDEZVOUS_ENV}):
            argv += ["-x", name]
        return argv


@launchers.register("mpiexec")
class HydraLauncher(Launcher):
    """MPICH/Intel MPI Hydra mpiexec."""

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        return [
            "mpiexec",
            "-n", str(plan.world_size),
            "-ppn", str(plan.ranks_per_node),
            "-bind-to", f"core:{cores_per_rank(plan)}",
            "-genvlist", ",".join(sorted({*plan.env, *RENDEZVOUS_ENV})),
        ]


@launchers.register("srun")
class SrunLauncher(Launcher):
    """Slurm srun: tasks per node, CPUs per task, and the plan's cores and GPUs for each task.

    When the plan's ranks sit on consecutive blocks of cores from core 0 (KNL, Perlmutter),
    `--cpus-per-task` with `--cpu-bind=cores` gives exactly them (NERSC affinity guide). Otherwise
    (reserved cores in the middle, GPUs nearest other cores: Frontier) the plan's own masks are
    passed with `--cpu-bind=mask_cpu:`, as the LUMI-G/Frontier guides do. GPUs are bound by the
    plan's map with `--gpu-bind=map_gpu:`/`mask_gpu:`, so Slurm gives each task the GPU the plan
    chose, never a different "closest" one.
    """

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        local = plan.local_ranks()
        argv = [
            "srun",
            f"--nodes={plan.nodes}",
            f"--ntasks={plan.world_size}",
            f"--ntasks-per-node={plan.ranks_per_node}",
            # Slurm's unit: CPUs per core as the site's Slurm counts them (schema: scheduler_cpus_per_core)
            f"--cpus-per-task={cores_per_rank(plan) * site.node_kinds[plan.node_kind].cpus_per_core}",
        ]
        c = cores_per_rank(plan)
        if all(r.cores == tuple(range(i * c, (i + 1) * c)) for i, r in enumerate(local)):
            argv.append("--cpu-bind=cores")
        else:
            argv.append("--cpu-bind=mask_cpu:" + ",".join(_hex_mask(r.cpus) for r in local))
        if site.mpi in ("openmpi",):
            argv.append("--mpi=pmix")
        gpus_used = sorted({g for r in local for g in r.gpus})
        if gpus_used:
            argv.append(f"--gpus-per-node={len(gpus_used)}")
            if all(len(r.gpus) == 1 for r in local):
                argv.append("--gpu-bind=map_gpu:" + ",".join(str(r.gpus[0]) for r in local))
            else:
                argv.append("--gpu-bind=mask_gpu:" + ",".join(_hex_mask(r.gpus) for r in local))
        return argv


def _hex_mask(ids) -> str:
    return hex(sum(1 << i for i in ids))


@launchers.register("ibrun")
class IbrunLauncher(Launcher):
    """TACC's ibrun takes the task count and layout from the Slurm allocation."""

    def command(self, plan: Plan, site: Site) -> list[str]:
        return ["ibrun"]


@launchers.register("jsrun")
class JsrunLauncher(Launcher):
    """IBM jsrun: resource sets of C cores and G GPUs, R per host, tasks bound packed.

    One resource set per rank when every rank has the same GPUs count (OLCF Summit guide:
    `jsrun -n<6N> -a1 -c7 -g1 -r6 -bpacked:7`); otherwise one per socket holding that
    socket's ranks (the hybrid per-NIC layout: 2 ranks and 3 GPUs per socket), else one per
    node (the guide's `jsrun -r1 -g6 -a6 -c42 -bpacked:7`). `-c` counts physical cores.
    """

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        c = cores_per_rank(plan)
        local = plan.local_ranks()
        per_socket: dict[int, list] = {}
        for r in local:
            per_socket.setdefault(r.socket, []).append(r)
        if len({len(r.gpus) for r in local}) == 1:
            sets_per_node, tasks, gpus = plan.ranks_per_node, 1, len(local[0].gpus)
        elif len({len(rs) for rs in per_socket.values()}) == 1 and len(
            {sum(len(r.gpus) for r in rs) for rs in per_socket.values()}
        ) == 1:
            first = next(iter(per_socket.values()))
            sets_per_node, tasks, gpus = len(per_socket), len(first), sum(len(r.gpus) for r in first)
        else:
            sets_per_node, tasks, gpus = 1, plan.ranks_per_node, len({g for r in local for g in r.gpus})
        return [
            "jsrun",
            f"-n{sets_per_node * plan.nodes}",
            f"-a{tasks}",
            f"-c{c * tasks}",
            f"-g{gpus}",
            f"-r{sets_per_node}",
            f"-bpacked:{c}",
        ]


@launchers.register("aprun")
class AprunLauncher(Launcher):
    """Cray ALPS aprun: -n ranks, -N per node, -j hardware threads per core, -d CPUs per rank.

    One hardware thread per core unless the plan runs more threads than cores (ALCF Theta's
    CosmoFlow line: `aprun -n 4N -N 4 -d 32 -j 2 -cc depth`); `-d` then counts those CPUs.
    """

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        cores = cores_per_rank(plan)
        smt = min(_threads_per_core(plan, site), -(-plan.threads_per_rank // cores))
        return [
            "aprun",
            "-n", str(plan.world_size),
            "-N", str(plan.ranks_per_node),
            "-d", str(cores * smt),
            "-j", str(smt),
            "-cc", "depth",
        ]


def _threads_per_core(plan: Plan, site: Site) -> int:
    return site.node_kinds[plan.node_kind].threads_per_core
