"""Race-free loopback addresses: each networked sandbox owns one 127.x.y.z.

Sandboxes that share the host network (Apptainer without network isolation) would collide on
TCP ports; each gets its own address instead and binds there. (A bwrap sandbox with network
has a network namespace of its own, see netns.py, and needs none.)
Ownership is a file ``<state>/addr/<address>`` created with O_CREAT|O_EXCL, which is atomic
across processes and servers sharing the state directory. The file names its owner; release
unlinks it, and the reaper releases the addresses of dead sandboxes.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path

from agentroll.runtime.errors import AddressExhausted

#: 127.0.0.0/24 is left alone (127.0.0.1 is everyone's localhost).
DEFAULT_RANGE = "127.1.0.0/16"
_LOCALHOST_NET = ipaddress.IPv4Network("127.0.0.0/24")


class LoopbackAllocator:
    def __init__(self, directory: Path, network: str = DEFAULT_RANGE) -> None:
        self.dir = directory
        self.network = ipaddress.IPv4Network(network)
        if not self.network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"{network} is not inside 127.0.0.0/8")
        self._next = 0

    def _candidates(self) -> Iterator[str]:
        first = int(self.network.network_address) + 1
        count = max(self.network.num_addresses - 2, 1)
        # Start after the last allocation so a just-released address is not reused at once.
        for i in range(count):
            addr = ipaddress.IPv4Address(first + (self._next + i) % count)
            if addr not in _LOCALHOST_NET:
                yield str(addr)

    def allocate(self, owner: str) -> str:
        """Claim a free address for ``owner`` (a sandbox id)."""
        for i, addr in enumerate(self._candidates()):
            try:
                fd = os.open(self.dir / addr, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(owner)
            self._next += i + 1
            return addr
        raise AddressExhausted(f"no free loopback address in {self.network}")

    def owner(self, addr: str) -> str | None:
        try:
            return (self.dir / addr).read_text()
        except FileNotFoundError:
            return None

    def release(self, addr: str, owner: str | None = None) -> None:
        """Give ``addr`` back; with ``owner``, only if that sandbox still owns it."""
        if owner is not None and self.owner(addr) != owner:
            return
        (self.dir / addr).unlink(missing_ok=True)
