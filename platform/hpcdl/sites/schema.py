"""The site-profile schema.

A profile is a YAML document that describes one machine: its node kinds (sockets, cores,
hardware threads, memory, GPUs and NICs with the socket each hangs off), how jobs reach it
(scheduler, launcher, container runtime, MPI), its filesystems, modules and defaults.
Unknown keys are refused, so a typo is an error instead of a silently ignored setting.
See docs/sites.md for the field-by-field guide.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Scheduler = Literal["slurm", "lsf", "pbs", "local"]
Launcher = Literal["srun", "jsrun", "ibrun", "mpirun", "mpiexec", "aprun", "local"]
Runtime = Literal["singularity", "apptainer", "shifter", "podman-hpc", "charliecloud", "none"]
MpiFlavour = Literal["openmpi", "mpich", "cray-mpich", "spectrum-mpi", "mvapich2", "intel-mpi", "none"]
NicKind = Literal["infiniband", "omnipath", "slingshot", "aries", "ethernet"]
GpuVendor = Literal["nvidia", "amd"]

# launchers that only start ranks inside their own scheduler's allocation
LAUNCHER_NEEDS: dict[str, tuple[str, ...]] = {
    "srun": ("slurm",),
    "ibrun": ("slurm",),  # TACC's wrapper reads the Slurm allocation
    "jsrun": ("lsf",),  # IBM Job Step Manager, inside an LSF CSM allocation
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gpu(_Strict):
    """One GPU (or one AMD GCD, which the OS shows as a GPU) and the socket it hangs off."""

    model: str
    socket: int = Field(ge=0)
    domain: int | None = Field(
        default=None, ge=0,
        description="NUMA domain (numbered across the node) the GPU is nearest, when a socket has several",
    )
    vendor: GpuVendor = "nvidia"
    memory_gb: float | None = Field(default=None, gt=0)


class Nic(_Strict):
    """One network port ranks can use: an IB HCA port, an OPA HFI, a Slingshot or Aries NIC."""

    kind: NicKind
    device: str = Field(description="verbs/HFI/CXI device name, e.g. mlx5_0, hfi1_0, cxi0, eth0")
    port: int = Field(default=1, ge=1)
    socket: int = Field(ge=0)
    domain: int | None = Field(
        default=None, ge=0, description="NUMA domain (numbered across the node) the NIC is nearest"
    )
    netdev: str | None = Field(default=None, description="IP interface on this NIC, e.g. ib0, hsn0")
    gbit_s: float | None = Field(default=None, gt=0)
    latency_us: float | None = Field(
        default=None, gt=0, description="published MPI small-message latency across the fabric (hpcdl predict)"
    )


class IntraNodeLink(_Strict):
    """How the ranks of one node reach each other (hpcdl predict's inside-the-node level)."""

    kind: Literal["nvlink", "infinity-fabric", "pcie", "shared-memory"]
    gbyte_s: float = Field(gt=0, description="bandwidth one rank sees per direction in a ring over the node's ranks")
    latency_us: float = Field(gt=0, description="latency of one step of a collective inside the node")


class NodeKind(_Strict):
    """One kind of compute node. Core numbers count physical cores across the node, socket 0 first."""

    description: str = ""
    count: int | None = Field(default=None, ge=1, description="nodes of this kind in the machine")
    cpu_model: str = ""
    cpu_target: str = Field(default="x86_64", description="archspec name: knl, skylake_avx512, power9le, zen3 ...")
    sockets: int = Field(ge=1)
    cores_per_socket: int = Field(ge=1)
    threads_per_core: int = Field(default=1, ge=1)
    scheduler_cpus_per_core: int | None = Field(
        default=None, ge=1,
        description=(
            "hardware threads of a core the batch system counts as CPUs: the unit of Slurm's "
            "--cpus-per-task and PBS ncpus. Default: threads_per_core (Slurm's own default on nodes "
            "configured with ThreadsPerCore). 1 where the site schedules physical cores: its Slurm "
            "defaults to --threads-per-core=1 or sets the node's CPUs to its core count (OLCF "
            "Frontier: '-c' counts physical cores)"
        ),
    )
    cpu_numbering: Literal["thread-major", "core-major"] = Field(
        default="thread-major",
        description=(
            "how Linux numbers hardware threads: thread-major (x86: cpu = thread*cores + core) "
            "or core-major (POWER: cpu = core*threads + thread)"
        ),
    )
    memory_gb: float = Field(gt=0)
    hbm_gb: float = Field(default=0, ge=0, description="on-package memory: KNL MCDRAM, V100/A100 HBM counts under gpus")
    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()
    domains_per_socket: int = Field(
        default=1, ge=1,
        description="NUMA domains per socket (AMD EPYC in NPS4 mode: 4); each holds an equal, contiguous share of cores",
    )
    reserved_cores_per_socket: int = Field(
        default=0, ge=0, description="the last cores of each socket, left to the OS, MPI progress and I/O"
    )
    reserved_cores: tuple[int, ...] = Field(
        default=(), description="further cores (numbered across the node) jobs cannot use, e.g. Frontier's low-noise cores"
    )
    default_ranks_per_socket: int | None = Field(default=None, ge=1)
    default_threads_per_rank: int | None = Field(default=None, ge=1)
    intra_node_link: IntraNodeLink | None = Field(default=None, description="for hpcdl predict; default by GPU/CPU kind")
    nodes_per_host: int = Field(
        default=1, ge=1,
        description="nodes sharing one physical machine (a test cluster's pretend nodes): they share its cores",
    )

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def cpus_per_core(self) -> int:
        """The CPUs the batch system counts for one core: what a rank's cores are worth in `-c`."""
        return self.scheduler_cpus_per_core or self.threads_per_core

    @property
    def usable_cores_per_socket(self) -> int:
        """Usable cores of the socket with the fewest (sockets are alike on every shipped node)."""
        return min(len(self.usable_cores_of_socket(s)) for s in range(self.sockets))

    @property
    def cores_per_domain(self) -> int:
        return self.cores_per_socket // self.domains_per_socket

    def cores_of_socket(self, socket: int) -> tuple[int, ...]:
        first = socket * self.cores_per_socket
        return tuple(range(first, first + self.cores_per_socket))

    def usable_cores_of_socket(self, socket: int) -> tuple[int, ...]:
        """The socket's cores without the reserved ones, in order."""
        cores = self.cores_of_socket(socket)
        kept = cores[: len(cores) - self.reserved_cores_per_socket]
        return tuple(c for c in kept if c not in self.reserved_cores)

    def usable_cores_of_domain(self, domain: int) -> tuple[int, ...]:
        first = domain * self.cores_per_domain
        span = range(first, first + self.cores_per_domain)
        return tuple(c for c in self.usable_cores_of_socket(first // self.cores_per_socket) if c in span)

    def domain_of_core(self, core: int) -> int:
        return core // self.cores_per_domain

    def socket_of_core(self, core: int) -> int:
        return core // self.cores_per_socket

    def cpus_of_core(self, core: int) -> tuple[int, ...]:
        """Linux logical CPU ids of all hardware threads of physical core `core`."""
        if self.cpu_numbering == "core-major":
            return tuple(core * self.threads_per_core + t for t in range(self.threads_per_core))
        return tuple(t * self.cores + core for t in range(self.threads_per_core))

    @model_validator(mode="after")
    def _devices_on_real_sockets(self) -> "NodeKind":
        if self.cores_per_socket % self.domains_per_socket:
            raise ValueError(
                f"domains_per_socket: {self.domains_per_socket} does not divide cores_per_socket {self.cores_per_socket}"
            )
        for what, devices in (("gpus", self.gpus), ("nics", self.nics)):
            for i, dev in enumerate(devices):
                if dev.socket >= self.sockets:
                    raise ValueError(
                        f"{what}[{i}].socket: {dev.socket} but the node has {self.sockets} socket(s), numbered from 0"
                    )
                if dev.domain is not None and dev.domain // self.domains_per_socket != dev.socket:
                    raise ValueError(
                        f"{what}[{i}].domain: {dev.domain} is not on socket {dev.socket} "
                        f"({self.domains_per_socket} domain(s) per socket, numbered across the node)"
                    )
        ports = [f"{n.device}:{n.port}" for n in self.nics]
        for port in ports:
            if ports.count(port) > 1:
                raise ValueError(f"nics: {port} is listed twice")
        if self.scheduler_cpus_per_core is not None and self.scheduler_cpus_per_core > self.threads_per_core:
            raise ValueError(
                f"scheduler_cpus_per_core: {self.scheduler_cpus_per_core} but a core has {self.threads_per_core} "
                "hardware thread(s) (threads_per_core)"
            )
        for core in self.reserved_cores:
            if not 0 <= core < self.cores:
                raise ValueError(f"reserved_cores: core {core} is not on the node (cores 0..{self.cores - 1})")
        if self.reserved_cores_per_socket >= self.cores_per_socket:
            raise ValueError("reserved_cores_per_socket: must leave at least one core per socket")
        for s in range(self.sockets):
            if not self.usable_cores_of_socket(s):
                raise ValueError(f"reserved_cores: socket {s} is left without a usable core")
        return self


class BurstBuffer(_Strict):
    """A per-job burst-buffer allocation the job script asks the scheduler for.

    Cray DataWarp under Slurm (NERSC Cori): `#DW jobdw capacity=... access_mode=... type=scratch`
    (Slurm's burst_buffer.html; NERSC's Cori burst-buffer guide). `private` gives each node
    its own namespace at $DW_JOB_PRIVATE (a node stages its shard there); `striped` one
    namespace shared by all nodes at $DW_JOB_STRIPED (the data set is staged there once).
    """

    kind: Literal["datawarp"] = "datawarp"
    # whole units only: NERSC notes Slurm misreads a decimal point (3.5TB) as one 20 GB grain
    capacity: str = Field(pattern=r"^[1-9][0-9]*(GB|TB|GiB|TiB)$", description="allocation size, e.g. 200GB")
    access_mode: Literal["private", "striped"] = "private"


class Filesystems(_Strict):
    scratch: str | None = Field(default=None, description="shared parallel filesystem for data and results")
    node_local: str | None = Field(
        default=None, description="node-local storage for staged data, e.g. /mnt/bb/$USER on Summit"
    )
    node_local_kind: Literal["nvme", "ssd", "tmpfs", "burst-buffer", "ramdisk"] | None = None
    burst_buffer: BurstBuffer | None = Field(default=None, description="a per-job burst buffer to request (DataWarp)")


class Modules(_Strict):
    system: Literal["lmod", "tcl", "none"] = "lmod"
    init: str | None = Field(default=None, description="script to source so `module` exists in batch jobs")
    load: tuple[str, ...] = Field(default=(), description="modules every hpcdl job loads")
    runtime: str | None = Field(default=None, description="module that provides the container runtime")
    frameworks: dict[str, str] = Field(
        default_factory=dict, description="the centre's own framework module, by framework (pytorch: open-ce/1.10.0...)"
    )


class Defaults(_Strict):
    """What a job asks the scheduler for unless the user says otherwise."""

    partition: str | None = Field(default=None, description="Slurm partition, or the LSF/PBS queue")
    account: str | None = None
    qos: str | None = Field(default=None, description="Slurm quality of service, e.g. NERSC's regular")
    time: str = "00:30:00"
    constraint: str | None = Field(default=None, description="Slurm --constraint, e.g. knl,quad,cache on Cori")
    alloc_flags: tuple[str, ...] = Field(
        default=(), description="LSF -alloc_flags, e.g. smt4 and nvme on Summit"
    )
    exclusive: bool = True
    max_nodes: int | None = Field(default=None, ge=1)
    max_time: str | None = None
    image: str | None = Field(default=None, description="image (path or name in image_dir) jobs run in")
    image_dir: str | None = None


class Site(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    sources: tuple[str, ...] = Field(default=(), description="where the profile's facts come from")
    scheduler: Scheduler
    launcher: Launcher
    runtime: Runtime = "none"
    mpi: MpiFlavour = "openmpi"
    node_kinds: dict[str, NodeKind]
    default_node_kind: str | None = None
    filesystems: Filesystems = Filesystems()
    modules: Modules = Modules()
    defaults: Defaults = Defaults()
    env: dict[str, str] = Field(default_factory=dict, description="site-wide settings every job exports")

    @field_validator("node_kinds")
    @classmethod
    def _at_least_one_kind(cls, kinds: dict[str, NodeKind]) -> dict[str, NodeKind]:
        if not kinds:
            raise ValueError("a site needs at least one node kind")
        return kinds

    @model_validator(mode="after")
    def _default_kind_exists(self) -> "Site":
        if self.default_node_kind is not None and self.default_node_kind not in self.node_kinds:
            raise ValueError(
                f"default_node_kind: {self.default_node_kind!r} is not one of {sorted(self.node_kinds)}"
            )
        needs = LAUNCHER_NEEDS.get(self.launcher)
        if needs and self.scheduler not in needs:
            raise ValueError(
                f"launcher: {self.launcher} runs under {' or '.join(needs)}, not under scheduler {self.scheduler}"
            )
        return self

    def node_kind(self, name: str | None = None) -> tuple[str, NodeKind]:
        from hpcdl.errors import HpcdlError

        name = name or self.default_node_kind or next(iter(self.node_kinds))
        if name not in self.node_kinds:
            raise HpcdlError(
                f"node kind {name!r} is not in site {self.name!r}; it has: {', '.join(sorted(self.node_kinds))}"
            )
        return name, self.node_kinds[name]
