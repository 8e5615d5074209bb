from __future__ import annotations

from typing import TYPE_CHECKING

from hpcdl.registry import Registry
from hpcdl.sites.schema import Site

if TYPE_CHECKING:  # the plan calls a launcher for its argv: the launcher only reads it
    from hpcdl.plan.model import Plan


class Launcher:
    """Turns a plan into the argv that starts its ranks; the program follows the argv."""

    name = "base"
    #: the launcher sets each rank's cores itself; otherwise the rank applies the plan's mask
    binds_cores = False

    def command(self, plan: Plan, site: Site) -> list[str]:
        raise NotImplementedError


launchers: Registry[Launcher] = Registry("launcher")


def launcher_for(name: str) -> Launcher:
    return launchers.get(name)


def cores_per_rank(plan: Plan) -> int:
    return len(plan.ranks[0].cores)


def gpus_per_rank(plan: Plan) -> int:
    return len(plan.ranks[0].gpus)
