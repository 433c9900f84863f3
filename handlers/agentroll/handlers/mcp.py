"""A task's tools served to a harness over MCP (streamable HTTP, JSON answers only).

A task that has tools of its own (an OpenEnv environment's) lends them to the harness
through the rollout's LLM proxy: `POST /mcp` on the proxy's address, with the rollout's key
(`Authorization: Bearer ...`). `McpServer` answers the JSON-RPC messages a client sends:
`initialize`, `ping`, `tools/list`, `tools/call`, and notifications (answered 202 with no
message). Anything else is a JSON-RPC error the client sees.

Whose fault: a call the task refuses (an unknown tool, arguments that do not fit) is the
policy's, answered as a JSON-RPC error (`INVALID_PARAMS`); a tool that ran and failed is a
result with `isError`. A `ToolSource` that raises `InfraError` (its server is gone) is
answered `INTERNAL_ERROR`; the task then ends the rollout as `infra_error`.
"""

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from agentroll.handlers.errors import InfraError, ToolRefused

PROTOCOL_VERSION = "2025-06-18"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND = -32700, -32600, -32601
INVALID_PARAMS, INTERNAL_ERROR = -32602, -32603

McpAnswer = Callable[[Any], Coroutine[Any, Any, dict[str, Any] | None]]
"""One JSON-RPC message in, its answer out (None: a notification, nothing to answer)."""


class ToolSource(Protocol):
    name: str
    """The server's name as the harness shows it (e.g. `mcp__NAME__tool` in Claude Code)."""

    async def list_tools(self) -> list[dict[str, Any]]:
        """MCP tool descriptions: `name`, `description`, `inputSchema`."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """An MCP `CallToolResult` (`content`, `isError`); `ToolRefused` for the policy's bad
        call, `InfraError` when the tools are gone."""
        ...


class McpServer:
    def __init__(self, tools: ToolSource) -> None:
        self.tools = tools

    async def answer(self, message: Any) -> dict[str, Any] | None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message (batches unsupported)")
        method, ident = message.get("method"), message.get("id")
        if "id" not in message:
            return None  # a notification (notifications/initialized, cancelled, ...)
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        try:
            result = await self._result(method, params)
        except ToolRefused as exc:
            return error(ident, INVALID_PARAMS, str(exc))
        except InfraError as exc:
            return error(ident, INTERNAL_ERROR, f"the tools are unavailable: {exc}")
        if result is None:
            return error(ident, METHOD_NOT_FOUND, f"method not found: {str(method)[:100]}")
        return {"jsonrpc": "2.0", "id": ident, "result": result}

    async def _result(self, method: Any, params: dict[str, Any]) -> dict[str, Any] | None:
        """The method's result; None for a method this server does not serve (an exception
        of the tool source is never mistaken for one)."""
        if method == "initialize":
            return {
                "protocolVersion": params.get("protocolVersion") or PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.tools.name, "version": "1"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": await self.tools.list_tools()}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments", {})
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise ToolRefused("tools/call needs a tool `name` and `arguments` (an object)")
            return await self.tools.call_tool(name, arguments)
        return None


def error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
