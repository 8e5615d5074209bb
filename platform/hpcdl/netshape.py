"""A shaped network between pretend nodes: each in its own network namespace, joined by a bridge.

    net = ShapedNetwork("hd3", ["n1", "n2"], gbit_s=1.0); net.up()
    argv = net.exec_argv("n1", ["/usr/sbin/slurmd", ...])   # runs inside n1's namespace, hostname n1
    net.down()

Each node gets a network namespace (`ip netns`), a veth pair whose host end is on one bridge
(`<prefix>br`, the host's address 10.<subnet>.1) and whose node end carries the node's own
address; traffic between nodes crosses the two veths and the bridge, so it leaves a node
through its link as it would through a NIC. `tc` shapes each node's link in both directions
(a token bucket, `tbf`, at `gbit_s`: the node end's egress and the host end's egress toward
the node), so a node sends and receives at the link's rate. Added delay needs tc's `netem`,
which this kernel may not have (it is a module, and some sandboxes boot without modules):
`delay_us` is then refused with one line rather than silently dropped; the link's own latency
is what the collectives check measures.

A process run through `exec_argv` also gets a UTS namespace whose hostname is the node's name
and a mount namespace with the node's own hosts file (/etc/netns/<ns>/hosts, where ip-netns(8)
keeps such files) bind-mounted over /etc/hosts: every node's name resolves to its address, so a job's
`MASTER_ADDR=$(hostname)` on the batch node is reachable from the others. The host's /etc/hosts
is never edited. Needs root, iproute2 (ip, tc) and util-linux (nsenter, unshare).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NETNS_ETC = Path("/etc/netns")


class ShapingError(RuntimeError):
    pass


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ShapingError(f"ip {' '.join(argv)}: {proc.stderr.strip()}")
    return proc


def _tc(namespace: str | None, *argv: str) -> None:
    cmd = (["ip", "netns", "exec", namespace] if namespace else []) + ["tc", *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise ShapingError(f"tc {' '.join(argv)}: {proc.stderr.strip()}")


@dataclass
class ShapedNetwork:
    prefix: str  # a short tag for the interface and namespace names (interface names stop at 15 characters)
    nodes: list[str]
    gbit_s: float | None = None  # each node's link, both directions; None: unshaped
    delay_us: float = 0.0  # added one-way delay (tc netem), where the kernel has it
    subnet: int = 231  # addresses 10.<subnet>.<index>.x
    index: int = 0  # a third octet of its own, so several networks can coexist
    made: list[tuple[str, str]] = field(default_factory=list)  # what up() created, for down()

    def __post_init__(self) -> None:
        if len(self.prefix) > 8 or not self.prefix.isalnum():
            raise ValueError(f"prefix {self.prefix!r}: up to 8 letters or digits (interface names are short)")

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def host_address(self) -> str:
        return f"10.{self.subnet}.{self.index}.1"

    def address(self, node: str) -> str:
        return f"10.{self.subnet}.{self.index}.{self.nodes.index(node) + 2}"

    def namespace(self, node: str) -> str:
        return f"{self.prefix}{node}"

    def up(self) -> "ShapedNetwork":
        if self.delay_us and not netem_available():
            raise ShapingError("delay_us: this kernel has no tc netem (the sch_netem module); shape the rate only")
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self.made.append(("link", self.bridge))
            _ip("addr", "add", f"{self.host_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            hosts = "127.0.0.1 localhost\n" + "".join(f"{self.address(n)} {n}\n" for n in self.nodes)
            for i, node in enumerate(self.nodes, 1):
                ns, host_end, node_end = self.namespace(node), f"{self.prefix}h{i}", f"{self.prefix}e{i}"
                _ip("netns", "add", ns)
                self.made.append(("netns", ns))
                folder = NETNS_ETC / ns
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "hosts").write_text(hosts)
                self.made.append(("etc", str(folder)))
                _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
                self.made.append(("link", host_end))
                _ip("link", "set", host_end, "master", self.bridge)
                _ip("link", "set", host_end, "up")
                _ip("link", "set", node_end, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", node_end)
                _ip("-n", ns, "link", "set", node_end, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "route", "add", "default", "via", self.host_address)
                if self.gbit_s:
                    for where, dev in ((ns, node_end), (None, host_end)):
                        _tc(where, "qdisc", "add", "dev", dev, "root", *self.shaping())
        except BaseException:
            self.down()
            raise
        return self

    def shaping(self) -> list[str]:
        """tc's qdisc for one direction of a link: netem's delay where asked (with its rate), else a token
        bucket at the link's rate, its burst a few MTUs (at least 10 ms worth would hide the rate)."""
        rate = f"{self.gbit_s * 1000:g}mbit"
        if self.delay_us:
            return ["netem", "delay", f"{self.delay_us:g}us", "rate", rate]
        burst = max(64 * 1024, int(self.gbit_s * 1e9 / 8 / 1000))  # 1 ms of the rate
        return ["tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]

    def exec_argv(self, node: str, argv: list[str]) -> list[str]:
        """`argv` run in `node`'s namespace (its link, its /etc/hosts) with `node` as its hostname."""
        # nsenter, not `ip netns exec`: that remounts /sys for the namespace and loses /sys/fs/cgroup, which
        # slurmd needs; a mount namespace of its own puts the node's hosts file over /etc/hosts
        hosts = NETNS_ETC / self.namespace(node) / "hosts"
        return ["nsenter", f"--net=/run/netns/{self.namespace(node)}", "unshare", "--uts", "--mount", "sh", "-c",
                'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"', node, str(hosts), *argv]

    def to_json(self) -> str:
        import json

        return json.dumps({"prefix": self.prefix, "nodes": self.nodes, "gbit_s": self.gbit_s,
                           "delay_us": self.delay_us, "subnet": self.subnet, "index": self.index})

    @classmethod
    def from_json(cls, text: str) -> "ShapedNetwork":
        """A network written by to_json, as up() leaves it (so another process can take it down)."""
        import json

        net = cls(**json.loads(text))
        net.made = [("link", net.bridge)]
        for i, node in enumerate(net.nodes, 1):
            net.made += [("netns", net.namespace(node)), ("etc", str(NETNS_ETC / net.namespace(node))),
                         ("link", f"{net.prefix}h{i}")]
        return net

    def down(self) -> None:
        """Remove what up() made, newest first; safe to call twice and after a failed up()."""
        for kind, name in reversed(self.made):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            elif kind == "link":
                _ip("link", "del", name, check=False)
            elif kind == "etc":
                shutil.rmtree(name, ignore_errors=True)
        self.made.clear()


def netem_available() -> bool:
    """Whether tc can add a netem qdisc here (a throwaway dummy interface tells)."""
    name = "hpcdlnetemq"
    if _ip("link", "add", name, "type", "dummy", check=False).returncode != 0:
        return False
    try:
        return subprocess.run(["tc", "qdisc", "add", "dev", name, "root", "netem", "delay", "1ms"],
                              capture_output=True, timeout=30).returncode == 0
    finally:
        _ip("link", "del", name, check=False)


def shaping_available() -> str | None:
    """None where this machine can make namespaces, veths, a bridge and tbf; else why not."""
    if any(shutil.which(tool) is None for tool in ("ip", "tc", "nsenter", "unshare")):
        return "needs iproute2 (ip, tc) and util-linux (nsenter, unshare)"
    probe = ShapedNetwork("hdprobe", ["n1"], gbit_s=1.0, index=254)
    try:
        probe.up()
    except (ShapingError, OSError) as exc:
        return str(exc)
    finally:
        probe.down()
    return None
