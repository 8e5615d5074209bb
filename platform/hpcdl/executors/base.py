from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcdl.registry import Registry


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, UNKNOWN
    exit_code: int | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


class Executor:
    """submit a script, read its state, cancel it, find its output."""

    name = "base"

    def submit(self, script: Path, job_dir: Path) -> str:
        raise NotImplementedError

    def status(self, job_id: str) -> JobState:
        raise NotImplementedError

    def cancel(self, job_id: str) -> None:
        raise NotImplementedError

    def output(self, job_id: str) -> Path:
        raise NotImplementedError


executors: Registry[Executor] = Registry("executor")


def executor_for(name: str) -> Executor:
    return executors.get(name)
