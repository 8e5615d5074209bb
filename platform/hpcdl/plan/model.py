"""The plan as data. Renderers and executors only read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank runs and how it is tuned."""

    rank: int
    node: int
    local_rank: int
    socket: int
    cores: tuple[int, ...]  # physical cores, numbered across the node (socket 0 first)
    cpus: tuple[int, ...]  # Linux logical CPUs of those cores (what affinity masks use)
    gpus: tuple[int, ...]
    nic: str | None  # "mlx5_0:1" style device:port, or None
    omp_num_threads: int
    env: dict[str, str] = field(default_factory=dict)  # settings that differ between local ranks


@dataclass(frozen=True)
class SpatialLayout:
    """Ranks as a grid of data-parallel groups x spatial groups (Dryden, Maruyama et al. 2019).

    Each spatial group shares every sample, one slab per rank, and sits inside one node on
    neighbouring ranks (the nearest GPUs: halo exchange every layer wants the fastest links);
    the groups are data-parallel replicas, whose gradient all-reduce crosses the nodes.
    """

    ways: int
    split: str  # rows | rows_and_columns
    grid: tuple[int, int]  # slabs: rows x columns
    groups: tuple[tuple[int, ...], ...]  # the global ranks of each spatial group, in slab order

    @property
    def data_parallel_groups(self) -> int:
        return len(self.groups)

    def group_of(self, rank: int) -> tuple[int, int]:
        """(spatial group, slab index) of a rank."""
        for g, members in enumerate(self.groups):
            if rank in members:
                return g, members.index(rank)
        raise ValueError(f"rank {rank} is in no spatial group")


#: kinds of runtime, as the plan names them
IMAGE, USER_IMAGE, SITE_CONTAINER = "image", "user-image", "site-container"
NATIVE_KINDS = ("modules", "conda", "uenv", "venv")
REFUSED = "refused"

#: the CSCS container engine's hook annotation that mounts the host's aws-ofi-nccl plugin (CSCS EDF docs)
CE_PLUGIN_HOOK = "com.hooks.aws_ofi_nccl.enabled"
#: where the plan says the plugin comes from when that hook brings it. The hook also sets NCCL's and
#: libfabric's Slingshot settings in the container ("It sets environment variables to control the behavior
#: of NCCL and the libfabric CXI provider", CSCS "Container Engine"; "the container engine sets these
#: automatically when using the NCCL hook", CSCS "NCCL"), so the job leaves them to it.
CE_HOOK_PLUGIN = f"the container engine's aws_ofi_nccl hook ({CE_PLUGIN_HOOK})"


@dataclass(frozen=True)
class RuntimeChoice:
    """What a job of one node kind runs in, and where its pieces come from, in words: data of the plan
    (Plan.runtime), which hpcdl.plan.runtime decides."""

    kind: str  # image | user-image | site-container | modules | conda | uenv | venv | refused
    runtime: str  # the container runtime that runs it; "none" outside a container
    image: str | None = None  # the hpcdl image's name, or the image reference the site or the user names
    framework_from: str = ""
    mpi_from: str = ""
    net_plugin_from: str | None = None  # None: no plugin reaches the ranks (or none is needed)
    net_plugin_library: str | None = None  # NCCL_NET_PLUGIN for a plugin built into an hpcdl image
    verdict: str = ""  # the compatibility check's word on it
    refusal: str | None = None  # one line naming what would serve the request, when nothing does
    modules: tuple[str, ...] = ()  # the centre's modules the job loads for it (conda, open-ce, ...)

    @property
    def in_container(self) -> bool:
        return self.runtime != "none"

    @property
    def plugin_sets_its_env(self) -> bool:
        """Whether what brings the plugin also sets the plugin's NCCL and libfabric settings (the
        container engine's hook), so the job sets none of them itself."""
        return self.net_plugin_from == CE_HOOK_PLUGIN

    def describe(self) -> list[str]:
        """The plan's words on it, one line each (hpcdl plan prints them)."""
        if self.refusal:
            return [f"runtime: refused: {self.refusal}"]
        what = {IMAGE: f"hpcdl image {self.image}", USER_IMAGE: f"image {self.image}",
                SITE_CONTAINER: f"the centre's container {self.image}"}.get(self.kind, f"the centre's {self.kind}")
        where = f" with {self.runtime}" if self.in_container else ""
        return [f"runtime: {what}{where} ({self.verdict})", f"framework from {self.framework_from}",
                f"MPI from {self.mpi_from}",
                f"network plugin from {self.net_plugin_from}" if self.net_plugin_from else "network plugin: none"]


@dataclass(frozen=True)
class PathValue:
    """A variable whose value the job shell builds from other variables (a profile's `env` entry given
    as `{path: ...}` or `{prepend: [...], append: [...]}`): one whole path, or folders put before and
    after the variable's own value, which joins only when it is set."""

    path: str | None = None  # the whole value, its $NAME references expanded
    prepend: tuple[str, ...] = ()  # folders before the variable's own value
    append: tuple[str, ...] = ()  # folders after it

    def to_dict(self) -> dict:
        """plan.json's shape: {"path": ...} or {"prepend": [...], "append": [...]}."""
        if self.path is not None:
            return {"path": self.path}
        return {"prepend": list(self.prepend), "append": list(self.append)}

    @classmethod
    def from_dict(cls, data: dict) -> "PathValue":
        if data.get("path") is not None:
            return cls(path=data["path"])
        return cls(prepend=tuple(data.get("prepend", ())), append=tuple(data.get("append", ())))

    def shown(self, name: str) -> str:
        """The value as a person reads it, `$NAME` standing for the variable's own value."""
        if self.path is not None:
            return self.path
        return ":".join([*self.prepend, f"${name}", *self.append])


@dataclass(frozen=True)
class Plan:
    site: str
    node_kind: str
    nodes: int
    ranks_per_node: int
    framework: str
    mode: str
    distributed: str
    precision: str
    threads_per_rank: int
    ranks: tuple[RankPlacement, ...]
    env: dict[str, str]  # settings shared by every rank
    launcher: str
    launcher_argv: tuple[str, ...]  # the launch line up to (not including) the program
    notes: tuple[str, ...] = ()  # why each choice was made, in words
    spatial: SpatialLayout | None = None  # spatial parallelism: who shares a sample
    modules: tuple[str, ...] = ()  # modules this plan needs beyond the site's (the GTL with GPU-aware MPI)
    # values built from other variables, expanded by the job shell
    env_paths: dict[str, PathValue] = field(default_factory=dict)
    # what the ranks run in and where their framework, MPI and network plugin come from (hpcdl.plan.runtime)
    runtime: RuntimeChoice | None = None
    # shell limits the job raises before it starts the ranks (the profile's launch.ulimit): {"memlock": "unlimited"}
    ulimit: dict[str, str] = field(default_factory=dict)
    # the folder the job makes its TMPDIR (the profile's filesystems.tmpdir), a path the job shell expands
    tmpdir: str | None = None
    # pretend nodes that share one host (a test cluster, the node kind's nodes_per_host): each node's CPU
    # ids are the same host CPUs, so a job over several of them must not pin by them (train/binding.py)
    nodes_per_host: int = 1
    # who starts a node's ranks where srun starts one task per node (the profile's launch.spawner: torchrun, hpcdl),
    # and its words, between the container runtime and the program; None: the launcher starts every rank itself
    spawner: str | None = None
    spawner_argv: tuple[str, ...] = ()
    # how each GPU rank finds its CPUs (the profile's launch.rank_cpus): "plan", the ranks' cpus above; "gpu-local", a
    # share of the CPUs the node reports nearest its GPU, found at run time (train/binding.py), the ranks' cpus empty
    rank_cpus: str = "plan"
    # how a gpu-local rank learns which of its node's GPUs its job holds where the batch system is not Slurm (the
    # profile's defaults.gpu_ids): "uuid", CUDA_VISIBLE_DEVICES naming them by UUID; None: Slurm's ids, or every GPU
    gpu_ids: str | None = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def local_ranks(self) -> tuple[RankPlacement, ...]:
        """The placements of node 0; every node has the same layout."""
        return tuple(r for r in self.ranks if r.node == 0)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["world_size"] = self.world_size
        data["env_paths"] = {name: value.to_dict() for name, value in self.env_paths.items()}
        if self.spatial is None:
            data.pop("spatial")  # plans without spatial parallelism read as they always have
        for name in ("modules", "env_paths", "runtime", "ulimit", "tmpdir", "spawner", "spawner_argv", "gpu_ids"):
            if not data[name]:
                data.pop(name)  # nor do plans without these
        if self.nodes_per_host == 1:
            data.pop("nodes_per_host")  # every real machine's node is a host of its own
        if self.rank_cpus == "plan":
            data.pop("rank_cpus")  # nor do plans whose ranks bind to the cores they are given
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        data = dict(data)
        data.pop("world_size", None)
        ranks = tuple(
            RankPlacement(**{**r, "cores": tuple(r["cores"]), "cpus": tuple(r["cpus"]), "gpus": tuple(r["gpus"])})
            for r in data.pop("ranks")
        )
        spatial = data.pop("spatial", None)
        runtime = data.pop("runtime", None)
        runtime = RuntimeChoice(**{**runtime, "modules": tuple(runtime.get("modules", ()))}) if runtime else None
        if spatial:
            spatial = SpatialLayout(spatial["ways"], spatial["split"], tuple(spatial["grid"]),
                                    tuple(tuple(g) for g in spatial["groups"]))
        return cls(
            **{**data, "ranks": ranks, "launcher_argv": tuple(data["launcher_argv"]), "notes": tuple(data.get("notes", ())),
               "spatial": spatial, "runtime": runtime, "modules": tuple(data.get("modules", ())),
               "env_paths": {name: PathValue.from_dict(v) for name, v in data.get("env_paths", {}).items()},
               "ulimit": dict(data.get("ulimit", {})), "spawner_argv": tuple(data.get("spawner_argv", ()))}
        )
