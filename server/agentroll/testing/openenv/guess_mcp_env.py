"""The guessing game as an OpenEnv MCP environment: its tools, `guess` and `nap`, behind
openenv-core's own server (`MCPEnvironment`, a FastMCP server in the environment's process).

Run in the openenv environment (`server.py`), never imported by agentroll:
`python -m uvicorn guess_mcp_env:app`. Reset with `{"target": 1-10}` (`"crash_on_step": true`
for an environment whose process dies at the first step; `"raise_on_guess": n` for one whose
`step` raises on the call `guess(n)` alone, as an environment bug one action provokes).
`guess(n)` answers `higher`, `lower` or `correct` (1 to 10; anything else raises);
`nap(seconds)` sleeps; as with `guess_env`, each `call_tool` step is rewarded -0.1, and 1.0
with `done` when correct.
Rewards come only through `step`: MCP's own `tools/call` carries none.
"""

import asyncio
import os
import uuid
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server import Observation, State, create_fastapi_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation


class GuessMcpEnv(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("guess")

        @mcp.tool
        def guess(n: int) -> str:
            """Guess the number, 1 to 10."""
            if not 1 <= n <= 10:
                raise ValueError(f"{n} is not from 1 to 10")
            self._last = (
                "correct" if n == self._target else "higher" if n < self._target else "lower"
            )
            return self._last

        @mcp.tool
        async def nap(seconds: float) -> str:
            """Sleep, then say so (past openenv-core's 30 s bound, its `timeout` answer)."""
            await asyncio.sleep(seconds)
            return "rested"

        super().__init__(mcp)
        self._state = State(episode_id=None, step_count=0)
        self._target = 0
        self._crash = False
        self._raise_on: int | None = None
        self._last = ""

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> Observation:
        self._target = int(kwargs.get("target", 5))
        self._crash = bool(kwargs.get("crash_on_step", False))
        self._raise_on = kwargs.get("raise_on_guess")
        self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
        return Observation(done=False, reward=None, metadata={"prompt": "Guess 1 to 10."})

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        if self._crash:
            os._exit(1)
        magic = self._raise_on is not None and isinstance(action, CallToolAction)
        if magic and action.arguments.get("n") == self._raise_on:
            raise RuntimeError(f"the guessing game chokes on {self._raise_on}")
        self._last = ""
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and isinstance(observation, CallToolObservation):
            self._state.step_count += 1
            observation.done = self._last == "correct"
            observation.reward = 1.0 if observation.done else -0.1
        return observation

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=None, metadata={"error": "call the guess tool"})

    @property
    def state(self) -> State:
        return self._state


app = create_fastapi_app(GuessMcpEnv, CallToolAction, CallToolObservation, max_concurrent_envs=128)
