"""A networked sandbox's own network namespace, reaching the internet through user-mode NAT.

A sandbox that asks for network never shares the node's network: its launcher first makes a
user and network namespace of its own (``unshare --user --map-root-user --net``), then waits.
The host attaches ``slirp4netns`` to that namespace (a tap device, 10.0.2.100/24, gateway
10.0.2.2, DNS 10.0.2.3), and only then does the launcher install the routes below and exec
bubblewrap, which shares that network namespace but runs the sandbox in a user namespace nested
inside it, with every capability dropped: the routes belong to the outer user namespace, and
nothing inside the sandbox can change them or make a network namespace of its own.

What the sandbox reaches:

* its own loopback (``lo`` is brought up: 127.0.0.1 is the sandbox's alone);
* DNS at 10.0.2.3, which slirp4netns answers with the node's resolvers (``/etc/resolv.conf``
  inside is bound to a file naming it);
* every other IPv4 destination through slirp4netns's sockets on the node, except:

  - the node's loopback: ``--disable-host-loopback`` drops what is sent to the gateway, the
    only address slirp4netns maps to the node's 127.0.0.1 (the node's loopback cannot be
    named from inside at all: 127.0.0.0/8 is the sandbox's own);
  - the node's own addresses and the networks it is attached to, read from the kernel's
    routing tables (``/proc/net/fib_trie``) at every start, and ``blocked_networks`` (by
    default every private, shared, link-local, multicast and reserved range, where a
    cluster's own services such as the inference fleet and cloud metadata live): each gets an
    ``unreachable`` route in the sandbox, so a connection fails at once with "No route to host".

  IPv6 is not configured (slirp4netns without ``--enable-ipv6``): the sandbox has only ``::1``.

A server that is not root needs unprivileged user namespaces (as bubblewrap does) and a
``/dev/net/tun`` it may open (stock Debian makes it usable by everyone); root needs neither.

``allowed_host_ports`` re-opens single TCP ports of the node's loopback (a package mirror on
the node): slirp4netns then maps the gateway to the node's loopback, and the launcher lets
only those ports through to it (``iptables``, in the sandbox's network namespace).

Why slirp4netns and not pasta: both start in a few milliseconds; pasta moved about twice the
bytes per second in our measurement (containers/README.md), but slirp4netns's ~3.7 Gbit/s is
more than a node's uplink gives one sandbox. slirp4netns is the one whose lifetime is ours:
it stays in the foreground as our child, says when the namespace is configured
(``--ready-fd``) and exits when our end of ``--exit-fd`` closes, so even a server killed with
SIGKILL leaves none behind; it runs in a mount namespace of its own under seccomp
(``--enable-sandbox --enable-seccomp``); and it blocks the node's loopback with one flag. The
pasta packaged with Debian 12 forwards every port the node listens on into the namespace unless
told ``-T none``, copies the node's addresses into it, daemonizes and logs to syslog.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable, Sequence

#: slirp4netns's fixed layout (its defaults, which ``--configure`` sets up).
SLIRP_CIDR = "10.0.2.0/24"
GATEWAY = "10.0.2.2"
RESOLVER = "10.0.2.3"
TAP = "tap0"
MTU = 65520

#: Ranges a node's neighbours live on, or that are never an internet destination. The
#: documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are neither.
DEFAULT_BLOCKED_NETWORKS: tuple[str, ...] = (
    "0.0.0.0/8",  # "this network"
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # shared address space (carrier-grade NAT)
    "169.254.0.0/16",  # link-local, cloud metadata services
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments
    "192.168.0.0/16",  # private
    "198.18.0.0/15",  # benchmarking
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, broadcast
)

_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_SLIRP = ipaddress.IPv4Network(SLIRP_CIDR)


def node_networks(fib_trie: str) -> list[ipaddress.IPv4Network]:
    """The node's own IPv4 addresses (/32) and attached networks, from ``/proc/net/fib_trie``.

    The kernel lists each prefix as ``|-- ADDR`` followed by lines ``/LEN SCOPE TYPE``: type
    LOCAL is an address of the node's, scope ``link`` a network it is attached to.
    """
    found: set[ipaddress.IPv4Network] = set()
    addr: str | None = None
    for line in fib_trie.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "|--":
            addr = words[1]
        elif addr is not None and len(words) == 3 and words[0].startswith("/"):
            length, scope, kind = words
            if kind == "LOCAL" or (scope == "link" and kind == "UNICAST"):
                net = ipaddress.IPv4Network(f"{addr}{length}", strict=False)
                if not net.subnet_of(_LOOPBACK):
                    found.add(net)
    return sorted(found)


def read_node_networks() -> list[ipaddress.IPv4Network]:
    with open("/proc/net/fib_trie", encoding="ascii") as f:
        return node_networks(f.read())


def route_batch(blocked: Iterable[ipaddress.IPv4Network]) -> str:
    """``ip -batch`` commands run in the sandbox's namespace before bubblewrap starts.

    slirp4netns's own network is never blocked: it holds the gateway and the resolver, and its
    connected route is more specific than any blocked range around it.
    """
    lines = ["link set lo up"]
    # Every address is blocked as its two halves: a route for 0.0.0.0/0 would clash with the
    # default route slirp4netns installed (and the launcher would fail).
    halves = (half for net in blocked if net.prefixlen == 0 for half in net.subnets())
    for net in sorted({*(n for n in blocked if n.prefixlen > 0), *halves}):
        # Loopback is the sandbox's own (and its local routes win over any of these); slirp's
        # network holds the gateway and the resolver.
        if net.subnet_of(_LOOPBACK) or net.subnet_of(_SLIRP):
            continue
        lines.append(f"route add unreachable {net}")
    return "".join(line + "\n" for line in lines)


def firewall_rules(allowed_host_ports: Sequence[int]) -> str:
    """``iptables-restore`` input: of the node's loopback (the gateway), only these TCP ports."""
    accept = [
        f"-A OUTPUT -d {GATEWAY}/32 -p tcp --dport {port} -j ACCEPT"
        for port in sorted(set(allowed_host_ports))
    ]
    return "\n".join(["*filter", *accept, f"-A OUTPUT -d {GATEWAY}/32 -j REJECT", "COMMIT", ""])


def resolv_conf() -> str:
    return f"nameserver {RESOLVER}\n"


def gate_argv(
    *, unshared_fd: int, go_fd: int, routes: str, firewall: str | None, command: Sequence[str]
) -> list[str]:
    """The launcher: new user and network namespaces, then bash (descriptors above 9) waiting.

    It reports the namespaces made by closing ``unshared_fd``, waits for a line on ``go_fd``
    (written once slirp4netns has configured the tap device), installs the routes (and the
    firewall), then execs ``command`` in the same process. Any failure exits non-zero before
    the sandbox exists.
    """
    script = (
        f"exec {unshared_fd}>&-; read -r go <&{go_fd} || exit 97; exec {go_fd}<&-; "
        f"ip -batch {shlex.quote(routes)} || exit 98; "
    )
    if firewall is not None:
        script += f"iptables-restore {shlex.quote(firewall)} || exit 99; "
    script += 'exec "$@"'
    return [
        "unshare", "--user", "--map-root-user", "--net", "--",
        "bash", "-c", script, "agentroll-netns", *command,
    ]  # fmt: skip


def slirp4netns_argv(
    binary: str, *, pid: int, ready_fd: int, exit_fd: int, host_loopback: bool
) -> list[str]:
    argv = [
        binary, "--configure", f"--mtu={MTU}", "--enable-sandbox", "--enable-seccomp",
        f"--ready-fd={ready_fd}", f"--exit-fd={exit_fd}",
    ]  # fmt: skip
    if not host_loopback:
        argv.append("--disable-host-loopback")
    return [*argv, str(pid), TAP]
