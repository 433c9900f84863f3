"""What tool-using scripted rules share: reading the conversation, writing Hermes calls.

A scripted agent is stateless: every turn it re-reads the whole conversation (system prompt
with the offered tools, the task, its own earlier calls and the tool responses) and decides
the next step from it, as a real model would.
"""

import json
import re
from typing import Any

from agentroll.testing.scripted_llm.policy import Conversation, Reply

_TOOLS_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)


def offered_tools(conv: Conversation) -> set[str]:
    """Names of the tools the chat template listed in the system prompt."""
    system = conv.messages[0] if conv.messages and conv.messages[0].role == "system" else None
    block = _TOOLS_BLOCK.search(system.content) if system is not None else None
    names = set()
    for line in block.group(1).splitlines() if block else []:
        try:
            tool = json.loads(line)
        except ValueError:
            continue
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def task_text(conv: Conversation) -> str:
    """The first user message: where the task is stated."""
    first = next((m for m in conv.messages if m.role == "user"), None)
    return first.content if first is not None else ""


def step(conv: Conversation) -> int:
    """How many turns the agent has already taken."""
    return sum(1 for m in conv.messages if m.role == "assistant" and m.complete)


def last_tool_output(conv: Conversation) -> str:
    last = conv.last("tool")
    return last.content if last is not None else ""


def call(name: str, arguments: dict[str, Any], thought: str = "") -> Reply:
    """One Hermes tool call, as Qwen2.5-style models write it."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    prefix = f"{thought}\n" if thought else ""
    return Reply(f"{prefix}<tool_call>\n{body}\n</tool_call>")


def write_file(tools: set[str], path: str, text: str, thought: str) -> Reply:
    """Create a file with the editor when offered, else with a bash here-document."""
    if "str_replace_editor" in tools:
        args = {"command": "create", "path": path, "file_text": text}
        return call("str_replace_editor", args, thought)
    return call(
        "bash", {"command": f"cat > {path} <<'AGENTROLL_EOF'\n{text}AGENTROLL_EOF"}, thought
    )
