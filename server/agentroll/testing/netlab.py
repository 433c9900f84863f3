"""A stand-in for "the internet" that never leaves this machine: two network namespaces.

``NetLab`` (root only) makes two namespaces of its own, each held by a ``sleep`` it owns:

* ``node``: a stand-in for the node's uplink, with a veth whose only route (the default one)
  leads to ``internet``;
* ``internet``: the other end of the veth (``CLUSTER_PEER``, a private address, so it also
  stands for a cluster neighbour) and a public-looking address on its loopback
  (``PUBLIC_ADDR``, from the documentation range 198.51.100.0/24). Its services answer on both:
  a TCP listener on ``port`` that sends ``token`` to whoever connects, one on ``port + 1``
  that streams as many MiB as the client asks for (``"256\\n"``, for throughput), and a DNS
  server that answers every A query with ``PUBLIC_ADDR``.

``slirp4netns`` (a script for ``SandboxNetworkConfig.slirp4netns_path``) runs the real
slirp4netns in ``node`` with its own ``/etc/resolv.conf`` naming the lab's DNS server, so a
sandbox's traffic leaves through the lab's veth and its DNS queries reach the lab. No address
outside loopback is ever added except inside these namespaces, and nothing routes out of them.

``python -m agentroll.testing.netlab PORT TOKEN`` runs the services (inside ``internet``).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

NODE_ADDR = "10.231.0.1"
CLUSTER_PEER = "10.231.0.2"
PUBLIC_ADDR = "198.51.100.7"
_CHUNK = b"\0" * (1 << 20)


class NetLab:
    """The two namespaces and the services; ``close`` kills every process it started."""

    def __init__(self, workdir: Path, *, port: int = 8080, token: str = "hello-from-internet"):
        self.port, self.token = port, token
        self._procs: list[subprocess.Popen[bytes]] = []
        try:
            self.node = self._holder()
            self.internet = self._holder()
            self._wire()
            served = subprocess.Popen(
                [*self.enter(self.internet), sys.executable, "-m", __name__, str(port), token],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
            )
            self._procs.append(served)
            assert served.stdout is not None
            if served.stdout.readline().strip() != b"serving":
                raise RuntimeError("the lab's internet services did not start")
            resolv = workdir / "lab-resolv.conf"
            resolv.write_text(f"nameserver {PUBLIC_ADDR}\n")
            self.slirp4netns = workdir / "lab-slirp4netns"
            bind = f"mount --bind {shlex.quote(str(resolv))} /etc/resolv.conf"
            inner = f'{bind} && exec slirp4netns "$@"'
            self.slirp4netns.write_text(
                "#!/bin/sh\n"
                f"exec {shlex.join(self.enter(self.node))} unshare --mount --propagation private "
                f'sh -c {shlex.quote(inner)} lab-slirp4netns "$@"\n'
            )
            self.slirp4netns.chmod(0o755)
        except BaseException:
            self.close()
            raise

    def _holder(self) -> int:
        proc = subprocess.Popen(["unshare", "--net", "--", "sleep", "3600"])
        self._procs.append(proc)
        own = os.readlink("/proc/self/ns/net")
        for _ in range(1000):  # until unshare has made the namespace and exec'd sleep
            try:
                if os.readlink(f"/proc/{proc.pid}/exe").endswith("sleep"):
                    break
            except OSError:
                pass
            threading.Event().wait(0.005)
        if os.readlink(f"/proc/{proc.pid}/ns/net") == own:
            raise RuntimeError("unshare --net did not make a network namespace")
        return proc.pid

    def enter(self, holder: int) -> list[str]:
        """The command prefix that runs a command in a lab namespace."""
        return ["nsenter", f"--net=/proc/{holder}/ns/net", "--"]

    def run(self, holder: int, *argv: str) -> str:
        done = subprocess.run(
            [*self.enter(holder), *argv], capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in the lab failed: {done.stderr.strip()}")
        return done.stdout

    def _wire(self) -> None:
        node, inet = self.node, self.internet
        self.run(node, "ip", "link", "add", "lab0", "type", "veth",
                 "peer", "name", "lab1", "netns", str(inet))  # fmt: skip
        for cmd in (
            "link set lo up", f"addr add {NODE_ADDR}/24 dev lab0", "link set lab0 up",
            f"route add default via {CLUSTER_PEER}",
        ):  # fmt: skip
            self.run(node, "ip", *cmd.split())
        for cmd in (
            "link set lo up", f"addr add {PUBLIC_ADDR}/32 dev lo",
            f"addr add {CLUSTER_PEER}/24 dev lab1", "link set lab1 up",
        ):  # fmt: skip
            self.run(inet, "ip", *cmd.split())

    def close(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
        self._procs.clear()


def _serve_tcp(listener: socket.socket, token: bytes | None) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_answer, args=(conn, token), daemon=True).start()


def _answer(conn: socket.socket, token: bytes | None) -> None:
    """Send ``token``; without one, stream the number of MiB the client's first line asks for."""
    with conn:
        conn.settimeout(30)
        try:
            if token is not None:
                conn.sendall(token)
                return
            for _ in range(int(conn.recv(16).split()[0])):
                conn.sendall(_CHUNK)
        except (OSError, ValueError, IndexError):
            pass


def dns_answer(query: bytes, address: str) -> bytes:
    """A response to a one-question DNS query: one A record with ``address``."""
    header, question = query[:12], query[12:]
    end = question.index(b"\0") + 5  # the name, then type and class
    (ident,) = struct.unpack("!H", header[:2])
    reply = struct.pack("!HHHHHH", ident, 0x8180, 1, 1, 0, 0) + question[:end]
    record = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(address)
    return reply + record


def _serve_dns(sock: socket.socket) -> None:
    while True:
        query, peer = sock.recvfrom(512)
        try:
            sock.sendto(dns_answer(query, PUBLIC_ADDR), peer)
        except (ValueError, struct.error, OSError):
            continue


def main() -> None:
    port, token = int(sys.argv[1]), sys.argv[2].encode()
    listener = socket.create_server(("0.0.0.0", port))
    bulk = socket.create_server(("0.0.0.0", port + 1))
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("0.0.0.0", 53))
    threading.Thread(target=_serve_dns, args=(dns,), daemon=True).start()
    threading.Thread(target=_serve_tcp, args=(bulk, None), daemon=True).start()
    print("serving", flush=True)
    _serve_tcp(listener, token)


if __name__ == "__main__":
    main()
