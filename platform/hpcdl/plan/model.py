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

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def local_ranks(self) -> tuple[RankPlacement, ...]:
        """The placements of node 0; every node has the same layout."""
        return tuple(r for r in self.ranks if r.node == 0)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["world_size"] = self.world_size
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        data = dict(data)
        data.pop("world_size", None)
        ranks = tuple(
            RankPlacement(**{**r, "cores": tuple(r["cores"]), "cpus": tuple(r["cpus"]), "gpus": tuple(r["gpus"])})
            for r in data.pop("ranks")
        )
        return cls(
            **{**data, "ranks": ranks, "launcher_argv": tuple(data["launcher_argv"]), "notes": tuple(data.get("notes", ()))}
        )
