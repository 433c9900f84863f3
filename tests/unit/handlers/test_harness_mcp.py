"""A task's own tools for a harness over MCP: which agents may run such a task (refused at
submission otherwise), and where each preset that speaks MCP is told of the server."""

import json
import tomllib
from typing import Any

import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.handlers.harness import (
    API_KEY,
    ClaudeCodeHarness,
    CodexHarness,
    GeminiCliHarness,
    OpenCodeHarness,
    QwenCodeHarness,
    ShellHarness,
)
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
    for preset in ("claude_code", "codex", "gemini_cli", "opencode", "qwen_code"):
        validate({"type": preset})
    with pytest.raises(
        ValueError,
        match=r"\(it does for: shell, claude_code, codex, gemini_cli, opencode, qwen_code\)",
    ):
        validate({"type": "mini_swe_agent"})
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


HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def test_codex_reads_the_server_from_its_config_toml() -> None:
    harness = CodexHarness(timeout_s=300)
    plain = harness.launch("x", "/tmp/h", "policy")
    launch = harness.with_mcp(plain, "/tmp/h", "openenv")
    config = tomllib.loads(launch.files["/tmp/h/codex/config.toml"].decode())
    assert config["mcp_servers"] == {
        "openenv": {"url": MCP_URL, "http_headers": HEADERS, "tool_timeout_sec": 300.0}
    }
    # The preset's own settings are all still there, and the bridge fills the file.
    assert {k: v for k, v in config.items() if k != "mcp_servers"} == tomllib.loads(
        plain.files["/tmp/h/codex/config.toml"].decode()
    )
    assert launch.render == ("/tmp/h/codex/config.toml",) and launch.argv == plain.argv


@pytest.mark.parametrize(
    ("harness", "path", "entry"),
    [
        (
            GeminiCliHarness(timeout_s=300, settings={"mcpServers": {"mine": {"url": "u"}}}),
            "/tmp/h/gemini-home/.gemini/settings.json",
            {"type": "http", "url": MCP_URL, "headers": HEADERS, "timeout": 300_000},
        ),
        (
            QwenCodeHarness(timeout_s=300, settings={"mcpServers": {"mine": {"url": "u"}}}),
            "/tmp/h/qwen-home/settings.json",
            {"httpUrl": MCP_URL, "headers": HEADERS, "timeout": 300_000, "alwaysLoadTools": True},
        ),
    ],
)
def test_gemini_and_qwen_read_the_server_from_their_settings(
    harness: GeminiCliHarness | QwenCodeHarness, path: str, entry: dict[str, Any]
) -> None:
    plain = harness.launch("x", "/tmp/h", "policy")
    launch = harness.with_mcp(plain, "/tmp/h", "openenv")
    settings = json.loads(launch.files[path])
    # Laid over the preset's and the user's settings (a server of the user's stays).
    assert settings["mcpServers"] == {"mine": {"url": "u"}, "openenv": entry}
    assert {k: v for k, v in settings.items() if k != "mcpServers"} == {
        k: v for k, v in json.loads(plain.files[path]).items() if k != "mcpServers"
    }
    assert path in launch.render and launch.argv == plain.argv


def test_opencode_reads_the_server_from_its_configuration_in_the_environment() -> None:
    harness = OpenCodeHarness()
    plain = harness.launch("x", "/tmp/h", "policy")
    launch = harness.with_mcp(plain, "/tmp/h", "openenv")
    config = json.loads(launch.env["OPENCODE_CONFIG_CONTENT"])
    assert config["mcp"] == {
        "openenv": {
            "type": "remote",
            "url": MCP_URL,
            "headers": HEADERS,
            "oauth": False,
            "enabled": True,
        }
    }
    assert {k: v for k, v in config.items() if k != "mcp"} == json.loads(
        plain.env["OPENCODE_CONFIG_CONTENT"]
    )
