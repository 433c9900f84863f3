"""What a networked sandbox is given: routes, firewall, launcher and NAT command lines."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentroll.runtime import SandboxSpec, netns, usernat
from agentroll.runtime.bwrap import bwrap_argv
from agentroll.runtime.config import BwrapConfig, SandboxNetworkConfig
from agentroll.runtime.errors import RuntimeUnavailable

# /proc/net/fib_trie of a node with eth0 192.0.2.2/24 and a docker bridge 172.17.0.1/16.
FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     |-- 172.17.0.0
        /16 link UNICAST
     |-- 172.17.0.1
        /32 host LOCAL
     +-- 192.0.2.0/24 2 0 2
        |-- 192.0.2.0
           /24 link UNICAST
        |-- 192.0.2.2
           /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 192.0.2.2
        /32 host LOCAL
"""


def test_node_networks_are_its_addresses_and_attached_networks_but_not_loopback() -> None:
    assert [str(n) for n in netns.node_networks(FIB_TRIE)] == [
        "172.17.0.0/16", "172.17.0.1/32", "192.0.2.0/24", "192.0.2.2/32",
    ]  # fmt: skip


def test_this_nodes_own_addresses_are_found() -> None:
    nets = netns.read_node_networks()
    assert all(not n.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) for n in nets)


def test_routes_block_everything_asked_but_loopback_and_the_nat_itself() -> None:
    blocked = [
        ipaddress.IPv4Network(n)
        for n in ("10.0.0.0/8", "192.0.2.2/32", "127.0.0.0/8", "10.0.2.0/24", "0.0.0.0/0")
    ]
    assert netns.route_batch(blocked) == (
        "link set lo up\nroute add unreachable 0.0.0.0/1\nroute add unreachable 10.0.0.0/8\n"
        "route add unreachable 128.0.0.0/1\nroute add unreachable 192.0.2.2/32\n"
    )


def test_default_blocked_ranges_hold_a_clusters_services_but_not_documentation() -> None:
    docs = [ipaddress.IPv4Network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
    cluster = (
        "10.1.2.3",
        "172.20.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
    )
    for sample in cluster:
        assert any(
            ipaddress.IPv4Address(sample) in ipaddress.IPv4Network(n)
            for n in netns.DEFAULT_BLOCKED_NETWORKS
        )
    for net in docs:
        assert all(
            not net.overlaps(ipaddress.IPv4Network(n)) for n in netns.DEFAULT_BLOCKED_NETWORKS
        )
    assert BwrapConfig().network.blocked_networks == tuple(
        map(ipaddress.IPv4Network, netns.DEFAULT_BLOCKED_NETWORKS)
    )


def test_firewall_lets_only_allowed_ports_reach_the_node() -> None:
    assert netns.firewall_rules([8080, 3142, 3142]) == (
        "*filter\n"
        "-A OUTPUT -d 10.0.2.2/32 -p tcp --dport 3142 -j ACCEPT\n"
        "-A OUTPUT -d 10.0.2.2/32 -p tcp --dport 8080 -j ACCEPT\n"
        "-A OUTPUT -d 10.0.2.2/32 -j REJECT\n"
        "COMMIT\n"
    )


def test_allowed_ports_and_blocked_networks_are_validated() -> None:
    with pytest.raises(ValidationError):
        SandboxNetworkConfig(allowed_host_ports=(0,))
    with pytest.raises(ValidationError):
        SandboxNetworkConfig(blocked_networks=("10.0.0.1/8",))  # type: ignore[arg-type]
    config = BwrapConfig.model_validate({"network": {"allowed_host_ports": [3142]}})
    assert config.network.allowed_host_ports == (3142,)


def test_launcher_waits_for_the_nat_then_routes_then_execs_bwrap() -> None:
    argv = netns.gate_argv(
        unshared_fd=11, go_fd=12, routes="/s/net-routes", firewall=None, command=["bwrap", "x"]
    )
    assert argv[:5] == ["unshare", "--user", "--map-root-user", "--net", "--"]
    script = argv[argv.index("-c") + 1]
    assert script.index("exec 11>&-") < script.index("<&12") < script.index("ip -batch")
    assert "iptables" not in script and script.endswith('exec "$@"')
    assert argv[-2:] == ["bwrap", "x"]
    walled = netns.gate_argv(
        unshared_fd=11, go_fd=12, routes="/r", firewall="/f w", command=["bwrap"]
    )
    assert "iptables-restore '/f w' || exit 99" in walled[walled.index("-c") + 1]


def test_slirp4netns_blocks_the_node_loopback_unless_ports_are_allowed() -> None:
    argv = netns.slirp4netns_argv("slirp4netns", pid=42, ready_fd=5, exit_fd=6, host_loopback=False)
    assert argv[-2:] == ["42", "tap0"]
    assert {"--configure", "--disable-host-loopback", "--enable-sandbox", "--enable-seccomp",
            "--ready-fd=5", "--exit-fd=6"} <= set(argv)  # fmt: skip
    opened = netns.slirp4netns_argv("s", pid=42, ready_fd=5, exit_fd=6, host_loopback=True)
    assert "--disable-host-loopback" not in opened


def test_bwrap_shares_the_launchers_namespace_and_binds_the_resolver() -> None:
    common = dict(
        bwrap="bwrap", socket_dir=Path("/s/sock"), workspace=Path("/s/work"), env={},
        command=["cmd"], info_fd=7, uid=65534,
    )  # fmt: skip
    argv = bwrap_argv(SandboxSpec(network=True), resolv_conf=Path("/s/resolv.conf"), **common)  # type: ignore[arg-type]
    assert argv[argv.index("--unshare-all") + 1] == "--share-net"
    i = argv.index("/s/resolv.conf")
    assert argv[i - 1 : i + 2] == ["--ro-bind", "/s/resolv.conf", "/etc/resolv.conf"]
    quiet = bwrap_argv(SandboxSpec(), **common)  # type: ignore[arg-type]
    assert "--share-net" not in quiet and "/etc/resolv.conf" not in quiet


def test_a_missing_nat_tool_is_named() -> None:
    config = SandboxNetworkConfig(slirp4netns_path="/nonexistent/slirp4netns")
    with pytest.raises(RuntimeUnavailable, match="/nonexistent/slirp4netns"):
        usernat.tools(config)
