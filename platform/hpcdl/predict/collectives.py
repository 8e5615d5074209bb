"""Allreduce time: the alpha-beta (latency-bandwidth) models of the algorithms libraries use.

Notation: p ranks, n bytes per rank, alpha seconds per message, beta seconds per byte of the
link a rank sends on, gamma seconds per byte the rank reduces (adds into its buffer). Costs
follow Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH" (IJHPCA 2005; MPICH's allreduce.c cost comments) and Patarasuk & Yuan 2009
(bandwidth-optimal ring). gamma matters where one CPU core does the adding (an MPI or gloo
rank); a GPU adds at its memory speed, so NCCL's gamma is near zero.

- ring:                 2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma   (NCCL Ring, gloo, MPI long); over
  N nodes of g ranks laid out node by node, 2(N-1) of the steps pay the network's alpha and 2(p-N)
  the node's own link's (NCCL's tuning model, src/graph/tuning.cc; `ring_over_nodes`)
- recursive doubling:   lg p (alpha + n beta + n gamma)                      (MPI short messages)
- Rabenseifner:         2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma    (MPI long, halving/doubling)
- double binary tree:   2 lg p alpha + 2 n beta + n gamma                    (NCCL Tree, Sanders et al. 2009; each
  rank sends about 2n over the two pipelined trees, so bandwidth as the ring but without (p-1)/p,
  latency logarithmic: LLNL Aluminum's point that at scale the ring's linear latency dominates)
- hierarchical:         reduce-scatter inside the node (ring over g local ranks), allreduce of n/g
  across the N nodes (best inter-node algorithm, all g local ranks at once on the node's NICs),
  allgather inside the node (Horovod HOROVOD_HIERARCHICAL_ALLREDUCE; NCCL's inter-node pattern).

A library picks the fastest of the algorithms it has for the message size (NCCL's tuner,
MPICH/Open MPI decision tables); so does `best_allreduce`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner", "tree", "hierarchical")

# which algorithms each communication library has (torch.distributed's gloo allreduce is a ring;
# Horovod runs NCCL inside and MPI across nodes when hierarchical, else NCCL or MPI flat)
LIBRARY_ALGORITHMS = {
    "nccl": ("ring", "tree"),
    "mpi": ("ring", "recursive_doubling", "rabenseifner", "hierarchical"),
    "gloo": ("ring",),
    "horovod": ("ring", "tree", "hierarchical"),
}


@dataclass(frozen=True)
class Link:
    """One level of the network as one rank sees it: latency per message and seconds per byte."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float = 0.0
    # an allreduce sweep measured over this link (bytes, seconds), among `measured_ranks` ranks, one per
    # node: where a message falls inside it among as many ranks, its time is read off the sweep, not
    # the alpha-beta line, which a real library's curve bends away from between its ends (protocol
    # switches, TCP's window, a shaper's burst)
    measured: tuple[tuple[float, float], ...] = ()
    measured_ranks: int = 0

    @classmethod
    def of(cls, latency_us: float, gbyte_s: float, reduce_gbyte_s: float | None = None) -> "Link":
        return cls(latency_us * 1e-6, 1.0 / (gbyte_s * 1e9), 1.0 / (reduce_gbyte_s * 1e9) if reduce_gbyte_s else 0.0)

    def measured_time(self, n: float, ranks: int) -> float | None:
        """An n-byte allreduce among `ranks` ranks, linearly between the two measured sizes around n;
        None outside the sweep or for another rank count."""
        if ranks != self.measured_ranks or not self.measured:
            return None
        points = sorted(self.measured)
        if not points[0][0] <= n <= points[-1][0]:
            return None
        for (b0, t0), (b1, t1) in zip(points, points[1:]):
            if b0 <= n <= b1:
                return t0 + (t1 - t0) * (n - b0) / (b1 - b0) if b1 > b0 else t0
        return points[0][1]  # a sweep of one size


@dataclass(frozen=True)
class Topology:
    """Ranks laid out as `nodes` x `ranks_per_node`; `intra` joins ranks of a node, `inter` the nodes.

    `inter` is one NIC as one rank sees it; `rails` NICs per node carry the node's traffic
    side by side (Summit: 4 virtual ports; Stampede2 KNL: 1 Omni-Path HFI).
    """

    nodes: int
    ranks_per_node: int
    intra: Link
    inter: Link
    rails: int = 1

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def inter_per_rank(self, ranks_sharing: int) -> Link:
        """The inter-node link when `ranks_sharing` ranks of a node send at once over its rails."""
        share = max(1.0, ranks_sharing / self.rails)
        return Link(self.inter.alpha_s, self.inter.beta_s_per_byte * share, self.inter.gamma_s_per_byte)

    def flat_link(self) -> Link:
        """The slowest link a flat algorithm over all ranks waits on at each step."""
        if self.nodes == 1:
            return self.intra
        if self.ranks_per_node == 1:
            return self.inter
        # the ranks of a node cross the network together; one rail each at most
        inter = self.inter_per_rank(min(self.ranks_per_node, self.rails))
        return Link(max(self.intra.alpha_s, inter.alpha_s), max(self.intra.beta_s_per_byte, inter.beta_s_per_byte),
                    max(self.intra.gamma_s_per_byte, inter.gamma_s_per_byte))


def _lg(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def ring(n: float, p: int, link: Link) -> float:
    if p <= 1:
        return 0.0
    share = (p - 1) / p * n
    return 2 * (p - 1) * link.alpha_s + 2 * share * link.beta_s_per_byte + share * link.gamma_s_per_byte


def recursive_doubling(n: float, p: int, link: Link) -> float:
    if p <= 1:
        return 0.0
    return _lg(p) * (link.alpha_s + n * link.beta_s_per_byte + n * link.gamma_s_per_byte)


def rabenseifner(n: float, p: int, link: Link) -> float:
    if p <= 1:
        return 0.0
    if p & (p - 1):
        # not a power of two: MPICH first folds the extra ranks in (one more exchange each way)
        return ((2 * math.floor(math.log2(p)) + 2) * link.alpha_s + (2 * (p - 1) / p + 2) * n * link.beta_s_per_byte
                + (1 + (p - 1) / p) * n * link.gamma_s_per_byte)
    share = (p - 1) / p * n
    return 2 * _lg(p) * link.alpha_s + 2 * share * link.beta_s_per_byte + share * link.gamma_s_per_byte


def tree(n: float, p: int, link: Link) -> float:
    if p <= 1:
        return 0.0
    return 2 * _lg(p) * link.alpha_s + 2 * n * link.beta_s_per_byte + n * link.gamma_s_per_byte


FLAT = {"ring": ring, "recursive_doubling": recursive_doubling, "rabenseifner": rabenseifner, "tree": tree}


def ring_reduce_scatter(n: float, p: int, link: Link) -> float:
    """Half a ring allreduce: each rank ends with the sum of its 1/p share (also the allgather's cost)."""
    return ring(n, p, link) / 2


def hierarchical(n: float, topo: Topology, inter_algorithms: tuple[str, ...] = ("ring", "rabenseifner", "tree",
                                                                                  "recursive_doubling")) -> tuple[float, str]:
    """Reduce-scatter inside, allreduce of each 1/g share across nodes, allgather inside."""
    g = topo.ranks_per_node
    inside = 2 * ring_reduce_scatter(n, g, topo.intra)
    across_link = topo.inter_per_rank(g)
    across, name = min((FLAT[a](n / g, topo.nodes, across_link), a) for a in inter_algorithms)
    return inside + across, name


def ring_over_nodes(n: float, topo: Topology) -> float:
    """A flat ring over ranks laid out node by node: only the hops between nodes pay the network's latency.

    Of a ring allreduce's 2(p-1) steps, 2(N-1) cross from one node to the next and the other
    2(p-N) stay inside a node, each at its own link's latency; the ring is pipelined, so its
    bandwidth term is the slowest link's. This is NCCL's own latency model (src/graph/tuning.cc,
    ncclTopoTuneModel: ring allreduce latency = base + (nsteps - nInterSteps) x intra-node hop
    latency + nInterSteps x network hop latency, nsteps = 2(nRanks-1), nInterSteps = 2(nNodes-1)).
    """
    p, nodes = topo.ranks, topo.nodes
    flat = topo.flat_link()
    inter = topo.inter_per_rank(min(topo.ranks_per_node, topo.rails))
    latency = 2 * (p - nodes) * topo.intra.alpha_s + 2 * (nodes - 1) * inter.alpha_s
    return latency + ring(n, p, Link(0.0, flat.beta_s_per_byte, flat.gamma_s_per_byte))


def allreduce_time(n: float, topo: Topology, algorithm: str) -> float:
    if topo.ranks <= 1 or n <= 0:
        return 0.0
    if algorithm == "hierarchical":
        if topo.nodes == 1 or topo.ranks_per_node == 1:
            return math.inf  # nothing to make hierarchical: the flat algorithms cover it
        return hierarchical(n, topo)[0]
    if algorithm == "ring" and topo.nodes > 1 and topo.ranks_per_node > 1:
        return ring_over_nodes(n, topo)
    return FLAT[algorithm](n, topo.ranks, topo.flat_link())


def best_allreduce(n: float, topo: Topology, algorithms: tuple[str, ...]) -> tuple[float, str]:
    """The fastest of `algorithms` for an n-byte allreduce: (seconds, name)."""
    if topo.ranks <= 1 or n <= 0:
        return 0.0, "none"
    if topo.nodes == 1 or topo.ranks_per_node == 1:  # one flat level: the one a sweep measures
        measured = topo.flat_link().measured_time(n, topo.ranks)
        if measured is not None:
            return measured, "measured"
    return min((allreduce_time(n, topo, a), a) for a in algorithms)


def ring_tree_crossover_bytes(p: int, link: Link) -> float:
    """Message size above which a ring beats the double binary tree on one flat level of p ranks.

    2(p-1) a + 2(p-1)/p n b = 2 lg p a + 2 n b  =>  n* = p a ((p-1) - lg p) / b.
    Below n* the tree's logarithmic latency wins; above it the ring's (p-1)/p bandwidth term.
    """
    return p * link.alpha_s * ((p - 1) - _lg(p)) / link.beta_s_per_byte
