"""Local runtime: the action server as a plain child process. NO isolation.

For trusted development only: the "sandbox" sees the whole host, the network, and runs as the
server's user. It must be enabled explicitly (``LocalConfig(enabled=True)``) and warns on every
start. It still gets its own workspace and socket directory, an explicit environment (the
server's is never inherited), rlimits on the tools, a socket that serves only the host, the
action server's guards that need no namespace (action/guard.py; as an ordinary process of the
same user it can still be killed by the agent), ``stop_agent`` (the server is a child subreaper,
so every process the agent starts stays below it) and the same owned teardown as the others.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentroll.runtime.base import SandboxSpec
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.errors import RuntimeUnavailable, SandboxStartError
from agentroll.runtime.lease import Lease
from agentroll.runtime.limits import prlimit_argv
from agentroll.runtime.sandbox import ProcessSandbox
from agentroll.runtime.sandbox_inside import action_server_argv, sandbox_env

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentroll.runtime.config import LocalConfig

log = logging.getLogger(__name__)


class LocalSandbox(ProcessSandbox):
    env: dict[str, str]

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return [*prlimit_argv(self.spec.limits), *argv]

    def exec_env(self) -> dict[str, str]:
        return self.env

    def exec_cwd(self) -> str | None:
        return str(self.workdir)


class LocalRuntime(BaseRuntime):
    name = "local"
    isolated = False

    def __init__(self, config: LocalConfig, *, instance_id: str | None = None) -> None:
        if not config.enabled:
            raise RuntimeUnavailable(
                "the local runtime has no isolation and is disabled; enable it explicitly "
                "(LocalConfig(enabled=True)) for trusted development only"
            )
        super().__init__(config, instance_id=instance_id)
        self.config = config

    def _needs_address(self, spec: SandboxSpec) -> bool:
        return True  # always on the host network

    def _create(
        self, sandbox_id: str, spec: SandboxSpec, base: Path, lease: Lease, address: str | None
    ) -> ProcessSandbox:
        if spec.image is not None or spec.binds:
            raise SandboxStartError("the local runtime supports neither images nor binds")
        sb = LocalSandbox(
            sandbox_id=sandbox_id, spec=spec, base_dir=base, workdir=base / "work",
            address=address, lease=lease, scanner=self.scanner,
        )  # fmt: skip
        sb.env = sandbox_env(spec, sandbox_id, self.instance_id, address, home=str(base / "work"))
        return sb

    async def _boot(self, sandbox: ProcessSandbox, deadline: float) -> None:
        assert isinstance(sandbox, LocalSandbox)
        import asyncio

        log.warning(
            "local runtime: sandbox %s runs WITHOUT isolation (trusted development only)",
            sandbox.id,
        )
        work = str(sandbox.workdir)
        argv = action_server_argv(
            self.config.python or sys.executable, work, sandbox.spec.limits,
            socket=str(sandbox.socket_path), roots=(work,),
        )  # fmt: skip
        await sandbox.launch(argv, sandbox.env)
        self.record(sandbox)
        await sandbox.wait_ready(max(deadline - asyncio.get_running_loop().time(), 0.1))
