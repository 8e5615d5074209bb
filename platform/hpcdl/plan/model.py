"""The plan as data. Renderers and executors only read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hpcdl.plan.runtime import RuntimeChoice


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
    # values built from other variables, expanded by the job shell: {name: {"prepend": [...], "append": [...]}}
    env_paths: dict[str, dict] = field(default_factory=dict)
    # what the ranks run in and where their framework, MPI and network plugin come from (hpcdl.plan.runtime)
    runtime: RuntimeChoice | None = None
    # pretend nodes that share one host (a test cluster, the node kind's nodes_per_host): each node's CPU
    # ids are the same host CPUs, so a job over several of them must not pin by them (train/binding.py)
    nodes_per_host: int = 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def local_ranks(self) -> tuple[RankPlacement, ...]:
        """The placements of node 0; every node has the same layout."""
        return tuple(r for r in self.ranks if r.node == 0)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["world_size"] = self.world_size
        if self.spatial is None:
            data.pop("spatial")  # plans without spatial parallelism read as they always have
        for name in ("modules", "env_paths", "runtime"):
            if not data[name]:
                data.pop(name)  # nor do plans without these
        if self.nodes_per_host == 1:
            data.pop("nodes_per_host")  # every real machine's node is a host of its own
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
               "env_paths": {k: {"prepend": list(v.get("prepend", ())), "append": list(v.get("append", ()))}
                             for k, v in data.get("env_paths", {}).items()}}
        )
