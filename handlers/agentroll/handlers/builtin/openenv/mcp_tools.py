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
WebSocket, an unexpected error frame or a `transport_error` ends the session: the call is
answered `INTERNAL_ERROR`, every later one too, and when the harness's run ends the failure is
raised here; the handler then asks a replayed control whose it is (`replay.blamed_tools`:
the policy's `agent_error` if the environment fails on that one action, else `infra_error`).

The tool loop's limits hold: past the step budget (the job's `max_turns`) a call is answered
with `isError` and takes no step; after `max_consecutive_errors` refused calls in a row no
call takes a step, and the rollout ends `agent_error` (`invalid_tool_calls`), still scored.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agentroll.handlers.builtin.openenv.session import Episode, Session, open_session
from agentroll.handlers.errors import AgentError, InfraError
from agentroll.handlers.mcp import ToolRefused

POLICY_TOOL_ERRORS = ("tool_not_found", "invalid_args")
RESULT_TOOL_ERRORS = ("execution_error", "timeout")


class OpenEnvTools:
    """The `ToolSource` of one session; the first infrastructure failure is kept in
    `failure` (and raised when the session closes), the policy's breaking of the tool loop's
    rules (too many invalid calls in a row, a call whose answer is too big) in `misconduct`.

    The tool loop's limits hold here too: at most `max_steps` steps (the job's turn limit),
    and after `max_invalid_in_a_row` refused calls in a row no further step is taken."""

    name = "openenv"

    def __init__(
        self, session: Session, episode: Episode, max_steps: int, max_invalid_in_a_row: int
    ) -> None:
        self.session = session
        self.episode = episode
        self.max_steps = max_steps
        self.max_invalid_in_a_row = max_invalid_in_a_row
        self.steps = 0
        self.invalid_in_a_row = 0
        self.failure: InfraError | None = None
        self.misconduct: AgentError | None = None
        # A harness may call tools in parallel; the session answers one frame at a time.
        self.turn = asyncio.Lock()

    async def list_tools(self) -> list[dict[str, Any]]:
        async with self.turn:
            answer = await self._ask("mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            try:
                tools = answer["data"]["result"]["tools"]
                if answer["type"] != "mcp" or not isinstance(tools, list):
                    raise TypeError("no list of tools")
                return [mcp_tool(t) for t in tools if isinstance(t, dict)]
            except (KeyError, AttributeError, TypeError) as exc:
                raise self._fail(f"tools/list: {exc!r}: {json.dumps(answer)[:500]}") from exc

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One step per call, in the order the calls arrive (`done` and the limits checked in
        turn)."""
        async with self.turn:
            if self.episode.done:
                return text_result("The episode is over.", is_error=True)
            if self.misconduct is not None:
                raise ToolRefused(f"{self.misconduct}: no more steps are taken")
            if self.steps >= self.max_steps:
                return text_result(
                    f"The step budget is spent ({self.max_steps} steps).", is_error=True
                )
            self.steps += 1
            try:
                result = await self._step(name, arguments)
            except AgentError as exc:  # the policy's call ended the session (too big an answer)
                self.misconduct = self.misconduct or exc
                return text_result(str(exc), is_error=True)
            except ToolRefused:
                self.invalid_in_a_row += 1
                if self.invalid_in_a_row >= self.max_invalid_in_a_row:
                    self.misconduct = AgentError(
                        f"{self.invalid_in_a_row} invalid tool calls in a row",
                        cause="invalid_tool_calls",
                        finish_reason="tool_errors",
                    )
                raise
            self.invalid_in_a_row = 0
            return result

    async def _step(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        action = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        answer = await self._ask("step", action)
        try:
            return self._step_result(name, answer)
        except (KeyError, AttributeError, TypeError) as exc:
            # The environment's answer is not the shape its protocol promises.
            raise self._fail(f"step: {exc!r}: {json.dumps(answer)[:1000]}") from exc

    def _step_result(self, name: str, answer: dict[str, Any]) -> dict[str, Any]:
        data = answer.get("data") or {}
        if answer["type"] == "error":
            if data.get("code") == "VALIDATION_ERROR":
                self.episode.invalid_actions += 1
                raise ToolRefused(f"invalid call: {json.dumps(data.get('errors'))[:1000]}")
            raise self._fail(f"step failed: {json.dumps(data)[:1000]}")
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
                raise self._fail(f"tool {name}: {kind}: {message}")
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

    async def close(self) -> None:
        """The session's closing handshake, or, with a step still in flight (the harness's run
        ended under it), the WebSocket closed at once: a second receive is not allowed."""
        if self.turn.locked():
            await self.session.ws.close()
        else:
            await self.session.close()

    def _fail(self, message: str) -> InfraError:
        self.failure = self.failure or InfraError(message, cause="openenv_error")
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
    url: str,
    timeout_s: float,
    reset: dict[str, Any],
    episode: Episode,
    limits: tuple[int, int],
) -> AsyncIterator[OpenEnvTools]:
    """A session reset and ready for the harness (`limits`: its step budget and invalid calls
    in a row allowed); closed on leaving. When the harness's run ended (normally or by an
    exception, never by a cancellation), the first infrastructure failure is raised (it
    outranks how the harness ended), else the policy's misconduct."""
    async with aiohttp.ClientSession(trust_env=False) as http:
        session = await open_session(http, url, timeout_s, reset, episode)
        tools = OpenEnvTools(session, episode, *limits)
        try:
            yield tools
        except Exception:
            await tools.close()
            if tools.failure is not None:
                raise tools.failure from None
            raise
        except BaseException:
            await tools.close()
            raise
        await tools.close()
        if tools.failure is not None:
            raise tools.failure
        if tools.misconduct is not None:
            raise tools.misconduct
