"""The site-profile schema.

A profile is a YAML document that describes one machine: its node kinds (sockets, cores,
hardware threads, memory, GPUs and NICs with the socket each hangs off), how jobs reach it
(scheduler, launcher, container runtime, MPI), its filesystems, modules and defaults.
Unknown keys are refused, so a typo is an error instead of a silently ignored setting.
See docs/sites.md for the field-by-field guide.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Iterable, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator, model_validator

from hpcdl.shell import VARIABLE, variables_in

Scheduler = Literal["slurm", "lsf", "pbs", "local"]
Launcher = Literal["srun", "jsrun", "ibrun", "mpirun", "mpiexec", "pals", "aprun", "local"]
Runtime = Literal["singularity", "apptainer", "shifter", "podman-hpc", "charliecloud", "container-engine", "pyxis",
                  "none"]
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
# a shell variable's name (POSIX: letters, digits and underscores, not starting with a digit)
VariableName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]
# one option word of a launcher, with no value (mympirun's --hybrid)
OptionName = Annotated[str, StringConstraints(pattern=r"^--?[A-Za-z][A-Za-z0-9-]*$")]
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


def _absolute_in_job(value: str) -> str:
    """A path a job uses as it runs: absolute, or starting with a variable the job has that expands to one. A job runs
    in its own folder, so a relative path would be read, made or sourced wherever that is (a relative modules.init
    sourced ../../../../etc/passwd)."""
    if not (value.startswith("/") or VARIABLE.match(value)):
        raise ValueError(f"{value!r} must be an absolute path (or start with a $VARIABLE the job has, such as $HOME, "
                         "$SLURM_TMPDIR or one named in provides_env)")
    return value


#: a path the job uses as it runs (modules.init, filesystems.tmpdir, container.workdir)
JobPath = Annotated[str, AfterValidator(_plain_path), AfterValidator(_absolute_in_job)]
#: the placeholder in a site path that takes the account/project given at render time
PROJECT_PLACEHOLDER = "{project}"
_DIRECTIVE = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*(?:[ =][A-Za-z0-9._:+=,@/%\[\]-]+)?$")
_WORD = re.compile(r"^[A-Za-z0-9._:+=,@/%-]+$")
_PER_NODE = re.compile(r"^[1-9][0-9]{0,8}[A-Za-z]{0,3}$")


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
    # Slurm binds --gpu-bind=closest by gres.conf's Cores= for each GPU (srun(1): "the GPU(s) which are
    # closest"; gres.conf(5): "Cores ... the specific cores which can use this resource"), which may be
    # finer than a NUMA domain: on the HPE Cray EX235a blade each GCD is tied to one 8-core L3 region
    # though two GCDs share a domain (OLCF Frontier: --gpu-bind=closest gives rank 0 on cores 1-7 GCD 4 alone)
    cores: tuple[int, ...] | None = Field(
        default=None, min_length=1,
        description="the cores (numbered across the node) the site's Slurm ties the GPU to (gres.conf Cores=), "
                    "where the centre's lines bind by --gpu-bind=closest and that is finer than its NUMA domain",
    )

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
    device: DeviceName | None = Field(
        default=None,
        description=(
            "verbs/HFI/CXI device name, e.g. mlx5_0, hfi1_0, cxi0, eth0; left out where the centre does not name "
            "it: the port still counts (kind, speed, socket) but no rank is pinned to a guessed device"
        ),
    )
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
    leaf_nodes: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="nodes under one leaf (edge) switch of this fabric; a job wider than that crosses the uplinks "
        "(hpcdl predict; unset: no contention counted)",
    )
    taper: float | None = Field(
        default=None, ge=1, le=100,
        description="the leaf switch's downlink to uplink bandwidth ratio (1: non-blocking fat tree, 2: 2:1 "
        "oversubscribed); past one leaf a node's bytes get 1/taper of its NIC (hpcdl predict)",
    )

    @property
    def name(self) -> str | None:
        """How the plan names this port as a rank's NIC: `device:port`, or its interface where the centre names
        only that (NCSA DeltaAI's "GPU0 ... HSN hsn0"); None where it names neither, so no rank holds it."""
        return f"{self.device}:{self.port}" if self.device else self.netdev


class IntraNodeLink(_Strict):
    """How the ranks of one node reach each other (hpcdl predict's inside-the-node level)."""

    kind: Literal["nvlink", "infinity-fabric", "pcie", "shared-memory"]
    gbyte_s: float = Field(gt=0, description="bandwidth one rank sees per direction in a ring over the node's ranks")
    latency_us: float = Field(gt=0, description="latency of one step of a collective inside the node")


class SizedPartition(_Strict):
    """One queue of a site that routes jobs by their size (TACC Frontera: small for 1-2 nodes, normal from
    3): jobs up to `max_nodes` nodes, and up to `max_gpus` GPUs where the queue limits a job's GPUs, go to
    `partition`; the last may leave both out."""

    max_nodes: int | None = Field(default=None, ge=1, le=MAX_NODES, description="the largest job this queue takes")
    max_gpus: int | None = Field(
        default=None, ge=1,
        description=("the most GPUs a job of this queue may hold, where the centre limits a job's GPUs rather than "
                     "its nodes (Slurm's per-job limit gres/gpu=N; PSI Merlin7: a100-general gres/gpu=4, "
                     "a100-daily gres/gpu=8)"),
    )
    partition: SchedulerWord | None = Field(
        default=None,
        description="the queue; left out, jobs of this size go to the kind's or site's partition (or name none)")
    qos: SchedulerWord | None = Field(
        default=None,
        description=("the Slurm quality of service jobs of this size must name, where the centre routes them by it "
                     "rather than, or beside, the queue (NHR@FAU Alex: a multi-node A100 job asks --qos=a100multi, "
                     "a one-node job none)"),
    )
    max_time: str | None = Field(
        default=None,
        description=("the longest job this queue runs, where it is shorter than the site's defaults.max_time "
                     "(Purdue Anvil: wholenode 96 h to 16 nodes, wide 12 h to 56); queues of one size told apart by "
                     "it alone take a job by its time, the first that runs it (UAB Cheaha: amperenodes 12 h, "
                     "amperenodes-medium 48 h)"),
    )
    gpu_counts: tuple[Annotated[int, Field(ge=1)], ...] | None = Field(
        default=None, min_length=1,
        description=("the only GPU counts a job of this queue may ask, where the centre's qsub refuses others "
                     "(ALCF Sophia's by-gpu: 'Valid values are 1, 2, 4, or 8 in your select statement ... If you "
                     "specify a different value, your qsub will issue an error and fail')"),
    )
    chunk: Literal["node", "gpu"] = Field(
        default="node",
        description=("PBS: what one chunk of this queue's select is: a node (the default, select=<nodes>:ncpus=..) "
                     "or one GPU, where the queue hands out GPUs of one node as chunks and the centre's jobs ask "
                     "select=<GPUs> alone (ALCF Sophia's by-gpu: 'The number of \"chunks\" you specify in your qsub "
                     "(i.e., -l select=4) will be the number of GPUs you are allocated, and they will all be on the "
                     "same node')"),
    )

    @field_validator("max_time")
    @classmethod
    def _a_slurm_time(cls, value: str | None) -> str | None:
        if value is not None and slurm_seconds(value) is None:
            raise ValueError(f"{value!r} is not a time limit; write HH:MM:SS, MM:SS, minutes or D-HH:MM:SS")
        return value


def _sizes_in_order(sizes: tuple[SizedPartition, ...]) -> tuple[SizedPartition, ...]:
    if any(s.max_nodes is None and s.max_gpus is None and s.max_time is None for s in sizes[:-1]):
        raise ValueError("list the queues from the smallest jobs up, each max_nodes (or max_gpus, or max_time) larger "
                         "than the one before; only the last may leave them out")
    # queues told apart by their time alone (UAB Cheaha: amperenodes to 12 hours, amperenodes-medium to 48): the
    # time each runs grows down the list, as the node bounds do
    times = [slurm_seconds(s.max_time) for s in sizes if s.max_time and s.max_nodes is None and s.max_gpus is None]
    if any(later <= earlier for earlier, later in zip(times, times[1:])):
        raise ValueError("list the queues from the shortest jobs up, each max_time longer than the one before")
    for bound in ("max_nodes", "max_gpus"):
        given = [getattr(s, bound) for s in sizes if getattr(s, bound) is not None]
        if any(later <= earlier for earlier, later in zip(given, given[1:])):
            raise ValueError(f"list the queues from the smallest jobs up, each {bound} larger than the one before; "
                             "only the last may leave max_nodes and max_gpus out")
    return sizes


#: Slurm's time limit forms (sbatch(1) --time): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?")


def slurm_seconds(text: str) -> int | None:
    """A Slurm time limit in seconds; None where the text is none of Slurm's forms (SLURM_TIME)."""
    m = SLURM_TIME.fullmatch(text)
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(a) * 60 + int(b) if b is not None else int(a) * 60


PartitionsBySize = Annotated[tuple[SizedPartition, ...], AfterValidator(_sizes_in_order)]


# a Slurm memory amount: a whole number of megabytes, or of K, M, G or T (sbatch(1) --mem)
SlurmMemory = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]*[KMGT]?$", max_length=16)]
# the same, or 0: "all of the memory on each node" (sbatch(1) --mem=0)
SlurmMemoryOrAll = Annotated[str, StringConstraints(pattern=r"^(0|[1-9][0-9]*[KMGT]?)$", max_length=16)]


class NodeKindDefaults(_Strict):
    """What a job on this node kind asks the scheduler for, where it differs from the site's `defaults`.

    Machines with several node kinds reach each through its own partition or feature (NERSC
    Perlmutter: `-C gpu` for GPU nodes, `-C cpu` for CPU nodes; JSC JUWELS: `--partition=booster`
    beside `batch`). A field left out takes the site's; `directives`, when given, replace the site's.
    """

    partition: SchedulerWord | None = Field(default=None, description="Slurm partition, or LSF/PBS queue, of this kind")
    qos: SchedulerWord | None = None
    constraint: SchedulerWord | None = Field(default=None, description="Slurm --constraint (PBS chunk resources) of this kind")
    account_suffix: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$", max_length=64)] | None = Field(
        default=None,
        description=(
            "added to the account of a job on this kind, where the centre keeps an account per node kind "
            "(Pawsey Setonix: <project>-gpu for GPU nodes; NCSA Delta: <project>-delta-gpu, <project>-delta-cpu)"
        ),
    )
    directives: tuple[str, ...] | None = Field(
        default=None, description="further scheduler options for jobs on this kind, in place of the site's"
    )
    job_resources_per_node: dict[str, str] | None = Field(
        default=None, description="PBS per-node resources of this kind (mem, jobfs), in place of the site's"
    )
    partition_by_nodes: PartitionsBySize | None = Field(
        default=None, description="the queue by job size for this kind, in place of the site's"
    )
    gpu_type: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$", max_length=64)] | None = Field(
        default=None,
        description=(
            "Slurm's GRES type of this kind's GPUs, named in every GPU request where the centre names it "
            "(CSC Mahti: a100 gives --gres=gpu:a100:4; Slurm takes [type:]number in --gres, --gpus-per-node "
            "and --gpus-per-task alike)"
        ),
    )
    mem_per_gpu: SlurmMemory | None = Field(
        default=None,
        description=(
            "Slurm: the node memory a job asks with each GPU it takes, a whole number in Slurm's units (megabytes, "
            "or with K, M, G or T), written as --mem=<GPUs per node x this> (MPCDF Raven: 125000 gives --mem=125000 "
            "for one A100 and --mem=500000 for the four of a full node)"
        ),
    )
    max_mem: SlurmMemoryOrAll | None = Field(
        default=None,
        description=(
            "Slurm: the most node memory a job may ask on this kind, in Slurm's units, where the centre publishes it "
            "below what mem_per_gpu times the node's GPUs comes to (UQ RCC Bunya: 700000 MB per H100, three a node, "
            "and 'Ask for 2000000M to get the maximum memory'): a job whose GPUs would ask more asks this; or 0, "
            "Slurm's 'all of the memory on each node', where the centre asks a whole node's memory so (NREL Kestrel: "
            "'To request all of the memory available on the GPU node, use --mem=0'): a job on every GPU of the node "
            "asks --mem=0, one on fewer its GPUs' share"
        ),
    )
    max_job_cpus: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description=(
            "the most CPUs (the batch system's unit, -c) one job's ranks may hold together on this kind, where the "
            "centre caps what a job or a researcher holds on its queue (UAB Cheaha's A100 nodes: '#SBATCH "
            "--partition=amperenodes # up to 64 cpus per job', '--ntasks=2 --cpus-per-task=32'): each rank takes "
            "at most its share of the cap, rounded down to whole cores, where its GPUs' or socket's share of the "
            "node would be more; a job asking more would wait for ever behind the limit. Refused where the kind's "
            "jobs take their nodes whole (defaults.exclusive), which holds every CPU of them"
        ),
    )
    gpu_jobs_only: bool = Field(
        default=False,
        description=(
            "true where the centre allows only GPU jobs on this kind and sanctions CPU-only work there (Cyfronet "
            "Athena: 'Please use Athena only for GPU-enabled jobs. Running extensive workloads not using GPUs will "
            "result in account suspension.'): a job whose ranks hold no GPU (--no-gpus, or a CPU mode) is refused, "
            "naming the field. Refused on a kind without GPUs"
        ),
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
    scheduler_sockets: int | None = Field(
        default=None, ge=1, le=1024,
        description=(
            "the sockets the site's Slurm counts on a node (slurmd's Sockets=), where it poses smaller parts of "
            "a processor as sockets: NUMA domains (ULHPC Aion: '16 cores per socket and 8 (virtual) sockets (CPUs) "
            "per aion node' on 2 x 64 cores) or L3 caches (SlurmdParameters=l3cache_as_socket); each takes an "
            "equal block of the node's cores in order. Default: sockets. Only what --ntasks-per-socket counts "
            "(defaults.tasks_per_socket)"
        ),
    )
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
    cpu_numbering: Literal["thread-major", "core-major", "socket-interleaved"] = Field(
        default="thread-major",
        description=(
            "how Linux numbers hardware threads: thread-major (x86: cpu = thread*cores + core), "
            "core-major (POWER: cpu = core*threads + thread) or socket-interleaved (some two-socket Intel "
            "nodes: consecutive ids alternate sockets, cpu = thread*cores + core-in-socket*sockets + socket; "
            "TACC Frontera: 'On CLX nodes the sequence of proc-ids on socket 0 are even')"
        ),
    )
    memory_gb: float = Field(gt=0, le=2**16, allow_inf_nan=False)  # 64 TB: above the largest shared-memory node
    hbm_gb: float = Field(default=0, ge=0, description="on-package memory: KNL MCDRAM, V100/A100 HBM counts under gpus")
    gpus: tuple[Gpu, ...] = Field(default=(), max_length=64)
    gpu_driver: str | None = Field(
        default=None, pattern=r"^[0-9]+(\.[0-9]+){0,2}$",
        description="the GPU driver the nodes run (NVIDIA: 535.183.06); images whose CUDA needs a newer one are refused",
    )
    gpu_driver_cuda: str | None = Field(
        default=None, pattern=r"^[0-9]+\.[0-9]+$",
        description="the newest CUDA the nodes' NVIDIA driver supports, as nvidia-smi prints it ('CUDA Version: 13.1') "
                    "and centres publish it where they give no driver number; images of a newer CUDA major are refused",
    )
    nics: tuple[Nic, ...] = Field(default=(), max_length=64)
    domains_per_socket: int = Field(
        default=1, ge=1,
        description="NUMA domains per socket (AMD EPYC in NPS4 mode: 4); each holds an equal, contiguous share of cores",
    )
    shared_domain_cores: Literal["domain", "spill"] = Field(
        default="domain",
        description=("where several GPUs sit on one NUMA domain and a socket's ranks leave some of its domains empty: "
                     "`domain` (the default) their ranks split that domain's cores; `spill` each rank takes the "
                     "socket's share, the ranks of a shared domain a run of blocks that holds it, one rank on the "
                     "domain and the others on the empty domains beside it (NHR@FAU Alex: two A100 on each of NUMA "
                     "domains 3, 1, 7, 5, 16 cores a GPU)"),
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
    env: dict[str, Text] = Field(
        default_factory=dict,
        description=("settings every job on this kind exports, beside the site's env and over it, where the centre "
                     "sets them for these nodes only (NHR@FAU Alex: NCCL_IB_HCA='=mlx5_0:1,mlx5_3:1' 'for A100 nodes', "
                     "whose A40 nodes have no InfiniBand); plain strings, exported as they are"),
    )
    environment: SiteEnvironment | None = Field(
        default=None,
        description=("the centre's own environment for this kind, in place of the site's `environment`, where the "
                     "centre's route to the framework differs by node kind (N8 CIR Bede: a conda environment with "
                     "Open-CE's PyTorch on its ppc64le POWER9 nodes, NVIDIA's NGC PyTorch container under Apptainer "
                     "on its aarch64 GH200 nodes); it serves this kind alone, so it names no node_kinds"),
    )

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    def tasks_per_scheduler_socket(self, first_cores: Iterable[int]) -> int:
        """The most tasks that start on one socket as the site's Slurm counts sockets (scheduler_sockets:
        equal blocks of cores, in order), given each task's first core: the S of --ntasks-per-socket=S
        that lets Slurm lay the tasks out as they are."""
        sockets = self.scheduler_sockets or self.sockets
        return max(Counter(core * sockets // self.cores for core in first_cores).values())

    @property
    def cpus_per_core(self) -> int:
        """The CPUs the batch system counts for one core: what a rank's cores are worth in `-c`."""
        return self.scheduler_cpus_per_core or self.threads_per_core

    @property
    def usable_cores(self) -> int:
        """The node's cores less the reserved ones, over all its sockets."""
        return sum(len(self.usable_cores_of_socket(s)) for s in range(self.sockets))

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
        if self.cpu_numbering == "socket-interleaved":
            socket, index = divmod(core, self.cores_per_socket)
            return tuple(t * self.cores + index * self.sockets + socket for t in range(self.threads_per_core))
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
        for i, gpu in enumerate(self.gpus):
            for core in gpu.cores or ():
                if not 0 <= core < self.cores:
                    raise ValueError(f"gpus[{i}].cores: core {core} is not on the node (cores 0..{self.cores - 1})")
                if self.socket_of_core(core) != gpu.socket:
                    raise ValueError(f"gpus[{i}].cores: core {core} is not on the GPU's socket {gpu.socket}")
                if gpu.domain is not None and self.domain_of_core(core) != gpu.domain:
                    raise ValueError(f"gpus[{i}].cores: core {core} is not in the GPU's NUMA domain {gpu.domain}")
        if any(g.cores for g in self.gpus) and not all(g.cores for g in self.gpus):
            raise ValueError("gpus[].cores: give every GPU its cores or none (Slurm's gres.conf ties each GPU to its own)")
        ports = [f"{n.device}:{n.port}" for n in self.nics if n.device]
        for port in ports:
            if ports.count(port) > 1:
                raise ValueError(f"nics: {port} is listed twice")
        if self.scheduler_sockets is not None and (self.scheduler_sockets % self.sockets
                                                   or self.cores % self.scheduler_sockets):
            raise ValueError(
                f"scheduler_sockets: {self.scheduler_sockets} does not split the node's {self.sockets} socket(s) "
                f"of {self.cores_per_socket} cores into equal blocks of whole cores"
            )
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
        if self.defaults.gpu_type and not self.gpus:
            raise ValueError(f"defaults.gpu_type: {self.defaults.gpu_type} but the node kind has no GPUs (gpus)")
        if self.defaults.mem_per_gpu and not self.gpus:
            raise ValueError(f"defaults.mem_per_gpu: {self.defaults.mem_per_gpu} but the node kind has no GPUs (gpus)")
        if self.defaults.max_mem and not self.defaults.mem_per_gpu:
            raise ValueError(f"defaults.max_mem: {self.defaults.max_mem} caps the memory mem_per_gpu asks, but the node "
                             "kind names no mem_per_gpu")
        if self.gpu_driver_cuda and not any(g.vendor == "nvidia" for g in self.gpus):
            raise ValueError(f"gpu_driver_cuda: {self.gpu_driver_cuda} is the CUDA of an NVIDIA driver, but the node kind "
                             "has no NVIDIA GPUs (gpus)")
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


class NodeLocalGres(_Strict):
    """Node-local storage a Slurm job asks as a generic resource before it may write there.

    CSC Puhti and Mahti: "Request local storage using the --gres flag in the job submission:
    --gres=nvme:<local_storage_space_per_node>", "given in GB", "Use the environment variable $LOCAL_SCRATCH";
    beside the GPUs in one list, "--gres=gpu:v100:<number_of_gpus_per_node>,nvme:<local_storage_space_per_node>".
    """

    # Slurm's GRES name (gres.conf Name=): a word, as the --gres list is split on ',' and ':'
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="the GRES name, e.g. nvme")
    # a whole number: the unit is the GRES's own count (CSC: GB)
    per_node: int = Field(gt=0, description="the count a job that takes a node whole asks on each node, e.g. 3600")


class Filesystems(_Strict):
    scratch: SitePath | None = Field(default=None, description="shared parallel filesystem for data and results")
    node_local: SitePath | None = Field(
        default=None, description="node-local storage for staged data, e.g. /mnt/bb/$USER on Summit"
    )
    node_local_kind: Literal["nvme", "ssd", "tmpfs", "burst-buffer", "ramdisk"] | None = None
    runs: Literal["submit", "scratch"] = Field(
        default="submit",
        description=(
            "where a batch job writes its run folder (hpcdl-runs/<name>-<job id>): under the folder it was "
            "submitted from (the default) or under the shared scratch, where the centre's compute nodes cannot "
            "write the home and project file systems a job may be submitted from (SciNet Trillium: 'The home and "
            "project file systems are read-only on compute nodes on Trillium. Your compute jobs, therefore, have to "
            "write to the scratch directory')"
        ),
    )
    tmpdir: JobPath | None = Field(
        default=None,
        description=(
            "the folder every job makes its TMPDIR, created first thing, where the centre's scripts set their own "
            "rather than share the node's small /tmp (NCAR: 'CISL recommends setting TMPDIR within each batch "
            "script', export TMPDIR=$SCRATCH/tmp && mkdir -p $TMPDIR); the launcher carries it to every rank"
        ),
    )
    burst_buffer: BurstBuffer | None = Field(default=None, description="a per-job burst buffer to request (DataWarp)")
    submit_refused: tuple[SitePath, ...] = Field(
        default=(),
        description=(
            "host folders the centre's scheduler refuses jobs submitted from (the Alliance's Cedar: 'Submitting jobs "
            "from directories residing in /home is not permitted, transfer the files either to your /project or "
            "/scratch directory and submit the job from there'): hpcdl submit and hpcdl validate refuse a job folder "
            "at or under one before they call the scheduler, naming this field; absolute paths without variables"
        ),
    )
    node_local_gres: NodeLocalGres | None = Field(
        default=None,
        description=(
            "the generic resource a Slurm job asks for node_local where it stages data there (CSC: "
            "--gres=gpu:v100:4,nvme:3600, $LOCAL_SCRATCH); on a node the job shares, its share of per_node"
        ),
    )

    @model_validator(mode="after")
    def _gres_names_a_place(self) -> "Filesystems":
        if self.runs == "scratch" and not self.scratch:
            raise ValueError("runs: 'scratch' puts the job's run folder under the shared scratch, but scratch names "
                             "no path")
        if self.node_local_gres is not None and not self.node_local:
            raise ValueError("node_local_gres: asks node-local storage, but node_local names no path to stage to")
        for i, folder in enumerate(self.submit_refused):
            if not folder.startswith("/") or variables_in(folder):
                raise ValueError(f"submit_refused[{i}]: {folder!r} is not an absolute host folder (the folder a job "
                                 "may not be submitted from, without variables)")
        return self


class Modules(_Strict):
    system: Literal["lmod", "tcl", "none"] = "lmod"
    init: JobPath | None = Field(default=None, description="script to source so `module` exists in batch jobs")
    login_shell: bool = Field(
        default=False,
        description=(
            "the job script runs in a login shell, #!/bin/bash -l, where the centre's job scripts start so that "
            "`module` and the site's module path come from /etc/profile (ULHPC: '#!/bin/bash -l # <--- DO NOT "
            "FORGET '-l' to facilitate further access to ULHPC modules')"
        ),
    )
    purge: bool = Field(
        default=False,
        description=(
            "`module purge` before the job's loads, where the centre's job scripts start from a clean module "
            "environment (CSC: module purge; module load pytorch; SURF: module purge; module load 2024); "
            "hpcdl's own module, if the job had it, is loaded again after the site's"
        ),
    )
    reset: bool = Field(
        default=False,
        description=(
            "`module reset` before the job's loads: Lmod's return to the site's default modules (sticky ones stay), "
            "where the centre's job scripts start so (NRIS Olivia: ml reset; ml load NRIS/GPU); like purge, hpcdl's "
            "own module, if the job had it, is loaded again after the site's"
        ),
    )
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

    @model_validator(mode="after")
    def _one_clean_start(self) -> Modules:
        # a purge unloads what a reset would restore: a centre's scripts start one way or the other
        if self.purge and self.reset:
            raise ValueError("purge and reset both set: a centre's job starts with `module purge` or `module reset`, "
                             "not both; keep the one its scripts write")
        if self.reset and self.system != "lmod":
            raise ValueError(f"reset: `module reset` is Lmod's; modules.system is {self.system}")
        return self


class Defaults(_Strict):
    """What a job asks the scheduler for unless the user says otherwise."""

    partition: SchedulerWord | None = Field(default=None, description="Slurm partition, or the LSF/PBS queue")
    partition_by_nodes: PartitionsBySize = Field(
        default=(),
        description=(
            "where the centre routes jobs to a queue by their node count: [{max_nodes: 2, partition: small}, "
            "{max_nodes: 512, partition: normal}] (TACC Frontera); a job goes to the first that takes its nodes, "
            "in place of `partition`, and a job larger than the last is refused"
        ),
    )
    account: SchedulerWord | None = None
    qos: SchedulerWord | None = Field(default=None, description="Slurm quality of service, e.g. NERSC's regular")
    time: str = "00:30:00"
    constraint: SchedulerWord | None = Field(default=None, description="Slurm --constraint, e.g. knl,quad,cache on Cori")
    alloc_flags: tuple[DeviceName, ...] = Field(
        default=(), description="LSF -alloc_flags, e.g. smt4 and nvme on Summit"
    )
    exclusive: bool = True
    exclusive_by: Literal["request", "policy"] = Field(
        default="request",
        description=(
            "how a job with `exclusive` gets its nodes whole: request (the default: the script asks, Slurm "
            "#SBATCH --exclusive, PBS place=scatter:excl, LSF -x) or policy (the batch system hands every job "
            "whole nodes and the centre's scripts ask nothing: LuxProvide MeluXina, 'job scheduling is done with "
            "full nodes. Requesting one task on one compute node will give you access to the complete node'); "
            "the plan is made for whole nodes either way"
        ),
    )
    account_flag: Literal["-P", "-G", "-A", "-W group_list"] | None = Field(
        default=None,
        description=(
            "the option that names the account: LSF -P project (the default) or -G user group (LLNL banks: "
            "#BSUB -G); PBS -A account (the default), -P project (NCI Gadi: #PBS -P a00) or -W group_list, the "
            "job's group attribute, where the centre charges a group (JCAHPC Miyabi: #PBS -W group_list=gz00)"
        ),
    )
    directives: tuple[str, ...] = Field(
        default=(),
        description="further scheduler options, one per directive line: --network=disable_rdzv_get, -S 2",
    )
    framework_directives: dict[Literal["pytorch", "tensorflow", "mxnet"], tuple[str, ...]] = Field(
        default_factory=dict,
        description=(
            "further scheduler options by the plan's framework, written after `directives` for a job of that "
            "framework only, where the centre's jobs name their application (KISTI Neuron: '--comment' is mandatory, "
            "pytorch for PyTorch, tensorflow for TensorFlow, etc for others); a framework not named gets none"
        ),
    )
    multi_node_directives: tuple[str, ...] = Field(
        default=(),
        description=(
            "further scheduler options for a job of more than one node only, one per directive line, written after "
            "`directives` and `framework_directives`, where the centre asks them of its multi-node jobs (Alliance "
            "Nibi: 'For better performance of tightly coupled multi-node jobs, you may constrain them to use only "
            "one network switch, by adding this option to your job submission script: #SBATCH --switches=1'); a "
            "job on one node gets none"
        ),
    )
    export_default: Literal["all", "none"] = Field(
        default="all",
        description=(
            "Slurm: the environment the site's Slurm starts a job in where the job names no --export: all (Slurm's "
            "own default, the submitting shell's) or none, where the centre's Slurm starts every job in the user's "
            "login environment by itself (KU Leuven: 'Slurm jobs start in a clean environment which corresponds to "
            "your login environment ... Environment variables that happen to be set in the session from which you "
            "submit the job are not propagated to the job'): the job is then written as under #SBATCH --export=NONE "
            "(it loads hpcdl's own module itself and unsets SLURM_EXPORT_ENV before the launch), without the directive"
        ),
    )
    account_required: bool = Field(
        default=False,
        description="the centre refuses or ends jobs that name no account/project (Minerva: 'All jobs must specify project')",
    )
    accountless_partitions: tuple[str, ...] = Field(
        default=(),
        description=(
            "partitions (queues) whose jobs name no account, where the centre says so (UArizona's Puma: the "
            "windfall partitions, 'Do not include an --account flag when requesting this partition', "
            "'#SBATCH --partition=gpu_windfall'): a job there is written without one, account_required does not "
            "hold there, and an account given for it is refused naming this field; unset, every partition takes one"
        ),
    )
    gpu_request: Literal["gpu", "rusage", "gpus-per-node", "gres", "gpus-per-task", "gpus", "none"] | None = Field(
        default=None,
        description=(
            "how the job asks for GPUs, as the centre's submit filter counts them. Slurm: --gpus-per-node=N "
            "(gpus-per-node, the default), --gres=gpu:N (gres: IDRIS, JSC), --gpus-per-task=G (gpus-per-task: "
            "CSCS) or the job's total, --gpus=N (gpus: PSC Bridges-2, --gpus=v100-32:16 on two nodes). LSF without CSM: -gpu \"num=N:mode=exclusive_process\" (gpu, the default) or "
            "-R \"rusage[ngpus_excl_p=N]\" (rusage). Any scheduler: none, where a node's GPUs come with the "
            "node and the batch system takes no GPU request (TACC: \"--gres: TACC does not support this option\")"
        ),
    )
    single_gpu_request: Literal["gpus", "gpus-per-node", "gres"] | None = Field(
        default=None,
        description=(
            "Slurm: how a job on one GPU in all (one node, one GPU) asks it, where the centre's pages ask a single GPU "
            "otherwise than several: gpus (the job's total, --gpus=[type:]1), gpus-per-node or gres; larger jobs ask "
            "theirs as gpu_request says (Calcul Quebec Rorqual: 'One H100-80gb : --gpus=h100:1', 'Multiple "
            "H100-80gb per node: --gpus-per-node=h100:2'). Unset: as gpu_request"
        ),
    )
    batch_request: Literal["tasks", "nodes", "cores"] = Field(
        default="tasks",
        description=(
            "what the batch header asks for: tasks (the default: #SBATCH --ntasks-per-node, --cpus-per-task and the "
            "GPUs, which srun repeats), nodes (#SBATCH names the nodes only, --exclusive or, for a shared job, "
            "its GPUs per node as --gres=gpu:N; srun alone says tasks, CPUs and GPUs, the step's GPUs per node "
            "among them: Pawsey Setonix's CLI filter counts 'allocation-packs', 'users should not indicate any "
            "other Slurm allocation option related to memory or CPU cores', 'srun -N 1 -n 8 -c 8 --gres=gpu:8 "
            "--gpus-per-task=1 --gpu-bind=closest'; under Open MPI's mpirun the header asks the GPUs per node too, the "
            "job exports SLURM_NTASKS, SLURM_NTASKS_PER_NODE and SLURM_TASKS_PER_NODE, from which Open MPI takes each "
            "node's slots, and the line names -N <ranks per node>: EPCC Cirrus, 'the submission script should not "
            "specify options such as --ntasks and --cpus-per-task', 'export SLURM_TASKS_PER_NODE=...', 'mpirun -n "
            "${SLURM_NTASKS} -N ${SLURM_NTASKS_PER_NODE}') or cores (the header asks every usable core of each whole node "
            "as a task of one CPU, --ntasks-per-node=<cores> --cpus-per-task=1, with the GPUs and no pinning "
            "option, no --hint or --threads-per-core; srun alone says the ranks' layout and binding: EPCC Tursa, "
            "'ask for the full node resources in your sbatch options with tasks-per-node equal to the number of "
            "CPU cores on the node and cpus-per-task equal to 1 and then specify the process and thread pinning "
            "using srun options. You cannot specify process/thread pinning options in sbatch options'; on nodes jobs "
            "share, the job's own cores, the ranks' cores on each node, as tasks of one CPU; under Open MPI's mpirun "
            "too, whose line names the ranks per node and their cores: CU Boulder Alpine, 'To run a 50-core job ... "
            "using 2 GPUs: #SBATCH --nodes=1 #SBATCH --ntasks=50 #SBATCH --gres=gpu:2', 'mpirun -np 4')"
        ),
    )
    cpu_request: Literal["cpus-per-task", "cpus-per-gpu"] = Field(
        default="cpus-per-task",
        description=(
            "Slurm: how the header asks each rank's CPUs: cpus-per-task (the default, #SBATCH --cpus-per-task=C) or "
            "cpus-per-gpu (#SBATCH --cpus-per-gpu=C/G for a rank of C CPUs and G GPUs, where the centre hands a "
            "node's CPUs and memory out with its GPUs and its job scripts ask them so: Birmingham's Baskerville, "
            "'Leave --cpus-per-gpu=36. Resources such as CPUs and Memory are allocated per GPU', '#SBATCH --gpus 1 "
            "#SBATCH --cpus-per-gpu 36'). sbatch takes not both; srun still names --cpus-per-task, which wins over "
            "the SLURM_CPUS_PER_GPU the job hands it. A job whose ranks hold no GPU, or CPUs its GPUs do not "
            "divide, asks --cpus-per-task"
        ),
    )
    total_tasks: bool = Field(
        default=False,
        description=(
            "Slurm: the header names the job's total tasks too, #SBATCH --ntasks=N beside --ntasks-per-node, where the "
            "centre's job scripts count them so (Cambridge CSD3's template: '#SBATCH --ntasks=$np'; NSC Berzelius: "
            "'--ntasks=1 --ntasks-per-node=1'); --ntasks-per-node stays beside it, since a total alone leaves the tasks "
            "of each node to Slurm, which may fill one node before the next. sbatch(1): 'If used with the --ntasks "
            "option, the --ntasks option will take precedence and the --ntasks-per-node will be treated as a maximum "
            "count of tasks per node': N nodes of at most R tasks each, N x R in all, is R on every node"
        ),
    )
    total_gpus: bool = Field(
        default=False,
        description=(
            "Slurm, with gpu_request: gpus-per-task: the header names the job's total GPUs too, #SBATCH --gpus=N "
            "beside --gpus-per-task, where the centre's job scripts count them so (UF Research Computing's HiPerGator "
            "AI job: '#SBATCH --gpus=16 # Total GPUs', '#SBATCH --gpus-per-task=1 # 1 GPU per task'); N is the "
            "plan's tasks times each task's GPUs, so both ask the same GPUs. Also with gpu_request: gpus-per-node, "
            "#SBATCH --gpus=N beside --gpus-per-node (KAUST Ibex: '#SBATCH --gpus=8', '#SBATCH --gpus-per-node=4' "
            "on 2 nodes), N the nodes times each node's GPUs"
        ),
    )
    tasks_per_socket: bool = Field(
        default=False,
        description=(
            "Slurm: the header names the most tasks on one socket too, #SBATCH --ntasks-per-socket=S beside "
            "--ntasks-per-node, where the centre's job scripts ask it so (ULHPC: 'always explicitly specify upon "
            "resource allocation the number of tasks you want per node/socket (--ntasks-per-node <n> "
            "--ntasks-per-socket <s>)'); S counts the plan's ranks whose first core lies on one socket as the "
            "site's Slurm counts sockets (node_kinds.<kind>.scheduler_sockets)"
        ),
    )
    job_resources: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "PBS job-wide resources (-l name=value, outside the select chunk): filesystems: home:eagle; "
            "{project} in a value takes the account (NCI Gadi: storage: scratch/{project}+gdata/{project})"
        ),
    )
    job_resources_per_node: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "PBS job-wide resources that grow with the node count, given per node as a whole number and a "
            "unit: mem: 382GB, jobfs: 400GB are asked as -l mem=764GB, -l jobfs=800GB on two nodes (NCI Gadi)"
        ),
    )
    pbs_request: Literal["select", "processes", "job-wide"] = Field(
        default="select",
        description=(
            "PBS: how CPUs and GPUs are asked: select (-l select=N:ncpus=..:mpiprocs=..:ngpus=.., PBS Pro's "
            "chunks; ALCF, NCAR), processes (-l select=N:mpiprocs=..:ompthreads=.., where the queue fixes a node's "
            "CPUs and the user cannot change ncpus; AIST ABCI 3.0's resource types) or job-wide (-l ncpus=<total> "
            "-l ngpus=<total>, the job's totals; NCI Gadi)"
        ),
    )
    max_nodes: int | None = Field(default=None, ge=1, le=MAX_NODES)
    max_nodes_partial: int | None = Field(
        default=None, ge=1, le=MAX_NODES,
        description=(
            "the most nodes a GPU job may take in part, some of each node's GPUs: a larger job must use every GPU "
            "of each node, and one that does not is refused naming this field (Cambridge CSD3's Wilkes-3 template: "
            "'Specify the number of GPUs per node (between 1 and 4; must be 4 if nodes>1)': 1); unset, any size"
        ),
    )
    partial_gpu_counts: tuple[Annotated[int, Field(ge=1)], ...] | None = Field(
        default=None, min_length=1,
        description=(
            "the only counts of a node's GPUs a GPU job may take on a node it takes in part, where the centre's "
            "scheduler refuses others (SciNet Trillium: 'you are only allowed to request exactly 1 GPU or a multiple "
            "of 4 GPUs. You cannot request --gpus-per-node=2 or 3': [1]); a job on every GPU of its nodes is always "
            "taken, and one of another count is refused naming this field; unset, any count"
        ),
    )
    whole_nodes_from: int | None = Field(
        default=None, ge=2, le=MAX_NODES,
        description=(
            "Slurm, on nodes jobs share (exclusive: false): the node count from which the site's Slurm gives a job "
            "its nodes whole though it names no --exclusive (OSC's own job template: 'if you request > 1 nodes, it "
            "doesn't matter how many cores you request - you get the whole node': 2); such a job is planned as on "
            "whole nodes, its ranks spread over the sockets with their sockets' cores, and its header still names "
            "no --exclusive; unset, a shared node stays shared at any size"
        ),
    )
    partial_gpus: Literal["first", "spread"] = Field(
        default="first",
        description=(
            "on nodes jobs share (exclusive: false): which GPUs a GPU job with fewer ranks than a node's GPUs takes: "
            "'first' (the default: the first GPUs, socket by socket, each with its share of the cores) or 'spread' "
            "(as evenly over the sockets as they go, each rank still with its GPU's share of the cores), where the "
            "centre's partial-node examples ask one task per socket (ULHPC Iris: '--ntasks-per-node 2 "
            "--ntasks-per-socket 1 -c 7 -G 2')"
        ),
    )
    gpu_rank_sockets: Literal["gpus", "even"] = Field(
        default="gpus",
        description=(
            "one rank per GPU: which socket's cores a rank takes: 'gpus' (the default: its GPU's socket) or 'even' "
            "(the ranks laid evenly over the sockets, in order, as the centre's --ntasks-per-socket lays its tasks, "
            "whatever socket their GPUs hang off), where the node's GPUs sit on fewer sockets than the centre's "
            "tasks (ULHPC Iris: hwloc-ls shows 'There are 4 GPUs attached to socket 0', and its GPU jobs ask "
            "'--ntasks-per-node 4 --ntasks-per-socket 2 -c 7 -G 4', two tasks of 7 cores on each socket)"
        ),
    )
    gpu_rank_cores: Literal["socket", "node"] = Field(
        default="socket",
        description=(
            "one rank per GPU: how many cores a GPU rank takes: 'socket' (the default: its share of its GPU's "
            "socket, or NUMA domain) or 'node' (the node's usable cores over the ranks, one pool over the node, "
            "whatever socket the profile gives each GPU), where the centre sizes a GPU's CPUs by the node and no page "
            "says which socket a GPU hangs off (Warwick's Sulis: '128 [cores] which does not divide equally over "
            "the 3 A100 GPUs in each node. We therefore recommend that single GPU jobs request 42 CPUs per task', and "
            "42 each for its three-task job on a node's three GPUs); needs launch.rank_cpus: gpu-local, each rank "
            "finding its cores near its GPU at run time"
        ),
    )
    gpu_ids: Literal["uuid"] | None = Field(
        default=None,
        description=(
            "how a batch system other than Slurm names the GPUs a job holds on a node it shares, where the centre "
            "says so: 'uuid', CUDA_VISIBLE_DEVICES set to their UUIDs (Imperial's CX3 under PBS Pro: 'CUDA_VISIBLE_"
            "DEVICES will be set automatically with the UUID of the allocated GPUs'); a rank finding its cores near "
            "its GPU (launch.rank_cpus: gpu-local) then finds its GPU among the node's by that UUID (the NVIDIA "
            "driver's /proc/driver/nvidia/gpus/<PCI address>/information), and keeps its launcher's CPUs where none "
            "is set; NVIDIA GPUs only, not under Slurm (whose SLURM_JOB_GPUS names them); unset, such a job's GPUs "
            "are unnamed and gpu-local is refused on shared nodes"
        ),
    )
    exclusive_when_full: bool = Field(
        default=False,
        description=(
            "on nodes jobs share (exclusive: false): a GPU job that takes every GPU of each of its nodes asks them "
            "whole (#SBATCH --exclusive, PBS place=...:excl, LSF -x), where the centre's full-node jobs do and its "
            "smaller ones share their node (BSC MareNostrum 5 ACC: one-GPU jobs '--gres=gpu:1 --cpus-per-task=20' "
            "with no --exclusive, four-GPU jobs '--gres=gpu:4 ... --exclusive'); unset, such a job names none"
        ),
    )
    max_time: str | None = None
    min_time: str | None = Field(
        default=None,
        description=(
            "the shortest time limit the centre's scheduler takes, where it refuses shorter jobs (SciNet Trillium's "
            "GPU compute partition: 'Min. walltime 15 minutes': 00:15:00); a job asking less is refused at render, "
            "naming this field; unset, any"
        ),
    )
    image: SitePath | None = Field(default=None, description="image (path or name in image_dir) jobs run in")
    image_dir: SitePath | None = None

    @field_validator("accountless_partitions")
    @classmethod
    def _accountless_partitions_are_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or not name.strip() or any(c.isspace() for c in name):
                raise ValueError(f"accountless_partitions: {name!r} is not a partition name (one word)")
        return value

    @model_validator(mode="after")
    def _min_time_is_a_time_jobs_can_keep(self) -> Defaults:
        if self.min_time is None:
            return self
        shortest = slurm_seconds(self.min_time)
        if shortest is None:
            raise ValueError(f"min_time: {self.min_time!r} is not a time limit; write HH:MM:SS, MM:SS, minutes or "
                             "D-HH:MM:SS")
        longest = slurm_seconds(self.max_time) if self.max_time else None
        if longest is not None and shortest > longest:
            raise ValueError(f"min_time: {self.min_time} is longer than max_time {self.max_time}")
        asked = slurm_seconds(self.time)
        if asked is not None and asked < shortest:
            raise ValueError(f"min_time: {self.min_time} is longer than time {self.time}, the limit a job asks by "
                             "default, so every such job would be refused")
        return self

    @model_validator(mode="after")
    def _policy_is_whole_nodes(self) -> Defaults:
        # a policy of whole nodes and jobs planned on shared ones would contradict each other
        if self.exclusive_when_full and self.exclusive:
            raise ValueError("exclusive_when_full: asks whole nodes for jobs on every GPU of nodes jobs otherwise "
                             "share, but exclusive is true (every job asks whole nodes); set exclusive: false, or "
                             "leave exclusive_when_full out")
        if self.exclusive_by == "policy" and not self.exclusive:
            raise ValueError("exclusive_by: policy says the batch system hands out whole nodes, but exclusive is "
                             "false; set exclusive: true, or leave exclusive_by out for nodes jobs share")
        return self


class EnvPath(_Strict):
    """An environment value built from other variables, as data: folders put before and after the
    variable's own value (LD_LIBRARY_PATH), or one path under a variable the job has (`path`:
    HF_HOME on $SCRATCH, as Texas A&M HPRC's jobs export it). The job shell expands only $NAME references."""

    prepend: tuple[str, ...] = ()
    append: tuple[str, ...] = ()
    path: str | None = None

    @field_validator("path")
    @classmethod
    def _a_path(cls, path: str | None) -> str | None:
        return None if path is None else _plain_path(path)

    @model_validator(mode="after")
    def _path_or_list(self) -> "EnvPath":
        if self.path is not None and (self.prepend or self.append):
            raise ValueError("path is the whole value; prepend and append build a list on the variable's own "
                             "value: give one or the other")
        if self.path is None and not (self.prepend or self.append):
            raise ValueError("give path (one path, its $NAME references expanded) or prepend/append (folders "
                             "around the variable's own value)")
        return self

    @field_validator("prepend", "append")
    @classmethod
    def _one_folder_each(cls, folders: tuple[str, ...]) -> tuple[str, ...]:
        for folder in folders:
            _plain_path(folder)
            if ":" in folder:
                # ':' separates a path list's folders: 'a:b' is two folders, and every runtime's bind splits on it
                raise ValueError(f"{folder!r}: one folder each, without ':' (the path list's separator)")
        return folders


def option_value(args, *spellings: str, short: str | None = None) -> str | None:
    """The value launcher arguments give an option, in any of its `spellings` (`--name=X`, `--name X`;
    "" where one ends the line bare) or its one-dash `short` form (`-sX`, `-s X`); None where they give
    none. The first word that names it wins."""
    args = list(args)
    for i, word in enumerate(args):
        for spelling in spellings:
            if word.startswith(spelling + "="):
                return word.split("=", 1)[1]
            if word == spelling:
                return args[i + 1] if i + 1 < len(args) else ""
        if short and word == short:
            return args[i + 1] if i + 1 < len(args) else ""
        if short and word.startswith(short) and not word.startswith("--"):
            return word[len(short):]
    return None


def srun_cpu_bind_of(args) -> str | None:
    """The --cpu-bind (or srun's older --cpu_bind) that srun arguments give, None where they give none."""
    return option_value(args, "--cpu-bind", "--cpu_bind")


def mpirun_option_of(args, name: str) -> str | None:
    """The value Open MPI's mpirun arguments give an option (`--bind-to`, `--map-by`), in either of the spellings
    mpirun takes (`--bind-to none`, `-bind-to none`, `--bind-to=none`); None where they give none."""
    return option_value(args, "--" + name, "-" + name)


# bash's `ulimit` option for each limit a profile may raise (bash(1), ulimit)
ULIMIT_OPTIONS = {
    "core": "-c", "data": "-d", "fsize": "-f", "memlock": "-l", "nofile": "-n", "stack": "-s", "cpu": "-t",
    "nproc": "-u", "as": "-v",
}
UlimitName = Literal["core", "data", "fsize", "memlock", "nofile", "stack", "cpu", "nproc", "as"]
ULIMIT_VALUE = re.compile(r"unlimited|[1-9][0-9]{0,17}")


def _ulimit_value(value: object) -> str:
    # YAML gives a number as an int: 65536 and "65536" alike, but no bool or float
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not ULIMIT_VALUE.fullmatch(text):
        raise ValueError(f"{value!r} is not unlimited or a whole number (in ulimit's units)")
    return text


UlimitValue = Annotated[str, BeforeValidator(_ulimit_value)]


class Launch(_Strict):
    """How the launcher starts ranks beyond what the plan decides."""

    args: tuple[str, ...] = Field(default=(), description="further launcher arguments, word by word")
    command: tuple[str, ...] = Field(
        default=(),
        description=(
            "the centre's own launcher, in place of the launcher's command word where it takes the same options "
            "(a site mpirun wrapper); the launcher's options follow it"
        ),
    )
    wrapper: tuple[str, ...] = Field(
        default=(),
        description=(
            "a command the centre puts between the launcher and each rank's program, word by word "
            "(a site's binding or environment script); it runs on the host, before any container"
        ),
    )
    gpu_wrapper: tuple[str, ...] = Field(
        default=(),
        description=(
            "as wrapper, for GPU jobs only, after wrapper's words (NCAR Derecho: mpiexec ... set_gpu_rank ./app, "
            "which sets each rank's CUDA_VISIBLE_DEVICES from its local rank)"
        ),
    )
    hostfile: bool = Field(
        default=False,
        description=(
            "mpirun is given the batch system's host file (--hostfile \"$PBS_NODEFILE\" under PBS, "
            "\"$LSB_DJOB_HOSTFILE\" under LSF), where the site's Open MPI is not built to read the allocation itself "
            "(ABCI 3.0: \"a host file is also specified in the -hostfile option ... set in the $PBS_NODEFILE "
            "environment variable\"); without one it starts every rank on the first node"
        ),
    )
    rank_order: Literal["devices", "cores"] = Field(
        default="devices",
        description=(
            "how a node's local ranks are numbered: devices (local rank i drives GPU i, or sits on NIC/socket i) or "
            "cores (local rank i sits on the i-th block of cores and drives the GPU nearest it: NERSC's Perlmutter "
            "staff scripts, --cpu-bind=cores with CUDA_VISIBLE_DEVICES=$((3-SLURM_LOCALID)))"
        ),
    )
    master_addr: Literal["host-name", "host-short-name", "host-ip", "host-fqdn", "node-list"] = Field(
        default="host-name",
        description=(
            "how a Slurm job names its rendezvous host (MASTER_ADDR, the batch host): its name, $(hostname), or "
            "host-short-name, its short name, $(hostname -s), where the centre's jobs name it so (UFRC HiPerGator's "
            "'export PRIMARY=$(hostname -s)'), or "
            "its address, $(hostname -i), where the centre asks for it (OLCF Frontier: export MASTER_ADDR=$(hostname -i)); "
            "host-fqdn: its fully qualified name, $(hostname --fqdn), where the centre's jobs name it so (the Vector "
            "Institute's multi-node job on Killarney: export MASTER_ADDR=$(hostname --fqdn)); "
            "node-list: the first host of the job's node list, $(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) "
            "(Princeton Research Computing's Della; NRIS Olivia's head_node); "
            "beside master_addr_suffix, the address of the suffixed name (JSC's course on JURECA-DC: "
            "MASTER_ADDR=\"${MASTER_ADDR}i\" then its nslookup address)"
        ),
    )
    master_addr_suffix: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$", max_length=32)] | None = Field(
        default=None,
        description=(
            "appended to the batch host's short name where the centre reaches nodes by another interface's name: "
            "MASTER_ADDR=\"$(hostname -s)i\" (JSC: the first node's name + 'i', 'to allow communication over "
            "InfiniBand cells')"
        ),
    )
    master_port: int | None = Field(
        default=None, ge=1024, le=65535,
        description="the rendezvous port the centre recommends (OLCF: 3442); default 20000 + the job id mod 12000, below Linux's ephemeral ports (32768 and up)",
    )
    master_port_base: int | None = Field(
        default=None, ge=1024, le=65535,
        description=(
            "with master_port_span, the rendezvous port the job derives from its id, base + the job id mod span, "
            "where the centre's jobs take it so (NYU Torch: export MASTER_PORT=$(expr 10000 + $(echo -n $SLURM_JOBID "
            "| tail -c 4)), 10000 + the id's last four digits: base 10000, span 10000); unset, 20000 and 12000"
        ),
    )
    master_port_span: int | None = Field(
        default=None, ge=1, le=64512,
        description="with master_port_base: how many ports the job id's remainder spreads the jobs over",
    )
    master_port_command: tuple[str, ...] = Field(
        default=(),
        description=(
            "a command the centre provides on its nodes that prints a free TCP port, word by word, run on the batch "
            "host (where rank 0 runs) to set MASTER_PORT, where the centre's jobs take their rendezvous port so "
            "(Princeton Research Computing's Della: export MASTER_PORT=$(get_free_port)); not beside master_port"
        ),
    )
    master_addr_env: VariableName | None = Field(
        default=None,
        description=(
            "a variable the site's job prolog sets in every Slurm job to the rendezvous host, where the centre's jobs "
            "take MASTER_ADDR from it (C3SE Alvis: --rdzv_endpoint=${PROEPI_HEAD_NODE}:${PROEPI_FREE_PORT}, 'on Alvis "
            "we configure some environment variables to easily start a distributed training job'); the job stops, "
            "naming it, where it is unset; not beside master_addr other than host-name, nor master_addr_suffix"
        ),
    )
    master_port_env: VariableName | None = Field(
        default=None,
        description=(
            "a variable the site's job prolog sets in every Slurm job to a free rendezvous port (C3SE Alvis: "
            "PROEPI_FREE_PORT), taken as MASTER_PORT; not beside master_port or master_port_command"
        ),
    )
    spawner: Literal["none", "torchrun", "hpcdl"] = Field(
        default="none",
        description=(
            "who starts a node's ranks: none (srun starts every rank as a Slurm task of its own), or a per-node "
            "launcher that srun starts once per node (one task holding the node's ranks' CPUs and GPUs) and that "
            "spawns the node's ranks: torchrun (NRIS Olivia: 'srun torchrun --nnodes=... --nproc_per_node=... "
            "--rdzv_id=\"${SLURM_JOB_ID}\" --rdzv_backend=c10d --rdzv_endpoint=\"${head_node}:29500\"'), its words "
            "from the plan (nodes, ranks per node) and the job's rendezvous (MASTER_ADDR:MASTER_PORT); or hpcdl "
            "(hpcdl launch --nproc N --nnodes M, which forwards signals and stops the survivors of a dead rank). "
            "Each rank still binds itself to its planned cores and GPU from plan.json. srun only; a container runtime "
            "runs the spawner inside the container"
        ),
    )
    spawner_one_node: Literal["rendezvous", "standalone", "localhost"] = Field(
        default="rendezvous",
        description=(
            "how a one-node job's torchrun (launch.spawner: torchrun) meets its workers, as the centre writes it: "
            "rendezvous (the default: the words every job's torchrun takes, launch.spawner_rendezvous), standalone "
            "(NRIS Saga: 'torchrun --standalone --nnodes=1 --nproc_per_node=...'; torchrun: '--standalone: Useful when "
            "launching single-node, multi-worker job', a local rendezvous on a free port) or localhost (MIT ORCD: "
            "'torchrun --nnodes=1 --nproc_per_node=4 --rdzv_id=$SLURM_JOB_ID --rdzv_endpoint=\"localhost:1234\"', 'Use "
            "`localhost` when there is only one node': the job's id and its MASTER_PORT on the node itself, with "
            "torchrun's default rendezvous backend, static); jobs of more nodes keep the rendezvous"
        ),
    )
    spawner_rendezvous: Literal["c10d", "static"] = Field(
        default="c10d",
        description=(
            "how torchrun's nodes meet (launch.spawner: torchrun): c10d (the default: --rdzv_id, --rdzv_backend=c10d, "
            "--rdzv_endpoint=MASTER_ADDR:MASTER_PORT, nodes taking their ranks as they join) or static, where the "
            "centre's per-node launcher is told its node's rank (RWTH HPC's CLAIX-2023 ResNet-50 job: 'python "
            "multiproc.py --nproc_per_node ${SLURM_GPUS_PER_NODE} --nnodes ${SLURM_NNODES} --node_rank ${SLURM_NODEID} "
            "--master_addr ${MASTER_ADDR} --master_port ${MASTER_PORT}'): torchrun --node_rank from each node's own "
            "SLURM_NODEID (read on the node, in a bash -c the task runs), --master_addr and --master_port, so node n's "
            "workers are ranks n*R..n*R+R-1 as the plan lays them out"
        ),
    )
    srun_mpi: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+$", max_length=32)] | None = Field(
        default=None,
        description=(
            "the PMI plugin srun starts ranks with, as the centre writes it: pmix, pmi2, cray_shasta ..., or "
            "default (no --mpi: the site's Slurm MpiDefault, where the centre's line is a plain srun); unset, "
            "Open MPI gets --mpi=pmix"
        ),
    )
    cpu_bind_default: Literal["auto", "cores", "none", "unstated"] | None = Field(
        default=None,
        description=(
            "how the site's Slurm binds tasks when srun names no --cpu-bind, where the centre's srun lines carry "
            "none: auto (task/affinity's auto binding, srun(1): 'If the job step allocation includes an allocation "
            "with a number of sockets, cores, or threads equal to the number of tasks times cpus-per-task, then the "
            "tasks will by default be bound to the appropriate resources') or cores (slurm.conf "
            "TaskPluginParam=Cores or the node's or partition's CpuBind=core: 'Bind tasks to cores by default'); the "
            "srun line then names no --cpu-bind, and a plan whose cores that binding would not give is refused. "
            "none: the site's Slurm binds no task (the job to its cores only: NRIS Olivia, 'the tasks and threads "
            "are free to use all cores the job has access to on the node'); unstated: the centre's lines are a bare "
            "srun and its pages do not say how its Slurm binds their tasks (SURF, BriCS). With either, the line names "
            "no --cpu-bind, no mask and no --distribution, and each rank binds itself to its cores from plan.json when "
            "it starts, whatever Slurm did, as with a --cpu-bind=none in launch.args. "
            "Unset, hpcdl writes --cpu-bind=cores or the plan's masks"
        ),
    )
    cpu_bind_unit: Literal["cores", "sockets"] = Field(
        default="cores",
        description=(
            "the unit srun's binding word names where hpcdl writes one: cores (the default, --cpu-bind=cores) or "
            "sockets (--cpu-bind=sockets, as the centre's own line writes it: JSC staff's JUPITER tutorial, "
            "'srun --cpu-bind=sockets --unbuffered', one task per GH200 superchip); srun(1): sockets 'Automatically "
            "generate masks binding tasks to sockets. Only the CPUs on the socket which have been allocated to the "
            "job will be used', so it is written only where each rank's cores are every usable core of the sockets "
            "(as the site's Slurm counts them) that they touch; elsewhere (two ranks on one socket) the plan's own "
            "binding, --cpu-bind=cores or masks, with a note naming the field. srun only; not beside "
            "cpu_bind_default, a --cpu-bind in launch.args or a spawner, which write no binding word"
        ),
    )
    distribution_default: Literal["cyclic", "block", "fcyclic"] | None = Field(
        default=None,
        description=(
            "how the site's Slurm lays a task's CPUs over the sockets when srun names no --distribution, where the "
            "centre's examples show it: cyclic (Slurm's own default, srun(1): 'Use the default method for "
            "distributing CPUs across sockets (cyclic)'), block (slurm.conf SelectTypeParameters="
            "CR_Core_Default_Dist_Block; CSC Mahti: 'with --cpus-per-task=8 the MPI task 0 is bound to CPU core 0, "
            "the MPI task 1 is bound to CPU core 7'), or fcyclic, where a task's own CPUs are dealt over the sockets "
            "in turn (srun(1): 'Tasks requiring more than one CPU will have each CPUs allocated in a cyclic fashion "
            "across sockets'; Slurm before 21.08 called that cyclic; TU Dresden ZIH: the default 'will split the "
            "cores allocated to a rank between the sockets of a node'); with block, hpcdl's line names no "
            "--distribution=block:block; with fcyclic it names it also where a rank of several cores sits alone on "
            "its socket. Unset, hpcdl cannot know and names it where two ranks share a socket"
        ),
    )
    srun_layout: Literal["restate", "header"] = Field(
        default="restate",
        description=(
            "how the srun line gives each step its layout: restate (hpcdl's srun repeats the header's --nodes, "
            "--ntasks, --ntasks-per-node, --cpus-per-task and GPU request) or header, where the centre's line is a "
            "bare srun that takes its layout from the #SBATCH header (NSC Berzelius, Princeton Della: 'srun python "
            "...'): the line then names only what the header cannot give (the binding words hpcdl writes, --mpi, "
            "--gpu-bind, --threads-per-core/--hint, which sbatch passes no srun) and launch.args, and the job exports "
            "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK, since srun 22.05 'will not inherit the --cpus-per-task value "
            "requested by salloc or sbatch' (sbatch(1)); every task sees its node's GPUs (gpu_visibility: node, "
            "required where the node has GPUs) and drives the plan's"
        ),
    )
    mpirun_layout: Literal["restate", "command", "count"] = Field(
        default="restate",
        description=(
            "how Open MPI's mpirun line gives the ranks their layout: restate (hpcdl's -np, --map-by ppr:R:node:PE=C "
            "and --bind-to core) or command, where the centre's own launcher (launch.command) lays the ranks out and "
            "binds them itself from its own options (launch.args) and the allocation, and the centre's line names no "
            "count, mapping or binding (N8 CIR Bede: 'bede-mpirun --bede-par 1ppg <mpi_program>', '1ppg (one process "
            "per GPU)'): the line then names only the -x exports, a host file where asked, and launch.args, and each "
            "rank binds itself to its cores from plan.json; or count, under Slurm or PBS, where the centre's line "
            "names the rank count alone and Open MPI lays the ranks over the slots the #SBATCH header's tasks, or the "
            "PBS chunks' mpiprocs, give each node (JHU ARCH's Rockfish: '#SBATCH --ntasks-per-node=8', '#SBATCH "
            "--cpus-per-task=6', 'mpirun -np 8 bin/gmx_mpi ...'; Imperial's CX3: 'mpirun -n 4 python "
            "node_name.py'): the line is -np N, the -x exports and launch.args, no --map-by and no --bind-to, and "
            "each rank binds itself to its cores from plan.json; under a header of cores as one-CPU tasks "
            "(defaults.batch_request: cores, CU Boulder Alpine's 'mpirun -np 4') a job of several nodes adds "
            "--map-by ppr:R:node, since -np alone would fill the first node's slots"
        ),
    )
    ranks_per_node_option: OptionName | None = Field(
        default=None,
        description=(
            "with mpirun_layout: command, the option of the centre's own launcher that takes the ranks it starts on "
            "each node, where the centre's line says them so: the line then names it with the plan's ranks per node "
            "(HPC-UGent's mympirun on VSC Hortense: 'mympirun --hybrid N', 'the number of processes started on each "
            "available physical node', which a fixed launch.args word would say for a full node only); or, with "
            "mpirun_layout: count, Open MPI's own option for it where the centre's line names it beside the count "
            "(CSD3's Wilkes-3 template: 'mpirun -npernode $mpi_tasks_per_node -np $np')"
        ),
    )
    env_list_option: OptionName | None = Field(
        default=None,
        description=(
            "with mpirun_layout: command, the option of the centre's own launcher that takes the variables to carry "
            "to the ranks as one comma-separated list, where it takes no mpirun -x: the line names the job's "
            "exports there in place of a -x each (HPC-UGent's mympirun: 'To add other variables to this list, you "
            "can use the mympirun option --variablesprefix. This option requires a comma-seperated list')"
        ),
    )
    srun_restates: tuple[Literal["nodes", "ntasks", "ntasks-per-node", "cpus-per-task"], ...] = Field(
        default=(),
        description=(
            "with srun_layout: header, the layout options the centre's otherwise bare srun names all the same: nodes "
            "(--nodes=N; Mahidol MAI HPC: 'srun -N 2 python3 train_ddp_2node.py'), ntasks (--ntasks=N), "
            "ntasks-per-node (--ntasks-per-node=R; the Kempner Institute on Harvard's Cannon: 'srun "
            "--ntasks-per-node=$SLURM_NTASKS_PER_NODE python -u mlp_ddp.py') and cpus-per-task (--cpus-per-task=C, "
            "the header's; MSU ICER: 'srun -c $SLURM_CPUS_PER_TASK my_hybrid_program', 'users must specify "
            "--cpus-per-task at the top of their job file and when calling srun'), where the job then exports no "
            "SRUN_CPUS_PER_TASK"
        ),
    )
    gpu_bind: Literal["map", "closest", "wrapper"] = Field(
        default="map",
        description=(
            "how srun binds each task's GPUs: map (the plan's own, --gpu-bind=map_gpu:/mask_gpu:), closest "
            "(--gpu-bind=closest, Slurm's GPUs nearest each task's cores, as the centre's line writes it: Pawsey "
            "Setonix 'srun -N 1 -n 8 -c 8 --gres=gpu:8 --gpus-per-task=1 --gpu-bind=closest', NCSA Delta "
            "'#SBATCH --gpu-bind=closest'; a plan whose GPUs are not the ones nearest its ranks' cores, one for one, "
            "is bound by its map, with a note), or wrapper: the centre's launch wrapper (wrapper or gpu_wrapper) "
            "gives local rank i GPU i itself and the centre's line names no --gpu-bind (EPCC Tursa's gpu_launch.sh: "
            "CUDA_VISIBLE_DEVICES=$((SLURM_PROCID % SLURM_NTASKS_PER_NODE))); the line then names none, a node not "
            "filled drives its first GPUs, and a plan giving a rank any other GPUs is refused"
        ),
    )
    threads_request: Literal["threads-per-core", "hint"] = Field(
        default="threads-per-core",
        description=(
            "how a Slurm job asks one hardware thread per core where the site's Slurm counts cores on an SMT node "
            "(scheduler_cpus_per_core: 1): threads-per-core (--threads-per-core=1) or hint (--hint=nomultithread, "
            "as EPCC and IDRIS write it, in #SBATCH and on srun, with no --cpu-bind: srun takes --hint beside "
            "neither); both bind each task to one thread of each of its cores. Where the plan's cores need "
            "srun's masks (--cpu-bind=mask_cpu), --threads-per-core=1 is written instead"
        ),
    )
    gpu_visibility: Literal["per-rank", "node"] = Field(
        default="per-rank",
        description=(
            "per-rank: each rank sees only its GPUs; node: every rank sees every GPU of its node and picks its "
            "own by local rank, so CUDA IPC works between ranks (OLCF Summit DL guidance, NERSC Perlmutter)"
        ),
    )
    nic_choice: Literal["plan", "library"] = Field(
        default="plan",
        description=(
            "plan: each rank is given the NIC port nearest it (NCCL_IB_HCA, UCX_NET_DEVICES, HFI_UNIT per rank); "
            "library: the plan names no NIC per rank and each rank's communication library picks its own (NCCL: the "
            "HCA nearest its GPU by PCI distance), where the centre's jobs name none (JSC's deep-learning jobs on "
            "JUWELS Booster); mode per-nic still places one rank per port"
        ),
    )
    rank_cpus: Literal["plan", "gpu-local"] = Field(
        default="plan",
        description=(
            "plan: each rank binds itself to the cores the plan gives it (from the profile's sockets and gpus[].socket); "
            "gpu-local: where the centre publishes no map of which cores go with which GPU, each GPU rank binds itself "
            "at run time to its share of the CPUs the node reports nearest its GPU (the GPU's PCI device's "
            "local_cpulist in sysfs, which nvidia-smi topo -m prints as CPU Affinity), split in local-rank order among "
            "the ranks whose GPUs report the same CPUs, within the CPUs its job holds on the node: PyTorch's torchrun "
            "--numa-binding does the same ('bind worker processes to CPUs near their assigned GPUs', 1-10 % faster in "
            "PyTorch's measurements). Only where the launch line names no binding itself (srun with "
            "cpu_bind_default none or unstated, or auto or cores, Slurm's own default binding, which each rank "
            "replaces, or --cpu-bind=none in launch.args, or the centre's own --cpu-bind=cores there, whole cores "
            "each rank replaces with whole cores near its GPU; a per-node spawner; Open MPI's "
            "mpirun with --bind-to none in launch.args, or with mpirun_layout: count, whose line names no binding "
            "and whose ranks bind themselves); under a scheduler other than Slurm only on whole nodes "
            "(defaults.exclusive), a job's GPUs among its node's being named by Slurm alone"
        ),
    )
    gpu_bind_default: Literal["none"] | None = Field(
        default=None,
        description=(
            "with gpu_visibility: node under srun, where the centre's srun lines carry no --gpu-bind and every task "
            "sees the step's GPUs without one: none (IDRIS's jobs, a bare srun under --gres=gpu:4 with "
            "torch.cuda.set_device(local_rank); JSC's, export CUDA_VISIBLE_DEVICES=0,1,2,3, an env: setting, before a "
            "bare srun); the srun line then names no --gpu-bind. Unset, hpcdl writes --gpu-bind=none"
        ),
    )

    ulimit: dict[UlimitName, UlimitValue] = Field(
        default_factory=dict,
        description=(
            "shell resource limits the job raises before it starts the ranks, as the centre's job scripts do "
            "(UChicago RCC Midway3: ulimit -l unlimited before mpirun, the memory InfiniBand registers): "
            "{memlock: unlimited} gives `ulimit -l unlimited`; a value is unlimited or a whole number in ulimit's units"
        ),
    )

    @property
    def slurm_binds_tasks(self) -> bool:
        """The site's Slurm binds each task to its block of cores by itself (cpu_bind_default auto or cores): the
        line names no --cpu-bind, and the plan's cores must be those it gives."""
        return self.cpu_bind_default in ("auto", "cores")

    @property
    def line_asks_no_binding(self) -> bool:
        """The line asks srun for no binding word (cpu_bind_default none or unstated): each rank binds itself to
        its cores from plan.json, whatever the site's Slurm did."""
        return self.cpu_bind_default in ("none", "unstated")

    @property
    def srun_binds_no_task(self) -> bool:
        """srun binds no task, each rank binding itself: the centre's own --cpu-bind=none in args or a line that asks
        no binding (cpu_bind_default none or unstated)."""
        return "none" in (srun_cpu_bind_of(self.args) or "").split(",") or self.line_asks_no_binding

    @property
    def srun_centre_binds_cores(self) -> bool:
        """The centre's own --cpu-bind=cores in args (REPACSS: "Each Slurm CPU is a hyperthread. To bind OpenMP threads
        to physical cores, use --cpu-bind=cores"), kept as written only beside rank_cpus: gpu-local: srun binds each
        task to whole cores, and each GPU rank replaces that binding with whole cores near its GPU."""
        return srun_cpu_bind_of(self.args) == "cores"

    @property
    def mpirun_binds_no_rank(self) -> bool:
        """Open MPI's mpirun binds no rank, each binding itself: the centre's own --bind-to none in args."""
        return mpirun_option_of(self.args, "bind-to") == "none"


class Container(_Strict):
    """Container-runtime modules and flags (podman-hpc --nccl, Shifter --module=gpu,nccl-plugin)."""

    gpu_modules: tuple[str, ...] | None = Field(
        default=None, description="runtime modules GPU jobs use; default: the runtime's GPU module (gpu)"
    )
    modules: tuple[str, ...] = Field(default=(), description="runtime modules every job uses")
    args: tuple[str, ...] = Field(default=(), description="further runtime arguments, word by word")
    command: Literal["exec", "run"] = Field(
        default="exec",
        description="Apptainer/Singularity: the subcommand that starts each rank's program in the image, `exec` (the "
        "program alone) or `run`, where the centre's lines run the image's runscript first and the program after it "
        "(KISTI Neuron: 'srun singularity run --nv <image> python ...', its NGC images' entrypoint)",
    )
    nvidia: Literal["nv", "nvccli"] = Field(
        default="nv",
        description="Apptainer/Singularity: how NVIDIA GPUs reach the container, `--nv` (the runtime binds the host's "
        "driver libraries) or `--nvccli` (nvidia-container-cli sets the container up, where the centre's "
        "container stack asks for it)",
    )
    workdir: JobPath | None = Field(
        default=None,
        description="Apptainer/Singularity: the folder the runtime keeps its temporary files in (`--workdir`, the "
        "container's /tmp and /var/tmp), where the centre asks for one: a job's own /tmp often lives in memory the "
        "job has little of (the Alliance: '-W ${SLURM_TMPDIR}'); an absolute path or one under a variable the job "
        "has, expanded when the job runs",
    )
    system_binds: tuple[SitePath, ...] = Field(
        default=(),
        description="Apptainer/Singularity: host folders the centre's runtime binds into every container by itself "
        "(apptainer.conf `bind path`), where the centre says so: the job binds no scratch, node-local or library "
        "folder at or under one of them (UVA: '/home, /scratch, /standard, /project' are 'mounted into each "
        "container by default', and its container lines bind none); absolute paths",
    )

    system_bound_env: dict[str, SitePath] = Field(
        default_factory=dict,
        description="Apptainer/Singularity: variables the centre sets to a folder under one of system_binds, each with "
        "that folder, where the centre says where the variable points (Purdue RCAC: 'Scratch - /scratch/gautschi/$USER "
        "($RCAC_SCRATCH)' and its Apptainer 'auto-mounts /home, /depot, and /scratch'): a scratch, node-local or library "
        "folder under $NAME is not bound either, as the centre's lines bind none",
    )

    @model_validator(mode="after")
    def _system_binds_absolute(self) -> "Container":
        for i, path in enumerate(self.system_binds):
            if not path.startswith("/") or variables_in(path):
                raise ValueError(f"system_binds[{i}]: {path!r} is not an absolute host folder (the runtime's own "
                                 "configuration names folders without variables)")
        system = [b.rstrip("/") or "/" for b in self.system_binds]
        for name, folder in self.system_bound_env.items():
            where = f"system_bound_env.{name}"
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{where}: {name!r} is not a variable's name (letters, digits and _)")
            if not folder.startswith("/") or variables_in(folder):
                raise ValueError(f"{where}: {folder!r} is not an absolute host folder (the folder the variable lies "
                                 "under, without variables)")
            folder = folder.rstrip("/") or "/"
            if not any(folder == b or folder.startswith(b.rstrip("/") + "/") for b in system):
                raise ValueError(f"{where}: {folder} is not at or under a folder of container.system_binds "
                                 f"({', '.join(system) or 'none'}), so the runtime would not mount it by itself")
        return self


#: a script inside a container that a job's shell sources (environment.source): a plain absolute path
_SOURCED_SCRIPT = re.compile(r"/[A-Za-z0-9._+/-]+")


class SiteEnvironment(_Strict):
    """The centre's own environment, a runtime beside hpcdl's images: where the framework, the MPI and
    the network plugin come from when the job runs there. hpcdl installs only itself into it (it is
    pure Python: `pip install hpcdl`, into the environment or with PYTHONUSERBASE for a container).

    kind container: the centre's image (`image`: an NGC or registry tag, a path) run with the site's
    `runtime` and its hooks and modules (podman-hpc --nccl, Shifter --module=gpu,nccl-plugin, the
    CSCS container engine's EDF with `annotations`); modules: `modules` loaded on the host; conda:
    `modules` loaded, then `conda activate [<activate>]` (none: the base environment); uenv: srun --uenv=<activate> (--view=`view`);
    venv: `source <activate>/bin/activate`. Used where no hpcdl image fits the node kind, or always
    with `prefer: true`.
    """

    kind: Literal["container", "modules", "conda", "uenv", "venv"]
    image: SitePath | None = Field(default=None, description="container: the centre's image (registry tag or path)")
    modules: tuple[ModuleName, ...] = Field(default=(), description="modules loaded before the launch")
    activate: SitePath | None = Field(
        default=None, description="conda: the environment (name or path); uenv: image label; venv: its folder"
    )
    view: DeviceName | None = Field(default=None, description="uenv: the view to start (CSCS: default)")
    hook: bool = Field(
        default=False,
        description="conda: define conda's shell function first, `eval \"$(conda shell.bash hook)\"`, where the centre's "
        "job scripts do (a batch shell runs no ~/.bashrc, so `conda init`'s function is not there)",
    )
    init: JobPath | None = Field(
        default=None,
        description="conda: a script the job sources so `conda` exists before `conda activate`, where the centre's job "
        "scripts enter conda so, from a conda install not on the batch shell's PATH (MASSIVE M3's GPU jobs: `source "
        "/path/to/miniconda/bin/activate`, then `conda activate tf2-gpu`): absolute, or under a variable the job has",
    )
    activate_command: Literal["conda", "source"] = Field(
        default="conda",
        description="conda: how the job enters the environment, `conda activate <activate>` (the default) or "
        "`source activate <activate>`, conda's own activate script on the PATH a conda module sets, which needs no "
        "shell function, where the centre's job scripts enter it so (MIT ORCD Engaging: `module load "
        "miniforge/24.3.0-0`, `source activate pytorch`)",
    )
    frameworks: tuple[Literal["pytorch", "tensorflow", "mxnet"], ...] = Field(
        default=("pytorch",), description="the frameworks it holds"
    )
    net_plugin: Text | None = Field(
        default=None,
        description="outside a container: where the NCCL/RCCL network plugin comes from in it (the uenv's default "
        "view, the module that loads it); inside one, the runtime's module, hook or bind says it",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="container-engine: the EDF's [annotations], e.g. com.hooks.aws_ofi_nccl.enabled: 'true'",
    )
    node_kinds: tuple[str, ...] = Field(default=(), description="the node kinds it serves; empty: all")
    prefer: bool = Field(default=False, description="run here even where an hpcdl image fits")
    module_env: tuple[VariableName, ...] = Field(
        default=(),
        description="container: variables the modules the job loads set (environment.modules, modules.runtime, "
        "modules.load), which `image` may name, expanded when the job runs, after its modules load: UVA's container "
        "modules set $CONTAINERDIR, the folder of the centre's images (`apptainer run --nv "
        "$CONTAINERDIR/pytorch-2.0.1.sif`)",
    )

    overlays: tuple[SitePath, ...] = Field(
        default=(),
        description="container, Apptainer/Singularity: overlay images over the centre's image, each opened read-only "
        "(`--overlay <file>:ro`), where the centre's users keep their own environment in one (NYU Torch: `apptainer "
        "exec --nv --overlay /scratch/<NetID>/pytorch-example/my_pytorch.ext3:ro IMAGE ...`, 'For production jobs to "
        "run, the overlay image should be open in read-only mode'); a path or one under a variable the job has",
    )
    source: SitePath | None = Field(
        default=None,
        description="container: a script inside the container that the program's shell sources before it starts, "
        "where the centre's jobs activate their environment so (NYU Torch: `/bin/bash -c \"source /ext3/env.sh; "
        "python ...\"`): the line runs `/bin/bash -c 'source <script> && exec \"$@\"' bash <program>`; an absolute "
        "path without variables",
    )

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> "SiteEnvironment":
        for field, given in (("overlays", self.overlays), ("source", self.source)):
            if given and self.kind != "container":
                raise ValueError(f"{field}: a container environment's; this is a {self.kind} environment")
        for i, path in enumerate(self.overlays):
            if ":" in path or "," in path:
                raise ValueError(f"overlays[{i}]: {path!r}: apptainer's --overlay reads ':' as the mode's separator "
                                 "and ',' as a list's; name a file without them (hpcdl opens each read-only, :ro)")
        if self.source is not None and not _SOURCED_SCRIPT.fullmatch(self.source):
            raise ValueError(f"source: {self.source!r} is not an absolute path of letters, digits, '.', '_', '+', "
                             "'-' and '/' (a script inside the container, without variables)")
        if self.kind == "container" and not self.image:
            raise ValueError("image: a container environment names the centre's image")
        if self.kind in ("uenv", "venv") and not self.activate:
            raise ValueError(f"activate: a {self.kind} environment names what to activate")
        if self.kind == "modules" and not self.modules:
            raise ValueError("modules: a modules environment names the modules to load")
        if self.hook and self.kind != "conda":
            raise ValueError(f"hook: conda's shell hook, not for a {self.kind} environment")
        if self.init and self.kind != "conda":
            raise ValueError(f"init: the script that brings conda, not for a {self.kind} environment")
        if self.init and self.hook:
            raise ValueError("init: the sourced script and hook both define conda's shell function; name one")
        if self.activate_command != "conda" and self.kind != "conda":
            raise ValueError(f"activate_command: conda's activate script, not for a {self.kind} environment")
        if self.activate_command == "source" and (self.hook or self.init):
            raise ValueError("activate_command: source enters the environment with conda's activate script, which "
                             "needs no shell function; not beside hook or init, which define one for `conda activate`")
        if self.module_env and self.kind != "container":
            raise ValueError(f"module_env: the variables a container environment's image may name; this is a "
                             f"{self.kind} environment")
        for key, value in self.annotations.items():
            if not _WORD.match(key) or any(c in value for c in '"\\\n\r\0'):
                raise ValueError(f"annotations.{key}: not a plain annotation name and value")
        return self


Choice = Literal[
    "ranks_per_node", "cores_per_rank", "binding", "gpus", "nics", "launcher", "directives", "environment",
    "modules", "container",
]


class Citation(_Strict):
    """Where one choice that shapes the plan comes from: the centre page or staff script it follows."""

    source: str = Field(min_length=1, description="URL of the centre page or centre-staff script")
    says: str = Field(min_length=1, description="what it says, quoted or in short")


class Retired(_Strict):
    """The machine has left service. Its profile stays (published runs were made on it, and their plans are
    reproduced from it); `hpcdl sites` and every plan for it say so."""

    date: str = Field(pattern=r"^[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?$", description="when: 2024, 2024-11 or 2024-11-15")
    source: str = Field(pattern=r"^https://[^\s]+$", description="URL of the page that says the machine was retired")


class Site(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: Text = ""
    sources: tuple[str, ...] = Field(default=(), description="where the profile's facts come from")
    retired: Retired | None = Field(default=None, description="when the machine left service, and the page that says so")
    scheduler: Scheduler
    launcher: Launcher
    runtime: Runtime = "none"
    mpi: MpiFlavour = "openmpi"
    mpi_version: str | None = Field(
        default=None, pattern=r"^[0-9]+(\.[0-9]+){0,3}$",
        description="the host MPI's version (Open MPI 4.1.6): an image's Open MPI of another major is refused under the host's mpirun",
    )
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
    environment: SiteEnvironment | None = Field(
        default=None, description="the centre's own environment (container, modules, conda, uenv or venv)"
    )
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
        self._no_srun_binding_in_env()
        lists = [("defaults.directives", self.defaults.directives)]
        lists += [(f"defaults.framework_directives.{f}", d) for f, d in self.defaults.framework_directives.items()]
        lists += [("defaults.multi_node_directives", self.defaults.multi_node_directives)]
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
            if not (_WORD.match(k) and _WORD.match(v.replace(PROJECT_PLACEHOLDER, "p"))) or "=" in k:
                raise ValueError(f"defaults.job_resources.{k}: {v!r} is not a plain name=value a #PBS -l line carries")
        per_node = [("defaults.job_resources_per_node", self.defaults.job_resources_per_node)]
        per_node += [(f"node_kinds.{k}.defaults.job_resources_per_node", n.defaults.job_resources_per_node or {})
                     for k, n in self.node_kinds.items()]
        for where, resources in per_node:
            for k, v in resources.items():
                if self.scheduler != "pbs":
                    raise ValueError(f"{where}: PBS resources, but the scheduler is {self.scheduler}")
                if not _WORD.match(k) or "=" in k or not _PER_NODE.match(v):
                    raise ValueError(f"{where}.{k}: {v!r} is not a whole number with a unit (382GB, 400GB, 4)")
        if self.defaults.export_default != "all" and self.scheduler != "slurm":
            raise ValueError(f"defaults.export_default: {self.defaults.export_default} is how a Slurm starts its jobs, "
                             f"but the scheduler is {self.scheduler}")
        if self.defaults.pbs_request != "select" and self.scheduler != "pbs":
            raise ValueError(f"defaults.pbs_request: a PBS setting, but the scheduler is {self.scheduler}")
        if self.defaults.gpu_request in ("gpu", "rusage") and self.scheduler != "lsf":
            raise ValueError(f"defaults.gpu_request: {self.defaults.gpu_request} is an LSF setting, but the scheduler "
                             f"is {self.scheduler}")
        for kind_name, kind in self.node_kinds.items():
            if kind.defaults.gpu_jobs_only and not kind.gpus:
                raise ValueError(f"node_kinds.{kind_name}.defaults.gpu_jobs_only: the kind has no GPUs, so no job "
                                 "could run on it")
            if kind.defaults.gpu_type and self.scheduler != "slurm":
                raise ValueError(f"node_kinds.{kind_name}.defaults.gpu_type: Slurm's GRES type, but the scheduler "
                                 f"is {self.scheduler}")
            if kind.defaults.max_job_cpus and self.job_defaults(kind_name).exclusive:
                raise ValueError(f"node_kinds.{kind_name}.defaults.max_job_cpus: {kind.defaults.max_job_cpus} caps the "
                                 "CPUs of a job on nodes it shares, but defaults.exclusive gives its jobs their nodes "
                                 "whole, every CPU of them; set defaults.exclusive: false or drop the cap")
            if kind.defaults.mem_per_gpu and self.scheduler != "slurm":
                raise ValueError(f"node_kinds.{kind_name}.defaults.mem_per_gpu: Slurm's --mem per GPU, but the "
                                 f"scheduler is {self.scheduler}")
        if self.defaults.gpu_request in ("gpus-per-node", "gres", "gpus-per-task", "gpus") and self.scheduler != "slurm":
            raise ValueError(f"defaults.gpu_request: {self.defaults.gpu_request} is a Slurm setting, but the scheduler "
                             f"is {self.scheduler}")
        if self.defaults.single_gpu_request and (self.scheduler != "slurm" or self.defaults.gpu_request == "none"
                                                 or self.defaults.batch_request == "nodes"):
            raise ValueError(f"defaults.single_gpu_request: {self.defaults.single_gpu_request} is how a Slurm header "
                             f"asks a job's one GPU, but the scheduler is {self.scheduler}, gpu_request "
                             f"{self.defaults.gpu_request or 'unset'} and batch_request {self.defaults.batch_request} "
                             "(it needs slurm, a GPU request, and a header that asks the GPUs)")
        if self.launch.mpirun_layout == "command" and (self.launcher != "mpirun" or not self.launch.command):
            raise ValueError(f"launch.mpirun_layout: command leaves the layout to the centre's own mpirun command "
                             f"(launch.command), but the launcher is {self.launcher} and launch.command "
                             f"{'is ' + ' '.join(self.launch.command) if self.launch.command else 'is unset'}")
        if self.launch.mpirun_layout == "count":
            # the line names the count alone and Open MPI takes each node's slots from the allocation: a Slurm header
            # of its ranks' tasks (SLURM_TASKS_PER_NODE), or PBS chunks naming each node's MPI processes (mpiprocs=R,
            # the node listed R times in PBS_NODEFILE), with Open MPI's own mpirun
            slots = {"slurm": self.defaults.batch_request in ("tasks", "cores"),
                     "pbs": self.defaults.pbs_request in ("select", "processes")}.get(self.scheduler, False)
            if self.launcher != "mpirun" or self.mpi != "openmpi" or not slots:
                raise ValueError(f"launch.mpirun_layout: count names Open MPI's rank count alone and leaves each "
                                 f"node's ranks to the slots the allocation gives it (a Slurm header of tasks, PBS "
                                 f"chunks of mpiprocs), but the launcher is {self.launcher}, the MPI {self.mpi}, the "
                                 f"scheduler {self.scheduler}, defaults.batch_request {self.defaults.batch_request} "
                                 f"and defaults.pbs_request {self.defaults.pbs_request}")
            for option in ("map-by", "bind-to"):
                if mpirun_option_of(self.launch.args, option) is not None:
                    raise ValueError(f"launch.mpirun_layout: count names no mapping or binding, but launch.args "
                                     f"names --{option}; leave mpirun_layout at restate to keep the centre's")
        for field in ("ranks_per_node_option", "env_list_option"):
            option = getattr(self.launch, field)
            if option is None:
                continue
            # each node's ranks may also be said beside Open MPI's count (mpirun_layout: count: CSD3's "mpirun
            # -npernode $mpi_tasks_per_node -np $np"); a list of variables only by the centre's own command, Open MPI
            # taking -x
            allowed = ("command", "count") if field == "ranks_per_node_option" else ("command",)
            if self.launch.mpirun_layout not in allowed:
                raise ValueError(f"launch.{field}: {option} names what the centre's line says beside the layout "
                                 f"hpcdl leaves to it (launch.mpirun_layout: {' or '.join(allowed)}), but "
                                 f"mpirun_layout is {self.launch.mpirun_layout}")
            if option_value(self.launch.args, option) is not None:
                raise ValueError(f"launch.{field}: {option} is written from the plan, and launch.args names it "
                                 "too; leave it out of launch.args")
        # a header of nodes alone (Pawsey's allocation-packs) needs a launcher that lays the ranks out itself: srun,
        # the centre's own mpirun command (launch.mpirun_layout: command; N8 CIR Bede's bede-mpirun), or Open MPI's
        # mpirun, which names its ranks per node and takes its slots from the job's exports (EPCC Cirrus)
        layout_launcher = self.launcher in ("srun", "mpirun")
        if self.defaults.batch_request == "nodes" and (self.scheduler != "slurm" or not layout_launcher):
            raise ValueError(f"defaults.batch_request: nodes leaves tasks, CPUs and GPUs to srun (or to Open MPI's "
                             f"mpirun, or the centre's own mpirun command, launch.mpirun_layout: command), but the "
                             f"scheduler is {self.scheduler} and the launcher {self.launcher}")
        # cores: the header asks the job's cores as one-CPU tasks and the launcher lays the ranks over them: srun, or
        # Open MPI's mpirun, which takes each node's slots from them and names its own ranks per node (CU Boulder
        # Alpine: "a 50-core job ... using 2 GPUs: --nodes=1 --ntasks=50 --gres=gpu:2", "mpirun -np 4")
        if self.defaults.batch_request == "cores" and (
                self.scheduler != "slurm" or self.launcher not in ("srun", "mpirun")
                or (self.launcher == "mpirun" and (self.mpi != "openmpi"
                                                   or self.launch.mpirun_layout not in ("restate", "count")))):
            raise ValueError(f"defaults.batch_request: cores leaves the ranks' tasks and CPUs to srun or to Open MPI's "
                             f"mpirun (launch.mpirun_layout: restate or count), but the scheduler is {self.scheduler}, the "
                             f"launcher {self.launcher} and the MPI {self.mpi}")
        if self.defaults.batch_request == "cores" and self.defaults.gpu_request == "gpus-per-task":
            raise ValueError("defaults.batch_request: cores asks a task of one CPU per core, and defaults.gpu_request: "
                             "gpus-per-task would give each of them GPUs; ask the GPUs per node (gres, gpus-per-node)")
        if self.defaults.tasks_per_socket and (self.scheduler != "slurm" or self.defaults.batch_request != "tasks"):
            raise ValueError(f"defaults.tasks_per_socket: #SBATCH --ntasks-per-socket beside --ntasks-per-node, a Slurm "
                             f"header that asks tasks, but the scheduler is {self.scheduler} and batch_request "
                             f"{self.defaults.batch_request}")
        if self.defaults.cpu_request == "cpus-per-gpu" and (
                self.scheduler != "slurm" or self.defaults.batch_request == "nodes"
                or self.defaults.gpu_request == "none"):
            raise ValueError(f"defaults.cpu_request: cpus-per-gpu asks CPUs with the GPUs a Slurm header asks, but the "
                             f"scheduler is {self.scheduler}, batch_request {self.defaults.batch_request} and "
                             f"gpu_request {self.defaults.gpu_request}")
        if self.defaults.total_tasks and (self.scheduler != "slurm" or self.defaults.batch_request == "nodes"):
            raise ValueError(f"defaults.total_tasks: #SBATCH --ntasks beside --ntasks-per-node, a Slurm header that asks "
                             f"tasks, but the scheduler is {self.scheduler} and batch_request "
                             f"{self.defaults.batch_request}")
        if self.defaults.total_gpus and (self.scheduler != "slurm"
                                         or (self.defaults.gpu_request or "gpus-per-node") not in ("gpus-per-task",
                                                                                                  "gpus-per-node")
                                         or self.defaults.batch_request != "tasks"):
            raise ValueError(f"defaults.total_gpus: #SBATCH --gpus beside --gpus-per-task or --gpus-per-node, a Slurm "
                             f"header that asks each task's or node's GPUs, but the scheduler is {self.scheduler}, gpu_request "
                             f"{self.defaults.gpu_request or 'gpus-per-node'} and batch_request {self.defaults.batch_request}")
        for kind in self.node_kinds:
            for size in self.job_defaults(kind).partition_by_nodes or ():
                if size.chunk != "gpu":
                    continue
                where = f"defaults.partition_by_nodes: {size.partition or 'the queue'} chunk: gpu"
                if self.scheduler != "pbs":
                    raise ValueError(f"{where} asks PBS chunks of one GPU, but the scheduler is {self.scheduler}")
                if size.max_nodes != 1:
                    raise ValueError(f"{where} puts a job's GPUs on one node: give the queue max_nodes: 1")
                if not self.node_kinds[kind].gpus:
                    raise ValueError(f"{where}: node kind {kind!r} has no GPUs to hand out as chunks")
        if self.defaults.whole_nodes_from and (self.scheduler != "slurm" or all(
                self.job_defaults(kind).exclusive for kind in self.node_kinds)):
            raise ValueError(f"defaults.whole_nodes_from: where Slurm gives larger jobs their nodes whole, a site whose "
                             f"jobs share nodes (defaults.exclusive: false); this one's scheduler is {self.scheduler} "
                             f"and its jobs take whole nodes already")
        if self.defaults.partial_gpus == "spread" and (self.scheduler not in ("slurm", "pbs") or all(
                self.job_defaults(kind).exclusive for kind in self.node_kinds) or self.launch.gpu_bind == "wrapper"):
            raise ValueError(f"defaults.partial_gpus: spread chooses the GPUs of a job that shares its node (defaults."
                             f"exclusive: false) under Slurm or PBS, whose own GPUs the plan picks (not launch.gpu_bind: "
                             f"wrapper); this one's scheduler is {self.scheduler}, its gpu_bind {self.launch.gpu_bind}, "
                             f"and {'its jobs take whole nodes' if all(self.job_defaults(k).exclusive for k in self.node_kinds) else 'its jobs share nodes'}")
        if self.defaults.gpu_rank_cores == "node" and self.launch.rank_cpus != "gpu-local":
            raise ValueError("defaults.gpu_rank_cores: node sizes each GPU rank by the node's cores, not its GPU's "
                             f"socket, but launch.rank_cpus is {self.launch.rank_cpus}: the plan would bind a rank to "
                             "cores off its GPU's socket; set launch.rank_cpus: gpu-local (each rank finds its cores "
                             "near its GPU at run time) or leave gpu_rank_cores out")
        if self.defaults.gpu_rank_sockets == "even" and self.launch.gpu_bind in ("closest", "wrapper"):
            raise ValueError(f"defaults.gpu_rank_sockets: even lays a GPU's rank on a socket of its own, so the plan "
                             f"must name each rank's GPU; launch.gpu_bind: {self.launch.gpu_bind} lets "
                             f"{'Slurm pick the GPUs beside its cores' if self.launch.gpu_bind == 'closest' else 'the centre wrapper pick them'}")
        suffixes = {k: n.defaults.account_suffix for k, n in self.node_kinds.items() if n.defaults.account_suffix}
        if suffixes and self.defaults.account and any(self.defaults.account.endswith(x) for x in suffixes.values()):
            raise ValueError("defaults.account: give the project without a node kind's account_suffix; the job adds it")
        flags = {"lsf": ("-P", "-G"), "pbs": ("-A", "-P", "-W group_list")}.get(self.scheduler, ())
        if self.defaults.account_flag and self.defaults.account_flag not in flags:
            known = f"{self.scheduler} takes {' or '.join(flags)}" if flags else f"{self.scheduler} has no such option"
            raise ValueError(f"defaults.account_flag: {self.defaults.account_flag} names no account under "
                             f"{self.scheduler} ({known}; Slurm's is always --account)")
        if self.launch.master_addr != "host-name" and self.scheduler != "slurm":
            raise ValueError(f"launch.master_addr: a Slurm setting (the batch host's address), but the scheduler is "
                             f"{self.scheduler}, whose jobs name the first host of their node file")
        if self.launch.master_addr == "host-fqdn" and self.launch.master_addr_suffix:
            raise ValueError("launch.master_addr: host-fqdn is the batch host's full name as its resolver gives it; "
                             "a master_addr_suffix names another interface's short name: not both")
        if self.launch.master_addr_suffix and self.scheduler != "slurm":
            raise ValueError(f"launch.master_addr_suffix: a Slurm setting (the batch host's name), but the scheduler "
                             f"is {self.scheduler}, whose jobs name the first host of their node file")
        if self.launch.cpu_bind_default and self.launcher != "srun":
            raise ValueError(f"launch.cpu_bind_default: how Slurm binds srun's tasks, but the launcher is {self.launcher}")
        if self.launch.line_asks_no_binding and self.launch.gpu_bind == "closest":
            raise ValueError(f"launch.cpu_bind_default: {self.launch.cpu_bind_default} leaves each task's cores to the "
                             "site's Slurm until the rank binds itself, but launch.gpu_bind: closest picks each task's "
                             "GPU by the cores Slurm binds it to; keep one")
        if self.launch.cpu_bind_unit != "cores":
            self._cpu_bind_unit_fits()
        if self.launch.distribution_default and self.launcher != "srun":
            raise ValueError(f"launch.distribution_default: an srun setting, but the launcher is {self.launcher}")
        if self.launch.gpu_bind_default and self.launcher != "srun":
            raise ValueError("launch.gpu_bind_default: how Slurm binds srun's GPUs, but the launcher is "
                             f"{self.launcher}")
        if self.launch.gpu_bind_default and self.launch.gpu_visibility != "node":
            raise ValueError("launch.gpu_bind_default: every task seeing the step's GPUs, but launch.gpu_visibility is "
                             "per-rank, whose ranks need their GPUs bound; set gpu_visibility: node, or unset it")
        if self.launch.srun_layout == "header":
            self._srun_layout_header_fits()
        elif self.launch.srun_restates:
            raise ValueError("launch.srun_restates: the layout options a bare srun names all the same, but "
                             "launch.srun_layout is restate (the line names every one); set srun_layout: header")
        if self.launch.gpu_bind != "map" and self.launcher != "srun":
            raise ValueError(f"launch.gpu_bind: how srun binds GPUs to tasks, but the launcher is {self.launcher}")
        if self.launch.gpu_bind != "map" and self.launch.gpu_visibility == "node":
            raise ValueError(f"launch.gpu_bind: {self.launch.gpu_bind} binds each task to its own GPUs, but "
                             "launch.gpu_visibility is node (every task sees every GPU); keep one")
        if self.launch.gpu_bind == "wrapper" and not (self.launch.wrapper or self.launch.gpu_wrapper):
            raise ValueError("launch.gpu_bind: wrapper says the centre's launch wrapper binds each rank's GPU, but "
                             "launch.wrapper and launch.gpu_wrapper name none; name the wrapper there")
        if self.launch.gpu_bind == "closest" and self.defaults.gpu_request == "none":
            raise ValueError("launch.gpu_bind: closest binds the GPUs Slurm allocates, but defaults.gpu_request is "
                             "none (the job asks none)")
        if self.launch.threads_request == "hint" and self.launcher != "srun":
            raise ValueError(f"launch.threads_request: hint is srun's and sbatch's --hint=nomultithread, but the "
                             f"launcher is {self.launcher}")
        if self.launch.threads_request == "hint" and not any(
                k.cpus_per_core < k.threads_per_core for k in self.node_kinds.values()):
            # the hint is written only where -c counts fewer threads than a core has; elsewhere it would be
            # dropped in silence, and the centre's --hint=nomultithread with it
            raise ValueError("launch.threads_request: hint asks one hardware thread per core where the site's Slurm "
                             "counts cores on an SMT node, but no node kind does (none has threads_per_core 2 or more "
                             "with scheduler_cpus_per_core: 1), so no line would carry it; say "
                             "scheduler_cpus_per_core: 1 where the centre's jobs ask --hint=nomultithread")
        if self.launch.hostfile and (self.launcher != "mpirun" or self.scheduler not in ("pbs", "lsf")):
            raise ValueError(f"launch.hostfile: the PBS or LSF host file given to Open MPI's mpirun, but the "
                             f"launcher is {self.launcher} under {self.scheduler}")
        if self.launch.srun_mpi and self.launcher != "srun":
            raise ValueError(f"launch.srun_mpi: an srun setting, but the launcher is {self.launcher}")
        if self.launch.srun_mpi and any(a == "--mpi" or a.startswith("--mpi=") for a in self.launch.args):
            raise ValueError("launch.srun_mpi: launch.args name a --mpi too; keep one (launch.srun_mpi)")
        if self.launcher == "srun" and (bind := srun_cpu_bind_of(self.launch.args)) is not None:
            # the centre's own word on binding is kept only where it is none: the ranks then bind themselves to
            # the plan's cores; or cores beside ranks that find their cores near their GPU (rank_cpus: gpu-local),
            # each rank replacing the whole cores srun bound its task to with whole cores near its GPU; any other
            # binding is the plan's to say (hpcdl writes it, or cpu_bind_default)
            if bind == "cores" and self.launch.rank_cpus == "gpu-local":
                if self.launch.cpu_bind_default:
                    raise ValueError(f"launch.cpu_bind_default: {self.launch.cpu_bind_default} says the line names no "
                                     "--cpu-bind, but launch.args say --cpu-bind=cores; keep one")
                if self.launch.spawner != "none":
                    raise ValueError(f"launch.spawner: {self.launch.spawner} starts one task per node and binds none, "
                                     "but launch.args say --cpu-bind=cores, a binding of a task per rank; keep one")
            elif "none" not in bind.split(","):
                raise ValueError(f"launch.args: --cpu-bind={bind}: hpcdl writes the binding srun gives each task from "
                                 "the plan (or none at all with launch.cpu_bind_default); only none, srun binding no "
                                 "task and each rank binding itself to its cores, is kept as the centre writes it, "
                                 "and cores beside launch.rank_cpus: gpu-local, each rank replacing it with whole "
                                 "cores near its GPU")
            elif self.launch.line_asks_no_binding:
                raise ValueError(f"launch.cpu_bind_default: {self.launch.cpu_bind_default}, the line asking no binding, "
                                 "and launch.args say --cpu-bind=none too; keep one")
            elif self.launch.cpu_bind_default:
                raise ValueError("launch.cpu_bind_default: the site's Slurm binding tasks by itself, but launch.args "
                                 "say --cpu-bind=none; keep one")
        if self.launcher == "mpirun" and (bind := mpirun_option_of(self.launch.args, "bind-to")) is not None:
            # as for srun's --cpu-bind: the centre's own word is kept only where it is none (PSC's Bridges-2 lines)
            if bind != "none":
                raise ValueError(f"launch.args: --bind-to {bind}: hpcdl writes the binding mpirun gives each rank from "
                                 "the plan; only none, mpirun binding no rank and each rank binding itself to its "
                                 "cores, is kept as the centre writes it")
        if self.launch.rank_cpus == "gpu-local" and not self._line_names_no_binding():
            raise ValueError(
                f"launch.rank_cpus: gpu-local has each rank choose its CPUs at run time, but the {self.launcher} line "
                "binds each task to cores itself; say it names no binding (srun: launch.cpu_bind_default: none, "
                "unstated, or auto or cores where the site's Slurm binds by itself, or --cpu-bind=none in "
                "launch.args; mpirun: --bind-to none in launch.args, or mpirun_layout: count), or keep rank_cpus: plan")
        if self.defaults.gpu_ids is not None:
            if self.scheduler == "slurm":
                raise ValueError("defaults.gpu_ids: uuid names a job's GPUs where the batch system is not Slurm, but "
                                 "the scheduler is slurm, which names them itself (SLURM_JOB_GPUS); leave it out")
            other = [name for name, kind in self.node_kinds.items() if any(g.vendor != "nvidia" for g in kind.gpus)]
            if other:
                raise ValueError(f"defaults.gpu_ids: uuid finds a GPU by its UUID in the NVIDIA driver's "
                                 f"/proc/driver/nvidia, but node kind {other[0]} has GPUs of another vendor")
        if (self.launch.rank_cpus == "gpu-local" and self.scheduler != "slurm" and not self.defaults.exclusive
                and self.defaults.gpu_ids is None):
            # a rank learns which of its node's GPUs its job holds from Slurm alone (SLURM_STEP_GPUS, SLURM_JOB_GPUS:
            # node-wide ids); elsewhere it takes the plan's GPU i as the node's i-th, which on a node jobs share may be
            # another job's, and would bind near that one (PBS's cgroup hook names a job's GPUs by UUID in
            # CUDA_VISIBLE_DEVICES, while sysfs lists every GPU of the node)
            raise ValueError(
                f"launch.rank_cpus: gpu-local has each rank find the node's GPU it drives among all the node's GPUs, "
                f"but under {self.scheduler} a job on a shared node (defaults.exclusive: false) may hold other GPUs "
                "than the node's first, which only Slurm's SLURM_JOB_GPUS names; keep rank_cpus: plan, take whole "
                "nodes (defaults.exclusive: true), or say how the batch system names them (defaults.gpu_ids: uuid)")
        if self.launch.spawner != "none":
            self._spawner_fits()
        if self.launch.spawner_rendezvous != "c10d" and self.launch.spawner != "torchrun":
            raise ValueError(f"launch.spawner_rendezvous: {self.launch.spawner_rendezvous} is how torchrun's nodes "
                             f"meet, but launch.spawner is {self.launch.spawner}; set spawner: torchrun or leave "
                             "spawner_rendezvous out")
        if self.launch.spawner_one_node != "rendezvous" and self.launch.spawner != "torchrun":
            raise ValueError(f"launch.spawner_one_node: {self.launch.spawner_one_node} is how torchrun meets a node's "
                             f"workers, but launch.spawner is {self.launch.spawner}; set spawner: torchrun or leave "
                             "spawner_one_node out")
        if (self.launch.master_addr_env or self.launch.master_port_env) and self.scheduler != "slurm":
            which = "launch.master_addr_env" if self.launch.master_addr_env else "launch.master_port_env"
            raise ValueError(f"{which}: a variable a Slurm job prolog sets, but the scheduler is {self.scheduler}")
        if self.launch.master_addr_env and (self.launch.master_addr != "host-name" or self.launch.master_addr_suffix):
            raise ValueError(f"launch.master_addr_env: the rendezvous host is the site prolog's "
                             f"${self.launch.master_addr_env}, but launch.master_addr or master_addr_suffix names "
                             f"it another way; keep one")
        if self.launch.master_port_env and (self.launch.master_port is not None or self.launch.master_port_command):
            raise ValueError(f"launch.master_port_env: the rendezvous port is the site prolog's "
                             f"${self.launch.master_port_env}, but launch.master_port or master_port_command gives "
                             f"it too; keep one")
        if (self.launch.master_port_base is None) != (self.launch.master_port_span is None):
            given = "launch.master_port_base" if self.launch.master_port_base is not None else "launch.master_port_span"
            raise ValueError(f"{given}: a port from the job id is base + the id mod span; give both "
                             "launch.master_port_base and launch.master_port_span")
        if self.launch.master_port_base is not None:
            top = self.launch.master_port_base + self.launch.master_port_span - 1
            if top > 65535:
                raise ValueError(f"launch.master_port_span: base {self.launch.master_port_base} + span "
                                 f"{self.launch.master_port_span} reaches port {top}, past the last, 65535")
            other = next((name for name, value in (("launch.master_port", self.launch.master_port),
                                                   ("launch.master_port_command", self.launch.master_port_command),
                                                   ("launch.master_port_env", self.launch.master_port_env)) if value),
                         None)
            if other:
                raise ValueError(f"launch.master_port_base: a port from the job id, but {other} gives the port "
                                 "another way; keep one")
        if self.launch.master_port_command and self.launch.master_port is not None:
            raise ValueError("launch.master_port_command: a port the centre's command picks, but launch.master_port "
                             f"fixes it at {self.launch.master_port}; keep one")
        for what, words in (("launch.args", self.launch.args), ("launch.command", self.launch.command),
                            ("launch.master_port_command", self.launch.master_port_command),
                            ("launch.wrapper", self.launch.wrapper), ("launch.gpu_wrapper", self.launch.gpu_wrapper),
                            ("container.args", self.container.args),
                            ("container.modules", self.container.modules),
                            ("container.gpu_modules", self.container.gpu_modules or ())):
            for i, w in enumerate(words):
                if not w or any(c in w for c in "\n\r\0"):
                    raise ValueError(f"{what}[{i}]: {w!r} is not one argument word")
        environment = self.environment
        if environment is not None:
            for kind in environment.node_kinds:
                if kind not in self.node_kinds:
                    raise ValueError(f"environment.node_kinds: {kind!r} is not one of {sorted(self.node_kinds)}")
        for where, env in self._environments():
            if where != "environment" and env.node_kinds:
                raise ValueError(f"{where}.node_kinds: a node kind's own environment serves that kind alone; "
                                 f"leave node_kinds out")
            if env.kind == "container" and self.runtime == "none":
                raise ValueError(f"{where}: a container environment needs a container runtime (runtime)")
            if env.kind == "uenv" and self.launcher != "srun":
                raise ValueError(f"{where}: a uenv starts through srun --uenv; the launcher is " + self.launcher)
            if env.overlays and self.runtime not in ("apptainer", "singularity"):
                raise ValueError(f"{where}.overlays: --overlay is Apptainer's and Singularity's; the runtime is "
                                 f"{self.runtime}")
            if env.module_env and not (env.modules or self.modules.runtime or self.modules.load):
                raise ValueError(f"{where}.module_env: no module is loaded that could set "
                                 f"${env.module_env[0]} ({where}.modules, modules.runtime, modules.load)")
        if self.container.workdir is not None and self.runtime not in ("apptainer", "singularity"):
            raise ValueError(f"container.workdir: --workdir is Apptainer's and Singularity's; the runtime is "
                             f"{self.runtime}")
        for name in self.container.system_bound_env:
            if name not in {*ALWAYS_SET, *self.provides_env}:
                raise ValueError(f"container.system_bound_env.{name}: not a variable every job has (provides_env, or "
                                 f"{', '.join(ALWAYS_SET)}): add `provides_env: [{name}]` where the centre sets it")
        if self.container.system_binds and self.runtime not in ("apptainer", "singularity"):
            raise ValueError(f"container.system_binds: the folders apptainer.conf's `bind path` binds; the runtime is "
                             f"{self.runtime}")
        if self.container.command != "exec" and self.runtime not in ("apptainer", "singularity"):
            raise ValueError(f"container.command: {self.container.command} is an Apptainer and Singularity subcommand; "
                             f"the runtime is {self.runtime}")
        if self.container.nvidia != "nv" and self.runtime not in ("apptainer", "singularity"):
            raise ValueError(f"container.nvidia: --{self.container.nvidia} is Apptainer's and Singularity's; the "
                             f"runtime is {self.runtime}")
        if self.runtime == "container-engine" and self.launcher != "srun":
            raise ValueError("runtime: the container engine starts through srun --environment; the launcher is "
                             + self.launcher)
        if self.runtime == "pyxis":
            self._pyxis_fits()
        if self.filesystems.node_local_gres is not None and self.scheduler != "slurm":
            raise ValueError(f"filesystems.node_local_gres: --gres is Slurm's request; the scheduler is {self.scheduler}")
        needs = LAUNCHER_NEEDS.get(self.launcher)
        if needs and self.scheduler not in needs:
            raise ValueError(
                f"launcher: {self.launcher} runs under {' or '.join(needs)}, not under scheduler {self.scheduler}"
            )
        self._cpu_counting_stated()
        return self

    def _pyxis_fits(self) -> None:
        """runtime: pyxis: its words (--container-image, --container-mounts, --container-workdir) are srun's own
        options, added by the pyxis SPANK plugin ("the new command-line arguments it introduces are directly added to
        srun", NVIDIA/pyxis wiki, Usage): only srun under Slurm takes them, and only on its own option list."""
        if self.launcher != "srun" or self.scheduler != "slurm":
            raise ValueError(f"runtime: pyxis's --container-image is an option of srun (a Slurm SPANK plugin); the "
                             f"launcher is {self.launcher} under scheduler {self.scheduler}")
        for field, words in (("launch.wrapper", self.launch.wrapper), ("launch.gpu_wrapper", self.launch.gpu_wrapper)):
            if words:
                raise ValueError(f"{field}: under runtime pyxis the container words are srun's own options, which "
                                 f"must come before any command; a wrapper between srun and them would take them as "
                                 f"its own arguments")
        value = self.env.get("LD_LIBRARY_PATH")
        if value is not None and not isinstance(value, str):
            raise ValueError("env.LD_LIBRARY_PATH: pyxis has no option that puts host folders on the container's "
                             "library path (its --container-mounts only binds them); name no prepend/append under it")

    def _line_names_no_binding(self) -> bool:
        """The launch line names no binding of hpcdl's, so each rank binds itself: srun under a per-node spawner (one
        task holding the node's CPUs), a bare srun whose site binds none or does not say (cpu_bind_default none,
        unstated) or binds each task by its own default (auto, cores: Slurm's default binding, which each rank
        replaces with its own, as it replaces Open MPI's under mpirun_layout: count), the centre's own
        --cpu-bind=none or --cpu-bind=cores (whole cores, which each rank replaces with whole cores near its GPU),
        or Open MPI's mpirun with the centre's --bind-to none or a line of the rank count alone
        (mpirun_layout: count: no binding word, Open MPI's default binding, which each rank replaces with its own, as
        it does plan.json's cores there)."""
        if self.launcher == "srun":
            return (self.launch.spawner != "none" or self.launch.srun_binds_no_task
                    or self.launch.slurm_binds_tasks or self.launch.srun_centre_binds_cores)
        return self.launcher == "mpirun" and (self.launch.mpirun_binds_no_rank
                                              or self.launch.mpirun_layout == "count")

    def _spawner_fits(self) -> None:
        """launch.spawner: srun starts one task per node, and a per-node launcher spawns the node's ranks: the one
        task holds the node's GPUs for its ranks to pick from, and nothing binds a rank but the rank itself."""
        spawner = self.launch.spawner
        if self.launcher != "srun" or self.scheduler != "slurm":
            raise ValueError(f"launch.spawner: {spawner} is started once per node by srun under Slurm, but the launcher "
                             f"is {self.launcher} under {self.scheduler}")
        if any(k.gpus for k in self.node_kinds.values()) and self.launch.gpu_visibility != "node":
            raise ValueError(f"launch.spawner: {spawner}'s ranks share one task's GPUs, each driving its own by the plan, "
                             "but launch.gpu_visibility is per-rank; set gpu_visibility: node")
        if self.defaults.gpu_request == "gpus-per-task":
            raise ValueError(f"launch.spawner: {spawner} runs one task per node holding the node's GPUs, but "
                             "defaults.gpu_request: gpus-per-task asks them per rank; ask them per node or per job")
        if self.defaults.batch_request != "tasks":
            raise ValueError(f"launch.spawner: {spawner} asks one task per node in the #SBATCH header, but "
                             f"defaults.batch_request is {self.defaults.batch_request}; keep one")
        if self.launch.slurm_binds_tasks:
            raise ValueError(f"launch.spawner: {spawner}'s ranks share one task and bind themselves to their cores, but "
                             f"launch.cpu_bind_default: {self.launch.cpu_bind_default} says Slurm binds each rank's task")
        if self.launch.wrapper or self.launch.gpu_wrapper:
            raise ValueError(f"launch.spawner: {spawner} starts the ranks, so a per-rank launch.wrapper or gpu_wrapper "
                             "between srun and the rank has no rank to wrap; keep one")
        if self.defaults.tasks_per_socket or self.defaults.cpu_request == "cpus-per-gpu":
            raise ValueError(f"launch.spawner: {spawner} asks one task per node, but defaults.tasks_per_socket or "
                             "defaults.cpu_request: cpus-per-gpu lay out a task per rank; keep one")

    def _cpu_bind_unit_fits(self) -> None:
        """launch.cpu_bind_unit names the word of a binding hpcdl writes on srun's line: refused where the line has
        none of hpcdl's (another launcher, the site's Slurm binding by itself, the centre's --cpu-bind=none, a
        per-node spawner)."""
        unit = self.launch.cpu_bind_unit
        if self.launcher != "srun":
            raise ValueError(f"launch.cpu_bind_unit: {unit} is srun's --cpu-bind={unit}, but the launcher is "
                             f"{self.launcher}")
        if self.launch.cpu_bind_default:
            raise ValueError(f"launch.cpu_bind_unit: {unit} names the binding word srun is given, but "
                             f"launch.cpu_bind_default: {self.launch.cpu_bind_default} says the line names none; keep one")
        if srun_cpu_bind_of(self.launch.args) is not None:
            raise ValueError(f"launch.cpu_bind_unit: {unit} names the binding word srun is given, but launch.args "
                             f"say --cpu-bind={srun_cpu_bind_of(self.launch.args)}; keep one")
        if self.launch.spawner != "none":
            raise ValueError(f"launch.cpu_bind_unit: {unit} names the binding word of a task per rank, but "
                             f"launch.spawner: {self.launch.spawner} starts one task per node and binds none; keep one")

    def _srun_layout_header_fits(self) -> None:
        """launch.srun_layout: header leaves tasks, CPUs and GPUs to the #SBATCH header: the header must ask them,
        and nothing may bind a task's GPUs but the plan."""
        if self.launcher != "srun":
            raise ValueError(f"launch.srun_layout: header is a bare srun under an #SBATCH header, but the launcher "
                             f"is {self.launcher}")
        if self.defaults.batch_request != "tasks":
            raise ValueError(f"launch.srun_layout: header takes the ranks' tasks and CPUs from the #SBATCH header, but "
                             f"defaults.batch_request is {self.defaults.batch_request} (a header that does not ask "
                             "them); keep one")
        if self.defaults.gpu_request == "gpus-per-task":
            # the header's --gpus-per-task reaches the bare srun as SLURM_GPUS_PER_TASK (sbatch(1) OUTPUT, srun(1)
            # INPUT ENVIRONMENT VARIABLES): each task gets its own GPUs, as the centre's line relies on (WarpX's
            # Great Lakes job: '#SBATCH --gpus-per-task=v100:1', 'srun --cpu-bind=cores ${EXE}'), never the node's
            if self.launch.gpu_visibility == "node":
                raise ValueError("launch.srun_layout: header with defaults.gpu_request: gpus-per-task gives each task "
                                 "its own GPUs (the header's --gpus-per-task reaches srun as SLURM_GPUS_PER_TASK), but "
                                 "launch.gpu_visibility is node; ask the GPUs per node or per job, or keep per-rank")
        elif (self.launch.gpu_visibility != "node" and self.launch.gpu_bind != "closest"
                and any(k.gpus for k in self.node_kinds.values())):
            # (srun's --gpu-bind=closest, NCSA's, still picks each task's own among them)
            raise ValueError("launch.srun_layout: header starts every task with the job's GPUs of its node (srun(1): a "
                             "step 'is allocated all of the generic resources that have been requested by the job'), "
                             "but launch.gpu_visibility is per-rank; set gpu_visibility: node")

    def _cpu_counting_stated(self) -> None:
        """On an SMT node the unit of Slurm's -c and PBS ncpus (a core or a hardware thread) decides every CPU
        request, and no default is right everywhere (NERSC counts threads, OLCF and NCAR cores): say it."""
        if self.scheduler not in ("slurm", "pbs"):
            return
        look = {"slurm": "`scontrol show node <node>`: CPUTot", "pbs": "`pbsnodes <node>`: resources_available.ncpus"}
        for name, node in self.node_kinds.items():
            if node.threads_per_core > 1 and node.scheduler_cpus_per_core is None:
                raise ValueError(
                    f"node_kinds.{name}.scheduler_cpus_per_core: the node has {node.threads_per_core} hardware threads "
                    f"per core, so say whether {self.scheduler} counts a core as {node.threads_per_core} CPUs "
                    f"(write {node.threads_per_core}) or as 1 (write 1); {look[self.scheduler]} equal to the node's "
                    f"{node.cores} cores means 1 (docs/sites.md)"
                )

    def _no_srun_binding_in_env(self) -> None:
        """srun reads SLURM_CPU_BIND, SLURM_GPU_BIND and SLURM_DISTRIBUTION as its --cpu-bind, --gpu-bind and
        --distribution (srun(1), INPUT ENVIRONMENT VARIABLES), and the options hpcdl's line writes override them: set
        in `env`, the centre's choice would be silently lost (BSC's MN5 scripts: `export SLURM_CPU_BIND=none`)."""
        if self.launcher != "srun":
            return
        options = {"SLURM_CPU_BIND": "--cpu-bind", "SLURM_GPU_BIND": "--gpu-bind", "SLURM_DISTRIBUTION": "--distribution"}
        where = [("env", self.env), *((f"node_kinds.{k}.env", n.env) for k, n in self.node_kinds.items())]
        for field, env in where:
            for name in sorted(set(env) & set(options)):
                raise ValueError(
                    f"{field}.{name}: srun reads it as {options[name]}, which the launch line hpcdl writes overrides; "
                    f"say the centre's choice as a launch field instead (SLURM_CPU_BIND=none: launch.args: "
                    f"[--cpu-bind=none]; docs/sites.md, launch)"
                )

    def _only_guaranteed_variables(self) -> None:
        """A script may use only variables the scheduler, the login or the profile guarantees: under
        `set -u` any other stops the job before it starts (Frontier's $PROJECT, which OLCF never sets)."""
        known = {*ALWAYS_SET, *self.provides_env, *(k for k in self.env)}
        prefix = SCHEDULER_VARIABLE_PREFIX[self.scheduler]
        places = [("filesystems.scratch", self.filesystems.scratch), ("filesystems.node_local", self.filesystems.node_local),
                  ("filesystems.tmpdir", self.filesystems.tmpdir),
                  ("modules.init", self.modules.init), *((f"modules.use[{i}]", p) for i, p in enumerate(self.modules.use)),
                  ("container.workdir", self.container.workdir)]
        for name, value in self.env.items():
            if isinstance(value, EnvPath):
                if value.path is not None and name == "LD_LIBRARY_PATH":
                    # a container runtime binds the library folders a profile adds around the host's own
                    raise ValueError("env.LD_LIBRARY_PATH: path would replace the library path whole; give the "
                                     "folders as prepend or append (docs/sites.md, env)")
                places += [(f"env.{name}", p) for p in (*value.prepend, *value.append, *(value.path or "",)) if p]
        # the site's environment and each node kind's own: an image is named on the launch line, after the job's
        # modules load, so it may also use what they set (module_env, for that environment's image alone)
        also: dict[str, set[str]] = {}
        for where, environment in self._environments():
            if environment.init:
                places.append((f"{where}.init", environment.init))
            if environment.image:
                places.append((f"{where}.image", environment.image))
                also[f"{where}.image"] = set(environment.module_env)
            for i, overlay in enumerate(environment.overlays):
                places.append((f"{where}.overlays[{i}]", overlay))
                also[f"{where}.overlays[{i}]"] = set(environment.module_env)
        for field, text in places:
            for var in variables_in(text or ""):
                if var not in known | also.get(field, set()) and not var.startswith(prefix) \
                        and not var.startswith("DW_JOB_"):
                    hint = (f"; for the project write {PROJECT_PLACEHOLDER}, which takes the account at render time"
                            if "PROJ" in var.upper() or "ACCOUNT" in var.upper() else "")
                    if field.endswith("environment.image"):
                        hint += (f"; if a module the job loads sets it (UVA's $CONTAINERDIR), add "
                                 f"`{field.removesuffix('.image')}.module_env: [{var}]`")
                    # (profiles written before this check loaded; the message says the one-line fix)
                    raise ValueError(
                        f"{field}: ${var} is set neither by {self.scheduler} nor by the login, and under set -u an "
                        f"unset variable stops the job; if the centre sets it in every job shell (TACC's and NERSC's "
                        f"$SCRATCH), add `provides_env: [{var}]` to the profile, else write the path without it{hint}"
                    )

    def job_defaults(self, kind: str | None = None) -> Defaults:
        """The site's `defaults` with the node kind's own partition, qos, constraint and directives."""
        _, node = self.node_kind(kind)
        # the fields as they were validated (a dump would hand on the queues by size as plain dicts)
        own = {name: value for name in type(node.defaults).model_fields
               if (value := getattr(node.defaults, name)) is not None}
        return self.defaults.model_copy(update=own) if own else self.defaults

    def _environments(self) -> list[tuple[str, SiteEnvironment]]:
        """The centre's own environments, each with the field that names it: the site's, then each node kind's."""
        named = [("environment", self.environment),
                 *((f"node_kinds.{name}.environment", kind.environment) for name, kind in self.node_kinds.items())]
        return [(where, env) for where, env in named if env is not None]

    def environment_for(self, kind: str | None = None) -> SiteEnvironment | None:
        """The centre's own environment on node kind `kind`: the kind's own (`node_kinds.<kind>.environment`),
        else the site's where it serves the kind (its `node_kinds` empty or naming it), else none."""
        name, node = self.node_kind(kind)
        if node.environment is not None:
            return node.environment
        env = self.environment
        return env if env is not None and (not env.node_kinds or name in env.node_kinds) else None

    def node_kind(self, name: str | None = None) -> tuple[str, NodeKind]:
        from hpcdl.errors import HpcdlError

        name = name or self.default_node_kind or next(iter(self.node_kinds))
        if name not in self.node_kinds:
            raise HpcdlError(
                f"node kind {name!r} is not in site {self.name!r}; it has: {', '.join(sorted(self.node_kinds))}"
            )
        return name, self.node_kinds[name]
