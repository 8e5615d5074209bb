"""A shaped network between pretend nodes (hpcdl.netshape): namespaces, a bridge, tc; measured, not assumed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from conftest import require_tool
from hpcdl.netshape import ShapedNetwork, ShapingError, netem_available, shaping_available

# a sender in one node streams MB to a receiver in the other and prints Gbit/s
SEND = """
import socket, sys, time
if sys.argv[1] == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 15998)); s.listen(1); print("ready", flush=True); c, _ = s.accept()
    while c.recv(1 << 20):
        pass
else:
    for _ in range(50):
        try:
            c = socket.create_connection((sys.argv[2], 15998)); break
        except OSError:
            time.sleep(0.1)
    data, n = b"x" * (1 << 20), int(sys.argv[3])
    c.sendall(data)  # the first MB fills the token bucket's burst and the socket buffers
    t = time.perf_counter()
    for _ in range(n):
        c.sendall(data)
    c.shutdown(socket.SHUT_WR); c.recv(1)
    print(n * 8 * (1 << 20) / (time.perf_counter() - t) / 1e9)
"""


@pytest.fixture
def tools():
    for tool in ("ip", "tc", "nsenter", "unshare"):
        require_tool(tool)
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    why = shaping_available()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def _rate(net: ShapedNetwork, megabytes: int) -> float:
    recv = subprocess.Popen(net.exec_argv("n2", [sys.executable, "-c", SEND, "recv"]), stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout.readline().strip() == "ready"
        out = subprocess.run(net.exec_argv("n1", [sys.executable, "-c", SEND, "send", "n2", str(megabytes)]),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return float(out.stdout.strip())
    finally:
        recv.wait(timeout=30)


def test_a_shaped_link_carries_the_rate_it_was_given_and_names_resolve_per_node(tools):
    net = ShapedNetwork("hdt1", ["n1", "n2"], gbit_s=0.2, index=251).up()
    try:
        # 25 MB at 0.2 Gbit/s: 1 s; never above the rate, below it only by what a busy host takes
        rate = _rate(net, 25)
        assert 0.2 * 0.7 <= rate <= 0.2 * 1.1, rate
        before = socket.gethostname()
        who = subprocess.run(net.exec_argv("n2", ["sh", "-c", "hostname; getent hosts n1"]), capture_output=True,
                             text=True, timeout=30)
        assert who.stdout.split()[:3] == ["n2", net.address("n1"), "n1"]
        assert socket.gethostname() == before  # the node's own UTS namespace: the host keeps its name
    finally:
        net.down()
    names = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "hdt1" not in names and "hdt1" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                                 text=True).stdout


def test_the_rate_follows_the_setting(tools):
    rates = {}
    for gbit, index in ((0.1, 252), (0.4, 253)):
        net = ShapedNetwork(f"hdt{index}", ["n1", "n2"], gbit_s=gbit, index=index).up()
        try:
            rates[gbit] = _rate(net, int(gbit * 1000 / 8 * 0.8))  # 0.8 s at the rate
        finally:
            net.down()
    # never above the setting (the token bucket); below it only by what a busy shared host takes from the sender
    assert rates[0.1] <= 0.1 * 1.1 and rates[0.4] <= 0.4 * 1.1, rates
    assert rates[0.1] >= 0.1 * 0.7 and rates[0.4] >= 0.4 * 0.6 and rates[0.4] > 2.5 * rates[0.1], rates


def test_a_delay_is_refused_in_one_line_where_the_kernel_has_no_netem(tools):
    net = ShapedNetwork("hdt2", ["n1", "n2"], gbit_s=1.0, delay_us=50, index=250)
    if netem_available():
        net.up().down()
        return
    with pytest.raises(ShapingError, match="no tc netem"):
        net.up()
    assert not net.made


def test_a_network_taken_down_from_its_record_leaves_nothing(tools):
    net = ShapedNetwork("hdt3", ["n1", "n2"], gbit_s=1.0, index=249).up()
    again = ShapedNetwork.from_json(net.to_json())
    again.down()
    assert "hdt3" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(p.name.startswith("hdt3") for p in __import__("pathlib").Path("/etc/netns").glob("*"))
