"""The two network levels of a site, from its profile's fabric facts (or published defaults).

Across nodes: a NIC's link rate (`nics[].gbit_s`) and its MPI small-message latency
(`nics[].latency_us`); inside a node: `intra_node_link` (NVLink, Infinity Fabric, PCIe or
shared memory). Where a profile leaves a fact out, the defaults below stand in, each with
its source. A site's validation collectives check, where it has run, replaces both
(hpcdl.predict.calibration).

A collective library adds its own cost once per collective on top of the wire's (not once per
step of a ring or tree): NCCL launches a kernel and synchronises its proxy threads (5-20 us per
collective, NVIDIA nccl-tests small-message times), Horovod waits for its background cycle (HOROVOD_CYCLE_TIME, 1 ms by default,
half a cycle on average) before each fused buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcdl.predict.collectives import Link
from hpcdl.sites.schema import NodeKind

# kind -> (link rate Gb/s when the profile gives none, MPI small-message latency us, source)
NIC_DEFAULTS = {
    "infiniband": (100.0, 1.0, "EDR InfiniBand 4x25 Gb/s; MPI latency about 1 us (OSU micro-benchmarks on ConnectX-4/5)"),
    "omnipath": (100.0, 1.0, "Intel Omni-Path 100 Gb/s; MPI latency about 1 us (PRACE Best Practice Guide - Modern "
                 "Interconnects, 2019)"),
    "aries": (80.0, 1.5, "Cray Aries: about 10 GB/s injection over PCIe Gen3 x16, MPI latency 1.3-2 us (Cray "
              "WP-Aries01-1112)"),
    "slingshot": (200.0, 2.0, "HPE Slingshot 11: 200 Gb/s per NIC, MPI latency about 2 us (HPE Slingshot data sheet)"),
    "ethernet": (10.0, 10.0, "Ethernet with TCP: about 10 us MPI latency through the kernel's stack"),
}
# Ethernet whose NIC does RDMA (RoCE, iWARP; the profile's `nics[].rdma`): the NIC moves the bytes
# as InfiniBand's does, and the kernel's stack drops out of the latency
ROCE_LATENCY = (2.0, "RoCE: MPI latency about 2 us, as InfiniBand verbs plus an Ethernet switch hop (OSU "
                "micro-benchmarks over RoCE on ConnectX-4/5: 1-2 us)")
# inside a node, when the profile names no intra_node_link
NVLINK_DEFAULT = (50.0, 5.0, "NVLink 2: two 25 GB/s bricks between neighbouring V100s (NVIDIA Volta white paper)")
# NVLink by GPU generation, where the profile names no intra_node_link: a ring's hop uses the links
# between two neighbouring GPUs. Boards of up to 4 GPUs join every pair directly (the links split
# between the 3 peers); 8-GPU boards put NVSwitch between them (all of a GPU's links on every hop).
# Each is a fallback the output says it used; a profile's intra_node_link replaces it.
NVLINK_BY_GPU = (
    ("h100", (150.0, 5.0, "NVLink 4 default: 18 links of 25 GB/s per H100 (H100 data sheet: 900 GB/s both ways), "
              "6 between each pair of a 4-GPU board"),
     (450.0, 5.0, "NVLink 4 default: all 18 links of an H100 through NVSwitch (8-GPU HGX board)")),
    ("a100", (100.0, 5.0, "NVLink 3 default: 12 links of 25 GB/s per A100 (A100 data sheet: 600 GB/s both ways), "
              "4 between each pair of a 4-GPU board"),
     (300.0, 5.0, "NVLink 3 default: all 12 links of an A100 through NVSwitch (8-GPU HGX board)")),
    ("v100", NVLINK_DEFAULT, NVLINK_DEFAULT),
)
PCIE_DEFAULT = (12.0, 10.0, "PCIe Gen3 x16: about 12 GB/s per direction")
SHARED_MEMORY_DEFAULT = (5.0, 0.5, "MPI shared memory: a copy-in/copy-out at a few GB/s per core, under 1 us")
# NICs whose transfers a host core drives (copies every byte): Omni-Path's PSM2 is an onload
# design (TACC TR-16-03: "a minimum of 2 MPI tasks per KNL helps achieve OPA bandwidth
# saturation"), and TCP over Ethernet copies through the kernel. InfiniBand, Aries and
# Slingshot move the bytes by the NIC's DMA (RDMA offload).
ONLOAD_NICS = ("omnipath", "ethernet")
# once per collective, on top of the wire: the library's own cost (see the module note)
LIBRARY_OVERHEAD_US = {"nccl": 10.0, "horovod": 10.0, "mpi": 0.0, "gloo": 0.0}
HOROVOD_CYCLE_S = 1e-3


@dataclass(frozen=True)
class Fabric:
    """The links one rank sees, with where each number came from."""

    intra: Link
    inter: Link
    rails: int
    intra_source: str
    inter_source: str
    onload: bool = False  # a host core copies each byte the NIC sends


def fabric_of(node: NodeKind) -> Fabric:
    if node.nics:
        kind = node.nics[0].kind
        rate, latency, source = NIC_DEFAULTS[kind]
        if kind == "ethernet" and node.nics[0].rdma:
            latency, source = ROCE_LATENCY
        gbit = node.nics[0].gbit_s or rate
        if node.nics[0].latency_us:
            latency, source = node.nics[0].latency_us, "the site profile (nics[].gbit_s, nics[].latency_us)"
        elif node.nics[0].gbit_s:
            source = f"the site profile (nics[].gbit_s); latency: {source}"
        inter = Link.of(latency, gbit / 8)
    else:
        rate, latency, source = NIC_DEFAULTS["ethernet"]
        inter = Link.of(latency, rate / 8)
        source = f"no NIC in the profile: {source}"
    if node.intra_node_link:
        link = node.intra_node_link
        intra, intra_source = Link.of(link.latency_us, link.gbyte_s), f"the site profile (intra_node_link: {link.kind})"
    else:
        gbyte, latency, intra_source = nvlink_default(node) or (PCIE_DEFAULT if node.gpus else SHARED_MEMORY_DEFAULT)
        intra_source = f"no intra_node_link in the profile: {intra_source}"
        intra = Link.of(latency, gbyte)
    if node.nics:
        rdma = node.nics[0].rdma
        onload = node.nics[0].kind in ONLOAD_NICS if rdma is None else not rdma
    else:
        onload = True
    return Fabric(intra, inter, max(1, len(node.nics)), intra_source, source, onload)


def nvlink_default(node: NodeKind) -> tuple[float, float, str] | None:
    """The NVLink of the node's GPU generation (NVLINK_BY_GPU), or None for GPUs without a row."""
    models = " ".join(g.model.lower() for g in node.gpus)
    for word, board, switched in NVLINK_BY_GPU:
        if word in models:
            return switched if len(node.gpus) >= 8 else board
    return None


def host_limited(fabric: Fabric, core_gbyte_s: float, cpu_reduces: bool) -> Fabric:
    """The links as a rank driven by one CPU core sees them.

    The core adds the gradients where the CPU reduces (MPI or gloo on CPU ranks): reading two
    operands and writing one is 3 bytes of memory traffic per byte reduced, so gamma = 3 / its
    stream bandwidth. On an onload NIC the core also copies every byte out and in: a rank's
    injection rate is at most half its stream bandwidth.
    """
    core = core_gbyte_s * 1e9
    gamma = 3 / core if cpu_reduces else 0.0
    intra = Link(fabric.intra.alpha_s, fabric.intra.beta_s_per_byte, max(fabric.intra.gamma_s_per_byte, gamma))
    beta = max(fabric.inter.beta_s_per_byte, 2 / core) if fabric.onload else fabric.inter.beta_s_per_byte
    inter = Link(fabric.inter.alpha_s, beta, max(fabric.inter.gamma_s_per_byte, gamma))
    note = (" and the host core's adds" if cpu_reduces else "") + (" and copies (onload NIC)" if fabric.onload else "")
    return Fabric(intra, inter, fabric.rails, fabric.intra_source, fabric.inter_source
                  + (f"; limited by one core's {core_gbyte_s:g} GB/s{note}" if note else ""), fabric.onload)


def library_overhead_s(library: str) -> float:
    """The library's cost once per collective (not per step of its algorithm: a ring of p ranks pays
    the wire's latency 2(p-1) times but launches one kernel)."""
    return LIBRARY_OVERHEAD_US.get(library, 0.0) * 1e-6
