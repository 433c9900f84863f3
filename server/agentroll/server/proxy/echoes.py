"""Tool calls a harness sends back in another form, rendered as the model sampled them.

A harness that validates a tool call's input may echo it back re-serialised in its history:
keys in its schema's order, the schema's defaults filled in (Claude Code sends Edit's
`{"file_path": ..., "old_string": ..., "new_string": ...}` back as
`{"replace_all": false, "file_path": ..., ...}`). Rendered as sent, the history would no longer
start with the tokens of the turn the model produced, and every turn would start a new chain.

So the proxy remembers each call it returned. A call in a later request with the same id and
name, whose arguments equal the returned ones up to key order and the tool schema's defaults
for keys the model left out, is rendered with the returned arguments. Any other difference (a
real edit of the call) is kept as the harness sent it: that history is not what was sampled.
"""

import json
from typing import Any

from agentroll.server.schema.messages import ChatMessage, ChatToolCall, ToolSpec


def _defaults(tools: list[ToolSpec]) -> dict[str, dict[str, Any]]:
    """Each offered tool's schema defaults: tool name -> {argument: default}."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function")
        params = fn.get("parameters") if isinstance(fn, dict) else None
        props = params.get("properties") if isinstance(params, dict) else None
        if isinstance(fn, dict) and isinstance(props, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = {
                key: prop["default"]
                for key, prop in props.items()
                if isinstance(prop, dict) and "default" in prop
            }
    return out


def _same_call(echoed: str, returned: str, defaults: dict[str, Any]) -> bool:
    try:
        echo, sent = json.loads(echoed), json.loads(returned)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python parses
        return False
    if not (isinstance(echo, dict) and isinstance(sent, dict)):
        return False
    # Every sampled argument as sampled; anything else the schema's default for that key.
    added = {k: v for k, v in echo.items() if k not in sent}
    unchanged = {k: v for k, v in echo.items() if k in sent}
    return bool(
        unchanged == sent and all(k in defaults and defaults[k] == v for k, v in added.items())
    )


class ReturnedCalls:
    """The tool calls one rollout's proxy returned, by call id."""

    def __init__(self) -> None:
        self._calls: dict[str, tuple[str, str]] = {}
        """id -> (name, arguments as returned)."""
        self._judged: dict[str, tuple[str, bool]] = {}
        """id -> (arguments as last echoed, whether they are the returned call's)."""

    def remember(self, reply: ChatMessage) -> None:
        for call in reply.get("tool_calls") or []:
            fn = call["function"]
            self._calls[call["id"]] = (fn["name"], fn["arguments"])

    def restore(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> list[ChatMessage]:
        """`messages` with every echoed call in the form it was returned in."""
        defaults = _defaults(tools)
        return [
            {**m, "tool_calls": [self._restored(c, defaults) for c in m["tool_calls"]]}
            if m.get("role") == "assistant" and m.get("tool_calls")
            else m
            for m in messages
        ]

    def _restored(self, call: ChatToolCall, defaults: dict[str, dict[str, Any]]) -> ChatToolCall:
        """The call as returned if it echoes one (calls come sanitised: string id, name and
        arguments)."""
        fn, call_id = call["function"], call["id"]
        known = self._calls.get(call_id)
        if known is None or fn["name"] != known[0] or fn["arguments"] == known[1]:
            return call
        judged = self._judged.get(call_id)
        if judged is None or judged[0] != fn["arguments"]:  # judged once per echoed form
            same = _same_call(fn["arguments"], known[1], defaults.get(known[0], {}))
            judged = self._judged[call_id] = (fn["arguments"], same)
        return {**call, "function": {**fn, "arguments": known[1]}} if judged[1] else call
