"""Executors: one small class per scheduler, all with the same verbs."""

from hpcdl.executors.base import Executor, JobState, executor_for, executors
from hpcdl.executors import local as _local  # noqa: F401  (registers)

__all__ = ["Executor", "JobState", "executor_for", "executors"]
