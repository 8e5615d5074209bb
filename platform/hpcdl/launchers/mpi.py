"""The launchers centres use. Each returns the launch line up to the program."""

from __future__ import annotations

from hpcdl.launchers.base import Launcher, cores_per_rank, gpus_per_rank, launchers
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
    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        argv = [
            "srun",
            f"--nodes={plan.nodes}",
            f"--ntasks={plan.world_size}",
            f"--ntasks-per-node={plan.ranks_per_node}",
            f"--cpus-per-task={cores_per_rank(plan) * _threads_per_core(plan, site)}",
            "--cpu-bind=cores",
        ]
        if site.mpi in ("openmpi",):
            argv.append("--mpi=pmix")
        if gpus_per_rank(plan):
            argv += [f"--gpus-per-task={gpus_per_rank(plan)}", "--gpu-bind=closest"]
        return argv


@launchers.register("ibrun")
class IbrunLauncher(Launcher):
    """TACC's ibrun takes the task count and layout from the Slurm allocation."""

    def command(self, plan: Plan, site: Site) -> list[str]:
        return ["ibrun"]


@launchers.register("jsrun")
class JsrunLauncher(Launcher):
    """IBM jsrun: one resource set per rank, R per host, C cores and G GPUs each, packed."""

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        c = cores_per_rank(plan)
        return [
            "jsrun",
            f"-n{plan.world_size}",
            "-a1",
            f"-c{c}",
            f"-g{gpus_per_rank(plan)}",
            f"-r{plan.ranks_per_node}",
            f"-bpacked:{c}",
        ]


@launchers.register("aprun")
class AprunLauncher(Launcher):
    """Cray ALPS aprun: -n ranks, -N per node, -d cores per rank, -j hardware threads per core."""

    binds_cores = True

    def command(self, plan: Plan, site: Site) -> list[str]:
        return [
            "aprun",
            "-n", str(plan.world_size),
            "-N", str(plan.ranks_per_node),
            "-d", str(cores_per_rank(plan)),
            "-j", "1",
            "-cc", "depth",
        ]


def _threads_per_core(plan: Plan, site: Site) -> int:
    return site.node_kinds[plan.node_kind].threads_per_core
