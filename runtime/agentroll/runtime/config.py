"""Runtime configuration: one pydantic model per backend, chosen by ``type``.

``RuntimeConfig`` is a discriminated union; each member's ``build()`` imports its backend
lazily, so choosing ``bwrap`` never imports the Apptainer code and vice versa::

    runtime = BwrapConfig().build(instance_id="srv-1")
    sandbox = await runtime.start(SandboxSpec(), timeout=10)
"""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentroll.runtime.netaddr import DEFAULT_RANGE
from agentroll.runtime.netns import DEFAULT_BLOCKED_NETWORKS

if TYPE_CHECKING:
    from agentroll.runtime.bwrap import BwrapRuntime
    from agentroll.runtime.local import LocalRuntime
    from agentroll.runtime.singularity import SingularityRuntime


class CommonConfig(BaseModel):
    """What every runtime's configuration holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Leases, socket directories and workspaces; default $XDG_RUNTIME_DIR/agentroll or
    #: /tmp/agentroll-<uid>. Servers sharing it reap each other's orphans, never live ones.
    state_dir: Path | None = None
    #: Loopback addresses handed to sandboxes that share the host network.
    loopback_range: str = DEFAULT_RANGE
    #: Interpreter that runs the action server inside the sandbox; None picks the host venv's
    #: for host-root sandboxes and ``python3`` inside images.
    python: str | None = None
    #: CPU niceness of every sandbox process (the action server and everything the agent
    #: starts, execs included). When sandboxes saturate the node, the server's event loop
    #: (the API, health checks, every rollout's LLM traffic) still gets the CPU first;
    #: 0 runs sandboxes at the server's own priority.
    nice: int = Field(10, ge=0, le=19)


class SandboxNetworkConfig(BaseModel):
    """What a sandbox that asks for network may reach (bwrap; see runtime/netns.py).

    It always reaches the internet through its own user-mode NAT (slirp4netns), never the
    node's loopback, the node's own addresses or the networks the node is attached to.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: IPv4 ranges unreachable from inside, on top of the node's own addresses and networks.
    blocked_networks: tuple[IPv4Network, ...] = tuple(
        IPv4Network(n) for n in DEFAULT_BLOCKED_NETWORKS
    )
    #: TCP ports of the node's loopback a sandbox may reach, at 10.0.2.2:PORT (e.g. a package
    #: mirror). Needs ``iptables`` on the node.
    allowed_host_ports: tuple[Annotated[int, Field(ge=1, le=65535)], ...] = ()
    #: The slirp4netns executable; None: from PATH.
    slirp4netns_path: str | None = None


class BwrapConfig(CommonConfig):
    type: Literal["bwrap"] = "bwrap"
    bwrap_path: str | None = None
    #: uid/gid of the sandbox user inside its user namespace.
    sandbox_uid: int = Field(65534, ge=1)
    #: Bind the host interpreter, venv and agentroll source into the sandbox. None: only for
    #: host-root sandboxes (images are expected to have agentroll installed).
    host_python: bool | None = None
    #: Sandboxes that ask for network: what they may reach.
    network: SandboxNetworkConfig = SandboxNetworkConfig()

    def build(self, *, instance_id: str | None = None) -> BwrapRuntime:
        from agentroll.runtime.bwrap import BwrapRuntime

        return BwrapRuntime(self, instance_id=instance_id)


class SingularityConfig(CommonConfig):
    type: Literal["singularity"] = "singularity"
    #: ``apptainer`` or ``singularity`` executable; None auto-detects (apptainer first).
    binary: str | None = None
    #: Image used when a spec names none (a .sif file or a sandbox directory).
    default_image: Path | None = None
    fakeroot: bool = False
    #: Give each instance its own empty network namespace (``--network none``). Off, every
    #: instance shares the node's network, the server's loopback included (a warning says so).
    network_isolation: bool = True
    #: ``--writable-tmpfs`` (an in-memory overlay) so the image root is writable.
    writable_tmpfs: bool = True
    #: Persistent overlay image/directory instead of --writable-tmpfs.
    overlay: Path | None = None
    #: Admission gates: concurrent ``instance start`` per image and per node (mount storms).
    max_starts_per_image: int = Field(8, ge=1)
    max_starts_per_node: int = Field(32, ge=1)
    #: Seconds ``instance stop`` may take before the instance is killed.
    stop_timeout_s: float = Field(10.0, gt=0)
    host_python: bool = False
    #: Extra environment for the CLI itself (not the sandbox), e.g. APPTAINER_CACHEDIR.
    cli_env: dict[str, str] = Field(default_factory=dict)

    def build(self, *, instance_id: str | None = None) -> SingularityRuntime:
        from agentroll.runtime.singularity import SingularityRuntime

        return SingularityRuntime(self, instance_id=instance_id)


class LocalConfig(CommonConfig):
    """No isolation at all: trusted development only. Refuses to build unless ``enabled``."""

    type: Literal["local"] = "local"
    enabled: bool = False

    def build(self, *, instance_id: str | None = None) -> LocalRuntime:
        from agentroll.runtime.local import LocalRuntime

        return LocalRuntime(self, instance_id=instance_id)


RuntimeConfig = Annotated[
    BwrapConfig | SingularityConfig | LocalConfig, Field(discriminator="type")
]
