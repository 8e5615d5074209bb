"""The `slurm` executor: sbatch, squeue, scontrol (sacct when accounting is on), scancel.

squeue answers while a job is pending or running; scontrol keeps a finished job for
MinJobAge (300 s by default), which is all a cluster without accounting has; sacct, when
slurmdbd is configured, answers for as long as the database keeps the job.
"""

from __future__ import annotations

from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.executors.base import Executor, JobState, checked_job_id, executors
from hpcdl.executors.local import job_environment

# Slurm's job states (squeue(1) JOB STATE CODES) in hpcdl's words
_STATES = {
    "PENDING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING",
    "RESV_DEL_HOLD": "PENDING", "SUSPENDED": "PENDING", "STOPPED": "PENDING", "RESIZING": "RUNNING",
    "CONFIGURING": "RUNNING", "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING", "COMPLETED": "COMPLETED", "CANCELLED": "CANCELLED", "TIMEOUT": "TIMEOUT",
    "DEADLINE": "TIMEOUT", "FAILED": "FAILED", "NODE_FAIL": "FAILED", "BOOT_FAIL": "FAILED",
    "OUT_OF_MEMORY": "FAILED", "PREEMPTED": "CANCELLED", "REVOKED": "CANCELLED", "SPECIAL_EXIT": "FAILED",
}


def _state(word: str) -> str:
    # sacct writes "CANCELLED by 0"; squeue may add a '+' to a state
    return _STATES.get(word.split()[0].rstrip("+") if word.strip() else "", "UNKNOWN")


def _exit_code(text: str | None) -> int | None:
    """Slurm's ExitCode is status:signal; a job killed by a signal reports 128+signal like bash."""
    if not text or ":" not in text:
        return None
    status, signal = text.split(":", 1)
    try:
        return int(status) or (128 + int(signal) if int(signal) else 0)
    except ValueError:
        return None


def _fields(text: str) -> dict[str, str]:
    """`scontrol show job -o` prints Key=Value pairs on one line; values may hold spaces (Command, Reason)."""
    out, key = {}, None
    for word in text.split(" "):
        name, eq, value = word.partition("=")
        if eq and name and name[0].isupper() and name.replace("/", "").replace(":", "").isalnum():
            key = name
            out[key] = value
        elif key is not None:
            out[key] += " " + word
    return {k: v.strip() for k, v in out.items()}


def checked_cluster(name: str) -> str:
    """A Slurm cluster name goes to the commands as part of one argv word: a name only."""
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise HpcdlError(f"slurm cluster: {name!r} is not a cluster name")
    return name


@executors.register("slurm")
class SlurmExecutor(Executor):
    programs = ("sbatch", "squeue", "scontrol", "scancel", "sacct")
    #: the cluster a job went to on a controller of several (sbatch --parsable's "jobid;cluster", where the script
    #: names one: VSC's wICE, "#SBATCH --cluster=wice"); every later command names it, since such a Slurm answers for
    #: its default cluster otherwise ("any Slurm command (such as scontrol, squeue, sacct) needs to be executed with
    #: the option --cluster=wice", the wICE advanced guide)
    cluster: str | None = None

    def on_cluster(self) -> list[str]:
        return [f"--clusters={checked_cluster(self.cluster)}"] if self.cluster else []

    def submit_command(self, script: Path, job_dir: Path) -> list[str]:
        # --parsable prints "jobid[;cluster]"; sbatch exports the submitting environment by
        # default (--export=ALL), which carries PATH (with hpcdl on it) and HPCDL_JOB_DIR
        return ["sbatch", "--parsable", f"--chdir={job_dir}", str(script)]

    def submit(self, script: Path, job_dir: Path) -> str:
        job_dir.mkdir(parents=True, exist_ok=True)
        proc = self.call(self.submit_command(script, job_dir), env=job_environment(job_dir), cwd=job_dir)
        job_id, _, cluster = proc.stdout.strip().partition(";")
        if not job_id.isdigit():
            raise HpcdlError(f"slurm: sbatch gave no job id (it printed {proc.stdout.strip()!r})")
        self.cluster = checked_cluster(cluster) if cluster else None
        return job_id

    def show(self, job_id: str) -> dict[str, str] | None:
        proc = self.call(["scontrol", *self.on_cluster(), "show", "job", "-o", checked_job_id(job_id)], check=False)
        if proc.returncode != 0 or "JobId=" not in proc.stdout:
            return None
        return _fields(proc.stdout.strip().splitlines()[0])

    def accounting(self) -> bool:
        proc = self.call(["scontrol", *self.on_cluster(), "show", "config"], check=False)
        for line in proc.stdout.splitlines():
            if line.startswith("AccountingStorageType"):
                return "none" not in line.split("=", 1)[1]
        return False

    def status(self, job_id: str) -> JobState:
        job_id = checked_job_id(job_id)
        proc = self.call(["squeue", *self.on_cluster(), "-h", "-j", job_id, "-o", "%T"], check=False)
        live = proc.stdout.split()
        if proc.returncode == 0 and live and _state(live[0]) in ("PENDING", "RUNNING"):
            return JobState(job_id, _state(live[0]), None, live[0])
        fields = self.show(job_id)
        if fields is not None:
            word = fields.get("JobState", "")
            return JobState(job_id, _state(word), _exit_code(fields.get("ExitCode")), word or None)
        if self.accounting():
            proc = self.call(["sacct", *self.on_cluster(), "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode"],
                              check=False)
            lines = [line for line in proc.stdout.splitlines() if line.strip()]
            if proc.returncode == 0 and lines:
                word, _, code = lines[-1].partition("|")
                return JobState(job_id, _state(word), _exit_code(code), word)
        raise HpcdlError(f"job id: slurm knows no job {job_id} (finished jobs are kept for MinJobAge without accounting)")

    def cancel(self, job_id: str) -> None:
        self.call(["scancel", *self.on_cluster(), checked_job_id(job_id)])

    def output(self, job_id: str) -> Path:
        fields = self.show(job_id)
        if fields is None or not fields.get("StdOut"):
            raise HpcdlError(f"job id: slurm has no output path for job {job_id}")
        return Path(fields["StdOut"])
