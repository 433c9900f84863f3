"""An OpenEnv MCP environment's tools, lent to a harness over MCP.

Under a harness the episode's session opens just before the harness starts (`reset`), and
closes when it ends, on every path. `tools/list` goes to the environment as an `mcp` frame
(its MCP client's `tools/list`: no step, no reward); each `tools/call` is one `step` with a
`call_tool` action, so the environment's rewards and `done` accumulate in the episode as it
emits them (`Episode.add`), exactly as under the tool loop.

Whose fault: a call the environment refuses (an unknown tool, arguments that do not fit: its
`tool_not_found` / `invalid_args`, or a `VALIDATION_ERROR` frame) is the policy's, answered
as a JSON-RPC error; a tool that ran and failed (`execution_error`, `timeout`) is a result
with `isError`; a call after the episode is done is answered so, without a step. A dropped
WebSocket, an unexpected error frame or a `transport_error` is the environment's: the call is
answered `INTERNAL_ERROR`, every later one too, and the rollout ends `infra_error` when the
harness's run ends.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agentroll.handlers.builtin.openenv.session import Episode, Session, open_session
from agentroll.handlers.errors import InfraError
from agentroll.handlers.mcp import ToolRefused

POLICY_TOOL_ERRORS = ("tool_not_found", "invalid_args")
RESULT_TOOL_ERRORS = ("execution_error", "timeout")


class OpenEnvTools:
    """The `ToolSource` of one session; the first infrastructure failure is kept in
    `failure` (and raised when the session closes)."""

    name = "openenv"

    def __init__(self, session: Session, episode: Episode) -> None:
        self.session = session
        self.episode = episode
        self.failure: InfraError | None = None
        # A harness may call tools in parallel; the session answers one frame at a time.
        self.turn = asyncio.Lock()

    async def list_tools(self) -> list[dict[str, Any]]:
        async with self.turn:
            return await self._list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One step per call, in the order the calls arrive (`done` checked in turn)."""
        async with self.turn:
            return await self._call_tool(name, arguments)

    async def _list_tools(self) -> list[dict[str, Any]]:
        answer = await self._ask("mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        result = (answer.get("data") or {}).get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if answer.get("type") != "mcp" or not isinstance(tools, list):
            raise self._fail(f"tools/list: {json.dumps(answer)[:500]}", "openenv_error")
        return [mcp_tool(t) for t in tools if isinstance(t, dict)]

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.episode.done:
            return text_result("The episode is over.", is_error=True)
        action = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        answer = await self._ask("step", action)
        data = answer.get("data") or {}
        if answer["type"] == "error":
            if data.get("code") == "VALIDATION_ERROR":
                self.episode.invalid_actions += 1
                raise ToolRefused(f"invalid call: {json.dumps(data.get('errors'))[:1000]}")
            raise self._fail(f"step failed: {json.dumps(data)[:1000]}", "openenv_error")
        try:
            self.episode.add(data)
        except InfraError as exc:
            self.failure = self.failure or exc
            raise
        observation = data.get("observation") or {}
        error = observation.get("error")
        if isinstance(error, dict):
            kind, message = error.get("error_type"), str(error.get("message"))
            if kind in POLICY_TOOL_ERRORS:
                self.episode.invalid_actions += 1
                raise ToolRefused(f"{kind}: {message}")
            if kind not in RESULT_TOOL_ERRORS:
                raise self._fail(f"tool {name}: {kind}: {message}", "openenv_error")
            return text_result(f"{kind}: {message}", is_error=True)
        return call_result(observation.get("result"))

    async def _ask(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None:
            raise self.failure
        try:
            return await self.session.ask(kind, data, answers=("observation", "error", "mcp"))
        except InfraError as exc:
            self.failure = exc
            raise

    def _fail(self, message: str, cause: str) -> InfraError:
        self.failure = self.failure or InfraError(message, cause=cause)
        return self.failure


def mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool description from the environment's (either spelling of the schema)."""
    schema = tool.get("inputSchema", tool.get("input_schema"))
    return {
        "name": str(tool.get("name")),
        "description": str(tool.get("description") or ""),
        "inputSchema": schema if isinstance(schema, dict) else {"type": "object"},
    }


def call_result(result: Any) -> dict[str, Any]:
    """An MCP `CallToolResult` from the observation's `result` (FastMCP's, serialised)."""
    if not isinstance(result, dict):
        return text_result(json.dumps(result, ensure_ascii=False))
    content = result.get("content")
    is_error = bool(result.get("is_error", result.get("isError", False)))
    if not isinstance(content, list):
        return text_result(json.dumps(result, ensure_ascii=False), is_error=is_error)
    texts = [
        {"type": "text", "text": str(c["text"])}
        if isinstance(c, dict) and c.get("type") == "text"
        else {"type": "text", "text": json.dumps(c, ensure_ascii=False)}
        for c in content
    ]
    return {"content": texts, "isError": is_error}


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


@contextlib.asynccontextmanager
async def served_tools(
    url: str, timeout_s: float, reset: dict[str, Any], episode: Episode
) -> AsyncIterator[OpenEnvTools]:
    """A session reset and ready for the harness; closed on leaving, its first
    infrastructure failure then raised (it outranks how the harness ended)."""
    async with aiohttp.ClientSession(trust_env=False) as http:
        session = await open_session(http, url, timeout_s, reset, episode)
        tools = OpenEnvTools(session, episode)
        try:
            yield tools
        finally:
            await session.close()
            if tools.failure is not None:
                raise tools.failure
