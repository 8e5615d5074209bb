"""The one vocabulary every executor speaks: submit -> job id, status, cancel, output."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.registry import Registry

#: the states hpcdl reports, whatever the scheduler calls them
STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN")


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # one of STATES
    exit_code: int | None = None
    reason: str | None = None  # the scheduler's own word for it, when it says more than `state`

    @property
    def finished(self) -> bool:
        return self.state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


class Executor:
    """submit a script, read its state, cancel it, find its output."""

    name = "base"
    #: the programs this executor runs, the first being the one that submits
    programs: tuple[str, ...] = ()
    #: the submit command reads the script on standard input (bsub) instead of as an argument
    script_on_stdin = False

    def submit_command(self, script: Path, job_dir: Path) -> list[str]:
        """The argv `submit` runs (what `hpcdl submit --dry-run` shows)."""
        raise NotImplementedError

    def submit(self, script: Path, job_dir: Path) -> str:
        raise NotImplementedError

    def status(self, job_id: str) -> JobState:
        raise NotImplementedError

    def cancel(self, job_id: str) -> None:
        raise NotImplementedError

    def output(self, job_id: str) -> Path:
        raise NotImplementedError

    # helpers for the executors that drive a scheduler's command-line tools

    def require(self, program: str) -> str:
        path = shutil.which(program)
        if path is None:
            raise HpcdlError(
                f"{self.name}: `{program}` is not on PATH, so jobs cannot be sent to {self.name} from here; "
                f"run on a login node of the machine (or `module load` its scheduler), or use --dry-run"
            )
        return path

    def call(self, argv: list[str], env: dict | None = None, cwd: Path | None = None,
             check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        self.require(argv[0])
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, input=input, timeout=120)
        if check and proc.returncode != 0:
            message = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()
            raise HpcdlError(f"{self.name}: {' '.join(argv[:1])} failed: {' / '.join(message[-3:])}")
        return proc


executors: Registry[Executor] = Registry("executor")


def executor_for(name: str) -> Executor:
    return executors.get(name)


def checked_job_id(job_id: str) -> str:
    """Job ids go to scheduler commands as one argv word; refuse anything that is not one."""
    job_id = str(job_id).strip()
    if not job_id or not all(c.isalnum() or c in "._[]-" for c in job_id):
        raise HpcdlError(f"job id: {job_id!r} is not a job id")
    return job_id
