"""The `lsf` executor: bsub, bjobs, bkill (IBM Spectrum LSF, as on Summit and Lassen)."""

from __future__ import annotations

import re
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.executors.base import Executor, JobState, checked_job_id, executors
from hpcdl.executors.local import job_environment

# bjobs STAT values (LSF "bjobs -l" job states) in hpcdl's words
_STATES = {"PEND": "PENDING", "PSUSP": "PENDING", "WAIT": "PENDING", "RUN": "RUNNING", "USUSP": "RUNNING",
           "SSUSP": "RUNNING", "PROV": "RUNNING", "DONE": "COMPLETED", "EXIT": "FAILED", "UNKWN": "UNKNOWN",
           "ZOMBI": "FAILED"}


@executors.register("lsf")
class LsfExecutor(Executor):
    programs = ("bsub", "bjobs", "bkill")
    # bsub reads the #BSUB lines only from a script given on standard input
    script_on_stdin = True

    def submit_command(self, script: Path, job_dir: Path) -> list[str]:
        return ["bsub", "-cwd", str(job_dir)]

    def submit(self, script: Path, job_dir: Path) -> str:
        self.require("bsub")
        job_dir.mkdir(parents=True, exist_ok=True)
        proc = self.call(["bsub", "-cwd", str(job_dir)], env=job_environment(job_dir), cwd=job_dir,
                         input=Path(script).read_text())
        m = re.search(r"Job <(\d+)>", proc.stdout)
        if not m:
            raise HpcdlError(f"lsf: bsub gave no job id (it printed {proc.stdout.strip()!r})")
        return m.group(1)

    def status(self, job_id: str) -> JobState:
        job_id = checked_job_id(job_id)
        proc = self.call(["bjobs", "-noheader", "-o", "stat exit_code", job_id], check=False)
        words = proc.stdout.split()
        if proc.returncode != 0 or not words:
            raise HpcdlError(f"job id: lsf knows no job {job_id}")
        code = int(words[1]) if len(words) > 1 and words[1].isdigit() else (0 if words[0] == "DONE" else None)
        return JobState(job_id, _STATES.get(words[0], "UNKNOWN"), code, words[0])

    def cancel(self, job_id: str) -> None:
        self.call(["bkill", checked_job_id(job_id)])

    def output(self, job_id: str) -> Path:
        proc = self.call(["bjobs", "-noheader", "-o", "output_file", checked_job_id(job_id)])
        return Path(proc.stdout.strip())
