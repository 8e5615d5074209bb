"""Which sites the checked-in modulefiles/ covers: the profiles shipped inside the package."""

from __future__ import annotations

from pathlib import Path

from hpcdl.sites import registry
from hpcdl.sites.registry import list_sites


def shipped_site_names() -> list[str]:
    """The sites whose profiles ship with hpcdl: the checked-in modulefiles/ holds exactly these.
    `local` is left out unless a profile ships for it: detected, it describes whatever machine
    renders it, so its modules are rendered where they are installed."""
    shipped = registry.SHIPPED.resolve()  # read at call time, so a test can point it elsewhere
    return [name for name, origin in list_sites().items() if _is_under(origin, shipped)]


def _is_under(origin: str, folder: Path) -> bool:
    try:
        return Path(origin).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False
