"""A task's own tools for a harness over MCP: which agents may run such a task (refused at
submission otherwise), and where each preset that speaks MCP is told of the server."""

import json
from typing import Any

import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.handlers.harness import API_KEY, ClaudeCodeHarness, ShellHarness
from agentroll.handlers.harness.base import MCP_URL
from agentroll.server.schema import JobRequest

OPENENV = {"server": {"url": "http://env:8000"}, "reset": {"target": 3}}


def validate(agent: dict[str, Any] | None) -> None:
    fields = {"task": "openenv", "instance": OPENENV}
    request = JobRequest.model_validate(fields if agent is None else {**fields, "agent": agent})
    HandlerRegistry().for_job(request).validate_instance(dict(OPENENV))


def test_an_openenv_task_runs_under_its_own_agent_or_a_preset_that_speaks_mcp() -> None:
    validate(None)
    validate({"type": "shell", "command": "x"})
    validate({"type": "claude_code"})
    with pytest.raises(ValueError, match="does not write codex's MCP configuration yet"):
        validate({"type": "codex"})
    with pytest.raises(ValueError, match=r"\(it does for: shell, claude_code\)"):
        validate({"type": "gemini_cli"})
    # An agent that cannot give the policy the environment's tools would play no episode.
    for agent in ("tool_loop", "answer"):
        with pytest.raises(ValueError, match="tools reach an agent only over MCP"):
            validate({"type": agent})


def test_claude_code_reads_the_server_from_an_mcp_config_file_the_bridge_fills() -> None:
    harness = ClaudeCodeHarness()
    launch = harness.with_mcp(harness.launch("x", "/tmp/h", "policy"), "/tmp/h", "openenv")
    assert launch.argv[-3:] == ["--strict-mcp-config", "--mcp-config", "/tmp/h/mcp.json"]
    assert json.loads(launch.files["/tmp/h/mcp.json"]) == {
        "mcpServers": {
            "openenv": {
                "type": "http",
                "url": MCP_URL,
                "headers": {"Authorization": f"Bearer {API_KEY}"},
            }
        }
    }
    assert launch.render == ("/tmp/h/mcp.json",)  # its placeholders filled in the sandbox
    assert launch.report_file == "/tmp/h/result.json"  # the preset's run is otherwise unchanged


def test_a_shell_harness_finds_the_server_in_its_environment() -> None:
    harness = ShellHarness(command="agent")
    launch = harness.with_mcp(harness.launch("x", "/tmp/h", "policy"), "/tmp/h", "openenv")
    assert launch.env["AGENTROLL_MCP_URL"] == MCP_URL == "@AGENTROLL_LLM_ORIGIN@/mcp"
    assert launch.argv == ["sh", "-c", "agent"]
