"""A real Slurm cluster on this machine, for trying hpcdl and for its tests: munge, slurmctld and one slurmd per node.

`hpcdl cluster up [--nodes N]` starts one and `hpcdl cluster down` stops it (see
docs/getting-started.md); the tests start theirs from the same code (tests/conftest.py).

Everything it writes (slurm.conf, state, spool, logs, per-node TmpFS) lives in a folder of
its own, and clients find it through SLURM_CONF, so /etc/slurm is never touched. Several
clusters may run on one machine at once (two test sessions side by side): each picks free
TCP ports for slurmctld and every slurmd, runs its own munged on its own socket and key
(`AuthInfo=socket=...`, so one cluster's tear-down never stops another's munged), and
starts its job ids at a random number (jobs derive MASTER_PORT from the job id). Shapes:

  nodes=1  one node `localhost`, TaskPlugin task/affinity (the measured single-node set-up);
  nodes=2  two pretend nodes n1, n2, both slurmd on 127.0.0.1 with their own ports, each
           with its own TmpFS (PMIx step launch fails on a shared one) and TaskPlugin task/none;
  link_gbit_s=G  pretend nodes n1..nN each in a network namespace of its own on one bridge, each
           node's link shaped to G Gbit/s by tc (hpcdl.netshape): traffic between nodes crosses a
           link, and a job's MASTER_ADDR=$(hostname) resolves to the batch node's own address;
  shape=NodeShape(...)  pretend nodes n1..nN shaped like a machine's node (NodeShape.from_site):
           its sockets, cores, hardware threads, the CPUs Slurm counts, core specialisation
           (CpuSpecList), GPUs as GRES over stand-in character devices, memory, features,
           partition and time limit.
           `SlurmdParameters=config_overrides` lets this small host pose as the large node;
           slurmctld then judges every request against that node as it would on the machine.
           With task_layout=True, slurmd also sees the posed node's sockets and cores (hwloc's
           HWLOC_SYNTHETIC topology) and runs TaskPlugin task/affinity, so it lays a step's tasks
           out over the posed CPUs and logs each task's mask (`_lllp_generate_cpu_bind`); a task
           bound to a CPU this host lacks cannot start, so these clusters judge binding, not jobs.
  shapes=(NodeShape(...), ...)  several machines side by side in one cluster, `nodes` pretend nodes
           each (n1..nN the first, nN+1..n2N the next ...), each machine in its own partition with
           its own time limit and memory per CPU: one bring-up judges many machines' jobs (a job
           names its partition, so slurmctld weighs it against that machine's nodes alone). Their
           partitions must differ, and the few settings slurm.conf holds once for the whole cluster
           (the default task distribution) must agree.

All pretend nodes are this host, so a job's MASTER_ADDR is the batch host's own name
(`hostname`, which /etc/hosts maps to 127.0.0.1); /etc/hosts is not edited.
Needs root (slurmd and munged run as root here) and Slurm's and munge's Debian packages
(slurmctld, slurmd, slurm-client, munge).

    cluster = SlurmCluster(folder, nodes=2); cluster.up(); ...; cluster.down()

`down()` is safe to call twice and after a failed `up()`; it stops only what `up()` started.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import pwd
import random
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

# Ports come from here, below Linux's ephemeral range (32768+, where outgoing connections and
# not where the jobs' MASTER_PORT = 20000 + job id % 12000 lands) and away from Slurm's default 6817.
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
    fd = _own_lock_file(BRING_UP_LOCK)
    if fd is None:  # another user's file, a link or a FIFO under the shared name: use our own name
        fd = _own_lock_file(BRING_UP_LOCK.with_name(f"hpcdl-slurm-harness-{os.geteuid()}.lock"))
    if fd is None:
        raise SlurmError(f"{BRING_UP_LOCK}: neither it nor our own lock file there is a regular file of ours")
    try:
        deadline = time.monotonic() + 600  # a bring-up takes seconds; a lock held longer is stuck
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SlurmError(f"{BRING_UP_LOCK}: held by another process for 10 minutes") from None
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)


def _own_lock_file(path: Path) -> int | None:
    """A descriptor of `path`, created if need be, only if it is a regular file this user owns.

    The temporary folder is shared: opened without following a link, and without blocking on a
    FIFO someone else put there under this name."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        return None
    return fd


@dataclass(frozen=True)
class NodeShape:
    """One compute node as slurm.conf describes it (NodeName line, gres.conf, partition).

    cpus_per_core: the hardware threads of a core Slurm counts as CPUs, the unit of
    `--cpus-per-task`. Slurm's default is all of them (CPUs = sockets x cores x threads);
    1 poses as a machine whose Slurm counts physical cores (slurm.conf: "CPUs ... can be set
    to the total number of ... cores ... when you want to schedule only the cores on a
    hyper-threaded node"; OLCF Frontier, where --threads-per-core=1 is the default).
    spec_cores: the physical cores (numbered across the node, socket 0 first) reserved for the
    system on every node: Slurm's core specialisation, written as CpuSpecList so Slurm keeps
    exactly those cores from jobs (Frontier's low-noise mode: 0, 8, ..., 56; slurm.conf
    CoreSpecCount would pick the highest-numbered cores instead).
    cpu_bind: the node's CpuBind= (slurm.conf: "If a job step request does not specify an option to
    control how tasks are bound to allocated CPUs (--cpu-bind) ... the node CpuBind option will
    control how tasks are bound": none, socket, ldom, core, thread); None writes none, leaving
    task/affinity's auto binding (srun(1) --cpu-bind, "Auto Binding") to bind a step that names none.
    gpu_type: the GPUs' GRES type (Gres=gpu:a100:4, gres.conf Type=a100), where the centre names one in its
    requests (CSC Mahti: --gres=gpu:a100:4, which an untyped node would refuse).
    count_gres: further generic resources the node holds as counts, with no device (name, count): node-local storage a
    job asks by --gres (CSC Puhti: "--gres=nvme:<local_storage_space_per_node>", "with a maximum of 3600 GB per
    node": ("nvme", 3600)), written Gres=...,nvme:3600 and gres.conf Name=nvme Count=3600.
    distribution_default: block poses a Slurm that lays a step's tasks out socket by socket when srun names
    no --distribution (SelectTypeParameters=...,CR_Core_Default_Dist_Block); None keeps Slurm's cyclic, and so
    does fcyclic, which no slurm.conf makes the default (its sites' lines name --distribution where it matters).
    """

    sockets: int = 1
    cores_per_socket: int = 2
    threads_per_core: int = 1
    cpus_per_core: int | None = None
    spec_cores: tuple[int, ...] = ()
    cpu_bind: str | None = None
    gpus: int = 0
    gpu_vendor: str = "nvidia"
    gpu_type: str | None = None
    count_gres: tuple[tuple[str, int], ...] = ()
    distribution_default: str | None = None
    memory_mb: int = 4096
    features: tuple[str, ...] = ()
    partition: str = "debug"
    max_time: str = "INFINITE"

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def cpus(self) -> int:
        """CPUs= on the NodeName line: every hardware thread, or every core where Slurm counts cores."""
        return self.cores * (self.cpus_per_core or self.threads_per_core)

    @property
    def hwloc_synthetic(self) -> str:
        """The node as an hwloc synthetic topology (HWLOC_SYNTHETIC): hardware threads numbered core
        by core, as Slurm numbers its abstract CPUs."""
        return f"package:{self.sockets} core:{self.cores_per_socket} pu:{self.threads_per_core}"

    @property
    def spec_cpu_ids(self) -> list[int]:
        """CpuSpecList: Slurm's abstract CPU ids of the first CPU of each reserved core (Slurm adds
        the core's other CPUs), counted in the node's CPUs (one per core when CPUs = cores)."""
        return [core * (self.cpus // self.cores) for core in self.spec_cores]

    @classmethod
    def from_site(cls, site, kind: str | None = None) -> "NodeShape":
        """The node of a hpcdl site profile (hpcdl.sites.schema.Site), as that machine's Slurm sees it."""
        kind, node = site.node_kind(kind)
        defaults = site.job_defaults(kind)
        features = tuple(f for f in (defaults.constraint or "").replace("&", ",").split(",") if f)
        usable = {c for s in range(node.sockets) for c in node.usable_cores_of_socket(s)}
        reserved = tuple(c for c in range(node.cores) if c not in usable)
        # the sockets that machine's Slurm counts: its NUMA domains or L3 caches where it poses them as sockets
        sockets = node.scheduler_sockets or node.sockets
        return cls(
            sockets=sockets, cores_per_socket=node.cores // sockets, threads_per_core=node.threads_per_core,
            cpus_per_core=node.scheduler_cpus_per_core, spec_cores=reserved, gpus=len(node.gpus),
            gpu_vendor=node.gpus[0].vendor if node.gpus else "nvidia", gpu_type=node.defaults.gpu_type,
            memory_mb=int(node.memory_gb * 1024),
            # a site that routes jobs to queues by size: the queue that takes the two whole nodes posed here, else
            # (a kind whose queues take one node at most: Purdue Gautschi's smallgpu) its largest, the last
            features=features, partition=next((p.partition or defaults.partition for p in defaults.partition_by_nodes
                                               if (p.max_nodes is None or p.max_nodes >= 2)
                                               and (p.max_gpus is None or p.max_gpus >= 2 * len(node.gpus))),
                                              (defaults.partition_by_nodes[-1].partition if defaults.partition_by_nodes
                                               else None) or defaults.partition) or "debug",
            max_time=_slurm_minutes(site.defaults.max_time) if site.defaults.max_time else "INFINITE",
        )


    @classmethod
    def from_published(cls, site, kind: str, facts: dict) -> "NodeShape":
        """The node as its centre publishes it (facts: sockets, cores_per_socket, threads_per_core,
        cpus: the CPUs Slurm counts on the node, spec_cores: the cores Slurm keeps for the system,
        gpus, gpu_type: the GPUs' GRES type where the centre's requests name one),
        with only the job policy (partition, features, time limit, memory) from the profile.
        A profile that declares the machine's CPU counting or reserved cores wrongly is then
        judged by a Slurm shaped like the real node, not posed as wrongly as it is written."""
        base = cls.from_site(site, kind)
        cores = facts["sockets"] * facts["cores_per_socket"]
        if facts["cpus"] % cores or not 1 <= facts["cpus"] // cores <= facts["threads_per_core"]:
            raise ValueError(f"cpus: {facts['cpus']} is not 1 to threads_per_core CPUs for each of {cores} cores")
        return replace(
            base, sockets=facts["sockets"], cores_per_socket=facts["cores_per_socket"],
            threads_per_core=facts["threads_per_core"], cpus_per_core=facts["cpus"] // cores,
            spec_cores=tuple(facts.get("spec_cores", ())), gpus=facts.get("gpus", 0),
            gpu_type=facts.get("gpu_type"),
        )


def _posed(shape: NodeShape | None, shapes: tuple[NodeShape, ...]) -> tuple[NodeShape, ...]:
    """The machines a cluster poses: one `shape`, several `shapes`, or none."""
    if shape is not None and shapes:
        raise ValueError("give one shape or several shapes, not both")
    return tuple(shapes) or ((shape,) if shape is not None else ())


def _check_side_by_side(shapes: tuple[NodeShape, ...]) -> None:
    """Machines posed in one cluster need partitions of their own, and must agree on what slurm.conf
    says once for all (the default task distribution)."""
    partitions = [shape.partition for shape in shapes]
    if len(set(partitions)) < len(partitions):
        raise ValueError(f"shapes: two machines in one cluster share a partition name: {partitions}")
    if len({shape.distribution_default == "block" for shape in shapes}) > 1:
        raise ValueError("shapes: machines in one cluster must agree on distribution_default (CR_Core_Default_Dist_Block)")


def _slurm_minutes(text: str) -> str:
    from hpcdl.render.jobscript import parse_time

    return str(-(-parse_time(text) // 60))


class SlurmCluster:
    def __init__(self, root: Path, nodes: int = 1, shape: NodeShape | None = None, link_gbit_s: float | None = None,
                 task_layout: bool = False, shapes: tuple[NodeShape, ...] = ()):
        self.root = Path(root)
        self.nodes = nodes
        self.shapes = _posed(shape, shapes)
        if task_layout and not self.shapes:
            raise ValueError("task_layout: the tasks are laid out over a posed node; give its shape")
        _check_side_by_side(self.shapes)
        self.task_layout = task_layout
        # link_gbit_s: each pretend node in its own network namespace, its link shaped to this rate
        # (hpcdl.netshape); None (the default): every slurmd on 127.0.0.1, as before
        self.link_gbit_s = link_gbit_s
        self.network = None
        self.conf = self.root / "slurm.conf"
        self.running = False
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}

    @property
    def node_names(self) -> list[str]:
        if self.nodes == 1 and not self.shapes and self.link_gbit_s is None:
            return ["localhost"]
        return [f"n{i}" for i in range(1, self.nodes * max(1, len(self.shapes)) + 1)]

    def nodes_of(self, shape: NodeShape) -> list[str]:
        """The pretend nodes posing as `shape` (one of the cluster's shapes)."""
        at = self.shapes.index(shape)
        return self.node_names[at * self.nodes:(at + 1) * self.nodes]

    @property
    def env(self) -> dict[str, str]:
        """The clients' environment: this process's, with SLURM_CONF naming this cluster. sbatch hands a job
        the submitting shell's environment (its default --export=ALL), and a login shell always has USER and
        LOGNAME (login(1), sshd set them), which profiles may use in a job's paths (`/scratch1/$USER/tmp`); a
        shell started without them (a container's root shell) gets them here from the password database, as
        a login would give them, so a job is judged as it runs when submitted from a login node."""
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for key in ("USER", "LOGNAME"):
            if not env.get(key):
                env[key] = pwd.getpwuid(os.getuid()).pw_name
        return env

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
                if self.link_gbit_s is not None:
                    self._start_network()
                self._write_conf()
                _run(["/usr/sbin/slurmctld", "-i", "-f", str(self.conf)], env=self.env)
                self.running = True
                for name in self.node_names:
                    argv = ["/usr/sbin/slurmd", "-N", name, "-f", str(self.conf)]
                    env = self.env
                    if self.task_layout:
                        posed = next(s for s in self.shapes if name in self.nodes_of(s))
                        env = {**self.env, "HWLOC_SYNTHETIC": posed.hwloc_synthetic}
                    _run(self.network.exec_argv(name, argv) if self.network else argv, env=env)
                self._wait_idle()
        except BaseException:
            self.down()
            raise
        return self

    def _start_network(self) -> None:
        """Each node in a network namespace of its own on one bridge, its link shaped (hpcdl.netshape);
        written to network.json so `down` from another process removes it."""
        from hpcdl.netshape import ShapedNetwork

        taken = {p.name for p in Path("/sys/class/net").iterdir()} if Path("/sys/class/net").is_dir() else set()
        while True:
            tag = f"hd{random.randrange(16**4):04x}"
            if f"{tag}br" not in taken:
                break
        self.network = ShapedNetwork(tag, self.node_names, gbit_s=self.link_gbit_s or None,
                                     index=random.randrange(1, 250))
        (self.root / "network.json").write_text(self.network.to_json())
        self.network.up()

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
        gres_lines: list[str] = []
        ctld_host = "localhost"
        if self.network is not None:
            # the nodes reach slurmctld at the bridge's address; each slurmd listens on its own
            ctld_host = f"localhost({self.network.host_address})"
            node_lines = [
                f"NodeName={name} NodeHostname={name} NodeAddr={self.network.address(name)} Port={port} "
                f"CPUs={cpus} RealMemory={mem // self.nodes} State=UNKNOWN"
                for name, port in self.node_ports.items()
            ]
            task_plugin, part_nodes = "task/none", f"n[1-{self.nodes}]"
        elif self.shapes:
            node_lines, gres_lines = [], []
            for shape in self.shapes:
                nodes, gres = self._shaped_nodes(shape)
                node_lines += nodes
                gres_lines += [line for line in gres if line not in gres_lines]
            task_plugin = "task/affinity" if self.task_layout else "task/none"
            part_nodes = None  # each machine in a partition of its own (below)
        elif self.nodes == 1:
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
        self.task_plugin = task_plugin  # `cluster up` says once when ranks cannot be bound
        r = self.root
        if self.shapes:
            # each machine its own partition; a job that names none goes to the first (Default=YES)
            partitions = [
                f"PartitionName={shape.partition} Nodes={','.join(self.nodes_of(shape))} "
                f"Default={'YES' if at == 0 else 'NO'} MaxTime={shape.max_time} "
                # a shaped node shares its memory out over its CPUs, so a whole-node job fits it
                f"DefMemPerCPU={shape.memory_mb // shape.cpus} State=UP"
                for at, shape in enumerate(self.shapes)]
        else:
            partitions = [f"PartitionName=debug Nodes={part_nodes} Default=YES MaxTime=INFINITE State=UP"]
        block = any(shape.distribution_default == "block" for shape in self.shapes)
        (self.root / "gres.conf").write_text("\n".join([*gres_lines, ""]))
        self.conf.write_text("\n".join([
            "ClusterName=hpcdltest",
            f"SlurmctldHost={ctld_host}",
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
            "SelectTypeParameters=CR_Core_Memory" + (",CR_Core_Default_Dist_Block" if block else ""),
            # schedule a batch job when it is submitted: slurm.conf's batch_sched_delay ("How long, in seconds,
            # the scheduling of batch jobs can be delayed ... The default value is 3 seconds") is for a
            # high-throughput machine; here it left each job pending about 2.4 s of its 3 s
            "SchedulerParameters=batch_sched_delay=0",
            "DefMemPerCPU=1000",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            # a cancelled job's processes get SIGKILL 5 s after SIGTERM (default 30 s)
            "KillWait=5",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            *([f"GresTypes={','.join(self._gres_types())}"] if gres_lines else []),
            *node_lines,
            *partitions,
            "",
        ]))

    def _gres_types(self) -> list[str]:
        """GresTypes: gpu where a posed machine has GPUs, and every count-only resource any of them holds."""
        counted = [name for shape in self.shapes for name, _ in shape.count_gres]
        return ["gpu"] * any(shape.gpus for shape in self.shapes) + list(dict.fromkeys(counted))

    def _shaped_nodes(self, shape: NodeShape) -> tuple[list[str], list[str]]:
        """NodeName lines posing as `shape`, and gres.conf lines for its GPUs.

        The GPUs are character devices under the cluster's folder (gpu0, gpu1 ..., /dev/null's
        numbers: slurmd refuses a plain file as "not a valid character or block device"):
        slurmd takes each one's index from its name and sets CUDA_VISIBLE_DEVICES or
        ROCR_VISIBLE_DEVICES for the tasks bound to it (gres.conf File=, AutoDetect=off).
        """
        devices = self.root / "dev"
        devices.mkdir(exist_ok=True)
        for g in range(shape.gpus):
            # slurmd takes only character or block devices; these are /dev/null's twins
            device = devices / f"gpu{g}"
            if not device.exists():
                os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        lines, gres = [], []
        if shape.gpus or shape.count_gres:
            gres.append("AutoDetect=off")
        for name in self.nodes_of(shape):
            port = self.node_ports[name]
            words = [f"NodeName={name}", "NodeHostname=localhost", "NodeAddr=127.0.0.1", f"Port={port}",
                     f"CPUs={shape.cpus}", f"Sockets={shape.sockets}", f"CoresPerSocket={shape.cores_per_socket}",
                     f"ThreadsPerCore={shape.threads_per_core}", f"RealMemory={shape.memory_mb}"]
            if shape.spec_cores:
                words.append(f"CpuSpecList={','.join(map(str, shape.spec_cpu_ids))}")
            if shape.cpu_bind:
                words.append(f"CpuBind={shape.cpu_bind}")
            node_gres = []
            if shape.gpus:
                typed = f"{shape.gpu_type}:" if shape.gpu_type else ""
                node_gres.append(f"gpu:{typed}{shape.gpus}")
                last = f"[0-{shape.gpus - 1}]" if shape.gpus > 1 else "0"
                flag = "amd_gpu_env" if shape.gpu_vendor == "amd" else "nvidia_gpu_env"
                kind = f" Type={shape.gpu_type}" if shape.gpu_type else ""
                gres.append(f"NodeName={name} Name=gpu{kind} File={devices}/gpu{last} Flags={flag}")
            for gres_name, count in shape.count_gres:
                node_gres.append(f"{gres_name}:{count}")
                gres.append(f"NodeName={name} Name={gres_name} Count={count}")
            if node_gres:
                words.append(f"Gres={','.join(node_gres)}")
            if shape.features:
                words.append(f"Features={','.join(shape.features)}")
            lines.append(" ".join([*words, "State=UNKNOWN"]))
        return lines, gres

    def _wait_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = _run(["sinfo", "-h", "-N", "-o", "%t"], env=self.env, check=False)
            states = proc.stdout.split()
            if proc.returncode == 0 and states.count("idle") == len(self.node_names):
                return
            time.sleep(0.2)
        raise SlurmError(f"Slurm did not come up: sinfo says {proc.stdout.strip()!r}\n{self.logs()}")

    def sbatch(self, *args, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """`sbatch ARGS` against this cluster (its SLURM_CONF), output captured: a job or a --test-only request."""
        return subprocess.run(["sbatch", *map(str, args)], capture_output=True, text=True, env=self.env, cwd=cwd,
                              timeout=timeout)

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
        self._stop_network()
        self._stop_munge()

    def _stop_network(self) -> None:
        record = self.root / "network.json"
        if self.network is None and record.exists():
            from hpcdl.netshape import ShapedNetwork

            self.network = ShapedNetwork.from_json(record.read_text())
        if self.network is not None:
            self.network.down()
            self.network = None
        record.unlink(missing_ok=True)

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
    # a daemon that exited but was not yet reaped by PID 1 shows as a zombie (in a container)
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

    def ensure(self, nodes: int, shape: NodeShape | None = None, task_layout: bool = False,
               shapes: tuple[NodeShape, ...] = ()) -> SlurmCluster:
        """A cluster of `nodes` nodes, shaped like `shape` when given (laying tasks out over it with
        task_layout), or `nodes` of each of several `shapes` side by side; the one up is reused when it fits."""
        wanted = _posed(shape, shapes)
        current = self.current
        if current is not None and current.nodes == nodes and current.shapes == wanted and \
                current.task_layout == task_layout:
            return current
        self.down()
        self.count = getattr(self, "count", 0) + 1
        folder = f"{nodes}-node" if not wanted else f"{nodes}-shaped-{self.count}"
        cluster = SlurmCluster(self.root / folder, nodes, task_layout=task_layout, shapes=wanted)
        self.current = cluster.up()
        return cluster

    def down(self) -> None:
        if self.current is not None:
            self.current.down()
            self.current = None


SITE_NAME = "local-slurm"


def site_profile(nodes: int) -> str:
    """A site profile for the cluster: this machine's node as detected, under Slurm with srun and PMIx.

    The pretend nodes share this machine's cores (nodes_per_host), and Open MPI's shared-memory
    transport breaks across pretend nodes on one host, so MPI goes over TCP (OMPI_MCA_btl).
    """
    import yaml

    from hpcdl.sites.detect import detect_local_site, site_to_yaml

    local = yaml.safe_load(site_to_yaml(detect_local_site()))
    kind = next(iter(local["node_kinds"]))
    node = local["node_kinds"][kind]
    node["nodes_per_host"] = nodes
    node["count"] = nodes
    # the Slurm started here counts every hardware thread as a CPU (slurm.conf's default): a Slurm
    # profile says so on an SMT node
    node.setdefault("scheduler_cpus_per_core", node.get("threads_per_core", 1))
    node.pop("gpus", None) if not node.get("gpus") else None
    profile = {
        "name": SITE_NAME,
        "description": f"the Slurm `hpcdl cluster up` started on this machine ({nodes} node(s))",
        "scheduler": "slurm", "launcher": "srun", "runtime": "none", "mpi": local.get("mpi", "openmpi"),
        "node_kinds": {kind: node}, "default_node_kind": kind,
        "modules": {"system": "none"},
        "defaults": {"partition": "debug", "time": "00:10:00", "exclusive": False},
        "env": {"OMPI_MCA_btl": "self,tcp"},
    }
    return ("# Written by `hpcdl cluster up`: the local Slurm it started, as a site profile.\n"
            + yaml.safe_dump(profile, sort_keys=False))


def default_folder() -> Path:
    return Path(os.environ.get("HPCDL_CLUSTER_DIR") or "~/.cache/hpcdl/cluster").expanduser()


def cluster_up(folder: Path, nodes: int = 1, link_gbit_s: float | None = None) -> SlurmCluster:
    """Start the cluster and leave it running (until cluster_down); write its site profile beside it."""
    from hpcdl.files import write_atomically

    folder = Path(folder).resolve()
    if (folder / "slurm.conf").exists() and any(_alive(p) for p in folder.glob("*.pid")):
        raise SlurmError(f"a cluster is already running in {folder}: `hpcdl cluster down` first")
    cluster = SlurmCluster(folder, nodes, link_gbit_s=link_gbit_s)
    cluster.up()
    atexit.unregister(cluster.down)  # it stays up until `down`
    write_atomically(folder / "sites" / f"{SITE_NAME}.yaml", site_profile(nodes), mode=0o644)
    return cluster


def running_clusters() -> list[Path]:
    """The folders of the clusters started here (by `cluster up` or a test) whose slurmctld still
    runs, read from each slurmctld's `-f FOLDER/slurm.conf`."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/slurmctld") and b"-f" in argv[:-1]:
            conf = Path(os.fsdecode(argv[argv.index(b"-f") + 1]))
            if conf.name == "slurm.conf" and (conf.parent / "slurmctld.pid").exists():
                found.add(conf.parent)
    return sorted(found)


def cluster_down(folder: Path) -> bool:
    """Stop what cluster_up started in `folder`; False when nothing was running there."""
    folder = Path(folder).resolve()
    cluster = SlurmCluster(folder)
    was = any(_alive(p) for p in folder.glob("*.pid")) or cluster.munge_dir is not None
    cluster.running = was and (folder / "slurm.conf").exists()
    cluster.down()
    return was


def main(argv: list[str] | None = None) -> int:
    """By hand, to look at a failing job: python -m hpcdl.cluster up|down FOLDER [NODES] [SITE[:KIND]].

    SITE (a shipped profile or a YAML file) poses the nodes as that site's node kind.
    """
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] not in ("up", "down"):
        print("usage: python -m hpcdl.cluster up|down FOLDER [NODES] [SITE[:KIND]]", file=sys.stderr)
        return 2
    root, nodes = Path(args[1]).resolve(), int(args[2]) if len(args) > 2 else 1
    shape = None
    if len(args) > 3:
        from hpcdl.sites import load_site
        from hpcdl.sites.registry import load_site_file

        name, _, kind = args[3].partition(":")
        site = load_site_file(Path(name)) if name.endswith((".yaml", ".yml")) else load_site(name)
        shape = NodeShape.from_site(site, kind or None)
    cluster = SlurmCluster(root, nodes, shape)
    if args[0] == "up":
        cluster.up()
        atexit.unregister(cluster.down)  # it stays up until `down`
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster_down(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
