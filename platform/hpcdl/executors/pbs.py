"""The `pbs` executor: qsub, qstat, qdel (PBS Pro / OpenPBS, Torque)."""

from __future__ import annotations

from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.executors.base import Executor, JobState, checked_job_id, executors
from hpcdl.executors.local import job_environment

# qstat job_state letters in hpcdl's words (F: finished, PBS Pro; C: completed, Torque)
_STATES = {"Q": "PENDING", "H": "PENDING", "W": "PENDING", "T": "PENDING", "S": "PENDING", "R": "RUNNING",
           "E": "RUNNING", "B": "RUNNING", "X": "COMPLETED", "F": "COMPLETED", "C": "COMPLETED"}


def _qstat_fields(text: str) -> dict[str, str]:
    fields, key = {}, None
    for line in text.splitlines():
        if " = " in line and not line.startswith("\t"):
            key, _, value = line.strip().partition(" = ")
            fields[key] = value
        elif key is not None:
            fields[key] += line.strip()
    return fields


@executors.register("pbs")
class PbsExecutor(Executor):
    programs = ("qsub", "qstat", "qdel")

    def submit_command(self, script: Path, job_dir: Path) -> list[str]:
        # PBS does not pass the submitting environment unless asked (-V); the job needs PATH
        return ["qsub", "-V", "-v", f"HPCDL_JOB_DIR={job_dir}", str(script)]

    def submit(self, script: Path, job_dir: Path) -> str:
        job_dir.mkdir(parents=True, exist_ok=True)
        proc = self.call(self.submit_command(script, job_dir), env=job_environment(job_dir), cwd=job_dir)
        job_id = proc.stdout.strip()
        if not job_id:
            raise HpcdlError("pbs: qsub gave no job id")
        return job_id

    def _fields(self, job_id: str) -> dict[str, str]:
        proc = self.call(["qstat", "-x", "-f", checked_job_id(job_id)], check=False)
        if proc.returncode != 0:
            proc = self.call(["qstat", "-f", job_id], check=False)  # Torque has no -x
        if proc.returncode != 0:
            raise HpcdlError(f"job id: pbs knows no job {job_id}")
        return _qstat_fields(proc.stdout)

    def status(self, job_id: str) -> JobState:
        fields = self._fields(job_id)
        letter = fields.get("job_state", "")
        code = fields.get("Exit_status") or fields.get("exit_status")
        exit_code = int(code) if code and code.lstrip("-").isdigit() else None
        state = _STATES.get(letter, "UNKNOWN")
        if state == "COMPLETED" and exit_code not in (None, 0):
            state = "FAILED"
        return JobState(job_id, state, exit_code, letter or None)

    def cancel(self, job_id: str) -> None:
        self.call(["qdel", checked_job_id(job_id)])

    def output(self, job_id: str) -> Path:
        path = self._fields(job_id).get("Output_Path", "")
        return Path(path.split(":", 1)[-1]) if path else Path()
