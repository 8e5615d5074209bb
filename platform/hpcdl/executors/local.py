"""The `local` executor: runs a job script with bash on this node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.executors.base import Executor, JobState, checked_job_id, executors

STATE_DIR = Path(os.environ.get("HPCDL_LOCAL_JOBS", "~/.cache/hpcdl/local-jobs")).expanduser()


def job_environment(job_dir: Path, **extra: str) -> dict[str, str]:
    """The job sees the hpcdl that submitted it first on PATH, as `module load hpcdl` would do."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        path = bin_dir + os.pathsep + path
    return {**os.environ, "PATH": path, "HPCDL_JOB_DIR": str(job_dir), **extra}


def _session_members(session: int) -> list[int]:
    """Live processes (zombies excluded) whose session id is `session`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


@executors.register("local")
class LocalExecutor(Executor):
    """Jobs are bash processes; their state lives in STATE_DIR/<id>/ (pid, rc, job_dir) and their
    output in the job folder's output.log, where `hpcdl run` writes it too."""

    def submit_command(self, script: Path, job_dir: Path) -> list[str]:
        return ["bash", str(script)]

    def submit(self, script: Path, job_dir: Path) -> str:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        job_dir.mkdir(parents=True, exist_ok=True)
        job_id = str(max((int(p.name) for p in STATE_DIR.iterdir() if p.name.isdigit()), default=0) + 1)
        state = STATE_DIR / job_id
        state.mkdir()
        (state / "job_dir").write_text(str(job_dir))
        out = job_dir / "output.log"
        # a small supervisor writes the exit status when the script ends, so status() can read it later
        runner = 'bash "$1" > "$2" 2>&1; echo $? > "$3"'
        proc = subprocess.Popen(
            ["bash", "-c", runner, "hpcdl-local", str(script), str(out), str(state / "rc")],
            env=job_environment(job_dir, HPCDL_JOB_ID=job_id),
            cwd=job_dir, start_new_session=True,
            # the job must not hold the submitter's terminal or pipes: `hpcdl submit | tail`
            # (or a test capturing its output) would otherwise wait for the job to end
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        (state / "pid").write_text(str(proc.pid))
        return job_id

    def run(self, script: Path, job_dir: Path, stream=None) -> int:
        """Run in the foreground, showing the job's output as it comes; returns the exit status."""
        job_dir.mkdir(parents=True, exist_ok=True)
        stream = stream or sys.stdout
        with open(job_dir / "output.log", "w") as log:
            proc = subprocess.Popen(
                ["bash", str(script)], cwd=job_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env=job_environment(job_dir),
            )
            for line in proc.stdout:
                log.write(line)
                stream.write(line)
                stream.flush()
            return proc.wait()

    def _state(self, job_id: str) -> Path:
        state = STATE_DIR / checked_job_id(job_id)
        if not state.is_dir():
            raise HpcdlError(f"job id: no local job {job_id!r} (looked in {STATE_DIR})")
        return state

    def status(self, job_id: str) -> JobState:
        state = self._state(job_id)
        if (state / "cancelled").exists():
            return JobState(job_id, "CANCELLED", None)
        rc_file = state / "rc"
        if rc_file.exists() and rc_file.read_text().strip():
            rc = int(rc_file.read_text())
            return JobState(job_id, "COMPLETED" if rc == 0 else "FAILED", rc)
        pid = int((state / "pid").read_text())
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return JobState(job_id, "FAILED", None)
        return JobState(job_id, "RUNNING")

    def cancel(self, job_id: str, grace: float = 10.0) -> None:
        """SIGTERM to every process of the job (its session), as scancel does; SIGKILL after `grace` s.

        The whole session, not one process group: mpirun puts each rank in a group of its own,
        so a group signal would leave the ranks running.
        """
        state = self._state(job_id)
        session = int((state / "pid").read_text())
        (state / "cancelled").touch()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _session_members(session)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while pids and time.monotonic() < deadline:
                pids = _session_members(session)
                time.sleep(0.1)
            if not pids:
                return

    def output(self, job_id: str) -> Path:
        state = self._state(job_id)
        if (state / "output").exists():  # a job submitted by hpcdl before 0.1.0 kept it here
            return state / "output"
        return Path((state / "job_dir").read_text()) / "output.log"
