"""The conversation's types (`agentroll.server.schema.messages`): checked by mypy, free at
run time, one home for every layer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import agentroll.handlers
from agentroll.handlers.toolcalls import HermesParser
from agentroll.handlers.toolcalls.render import assistant_message, tool_message
from agentroll.server.schema import messages

ROOT = Path(__file__).resolve().parents[3]


def _mypy(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "snippet.py"
    source.write_text(
        "from agentroll.handlers import ChatMessage, ToolSpec\n"
        + textwrap.dedent(body).lstrip("\n")
    )
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / ".mypy"), str(source)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_mypy_catches_a_misspelt_key_and_a_wrong_role(tmp_path: Path) -> None:
    out = _mypy(
        tmp_path,
        """
        reply: ChatMessage = {"role": "assistant", "contnet": "hi"}
        asked: ChatMessage = {"role": "robot", "content": "hi"}
        tool: ToolSpec = {"type": "function", "function": {"description": "no name"}}
        """,
    )
    assert out.returncode == 1, out.stdout
    assert 'snippet.py:2: error: Extra key "contnet"' in out.stdout
    assert "snippet.py:3: error: Incompatible types (expression has type \"Literal['robot']\"" in (
        out.stdout
    )
    assert 'snippet.py:4: error: Missing key "name" for TypedDict "FunctionSpec"' in out.stdout


def test_mypy_accepts_what_the_agent_loop_writes(tmp_path: Path) -> None:
    out = _mypy(
        tmp_path,
        """
        call: ChatMessage = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ],
        }
        result: ChatMessage = {"role": "tool", "content": "ok", "tool_call_id": "c1"}
        spec: ToolSpec = {"type": "function", "function": {"name": "bash", "parameters": {}}}
        """,
    )
    assert out.returncode == 0, out.stdout


def test_mypy_catches_a_misspelt_key_in_a_translated_conversation_and_a_trajectory(
    tmp_path: Path,
) -> None:
    """The proxy's translators and a trajectory's `messages`/`tools` hand out the same
    types: a typo reading either is an error before anything runs."""
    out = _mypy(
        tmp_path,
        """
        from agentroll.server.proxy.anthropic_api import parse_messages
        from agentroll.server.schema import Trajectory

        request = parse_messages({})
        request.messages[0]["tool_call"]
        request.tools[0]["function"]["parameter"]
        trajectory = Trajectory.model_validate({})
        trajectory.messages[0]["tool_call_ids"]
        trajectory.tools[0]["fuction"]
        fine = (request.messages[0]["role"], trajectory.messages[0].get("reasoning_content"))
        """,
    )
    assert out.returncode == 1, out.stdout
    assert 'snippet.py:6: error: TypedDict "ChatMessage" has no key "tool_call"' in out.stdout
    assert 'snippet.py:7: error: TypedDict "FunctionSpec" has no key "parameter"' in out.stdout
    assert 'snippet.py:9: error: TypedDict "ChatMessage" has no key "tool_call_ids"' in out.stdout
    assert 'snippet.py:10: error: TypedDict "ToolSpec" has no key "fuction"' in out.stdout
    assert "snippet.py:11" not in out.stdout
    assert "Found 4 errors in 1 file" in out.stdout


def test_messages_stay_plain_dicts_at_run_time() -> None:
    reply = HermesParser().parse(
        '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>'
    )
    message = assistant_message(reply.with_call_ids("call_1_"))
    assert type(message) is dict
    assert message["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}
    observation = tool_message(reply.calls[0], "a.txt")
    assert type(observation) is dict and observation["role"] == "tool"


def test_handlers_export_the_shared_types_and_the_old_turn_name() -> None:
    assert agentroll.handlers.ChatMessage is messages.ChatMessage
    assert agentroll.handlers.ToolSpec is messages.ToolSpec
    assert agentroll.handlers.Turn is agentroll.handlers.SampledTurn
