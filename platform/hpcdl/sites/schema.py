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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gpu(_Strict):
    """One GPU (or one AMD GCD, which the OS shows as a GPU) and the socket it hangs off."""

    model: str
    socket: int = Field(ge=0)
    vendor: GpuVendor = "nvidia"
    memory_gb: float | None = Field(default=None, gt=0)


class Nic(_Strict):
    """One network port ranks can use: an IB HCA port, an OPA HFI, a Slingshot or Aries NIC."""

    kind: NicKind
    device: str = Field(description="verbs/HFI/CXI device name, e.g. mlx5_0, hfi1_0, cxi0, eth0")
    port: int = Field(default=1, ge=1)
    socket: int = Field(ge=0)
    netdev: str | None = Field(default=None, description="IP interface on this NIC, e.g. ib0, hsn0")
    gbit_s: float | None = Field(default=None, gt=0)


class NodeKind(_Strict):
    """One kind of compute node. Core numbers count physical cores across the node, socket 0 first."""

    description: str = ""
    count: int | None = Field(default=None, ge=1, description="nodes of this kind in the machine")
    cpu_model: str = ""
    cpu_target: str = Field(default="x86_64", description="archspec name: knl, skylake_avx512, power9le, zen3 ...")
    sockets: int = Field(ge=1)
    cores_per_socket: int = Field(ge=1)
    threads_per_core: int = Field(default=1, ge=1)
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
    reserved_cores_per_socket: int = Field(
        default=0, ge=0, description="cores per socket left to the OS, MPI progress and I/O"
    )
    default_ranks_per_socket: int | None = Field(default=None, ge=1)
    default_threads_per_rank: int | None = Field(default=None, ge=1)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def usable_cores_per_socket(self) -> int:
        return self.cores_per_socket - self.reserved_cores_per_socket

    def cpus_of_core(self, core: int) -> tuple[int, ...]:
        """Linux logical CPU ids of all hardware threads of physical core `core`."""
        if self.cpu_numbering == "core-major":
            return tuple(core * self.threads_per_core + t for t in range(self.threads_per_core))
        return tuple(t * self.cores + core for t in range(self.threads_per_core))

    @model_validator(mode="after")
    def _devices_on_real_sockets(self) -> "NodeKind":
        for what, devices in (("gpus", self.gpus), ("nics", self.nics)):
            for i, dev in enumerate(devices):
                if dev.socket >= self.sockets:
                    raise ValueError(
                        f"{what}[{i}] is on socket {dev.socket} but the node has {self.sockets} socket(s)"
                    )
        if self.reserved_cores_per_socket >= self.cores_per_socket:
            raise ValueError("reserved_cores_per_socket must leave at least one core per socket")
        return self


class Filesystems(_Strict):
    scratch: str | None = Field(default=None, description="shared parallel filesystem for data and results")
    node_local: str | None = Field(
        default=None, description="node-local storage for staged data, e.g. /mnt/bb/$USER on Summit"
    )
    node_local_kind: Literal["nvme", "ssd", "tmpfs", "burst-buffer", "ramdisk"] | None = None


class Modules(_Strict):
    system: Literal["lmod", "tcl", "none"] = "lmod"
    init: str | None = Field(default=None, description="script to source so `module` exists in batch jobs")
    load: tuple[str, ...] = Field(default=(), description="modules every hpcdl job loads")
    runtime: str | None = Field(default=None, description="module that provides the container runtime")


class Defaults(_Strict):
    partition: str | None = None
    account: str | None = None
    time: str = "00:30:00"
    constraint: str | None = None
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
                f"default_node_kind {self.default_node_kind!r} is not one of {sorted(self.node_kinds)}"
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
