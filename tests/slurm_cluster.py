"""A real Slurm cluster on this machine for the tests: munge, slurmctld and one slurmd per node.

Everything it writes (slurm.conf, state, spool, logs, per-node TmpFS) lives in a folder of
its own, and clients find it through SLURM_CONF, so /etc/slurm is never touched. Shapes:

  nodes=1  one node `localhost`, TaskPlugin task/affinity (the measured single-node set-up);
  nodes=2  two pretend nodes n1, n2, both slurmd on 127.0.0.1 with their own ports, each
           with its own TmpFS (PMIx step launch fails on a shared one) and TaskPlugin task/none.

All pretend nodes are this host, so a job's MASTER_ADDR is the batch host's own name
(`hostname`, which /etc/hosts maps to 127.0.0.1); /etc/hosts is not edited.
The commands and their pitfalls were measured in shared/research/local-stack.md.

    cluster = SlurmCluster(folder, nodes=2); cluster.up(); ...; cluster.down()

`down()` is safe to call twice and after a failed `up()`; it stops munged only when `up()`
started it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
from pathlib import Path

SLURMCTLD_PORT = 16817  # away from the default 6817, in case a real Slurm is configured here
SLURMD_PORT = 16818
PRETEND_NODE_PORTS = 17001
MUNGE_PID = Path("/run/munge/munged.pid")


class SlurmError(RuntimeError):
    pass


def _run(argv, env=None, check=True, timeout=60) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise SlurmError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class SlurmCluster:
    def __init__(self, root: Path, nodes: int = 1):
        self.root = Path(root)
        self.nodes = nodes
        self.conf = self.root / "slurm.conf"
        self.started_munge = False
        self.running = False

    @property
    def node_names(self) -> list[str]:
        return ["localhost"] if self.nodes == 1 else [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- bring-up

    def up(self) -> "SlurmCluster":
        atexit.register(self.down)  # also when the test session is interrupted
        try:
            self._start_munge()
            self._write_conf()
            _run(["/usr/sbin/slurmctld", "-i", "-f", str(self.conf)], env=self.env)
            self.running = True
            for name in self.node_names:
                _run(["/usr/sbin/slurmd", "-N", name, "-f", str(self.conf)], env=self.env)
            self._wait_idle()
        except BaseException:
            self.down()
            raise
        return self

    def _start_munge(self) -> None:
        if munge_works():
            return
        key = Path("/etc/munge/munge.key")
        if not key.exists() or key.stat().st_size == 0:
            _run(["mungekey", "--create", "--force"])
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        _run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge"])
        _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
        self.started_munge = True
        (self.root / "started-munge").parent.mkdir(parents=True, exist_ok=True)
        (self.root / "started-munge").touch()  # so that `down` from another process stops it too
        for _ in range(50):
            if munge_works():
                return
            time.sleep(0.1)
        raise SlurmError("munged did not come up")

    def _write_conf(self) -> None:
        cpus = os.cpu_count() or 1
        mem = _real_memory_mb()
        for sub in ("state", "log", "spool", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for name in self.node_names:
            (self.root / "spool" / f"slurmd-{name}").mkdir(exist_ok=True)
            (self.root / "tmp" / name).mkdir(exist_ok=True)
        if self.nodes == 1:
            node_lines = [f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem} State=UNKNOWN"]
            task_plugin, part_nodes, slurmd_port = "task/affinity", "localhost", f"SlurmdPort={SLURMD_PORT}"
        else:
            last = PRETEND_NODE_PORTS + self.nodes - 1
            node_lines = [
                f"NodeName=n[1-{self.nodes}] NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port=[{PRETEND_NODE_PORTS}-{last}] CPUs={cpus} RealMemory={mem // self.nodes} State=UNKNOWN"
            ]
            # pretend nodes share the real cores, which task/affinity refuses to lay out twice
            task_plugin, part_nodes, slurmd_port = "task/none", f"n[1-{self.nodes}]", f"SlurmdPort={SLURMD_PORT}"
        r = self.root
        self.conf.write_text("\n".join([
            "ClusterName=hpcdltest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={SLURMCTLD_PORT}",
            slurmd_port,
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/slurmd-%n",
            # one TmpFS per node: PMIx makes the same folder name on every node it starts a step on
            f"TmpFS={r}/tmp/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            f"TaskPlugin={task_plugin}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=1000",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            # a cancelled job's processes get SIGKILL 5 s after SIGTERM (default 30 s)
            "KillWait=5",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            *node_lines,
            f"PartitionName=debug Nodes={part_nodes} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _wait_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = _run(["sinfo", "-h", "-N", "-o", "%t"], env=self.env, check=False)
            states = proc.stdout.split()
            if proc.returncode == 0 and states.count("idle") == len(self.node_names):
                return
            time.sleep(0.2)
        raise SlurmError(f"Slurm did not come up: sinfo says {proc.stdout.strip()!r}\n{self.logs()}")

    def logs(self, lines: int = 20) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*.log")):
            out.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    # ---- tear-down

    def down(self) -> None:
        if self.running:
            _run(["scontrol", "shutdown"], env=self.env, check=False)  # stops slurmctld and every slurmd
            self.running = False
        self._wait_for_pidfiles()
        if self.started_munge and MUNGE_PID.exists():
            try:
                os.kill(int(MUNGE_PID.read_text().strip()), 15)
            except (ProcessLookupError, ValueError):
                pass
            for _ in range(50):  # munged removes its pid file on exit
                if not MUNGE_PID.exists():
                    break
                time.sleep(0.1)
            self.started_munge = False
            (self.root / "started-munge").unlink(missing_ok=True)

    def _wait_for_pidfiles(self, timeout: float = 15) -> None:
        """The daemons remove their pid files on exit; those still alive after the wait are killed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = [p for p in self.root.glob("*.pid") if _alive(p)]
            if not alive:
                break
            time.sleep(0.2)
        for pidfile in self.root.glob("*.pid"):
            if _alive(pidfile):
                try:
                    os.kill(int(pidfile.read_text().strip()), 9)
                except (ProcessLookupError, ValueError):
                    pass
            pidfile.unlink(missing_ok=True)


def _alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    # a daemon that exited but was not yet reaped by PID 1 shows as a zombie (local-stack.md)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _real_memory_mb() -> int:
    proc = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30)
    for word in proc.stdout.split():
        if word.startswith("RealMemory="):
            return int(word.split("=", 1)[1])
    return 1024


class SlurmClusters:
    """At most one cluster up at a time (they share munge and the controller port); the
    session fixture asks for a shape and gets it, and tears the last one down at the end."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.current: SlurmCluster | None = None

    def ensure(self, nodes: int) -> SlurmCluster:
        if self.current is not None and self.current.nodes == nodes:
            return self.current
        self.down()
        cluster = SlurmCluster(self.root / f"{nodes}-node", nodes)
        self.current = cluster.up()
        return cluster

    def down(self) -> None:
        if self.current is not None:
            self.current.down()
            self.current = None


def main(argv: list[str] | None = None) -> int:
    """By hand, to look at a failing job: python tests/slurm_cluster.py up|down FOLDER [NODES]."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] not in ("up", "down"):
        print("usage: python tests/slurm_cluster.py up|down FOLDER [NODES]", file=sys.stderr)
        return 2
    root, nodes = Path(args[1]).resolve(), int(args[2]) if len(args) > 2 else 1
    cluster = SlurmCluster(root, nodes)
    if args[0] == "up":
        cluster.up()
        atexit.unregister(cluster.down)  # it stays up until `down`
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.running = cluster.conf.exists()
        cluster.started_munge = (root / "started-munge").exists()
        cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
