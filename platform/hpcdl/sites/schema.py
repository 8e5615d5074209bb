"""The site-profile schema.

A profile is a YAML document that describes one machine: its node kinds (sockets, cores,
hardware threads, memory, GPUs and NICs with the socket each hangs off), how jobs reach it
(scheduler, launcher, container runtime, MPI), its filesystems, modules and defaults.
Unknown keys are refused, so a typo is an error instead of a silently ignored setting.
See docs/sites.md for the field-by-field guide.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

Scheduler = Literal["slurm", "lsf", "pbs", "local"]
Launcher = Literal["srun", "jsrun", "ibrun", "mpirun", "mpiexec", "pals", "aprun", "local"]
Runtime = Literal["singularity", "apptainer", "shifter", "podman-hpc", "charliecloud", "none"]
MpiFlavour = Literal[
    "openmpi", "mpich", "cray-mpich", "spectrum-mpi", "mvapich2", "intel-mpi", "parastation-mpi", "none"
]
NicKind = Literal["infiniband", "omnipath", "slingshot", "aries", "ethernet"]
GpuVendor = Literal["nvidia", "amd"]

# Profile strings that name things a job script, a modulefile or a launcher uses are checked
# here, by what they name (issue #17: a NIC name with a newline ran commands in every job).
# Linux network and verbs device names: letters, digits and . _ - (IFNAMSIZ is 16; verbs 64).
# Named once for both ends: profiles are validated with them here, and `hpcdl sites detect`
# leaves out a host device whose name fails them (sites.detect), so a detected profile validates.
DEVICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
DEVICE_NAME_MAX_LENGTH = 64
DeviceName = Annotated[str, StringConstraints(pattern=DEVICE_NAME_PATTERN, max_length=DEVICE_NAME_MAX_LENGTH)]
# Lmod/Tcl module names: name/version, with the + @ : , characters Spack and vendors use.
ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+@:,/-]*$", max_length=255)]
# a scheduler word: account, partition/queue, QoS, feature list (no blanks, quotes or shell text)
SchedulerWord = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:+=,@/%&|!()\[\]*-]+$", max_length=255)]
PATH_MAX = 4096
#: more nodes than any machine has (Fugaku: 158,976): a bound on counts, so a typo cannot make
#: plan and render build millions of ranks
MAX_NODES = 1_000_000


def _plain_path(value: str) -> str:
    """A path (or image name): printable text a file name can hold, within PATH_MAX."""
    if not value or len(value) > PATH_MAX or not value.isprintable():
        raise ValueError(f"must be a non-empty path of printable characters, at most {PATH_MAX} long")
    return value


SitePath = Annotated[str, AfterValidator(_plain_path)]


def _plain_text(value: str) -> str:
    """Free text (descriptions, models): printable, one line, a sane length."""
    if len(value) > 1000 or not value.isprintable():
        raise ValueError("must be printable text on one line, at most 1000 characters")
    return value


Text = Annotated[str, AfterValidator(_plain_text)]

# launchers that only start ranks inside their own scheduler's allocation
LAUNCHER_NEEDS: dict[str, tuple[str, ...]] = {
    "srun": ("slurm",),
    "ibrun": ("slurm",),  # TACC's wrapper reads the Slurm allocation
    "jsrun": ("lsf",),  # IBM Job Step Manager, inside an LSF CSM allocation
    "pals": ("pbs",),  # HPE Cray PALS mpiexec, inside a PBS Pro allocation (ALCF Polaris, Aurora)
}

#: variables every job shell has: the login's and the batch system's own (a path may use them)
ALWAYS_SET = ("USER", "HOME", "LOGNAME", "HOSTNAME", "PWD", "TMPDIR")
SCHEDULER_VARIABLE_PREFIX = {"slurm": "SLURM_", "lsf": "LSB_", "pbs": "PBS_", "local": "HPCDL_"}
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
#: the placeholder in a site path that takes the account/project given at render time
PROJECT_PLACEHOLDER = "{project}"
_DIRECTIVE = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*(?:[ =][A-Za-z0-9._:+=,@/%\[\]-]+)?$")
_WORD = re.compile(r"^[A-Za-z0-9._:+=,@/%-]+$")


def variables_in(text: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in _VARIABLE.finditer(text)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# words in a GPU's model name that say its vendor (checked against `vendor`): the brand, or a
# bare model number as nvidia-smi / rocm-smi and centres' pages write them (MI250X, A100, GH200)
_GPU_MODEL_VENDOR = (
    ("intel", r"\bintel\b|ponte vecchio|\bpvc\b|\bgpu max\b"),
    ("amd", r"\bamd\b|\binstinct\b|\bradeon\b|\bmi\d{2,3}[a-z]?\b"),
    ("nvidia", r"\bnvidia\b|\btesla\b|\bquadro\b|\bgeforce\b"
               r"|\b(?:[kmp]\d{2}|[pv]100s?|a(?:2|10|16|30|40|100)|[hb][12]00|g[hb]200|l4|l40s?|t4)\b"),
)


class Gpu(_Strict):
    """One GPU (or one AMD GCD, which the OS shows as a GPU) and the socket it hangs off."""

    model: Text
    socket: int = Field(ge=0)
    domain: int | None = Field(
        default=None, ge=0,
        description="NUMA domain (numbered across the node) the GPU is nearest, when a socket has several",
    )
    vendor: GpuVendor = "nvidia"
    memory_gb: float | None = Field(default=None, gt=0, le=4096, allow_inf_nan=False)

    @field_validator("vendor", mode="before")
    @classmethod
    def _vendor_in_scope(cls, value):
        # Intel GPUs (ALCF Aurora's Data Center GPU Max, run through Level Zero with ZE_AFFINITY_MASK
        # and oneCCL) are outside what hpcdl drives: say so, rather than only list the allowed words
        if isinstance(value, str) and value not in GpuVendor.__args__:
            raise ValueError(
                f"{value!r} GPUs are outside hpcdl's scope: it drives NVIDIA (CUDA, NCCL) and AMD (ROCm, RCCL) "
                "GPUs only, vendor 'nvidia' or 'amd'; to use such a node's CPUs alone, describe it without gpus"
            )
        return value

    @model_validator(mode="after")
    def _model_matches_vendor(self):
        # vendor defaults to nvidia: a profile that names an AMD or Intel GPU by its model but forgets
        # vendor would hand ranks CUDA_VISIBLE_DEVICES on a machine that reads something else
        model = self.model.lower()
        named = next((v for v, pattern in _GPU_MODEL_VENDOR if re.search(pattern, model)), None)
        if named == "intel":
            raise ValueError(
                f"vendor: model {self.model!r} is an Intel GPU, outside hpcdl's scope: it drives NVIDIA (CUDA, NCCL) "
                "and AMD (ROCm, RCCL) GPUs only; to use such a node's CPUs alone, describe it without gpus"
            )
        if named and named != self.vendor:
            raise ValueError(f"vendor: model {self.model!r} is an {named.upper()} GPU but vendor is {self.vendor!r}; "
                             f"set vendor: {named}")
        return self


class Nic(_Strict):
    """One network port ranks can use: an IB HCA port, an OPA HFI, a Slingshot or Aries NIC."""

    kind: NicKind
    device: DeviceName = Field(description="verbs/HFI/CXI device name, e.g. mlx5_0, hfi1_0, cxi0, eth0")
    port: int = Field(default=1, ge=1, le=255)  # a verbs port number is 8 bits (ibv_query_port)
    socket: int = Field(ge=0)
    domain: int | None = Field(
        default=None, ge=0, description="NUMA domain (numbered across the node) the NIC is nearest"
    )
    netdev: DeviceName | None = Field(default=None, description="IP interface on this NIC, e.g. ib0, hsn0")
    gbit_s: float | None = Field(default=None, gt=0)
    latency_us: float | None = Field(
        default=None, gt=0, description="published MPI small-message latency across the fabric (hpcdl predict)"
    )
    rdma: bool | None = Field(
        default=None,
        description="the NIC moves the bytes itself (RDMA: InfiniBand verbs, RoCE or iWARP on Ethernet) rather than "
        "a host core copying them (TCP, Omni-Path PSM2); default by kind: Ethernet and Omni-Path copy (hpcdl predict)",
    )


class IntraNodeLink(_Strict):
    """How the ranks of one node reach each other (hpcdl predict's inside-the-node level)."""

    kind: Literal["nvlink", "infinity-fabric", "pcie", "shared-memory"]
    gbyte_s: float = Field(gt=0, description="bandwidth one rank sees per direction in a ring over the node's ranks")
    latency_us: float = Field(gt=0, description="latency of one step of a collective inside the node")


class NodeKindDefaults(_Strict):
    """What a job on this node kind asks the scheduler for, where it differs from the site's `defaults`.

    Machines with several node kinds reach each through its own partition or feature (NERSC
    Perlmutter: `-C gpu` for GPU nodes, `-C cpu` for CPU nodes; JSC JUWELS: `--partition=booster`
    beside `batch`). A field left out takes the site's; `directives`, when given, replace the site's.
    """

    partition: SchedulerWord | None = Field(default=None, description="Slurm partition, or LSF/PBS queue, of this kind")
    qos: SchedulerWord | None = None
    constraint: SchedulerWord | None = Field(default=None, description="Slurm --constraint (PBS chunk resources) of this kind")
    directives: tuple[str, ...] | None = Field(
        default=None, description="further scheduler options for jobs on this kind, in place of the site's"
    )


class NodeKind(_Strict):
    """One kind of compute node. Core numbers count physical cores across the node, socket 0 first."""

    description: Text = ""
    count: int | None = Field(default=None, ge=1, le=MAX_NODES, description="nodes of this kind in the machine")
    cpu_model: Text = ""
    cpu_target: DeviceName = Field(default="x86_64", description="archspec name: knl, skylake_avx512, power9le, zen3 ...")
    sockets: int = Field(ge=1, le=64, strict=True)  # the largest shared-memory nodes (HPE Superdome Flex) have 32
    cores_per_socket: int = Field(ge=1, le=1024, strict=True)  # today's most: 192 (AMD Zen 5c), 260 (Sunway SW26010)
    threads_per_core: int = Field(default=1, ge=1, le=8, strict=True)  # POWER8/9 SMT8
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
    memory_gb: float = Field(gt=0, le=2**16, allow_inf_nan=False)  # 64 TB: above the largest shared-memory node
    hbm_gb: float = Field(default=0, ge=0, description="on-package memory: KNL MCDRAM, V100/A100 HBM counts under gpus")
    gpus: tuple[Gpu, ...] = Field(default=(), max_length=64)
    nics: tuple[Nic, ...] = Field(default=(), max_length=64)
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
    default_cores_per_rank: int | None = Field(
        default=None, ge=1,
        description="at most this many cores per rank unless the request says otherwise (LBANN on Lassen: 8)",
    )
    intra_node_link: IntraNodeLink | None = Field(default=None, description="for hpcdl predict; default by GPU/CPU kind")
    nodes_per_host: int = Field(
        default=1, ge=1, le=MAX_NODES,
        description="nodes sharing one physical machine (a test cluster's pretend nodes): they share its cores",
    )
    defaults: NodeKindDefaults = Field(
        default_factory=NodeKindDefaults,
        description="partition, qos, constraint and directives of this kind where they differ from the site's",
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
        cpus = self.sockets * self.cores_per_socket * self.threads_per_core
        if self.default_threads_per_rank is not None and self.default_threads_per_rank > cpus:
            raise ValueError(f"default_threads_per_rank: {self.default_threads_per_rank} is more than the node's "
                             f"{cpus} hardware threads")
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
    scratch: SitePath | None = Field(default=None, description="shared parallel filesystem for data and results")
    node_local: SitePath | None = Field(
        default=None, description="node-local storage for staged data, e.g. /mnt/bb/$USER on Summit"
    )
    node_local_kind: Literal["nvme", "ssd", "tmpfs", "burst-buffer", "ramdisk"] | None = None
    burst_buffer: BurstBuffer | None = Field(default=None, description="a per-job burst buffer to request (DataWarp)")


class Modules(_Strict):
    system: Literal["lmod", "tcl", "none"] = "lmod"
    init: SitePath | None = Field(default=None, description="script to source so `module` exists in batch jobs")

    @field_validator("init")
    @classmethod
    def _init_absolute(cls, init: str | None) -> str | None:
        # a job script runs in its job folder: a relative path would be sourced from wherever that is
        if init is not None and not init.startswith(("/", "$")):
            raise ValueError(f"{init!r} must be an absolute path (or start with a $VARIABLE such as $LMOD_PKG)")
        return init
    use: tuple[SitePath, ...] = Field(default=(), description="module folders to `module use` before loading")
    load: tuple[ModuleName, ...] = Field(default=(), description="modules every hpcdl job loads")
    gpu_mpi: tuple[ModuleName, ...] = Field(
        default=(),
        description=(
            "modules that make the MPI GPU-aware (Cray: the GTL, craype-accel-amd-gfx90a or craype-accel-nvidia80); "
            "GPU jobs load them and set MPICH_GPU_SUPPORT_ENABLED=1, both or neither"
        ),
    )
    runtime: ModuleName | None = Field(default=None, description="module that provides the container runtime")
    frameworks: dict[str, ModuleName] = Field(
        default_factory=dict, description="the centre's own framework module, by framework (pytorch: open-ce/1.10.0...)"
    )


class Defaults(_Strict):
    """What a job asks the scheduler for unless the user says otherwise."""

    partition: SchedulerWord | None = Field(default=None, description="Slurm partition, or the LSF/PBS queue")
    account: SchedulerWord | None = None
    qos: SchedulerWord | None = Field(default=None, description="Slurm quality of service, e.g. NERSC's regular")
    time: str = "00:30:00"
    constraint: SchedulerWord | None = Field(default=None, description="Slurm --constraint, e.g. knl,quad,cache on Cori")
    alloc_flags: tuple[DeviceName, ...] = Field(
        default=(), description="LSF -alloc_flags, e.g. smt4 and nvme on Summit"
    )
    exclusive: bool = True
    account_flag: Literal["-P", "-G"] | None = Field(
        default=None, description="LSF: -P project (the default) or -G user group (LLNL banks: #BSUB -G)"
    )
    directives: tuple[str, ...] = Field(
        default=(),
        description="further scheduler options, one per directive line: --network=disable_rdzv_get, -S 2",
    )
    account_required: bool = Field(
        default=False,
        description="the centre refuses or ends jobs that name no account/project (Minerva: 'All jobs must specify project')",
    )
    gpu_request: Literal["gpu", "rusage", "none"] | None = Field(
        default=None,
        description=(
            "LSF without CSM: GPUs per node by -gpu \"num=N:mode=exclusive_process\" (gpu, the default) or "
            "-R \"rusage[ngpus_excl_p=N]\" (rusage), as the centre documents; any scheduler: none, where a "
            "node's GPUs come with the node and the batch system takes no GPU request (TACC: \"--gres: TACC "
            "does not support this option\")"
        ),
    )
    job_resources: dict[str, str] = Field(
        default_factory=dict,
        description="PBS job-wide resources (-l name=value, outside the select chunk): filesystems: home:eagle",
    )
    max_nodes: int | None = Field(default=None, ge=1, le=MAX_NODES)
    max_time: str | None = None
    image: SitePath | None = Field(default=None, description="image (path or name in image_dir) jobs run in")
    image_dir: SitePath | None = None


class EnvPath(_Strict):
    """An environment value built from other variables, as data: folders put before and after the
    variable's own value (LD_LIBRARY_PATH). The job shell expands only $NAME references."""

    prepend: tuple[str, ...] = ()
    append: tuple[str, ...] = ()


class Launch(_Strict):
    """How the launcher starts ranks beyond what the plan decides."""

    args: tuple[str, ...] = Field(default=(), description="further launcher arguments, word by word")
    gpu_visibility: Literal["per-rank", "node"] = Field(
        default="per-rank",
        description=(
            "per-rank: each rank sees only its GPUs; node: every rank sees every GPU of its node and picks its "
            "own by local rank, so CUDA IPC works between ranks (OLCF Summit DL guidance, NERSC Perlmutter)"
        ),
    )


class Container(_Strict):
    """Container-runtime modules and flags (podman-hpc --nccl, Shifter --module=gpu,nccl-plugin)."""

    gpu_modules: tuple[str, ...] | None = Field(
        default=None, description="runtime modules GPU jobs use; default: the runtime's GPU module (gpu)"
    )
    modules: tuple[str, ...] = Field(default=(), description="runtime modules every job uses")
    args: tuple[str, ...] = Field(default=(), description="further runtime arguments, word by word")


Choice = Literal[
    "ranks_per_node", "cores_per_rank", "binding", "gpus", "nics", "launcher", "directives", "environment",
    "modules", "container",
]


class Citation(_Strict):
    """Where one choice that shapes the plan comes from: the centre page or staff script it follows."""

    source: str = Field(min_length=1, description="URL of the centre page or centre-staff script")
    says: str = Field(min_length=1, description="what it says, quoted or in short")


class Site(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: Text = ""
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
    env: dict[str, Text | EnvPath] = Field(
        default_factory=dict, description="site-wide settings every job exports; a path list as {prepend: [...]}"
    )
    provides_env: tuple[str, ...] = Field(
        default=(), description="variables the centre sets in every job shell ($PSCRATCH), which paths may use"
    )
    launch: Launch = Launch()
    container: Container = Container()
    citations: dict[Choice, tuple[Citation, ...]] = Field(
        default_factory=dict, description="per choice that shapes a plan, the centre pages it follows"
    )

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
        self._only_guaranteed_variables()
        lists = [("defaults.directives", self.defaults.directives)]
        lists += [(f"node_kinds.{k}.defaults.directives", n.defaults.directives or ()) for k, n in self.node_kinds.items()]
        for where, directives in lists:
            for i, d in enumerate(directives):
                if not _DIRECTIVE.match(d):
                    raise ValueError(
                        f"{where}[{i}]: {d!r} is not one scheduler option; write -X value or --name=value "
                        "with letters, digits and . _ : + = , @ / % - only"
                    )
        for k, v in self.defaults.job_resources.items():
            if self.scheduler != "pbs":
                raise ValueError(f"defaults.job_resources: PBS job-wide resources, but the scheduler is {self.scheduler}")
            if not (_WORD.match(k) and _WORD.match(v)) or "=" in k:
                raise ValueError(f"defaults.job_resources.{k}: {v!r} is not a plain name=value a #PBS -l line carries")
        if self.defaults.gpu_request in ("gpu", "rusage") and self.scheduler != "lsf":
            raise ValueError(f"defaults.gpu_request: an LSF setting, but the scheduler is {self.scheduler}")
        if self.defaults.account_flag and self.scheduler != "lsf":
            raise ValueError(f"defaults.account_flag: an LSF setting, but the scheduler is {self.scheduler}")
        for what, words in (("launch.args", self.launch.args), ("container.args", self.container.args),
                            ("container.modules", self.container.modules),
                            ("container.gpu_modules", self.container.gpu_modules or ())):
            for i, w in enumerate(words):
                if not w or any(c in w for c in "\n\r\0"):
                    raise ValueError(f"{what}[{i}]: {w!r} is not one argument word")
        needs = LAUNCHER_NEEDS.get(self.launcher)
        if needs and self.scheduler not in needs:
            raise ValueError(
                f"launcher: {self.launcher} runs under {' or '.join(needs)}, not under scheduler {self.scheduler}"
            )
        return self

    def _only_guaranteed_variables(self) -> None:
        """A script may use only variables the scheduler, the login or the profile guarantees: under
        `set -u` any other stops the job before it starts (Frontier's $PROJECT, which OLCF never sets)."""
        known = {*ALWAYS_SET, *self.provides_env, *(k for k in self.env)}
        prefix = SCHEDULER_VARIABLE_PREFIX[self.scheduler]
        places = [("filesystems.scratch", self.filesystems.scratch), ("filesystems.node_local", self.filesystems.node_local),
                  *((f"modules.use[{i}]", p) for i, p in enumerate(self.modules.use))]
        for name, value in self.env.items():
            if isinstance(value, EnvPath):
                places += [(f"env.{name}", p) for p in (*value.prepend, *value.append)]
        for field, text in places:
            for var in variables_in(text or ""):
                if var not in known and not var.startswith(prefix) and not var.startswith("DW_JOB_"):
                    hint = (f"; for the project write {PROJECT_PLACEHOLDER}, which takes the account at render time"
                            if "PROJ" in var.upper() or "ACCOUNT" in var.upper() else "")
                    raise ValueError(
                        f"{field}: ${var} is set neither by {self.scheduler} nor by the login; list it under "
                        f"provides_env if the centre sets it in every job{hint}"
                    )

    def job_defaults(self, kind: str | None = None) -> Defaults:
        """The site's `defaults` with the node kind's own partition, qos, constraint and directives."""
        _, node = self.node_kind(kind)
        own = node.defaults.model_dump(exclude_none=True)
        return self.defaults.model_copy(update=own) if own else self.defaults

    def node_kind(self, name: str | None = None) -> tuple[str, NodeKind]:
        from hpcdl.errors import HpcdlError

        name = name or self.default_node_kind or next(iter(self.node_kinds))
        if name not in self.node_kinds:
            raise HpcdlError(
                f"node kind {name!r} is not in site {self.name!r}; it has: {', '.join(sorted(self.node_kinds))}"
            )
        return name, self.node_kinds[name]
