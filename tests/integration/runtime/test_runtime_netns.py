"""A bubblewrap sandbox with network: its own namespace behind slirp4netns, never the node's.

From inside a real networked sandbox: the node's loopback (a real agentroll server's API and
/metrics, a backend's port), the node's own address, another sandbox's listener and the
routes are out of reach; its own loopback and DNS work; and, in a lab of namespaces this test
makes (agentroll.testing.netlab), a public address answers through the NAT while a private
neighbour does not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_support import HAVE_NAT, make_config, marked_pids
from tests.conftest import ServerFactory

from agentroll.handlers.harness.runner import bridge_source
from agentroll.runtime import Bind, SandboxSpec, netns, procs
from agentroll.runtime.bwrap import BwrapRuntime, BwrapSandbox
from agentroll.runtime.config import BwrapConfig, SandboxNetworkConfig
from agentroll.runtime.errors import RuntimeUnavailable, SandboxStartError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not HAVE_NAT, reason="bwrap, slirp4netns or a usable /dev/net/tun missing"),
]
ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="the lab's namespaces and veth need root")

# Connects to each HOST:PORT and reports what came back (or the error), as JSON; "self" is a
# listener the probe opens on the sandbox's own loopback first.
PROBE = """
import json, socket, sys, threading
own = socket.create_server(("127.0.0.1", 0))
def serve():
    while True:
        c, _ = own.accept(); c.sendall(b"own-loopback"); c.close()
threading.Thread(target=serve, daemon=True).start()
out = {}
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    addr = ("127.0.0.1", own.getsockname()[1]) if target == "self" else (host.strip("[]"), port)
    try:
        with socket.create_connection(addr, timeout=3) as s:
            s.settimeout(3)
            out[target] = s.recv(100).decode(errors="replace") or "connected"
    except OSError as exc:
        out[target] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


class TokenServer:
    """A host listener that sends ``token`` to whoever connects."""

    def __init__(self, host: str, token: str, port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family)
        self.port = self.sock.getsockname()[1]
        self.token = token.encode()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def target(self) -> str:
        """HOST:PORT as the probe takes it (an IPv6 host in brackets)."""
        host = self.sock.getsockname()[0]
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(self.token)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def host_listeners() -> Iterator[dict[str, TokenServer]]:
    """Listeners on the node's loopback and on its own non-loopback address (if it has one)."""
    servers = {"loopback": TokenServer("127.0.0.1", "host-loopback")}
    own = [n for n in netns.read_node_networks() if n.prefixlen == 32]
    if own:
        servers["node"] = TokenServer(str(own[0].network_address), "node-address")
    if own6 := _node_ipv6():
        servers["node6"] = TokenServer(own6, "node-ipv6-address")
    yield servers
    for s in servers.values():
        s.close()


def _node_ipv6() -> str | None:
    """A global (not loopback, not link-local) IPv6 address of the node's, if it has one."""
    with open("/proc/net/if_inet6") as f:
        for line in f:
            raw, scope = line.split()[0], line.split()[3]
            if scope == "00":  # global scope
                return str(ipaddress.IPv6Address(bytes.fromhex(raw)))
    return None


async def probe(sb: BwrapSandbox, *targets: str) -> dict[str, str]:
    out = await sb.exec(["python3", "-c", PROBE, *targets], timeout=60)
    assert out.exit_code == 0, out.stderr
    return dict(json.loads(out.stdout))


async def test_a_networked_sandbox_reaches_nothing_on_the_node(
    bwrap: BwrapRuntime,
    host_listeners: dict[str, TokenServer],
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server() as (server, _):
        api_port = int(server.url.rsplit(":", 1)[1].strip("/"))
        neighbour = await bwrap.start(SandboxSpec(network=True), timeout=30)
        await neighbour.tools.bash(
            'python3 -c \'import socket\ns = socket.create_server(("0.0.0.0", 8000))\n'
            'while True:\n    c, _ = s.accept(); c.sendall(b"neighbour"); c.close()\' &',
            timeout=10,
        )
        sb = await bwrap.start(SandboxSpec(network=True), timeout=30)
        assert isinstance(sb, BwrapSandbox) and sb.nat is not None
        lo = host_listeners["loopback"].port
        targets = [
            f"127.0.0.1:{lo}", f"{netns.GATEWAY}:{lo}",  # a backend on the node's loopback
            f"127.0.0.1:{api_port}", f"{netns.GATEWAY}:{api_port}",  # the agentroll API
            "127.0.0.1:8000", f"{netns.GATEWAY}:8000", "10.0.2.100:8000",  # the neighbour
        ]  # fmt: skip
        metadata = "169.254.169.254:80"  # a cloud's metadata service: a private range
        targets.append(metadata)
        node_targets = [s.target for name, s in host_listeners.items() if name != "loopback"]
        seen = await probe(sb, "self", *targets, *node_targets)
        assert seen.pop("self") == "own-loopback"
        for target, answer in seen.items():
            assert "Error" in answer, f"{target} answered from inside the sandbox: {answer}"
        assert "No route to host" in seen[metadata]
        for target in node_targets:  # IPv4: an unreachable route; IPv6: no route at all
            assert "unreachable" in seen[target].lower() or "No route" in seen[target]
        assert "unreachable" in seen[f"{netns.GATEWAY}:{lo}"].lower()
        # The neighbour's listener is there, in its own namespace: ours reached none of it.
        assert (await probe(neighbour, "127.0.0.1:8000"))["127.0.0.1:8000"] == "neighbour"
        metrics = (
            "import urllib.request, sys\n"
            "for url in sys.argv[1:]:\n"
            "    try:\n        urllib.request.urlopen(url, timeout=3); print('OPENED', url)\n"
            "    except OSError as e:\n        print('BLOCKED', url, e)\n"
        )
        urls = [f"http://{h}:{api_port}/metrics" for h in ("127.0.0.1", netns.GATEWAY)]
        out = await sb.exec(["python3", "-c", metrics, *urls], timeout=30)
        assert "OPENED" not in out.stdout and out.stdout.count("BLOCKED") == 2, out.stdout
        # UDP too: datagrams to the node's loopback through the gateway never arrive.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            udp.setblocking(False)
            send = (
                "import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for host in sys.argv[2:]:\n    s.sendto(b'datagram', (host, int(sys.argv[1])))\n"
            )
            port = str(udp.getsockname()[1])
            out = await sb.exec(
                ["python3", "-c", send, port, netns.GATEWAY, "127.0.0.1"], timeout=30
            )
            assert out.exit_code == 0, out.stderr
            await asyncio.sleep(1.0)  # a datagram through slirp4netns would have arrived by now
            with pytest.raises(BlockingIOError):
                udp.recvfrom(100)
        # Abstract Unix sockets belong to a network namespace: the node's are not the sandbox's.
        with socket.socket(socket.AF_UNIX) as abstract:
            name = f"agentroll-test-{sb.id}"
            abstract.bind("\0" + name)
            abstract.listen()
            connect = f"import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}')"
            out = await sb.exec(["python3", "-c", connect], timeout=30)
            assert out.exit_code != 0 and "ConnectionRefusedError" in out.stderr, out.stderr
        await asyncio.gather(sb.stop(), neighbour.stop())


async def test_the_routes_and_resolver_are_fixed_from_inside(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(network=True), timeout=30)
    resolv = await sb.exec(["cat", "/etc/resolv.conf"], timeout=10)
    assert resolv.stdout == f"nameserver {netns.RESOLVER}\n"
    res = await sb.tools.bash(
        "ip route del 10.0.0.0/8; ip route add 10.0.0.0/8 dev tap0; ip link set tap0 down;"
        " unshare -n true || echo no-new-netns; ip route show 10.0.0.0/8",
        timeout=20,
    )
    assert res.output.count("Operation not permitted") >= 3
    assert "no-new-netns" in res.output and "unreachable 10.0.0.0/8" in res.output
    await sb.stop()


async def test_the_nat_is_owned_and_torn_down_with_its_sandbox(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(network=True), timeout=30)
    assert isinstance(sb, BwrapSandbox) and sb.nat is not None
    nat = sb.nat.pid
    assert nat in marked_pids(sb.id)  # teardown's scan and the orphan reaper find it too
    await sb.stop()
    assert sb.nat.proc.returncode is not None
    assert nat not in {p.pid for p in await asyncio.to_thread(procs.scan)}
    assert marked_pids(sb.id) == []
    # Without network there is no NAT and no interface but lo.
    quiet = await bwrap.start(SandboxSpec(), timeout=30)
    assert isinstance(quiet, BwrapSandbox) and quiet.nat is None
    await quiet.stop()


@pytest.mark.skipif(shutil.which("iptables-restore") is None, reason="iptables missing")
async def test_an_allowed_host_port_and_nothing_else(
    state_dir: Path, host_listeners: dict[str, TokenServer]
) -> None:
    mirror = TokenServer("127.0.0.1", "package-mirror")
    config = SandboxNetworkConfig(allowed_host_ports=(mirror.port,))
    rt = BwrapConfig(state_dir=state_dir, network=config).build()
    try:
        sb = await rt.start(SandboxSpec(network=True), timeout=30)
        assert isinstance(sb, BwrapSandbox)
        lo = host_listeners["loopback"].port
        seen = await probe(sb, f"{netns.GATEWAY}:{mirror.port}", f"{netns.GATEWAY}:{lo}")
        assert seen[f"{netns.GATEWAY}:{mirror.port}"] == "package-mirror"
        assert "ConnectionRefusedError" in seen[f"{netns.GATEWAY}:{lo}"]
        res = await sb.tools.bash("iptables -F OUTPUT; echo rc=$?", timeout=20)
        assert "rc=0" not in res.output
        await sb.stop()
    finally:
        await rt.close()
        mirror.close()


@ROOT
async def test_the_internet_is_reachable_and_a_private_neighbour_is_not(state_dir: Path) -> None:
    from agentroll.testing.netlab import CLUSTER_PEER, NODE_ADDR, PUBLIC_ADDR, NetLab

    lab = await asyncio.to_thread(NetLab, state_dir)
    rt = BwrapConfig(
        state_dir=state_dir, network=SandboxNetworkConfig(slirp4netns_path=str(lab.slirp4netns))
    ).build()
    try:
        sb = await rt.start(SandboxSpec(network=True), timeout=30)
        assert isinstance(sb, BwrapSandbox)
        port = lab.port
        seen = await probe(sb, f"{PUBLIC_ADDR}:{port}", f"{CLUSTER_PEER}:{port}",
                           f"{NODE_ADDR}:{port}")  # fmt: skip
        assert seen[f"{PUBLIC_ADDR}:{port}"] == lab.token
        assert "No route to host" in seen[f"{CLUSTER_PEER}:{port}"]
        assert "No route to host" in seen[f"{NODE_ADDR}:{port}"]
        # DNS: the sandbox asks slirp4netns's resolver, which asks the lab's DNS server.
        lookup = "import socket; print(socket.gethostbyname('pypi.internet.test'))"
        out = await sb.exec(["python3", "-c", lookup], timeout=30)
        assert out.stdout.strip() == PUBLIC_ADDR, out.stderr
        await sb.stop()
    finally:
        await rt.close()
        await asyncio.to_thread(lab.close)


@ROOT
@pytest.mark.parametrize("blocked", ["0.0.0.0/0", "0.0.0.0/1"])
async def test_an_operator_who_blocks_every_address_gets_no_internet(
    state_dir: Path, blocked: str
) -> None:
    """`blocked_networks` holding every address (the default route's own range, or a range
    that holds loopback) blocks them all, public ones too; the sandbox's own loopback and
    DNS still work, and a public address outside a narrower range still answers (the
    control)."""
    from agentroll.testing.netlab import PUBLIC_ADDR, NetLab

    lab = await asyncio.to_thread(NetLab, state_dir)
    config = SandboxNetworkConfig(
        slirp4netns_path=str(lab.slirp4netns), blocked_networks=(ipaddress.IPv4Network(blocked),)
    )
    rt = BwrapConfig(state_dir=state_dir, network=config).build()
    try:
        sb = await rt.start(SandboxSpec(network=True), timeout=30)
        assert isinstance(sb, BwrapSandbox)
        public = f"{PUBLIC_ADDR}:{lab.port}"  # 198.51.100.7: outside 0.0.0.0/1
        seen = await probe(sb, "self", public)
        assert seen["self"] == "own-loopback"
        if blocked == "0.0.0.0/0":
            assert "No route to host" in seen[public], seen
        else:
            assert seen[public] == lab.token
        lookup = "import socket; print(socket.gethostbyname('pypi.internet.test'))"
        out = await sb.exec(["python3", "-c", lookup], timeout=30)
        assert out.stdout.strip() == PUBLIC_ADDR, out.stderr
        await sb.stop()
    finally:
        await rt.close()
        await asyncio.to_thread(lab.close)


async def test_a_killed_server_leaves_no_nat_behind(state_dir: Path) -> None:
    """slirp4netns leaves when its exit pipe closes with the server; the reaper finds the rest."""
    tests, state = str(Path(__file__).parent), str(state_dir)
    script = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {tests!r})\n"
        "from rt_support import make_config\n"
        "from pathlib import Path\n"
        "from agentroll.runtime import SandboxSpec\n"
        "async def main():\n"
        f"    rt = make_config('bwrap', Path({state!r})).build()\n"
        "    sb = await rt.start(SandboxSpec(network=True), timeout=30)\n"
        "    print(sb.id, sb.nat.pid, flush=True)\n"
        "    await asyncio.sleep(300)\n"
        "asyncio.run(main())\n"
    )
    owner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    assert owner.stdout is not None
    sandbox_id, nat = (await asyncio.wait_for(owner.stdout.readline(), 60)).decode().split()
    owner.kill()
    await owner.wait()
    for _ in range(200):  # generous: the machine may be busy
        if int(nat) not in {p.pid for p in await asyncio.to_thread(procs.scan)}:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"slirp4netns {nat} outlived its server")
    rt = make_config("bwrap", state_dir).build()
    assert await rt.reap_orphans() == 1
    assert marked_pids(sandbox_id) == []
    await rt.close()


# Inside the sandbox, run by the bridge: the rollout's proxy answers, the node does not.
HARNESS = """
import os, socket, sys, urllib.request
print(urllib.request.urlopen(os.environ["OPENAI_BASE_URL"] + "/models", timeout=10).read().decode())
for host in ("127.0.0.1", "10.0.2.2"):
    try:
        socket.create_connection((host, int(sys.argv[1])), timeout=3); print("REACHED", host)
    except OSError as exc:
        print("blocked", host, type(exc).__name__)
"""


@pytest.mark.parametrize("network", [True, False])
async def test_the_bridge_reaches_its_own_proxy_and_nothing_else(
    bwrap: BwrapRuntime, host_listeners: dict[str, TokenServer], tmp_path: Path, network: bool
) -> None:
    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\nConnection: close\r\n\r\n")
        writer.write(b"rollout-proxy\n")
        await writer.drain()
        writer.close()

    sockets = tmp_path / "llm"
    sockets.mkdir()
    server = await asyncio.start_unix_server(proxy, str(sockets / "proxy.sock"))
    spec = SandboxSpec(network=network, binds=(Bind(host=sockets, dest="/run/llm"),))
    sb = await bwrap.start(spec, timeout=30)
    try:
        config = {
            "socket": "/run/llm/proxy.sock",
            "argv": ["python3", "-c", HARNESS, str(host_listeners["loopback"].port)],
            "env": {"OPENAI_API_KEY": "rollout-key"},
        }
        await sb.upload("/tmp/bridge.py", bridge_source())
        await sb.upload("/tmp/bridge.json", json.dumps(config).encode())
        run = await sb.exec(["python3", "/tmp/bridge.py", "/tmp/bridge.json"], timeout=60)
        assert run.exit_code == 0, run.stderr
        lines = run.stdout.split("\n")
        assert lines[0] == "rollout-proxy"
        assert [line.split()[:2] for line in lines[2:4]] == [
            ["blocked", "127.0.0.1"], ["blocked", "10.0.2.2"],
        ]  # fmt: skip
    finally:
        await sb.stop()
        server.close()


async def test_without_slirp4netns_a_sandbox_with_network_is_refused_and_leaves_nothing(
    state_dir: Path,
) -> None:
    config = SandboxNetworkConfig(slirp4netns_path=str(state_dir / "no-such-slirp4netns"))
    rt = BwrapConfig(state_dir=state_dir, network=config).build()
    try:
        with pytest.raises(RuntimeUnavailable, match="no-such-slirp4netns"):
            await rt.start(SandboxSpec(network=True), timeout=30)
        assert not rt.live and rt.leases.all() == []
    finally:
        await rt.close()


async def test_apptainer_refuses_a_sandbox_with_network(state_dir: Path) -> None:
    """Without root, Apptainer could only share the node's network: it says so and starts none."""
    rt = make_config("fake-apptainer", state_dir).build()
    try:
        with pytest.raises(SandboxStartError, match="refuses sandboxes with network"):
            await rt.start(SandboxSpec(network=True), timeout=30)
        assert not rt.live and rt.leases.all() == []
        sb = await rt.start(SandboxSpec(), timeout=30)  # without network it still starts
        await sb.stop()
    finally:
        await rt.close()


def test_apptainer_without_network_isolation_says_what_it_shares(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config("fake-apptainer", state_dir)
    shared = config.model_copy(update={"network_isolation": False})
    with caplog.at_level(logging.WARNING, logger="agentroll.runtime.singularity"):
        shared.build()
    assert "shares this node's network" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentroll.runtime.singularity"):
        config.build()
    assert "network" not in caplog.text


async def test_a_cancelled_networked_start_leaves_no_nat(bwrap: BwrapRuntime) -> None:
    """Cancelled before, while and after slirp4netns attaches: nothing of it is left."""
    before = {p.sandbox_id for p in await asyncio.to_thread(procs.scan) if p.sandbox_id}
    cancelled = 0
    for delay in (0.0, 0.005, 0.01, 0.02, 0.04, 0.08):
        task = asyncio.create_task(bwrap.start(SandboxSpec(network=True), timeout=30))
        await asyncio.sleep(delay)
        task.cancel()
        try:
            sb = await task
        except asyncio.CancelledError:
            cancelled += 1
        else:  # finished before the cancel landed
            await sb.stop()
    assert cancelled >= 2
    assert bwrap.live == [] and bwrap.leases.all() == []
    after = {p.sandbox_id for p in await asyncio.to_thread(procs.scan) if p.sandbox_id}
    assert after <= before
