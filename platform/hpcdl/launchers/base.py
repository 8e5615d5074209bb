from __future__ import annotations

from typing import Protocol

from hpcdl.registry import Registry
from hpcdl.sites.schema import Site


class PlacedRank(Protocol):
    """One rank of a plan as a launcher reads it (hpcdl.plan.model.RankPlacement is one)."""

    local_rank: int
    socket: int
    cores: tuple[int, ...]
    cpus: tuple[int, ...]
    gpus: tuple[int, ...]


class LaunchPlan(Protocol):
    """A plan as a launcher or a container runtime reads it (hpcdl.plan.model.Plan is one).

    The planner asks the site's launcher for the launch line, so the launchers sit below the plan:
    they say here what they read of it rather than import its type, which would close a circle
    (plan -> launchers -> plan). The fields read as the plan's own do."""

    node_kind: str
    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    distributed: str
    ranks: tuple[PlacedRank, ...]
    env: dict[str, str]
    env_paths: dict[str, object]  # values are hpcdl.plan.model.PathValue; launchers read only the names
    tmpdir: str | None

    @property
    def world_size(self) -> int: ...

    def local_ranks(self) -> tuple[PlacedRank, ...]: ...


class Launcher:
    """Turns a plan into the argv that starts its ranks; the program follows the argv."""

    name = "base"
    #: the launcher sets each rank's cores itself; otherwise the rank applies the plan's mask
    binds_cores = False

    def command(self, plan: LaunchPlan, site: Site) -> list[str]:
        raise NotImplementedError


launchers: Registry[Launcher] = Registry("launcher")


def launcher_for(name: str) -> Launcher:
    return launchers.get(name)


def cores_per_rank(plan: LaunchPlan) -> int:
    return len(plan.ranks[0].cores)


def gpus_per_rank(plan: LaunchPlan) -> int:
    return len(plan.ranks[0].gpus)


def slurm_gpu_style(site: Site, nodes: int, held: int) -> str:
    """How a Slurm job asks its GPUs (`held` on each of `nodes`): defaults.gpu_request, or for a job on one GPU in all
    defaults.single_gpu_request, where the centre asks a single GPU otherwise than several (Calcul Quebec Rorqual:
    "One H100-80gb : --gpus=h100:1", "Multiple H100-80gb per node: --gpus-per-node=h100:2")."""
    if site.defaults.single_gpu_request and nodes * held == 1:
        return site.defaults.single_gpu_request
    return site.defaults.gpu_request or "gpus-per-node"


def gpu_total_uneven(nodes: int, held: int, node_gpus: int) -> bool:
    """Whether a job's GPUs asked as one total (`--gpus=N`, defaults.gpu_request: gpus: "the total number of
    GPUs required for the job", sbatch(1)) could be laid out otherwise than the plan's: several nodes, each
    holding more GPUs than the plan uses there. Such a job asks its GPUs per node instead."""
    return nodes > 1 and 0 < held < node_gpus
