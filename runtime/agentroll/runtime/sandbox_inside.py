"""What every backend launches: the sandbox's environment and the action server's command.

Shared by bwrap, singularity and local, so that choosing one backend imports none of the
others' code. The sandbox-side paths here (socket directory, PATH) are what bwrap and
Apptainer sandboxes see; the local runtime passes its host paths instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentroll.runtime.base import MARKER_ENV, OWNER_ENV, Limits, SandboxSpec
from agentroll.runtime.limits import rlimit_args
from agentroll.runtime.sandbox import SOCKET_NAME

#: Where the socket directory appears inside every isolated sandbox.
SOCKET_DIR_INSIDE = "/run/agentroll"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


def marker_env(sandbox_id: str, owner: str) -> dict[str, str]:
    """The variables teardown and the reaper find a sandbox's processes by."""
    return {MARKER_ENV: sandbox_id, OWNER_ENV: owner}


def sandbox_env(
    spec: SandboxSpec,
    sandbox_id: str,
    owner: str,
    address: str | None,
    image_env: dict[str, str] | None = None,
    *,
    home: str | None = None,
) -> dict[str, str]:
    """The sandbox's whole environment: defaults, the image's, the spec's, then the markers.

    `home` defaults to the spec's workdir as the sandbox sees it.
    """
    env = {"PATH": DEFAULT_PATH, "HOME": home or spec.workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    env.update(image_env or {})
    env.update(dict(spec.env))
    env.update(marker_env(sandbox_id, owner))
    if address:
        env["AGENTROLL_SANDBOX_ADDR"] = address
    return env


def action_server_argv(
    python: str,
    workdir: str,
    limits: Limits,
    cgroup_fds: Sequence[int] = (),
    *,
    socket: str = f"{SOCKET_DIR_INSIDE}/{SOCKET_NAME}",
    roots: Sequence[str] | None = None,
    listen_fd: int | None = None,
) -> list[str]:
    """The sandbox's action server: serving only the host, confining the agent's tools.

    The agent's file tools may touch `roots` only (default: the workdir and /tmp). With
    `listen_fd` it serves the host's own listening socket instead of creating one.
    """
    roots = (workdir, "/tmp") if roots is None else roots
    listen = ["--listen-fd", str(listen_fd)] if listen_fd is not None else []
    return [
        python, "-m", "agentroll.runtime.action", "--socket", socket, *listen, "--single-client",
        "--workdir", workdir, *(arg for root in roots for arg in ("--root", root)),
        *rlimit_args(limits),
        *(arg for fd in cgroup_fds for arg in ("--agent-cgroup-fd", str(fd))),
    ]  # fmt: skip
