"""Launchers: one small class each, one verb: the argv that starts a plan's ranks."""

from hpcdl.launchers.base import Launcher, launcher_for, launchers
from hpcdl.launchers import mpi as _mpi  # noqa: F401  (registers the launchers)

__all__ = ["Launcher", "launcher_for", "launchers"]
