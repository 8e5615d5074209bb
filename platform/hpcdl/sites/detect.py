"""Describe the node hpcdl runs on as a site profile (`hpcdl sites detect`)."""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
from pathlib import Path

from hpcdl.sites.schema import (
    DEVICE_NAME_MAX_LENGTH, DEVICE_NAME_PATTERN, Defaults, Filesystems, Gpu, Modules, Nic, NodeKind, Site,
)

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


def _run(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def _lscpu_topology() -> tuple[int, int, int, str]:
    """sockets, cores per socket, threads per core, model name (from lscpu, else sysfs/os)."""
    out = _run(["lscpu", "-J"])
    fields: dict[str, str] = {}
    if out:
        for item in json.loads(out).get("lscpu", []):
            fields[item["field"].rstrip(":")] = item.get("data") or ""
    cpus = os.cpu_count() or 1
    sockets = int(fields.get("Socket(s)", "1") or 1)
    threads = int(fields.get("Thread(s) per core", "1") or 1)
    cores_per_socket = int(fields.get("Core(s) per socket", "0") or 0) or max(1, cpus // (sockets * threads))
    return sockets, cores_per_socket, threads, fields.get("Model name", "")


def _cpu_numbering(threads_per_core: int, sockets: int = 1, cpus: Path = Path("/sys/devices/system/cpu")) -> str:
    """core-major where CPU 1 is CPU 0's second thread (POWER), socket-interleaved where CPU 1 is on
    another socket than CPU 0 (TACC Frontera's CLX nodes), thread-major otherwise."""
    try:
        if threads_per_core > 1:
            siblings = set()  # a cpulist: "0-3" (POWER SMT4), "0,48"
            for part in (cpus / "cpu0/topology/thread_siblings_list").read_text().strip().split(","):
                a, _, b = part.partition("-")
                siblings.update(range(int(a), int(b or a) + 1))
            if 1 in siblings:
                return "core-major"
        if sockets > 1:
            package = [(cpus / f"cpu{i}/topology/physical_package_id").read_text().strip() for i in (0, 1)]
            if package[0] != package[1]:
                return "socket-interleaved"
    except (OSError, ValueError):
        pass
    return "thread-major"


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return 1.0


def _domains_per_socket(sockets: int, cores_per_socket: int) -> int:
    """NUMA nodes per socket (EPYC in NPS4: 4), when Linux shows more nodes than sockets."""
    nodes = [d for d in Path("/sys/devices/system/node").glob("node[0-9]*")] if Path("/sys/devices/system/node").is_dir() else []
    n = len(nodes)
    if n > sockets and n % sockets == 0 and cores_per_socket % (n // sockets) == 0:
        return n // sockets
    return 1


def _placement(sysfs_device: Path, sockets: int, domains_per_socket: int) -> dict:
    """socket (and NUMA domain, when a socket has several) of a PCI device, from its numa_node."""
    try:
        node = int((sysfs_device / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return {"socket": 0}
    if not 0 <= node < sockets * domains_per_socket:
        return {"socket": 0}
    if domains_per_socket == 1:
        return {"socket": node}
    return {"socket": node // domains_per_socket, "domain": node}


def _gpus(sockets: int, domains_per_socket: int = 1) -> tuple[Gpu, ...]:
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,pci.bus_id", "--format=csv,noheader,nounits"])
    gpus = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        bus = parts[2].lower()
        if bus.startswith("0000") and len(bus.split(":")[0]) == 8:
            bus = bus[4:]
        dev = Path("/sys/bus/pci/devices") / f"0000:{bus[-7:]}" if len(bus) >= 7 else Path("/nonexistent")
        gpus.append(Gpu(model=parts[0], memory_gb=round(float(parts[1]) / 1024, 1),
                        **_placement(dev, sockets, domains_per_socket)))
    return tuple(gpus)


# matched with fullmatch: in Python's re, `$` also matches before a trailing newline (pydantic's
# Rust regex engine has no such exception), and a name ending in one must be left out
_DEVICE = re.compile(DEVICE_NAME_PATTERN)


def _device_name_ok(name: str) -> bool:
    """Whether a profile may hold this name (sites.schema.DeviceName); a device whose name it may
    not hold is left out, not copied."""
    return len(name) <= DEVICE_NAME_MAX_LENGTH and _DEVICE.fullmatch(name) is not None


def _nics(sockets: int, domains_per_socket: int = 1) -> tuple[Nic, ...]:
    nics = []
    ib = Path("/sys/class/infiniband")
    if ib.is_dir():
        for dev in sorted(ib.iterdir()):
            kind = "omnipath" if dev.name.startswith("hfi") else "infiniband"
            for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
                if not port.name.isdigit() or not _device_name_ok(dev.name):
                    continue
                nics.append(Nic(kind=kind, device=dev.name, port=int(port.name),
                                **_placement(dev / "device", sockets, domains_per_socket)))
    cxi = Path("/sys/class/cxi")  # HPE Slingshot 11 NICs
    if cxi.is_dir():
        for dev in sorted(cxi.iterdir()):
            if not _device_name_ok(dev.name):
                continue
            nics.append(Nic(kind="slingshot", device=dev.name, **_placement(dev / "device", sockets, domains_per_socket)))
    if not nics:
        net = Path("/sys/class/net")
        for dev in sorted(net.iterdir()) if net.is_dir() else []:
            # physical Ethernet ports have a device link; lo, bridges and ifb do not
            if (dev / "device").exists() and _device_name_ok(dev.name):
                nics.append(Nic(kind="ethernet", device=dev.name, netdev=dev.name,
                                **_placement(dev / "device", sockets, domains_per_socket)))
    return tuple(nics)


def detect_local_node() -> NodeKind:
    sockets, cores_per_socket, threads, model = _lscpu_topology()
    domains = _domains_per_socket(sockets, cores_per_socket)
    return NodeKind(
        description="this node, as detected by hpcdl",
        count=1,
        cpu_model=model,
        cpu_target=_cpu_target(),
        sockets=sockets,
        cores_per_socket=cores_per_socket,
        threads_per_core=threads,
        cpu_numbering=_cpu_numbering(threads, sockets),
        memory_gb=_memory_gb(),
        domains_per_socket=domains,
        gpus=_gpus(sockets, domains),
        nics=_nics(sockets, domains),
        # A workstation-sized node runs one rank per core (at most two per socket) so the
        # distributed path is exercised; on 2 Zen 3 cores, 2 ranks x 1 thread trained as fast
        # as 1 rank x 2 threads (11.1 vs 11.4 img/s, shared/research/frameworks.md).
        default_ranks_per_socket=min(cores_per_socket, 2),
    )


def _cpu_target() -> str:
    try:
        import archspec.cpu

        return str(archspec.cpu.host().name)
    except Exception:  # archspec is optional; the machine name is a fine fallback
        return os.uname().machine


def slurm_facts() -> dict:
    """The Slurm this node submits to (`sinfo`, `scontrol show node`, found through $SLURM_CONF
    like every Slurm client): its default partition, node count, the nodes that share one host
    (a test cluster's pretend nodes) and the memory Slurm grants a node, in MB."""
    from hpcdl.errors import HpcdlError

    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        # Slurm's clients retry a missing configuration file for 60 s before they give up
        raise HpcdlError(f"scheduler: slurm, but $SLURM_CONF names no file ({conf!r}): point it at the "
                         "cluster's slurm.conf, or unset it")
    partitions = _run(["sinfo", "-h", "-o", "%P %D"])
    nodes = _run(["scontrol", "show", "node", "-o"]) if partitions else None
    if not partitions or not nodes:
        raise HpcdlError("scheduler: slurm, but no Slurm answers here (sinfo/scontrol failed; is $SLURM_CONF set "
                         "and slurmctld up?)")
    default, count = None, 0
    for line in partitions.splitlines():
        name, _, n = line.partition(" ")
        if name.endswith("*") or default is None:
            default, count = name.rstrip("*"), int(n or 0)
    hosts: dict[str, int] = {}
    memory: list[int] = []
    per_core: list[int] = []
    for line in nodes.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        host = fields.get("NodeHostName") or fields.get("NodeAddr") or fields.get("NodeName", "")
        hosts[host] = hosts.get(host, 0) + 1
        if fields.get("RealMemory", "").isdigit():
            memory.append(int(fields["RealMemory"]))
        # what Slurm counts as a CPU: CPUTot against the node's cores (docs/sites.md, scheduler_cpus_per_core)
        cores = [fields.get(k, "") for k in ("Sockets", "CoresPerSocket")]
        if fields.get("CPUTot", "").isdigit() and all(c.isdigit() and int(c) for c in cores):
            per_core.append(max(1, int(fields["CPUTot"]) // (int(cores[0]) * int(cores[1]))))
    return {"partition": default, "nodes": count or sum(hosts.values()),
            "nodes_per_host": max(hosts.values()) if hosts else 1, "memory_mb": min(memory) if memory else None,
            "cpus_per_core": min(per_core) if per_core else None}


def detect_local_site(runtime: str | None = None, image: str | None = None, scheduler: str | None = None) -> Site:
    """This node as a site. Its ranks run natively, or in a container image: `runtime` and
    `image` (else $HPCDL_LOCAL_RUNTIME and $HPCDL_LOCAL_IMAGE), e.g. charliecloud and the
    SquashFS file `hpcdl images build local-cpu` printed. With `scheduler` slurm (else
    $HPCDL_LOCAL_SCHEDULER), jobs go to the Slurm this node submits to (`hpcdl cluster up`'s
    pretend nodes, or a real one), launched by srun with PMIx, on nodes shaped like this one."""
    from typing import get_args

    from hpcdl.errors import HpcdlError
    from hpcdl.sites.schema import Runtime

    node = detect_local_node()
    launcher = "mpirun" if shutil.which("mpirun") else "local"
    runtime = runtime or os.environ.get("HPCDL_LOCAL_RUNTIME") or "none"
    image = image or os.environ.get("HPCDL_LOCAL_IMAGE") or None
    scheduler = scheduler or os.environ.get("HPCDL_LOCAL_SCHEDULER") or "local"
    if runtime not in get_args(Runtime):
        raise HpcdlError(f"runtime: {runtime!r} is not one of {', '.join(get_args(Runtime))} "
                         "(--runtime or $HPCDL_LOCAL_RUNTIME)")
    if scheduler not in ("local", "slurm"):
        raise HpcdlError(f"scheduler: {scheduler!r} is not one of local, slurm (--scheduler or $HPCDL_LOCAL_SCHEDULER)")
    env: dict[str, str] = {}
    partition = None
    sources = ["detected with lscpu, /proc/meminfo, nvidia-smi and /sys/class/{infiniband,cxi,net}"]
    if scheduler == "slurm":
        facts = slurm_facts()
        launcher, partition = "srun", facts["partition"]
        update: dict = {"count": facts["nodes"], "nodes_per_host": facts["nodes_per_host"],
                        # a Slurm profile says what a CPU is on an SMT node: read from scontrol, else
                        # Slurm's own default (every hardware thread)
                        "scheduler_cpus_per_core": min(node.threads_per_core,
                                                       facts.get("cpus_per_core") or node.threads_per_core)}
        if facts["memory_mb"]:
            update["memory_gb"] = round(facts["memory_mb"] / 1024, 1)
        node = node.model_copy(update=update)
        if facts["nodes_per_host"] > 1:
            # Open MPI's shared-memory transport breaks across pretend nodes on one host
            env["OMPI_MCA_btl"] = "self,tcp"
        sources.append("the Slurm it submits to: sinfo (default partition, nodes), scontrol show node "
                       "(hosts, RealMemory)")
    return Site(
        name="local",
        description="this node, detected by hpcdl (run `hpcdl sites detect` to save it as a profile)",
        sources=tuple(sources),
        scheduler=scheduler,
        launcher=launcher,
        runtime=runtime,
        mpi="openmpi" if launcher in ("mpirun", "srun") else "none",
        node_kinds={"node": node},
        default_node_kind="node",
        filesystems=Filesystems(scratch=None, node_local="/tmp", node_local_kind="tmpfs"),
        modules=Modules(system="lmod" if Path(LMOD_INIT).exists() else "none",
                        init=LMOD_INIT if Path(LMOD_INIT).exists() else None),
        defaults=Defaults(time="00:30:00", exclusive=False, partition=partition,
                          image=image if runtime != "none" else None),
        env=env,
    )


def site_to_yaml(site: Site) -> str:
    import yaml

    data = site.model_dump(mode="json", exclude_defaults=False)
    return yaml.safe_dump(data, sort_keys=False)
