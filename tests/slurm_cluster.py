"""A real Slurm cluster on this machine for the tests: munge, slurmctld and one slurmd per node.

Everything it writes (slurm.conf, state, spool, logs, per-node TmpFS) lives in a folder of
its own, and clients find it through SLURM_CONF, so /etc/slurm is never touched. Several
clusters may run on one machine at once (two test sessions side by side): each picks free
TCP ports for slurmctld and every slurmd, runs its own munged on its own socket and key
(`AuthInfo=socket=...`, so one cluster's tear-down never stops another's munged), and
starts its job ids at a random number (jobs derive MASTER_PORT from the job id). Shapes:

  nodes=1  one node `localhost`, TaskPlugin task/affinity (the measured single-node set-up);
  nodes=2  two pretend nodes n1, n2, both slurmd on 127.0.0.1 with their own ports, each
           with its own TmpFS (PMIx step launch fails on a shared one) and TaskPlugin task/none.

All pretend nodes are this host, so a job's MASTER_ADDR is the batch host's own name
(`hostname`, which /etc/hosts maps to 127.0.0.1); /etc/hosts is not edited.
The commands and their pitfalls were measured in shared/research/local-stack.md.

    cluster = SlurmCluster(folder, nodes=2); cluster.up(); ...; cluster.down()

`down()` is safe to call twice and after a failed `up()`; it stops only what `up()` started.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# Ports come from here, below Linux's ephemeral range (32768+, where outgoing connections and
# the jobs' MASTER_PORT = 20000 + job id % 20000 may land) and away from Slurm's default 6817.
PORT_RANGE = (10000, 19999)
# the fixed ports of earlier versions of this harness, still used by older checkouts
LEGACY_PORTS = frozenset({16817, 16818, *range(17001, 17009)})
BRING_UP_LOCK = Path(tempfile.gettempdir()) / "hpcdl-slurm-harness.lock"


class SlurmError(RuntimeError):
    pass


def _run(argv, env=None, check=True, timeout=60) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise SlurmError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def munge_works(sock: Path | None = None) -> bool:
    where = ["-S", str(sock)] if sock else []
    try:
        cred = subprocess.run(["munge", "-n", *where], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run(["unmunge", *where], input=cred.stdout, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def free_ports(count: int, exclude=()) -> list[int]:
    """`count` distinct TCP ports nothing listens on now (checked by binding them on every address)."""
    chosen: list[int] = []
    candidates = [p for p in range(PORT_RANGE[0], PORT_RANGE[1] + 1) if p not in LEGACY_PORTS and p not in exclude]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise SlurmError(f"no {count} free TCP ports in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


@contextlib.contextmanager
def _bring_up_lock():
    """One cluster at a time picks its ports and starts its daemons, so two never pick the same port."""
    with open(BRING_UP_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SlurmCluster:
    def __init__(self, root: Path, nodes: int = 1):
        self.root = Path(root)
        self.nodes = nodes
        self.conf = self.root / "slurm.conf"
        self.running = False
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}

    @property
    def node_names(self) -> list[str]:
        return ["localhost"] if self.nodes == 1 else [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- bring-up

    @property
    def munge_dir(self) -> Path | None:
        """The private munged's folder (socket, key, pid), outside the 0700 test folders: the
        socket's folder and every folder above it must be searchable by all (munged checks)."""
        record = self.root / "munge-dir"
        return Path(record.read_text().strip()) if record.exists() else None

    @property
    def munge_socket(self) -> Path:
        assert self.munge_dir is not None, "up() first"
        return self.munge_dir / "munge.socket"

    def up(self) -> "SlurmCluster":
        atexit.register(self.down)  # also when the test session is interrupted
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._start_munge()
            with _bring_up_lock():
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
        """A munged of our own: its own key, socket and pid file (AuthInfo=socket=... in slurm.conf)."""
        folder = Path(tempfile.mkdtemp(prefix="hpcdl-munge-"))
        folder.chmod(0o755)
        (self.root / "munge-dir").write_text(f"{folder}\n")
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        _run(["/usr/sbin/munged", f"--socket={folder / 'munge.socket'}", f"--key-file={key}",
              f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
              f"--seed-file={folder / 'munged.seed'}"])
        for _ in range(50):
            if munge_works(self.munge_socket):
                return
            time.sleep(0.1)
        raise SlurmError(f"munged did not come up: {(folder / 'munged.log').read_text(errors='replace')[-2000:]}")

    def _write_conf(self) -> None:
        cpus = os.cpu_count() or 1
        mem = _real_memory_mb()
        for sub in ("state", "log", "spool", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for name in self.node_names:
            (self.root / "spool" / f"slurmd-{name}").mkdir(exist_ok=True)
            (self.root / "tmp" / name).mkdir(exist_ok=True)
        self.ctld_port, *ports = free_ports(1 + len(self.node_names))
        self.node_ports = dict(zip(self.node_names, ports))
        if self.nodes == 1:
            node_lines = [f"NodeName=localhost NodeAddr=127.0.0.1 Port={ports[0]} CPUs={cpus} RealMemory={mem} "
                          "State=UNKNOWN"]
            task_plugin, part_nodes = "task/affinity", "localhost"
        else:
            # one line per pretend node: each slurmd listens on a port of its own
            node_lines = [
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
                f"RealMemory={mem // self.nodes} State=UNKNOWN"
                for name, port in self.node_ports.items()
            ]
            # pretend nodes share the real cores, which task/affinity refuses to lay out twice
            task_plugin, part_nodes = "task/none", f"n[1-{self.nodes}]"
        r = self.root
        self.conf.write_text("\n".join([
            "ClusterName=hpcdltest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            # jobs take MASTER_PORT from the job id: two clusters here should not count alike
            f"FirstJobId={random.randrange(1000, 19000)}",
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
        self._stop_munge()

    def _stop_munge(self) -> None:
        folder = self.munge_dir
        if folder is None:
            return
        pidfile = folder / "munged.pid"
        if _alive(pidfile):
            try:
                os.kill(int(pidfile.read_text().strip()), 15)
            except (ProcessLookupError, ValueError):
                pass
            for _ in range(50):  # munged removes its pid file on exit
                if not _alive(pidfile):
                    break
                time.sleep(0.1)
        shutil.rmtree(folder, ignore_errors=True)
        (self.root / "munge-dir").unlink(missing_ok=True)

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
    """One cluster up at a time per test session (the jobs share the machine's cores); the
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
        cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
