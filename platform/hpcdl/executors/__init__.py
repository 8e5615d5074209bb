"""Executors: one small class per scheduler, all with the same verbs."""

from hpcdl.executors.base import Executor, JobState, executor_for, executors
from hpcdl.executors import local as _local  # noqa: F401  (registers)
from hpcdl.executors import slurm as _slurm  # noqa: F401
from hpcdl.executors import lsf as _lsf  # noqa: F401
from hpcdl.executors import pbs as _pbs  # noqa: F401

__all__ = ["Executor", "JobState", "executor_for", "executors"]
