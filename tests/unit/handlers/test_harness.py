"""The harness family: launches, instance validation, and how a run maps onto outcomes."""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers import AgentError, InfraError, ProxyStop
from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.harness import (
    API_KEY,
    LLM_ORIGIN,
    GeminiCliHarness,
    HarnessRun,
    MiniSweAgentHarness,
    ShellHarness,
    outcome_error,
)


def test_a_shell_harness_gets_the_instruction_in_env_and_file() -> None:
    launch = ShellHarness(command="agent --go").launch("Fix it.", "/tmp/h", "policy")
    assert launch.argv == ["sh", "-c", "agent --go"]
    assert launch.env["AGENTROLL_INSTRUCTION"] == "Fix it."
    assert launch.env["OPENAI_MODEL"] == "policy"
    assert launch.files == {"/tmp/h/instruction.txt": b"Fix it."}
    argv = ShellHarness(command=["python3", "a.py"], env={"K": "v"}).launch("x", "/t", "m")
    assert argv.argv == ["python3", "a.py"] and argv.env["K"] == "v"


@pytest.mark.parametrize(
    ("mode", "config", "model_class"),
    [("toolcall", "mini.yaml", "litellm"), ("text", "mini_textbased.yaml", "litellm_textbased")],
)
def test_mini_swe_agent_runs_headless_against_the_served_model(
    mode: str, config: str, model_class: str
) -> None:
    harness = MiniSweAgentHarness(mode=mode, step_limit=7, overrides=["agent.x=1"])
    launch = harness.launch("Solve the issue.", "/tmp/h", "policy")
    argv = launch.argv
    assert argv[0] == "mini" and "-y" in argv and "--exit-immediately" in argv
    assert argv[argv.index("-m") + 1] == "openai/policy"
    assert argv[argv.index("-t") + 1] == "Solve the issue."
    assert argv[argv.index("-c") + 1] == config and argv[-2:] == ["-c", "agent.x=1"]
    settings = json.loads(launch.files["/tmp/h/agentroll.yaml"])
    assert settings["agent"]["step_limit"] == 7
    assert settings["model"]["model_class"] == model_class
    assert launch.env["MSWEA_CONFIGURED"] == "true"
    assert launch.env["MSWEA_GLOBAL_CONFIG_DIR"].startswith("/tmp/h/")
    assert launch.report_file == "/tmp/h/trajectory.json"


def test_instances_are_checked_down_to_the_evaluators_task(
    validate_harness_job: Callable[[dict[str, Any]], None],
) -> None:
    task = load_swe_tasks()[0].instance
    validate_harness_job({"harness": {"type": "mini_swe_agent"}, "task": task})
    with pytest.raises(ValueError, match="harness"):
        validate_harness_job({"harness": {"type": "nope"}, "task": task})
    with pytest.raises(ValueError, match="invalid swe instance"):
        validate_harness_job({"harness": {"type": "shell", "command": "x"}, "task": {}})
    with pytest.raises(ValueError, match="unknown tool-call parser 'xml9'"):
        validate_harness_job(
            {"harness": {"type": "shell", "command": "x", "parser": "xml9"}, "task": task}
        )
    with pytest.raises(ValueError, match="evaluator"):
        validate_harness_job(
            {"harness": {"type": "shell", "command": "x"}, "evaluator": "chess", "task": {}}
        )


def run(**kw: object) -> HarnessRun:
    base: dict = dict(
        exit_code=0,
        timed_out=False,
        stopped=None,
        stdout_tail="",
        stderr_tail="",
        seconds=1.0,
        report=None,
    )
    return HarnessRun(**{**base, **kw})


def test_how_a_run_ends_decides_the_outcome() -> None:
    assert outcome_error(run(), 60) is None
    crash = outcome_error(run(exit_code=2, stderr_tail="Traceback...\nKeyError: 'x'"), 60)
    assert isinstance(crash, AgentError) and crash.cause == "harness_crashed"
    assert "exit code 2" in str(crash) and "KeyError" in str(crash)
    slow = outcome_error(run(exit_code=None, timed_out=True), 60)
    assert isinstance(slow, AgentError) and slow.cause == "harness_timeout"
    assert slow.finish_reason == "time_limit"
    capped = outcome_error(run(stopped=ProxyStop("limit", "max_tokens", "cap")), 60)
    assert isinstance(capped, AgentError) and capped.cause == "harness_max_tokens"
    assert capped.finish_reason == "length"
    infra = outcome_error(run(stopped=ProxyStop("infra", "llm_backend_unavailable", "down")), 60)
    assert isinstance(infra, InfraError) and infra.cause == "llm_backend_unavailable"
    bridge = outcome_error(
        run(exit_code=222, stderr_tail="agentroll-bridge: the LLM proxy socket is gone"), 60
    )
    assert isinstance(bridge, InfraError) and bridge.cause == "llm_proxy_bridge_failed"
    # A harness that happens to exit 222 on its own is still the harness's doing.
    assert isinstance(outcome_error(run(exit_code=222, stderr_tail="oops"), 60), AgentError)


def test_the_bridge_fills_the_proxy_address_and_key_into_config_files(tmp_path: Path) -> None:
    from agentroll.handlers.harness import bridge

    config = tmp_path / "config.toml"
    config.write_text(f'base_url = "{LLM_ORIGIN}/v1"\nkey = "{API_KEY}"\nother = "@KEEP@"\n')
    values = {LLM_ORIGIN: "http://127.0.0.1:4242", API_KEY: "arp-secret"}
    bridge.render(str(config), values)
    assert config.read_text() == (
        'base_url = "http://127.0.0.1:4242/v1"\nkey = "arp-secret"\nother = "@KEEP@"\n'
    )
    assert bridge.fill(f"{LLM_ORIGIN}", values) == "http://127.0.0.1:4242"


def test_gemini_cli_runs_one_prompt_headless_against_the_proxy() -> None:
    launch = GeminiCliHarness().launch("Fix the bug.", "/tmp/h", "policy")
    argv = launch.argv
    assert argv[:2] == ["sh", "-c"] and argv[4] == "gemini"
    assert argv[argv.index("-m") + 1] == "policy"
    assert argv[argv.index("--approval-mode") + 1] == "yolo"
    assert argv[argv.index("-o") + 1] == "json" and argv[-2:] == ["-p", "Fix the bug."]
    env = launch.env
    assert (env["GOOGLE_GEMINI_BASE_URL"], env["GEMINI_API_KEY"]) == (LLM_ORIGIN, API_KEY)
    assert env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert env["GEMINI_CLI_HOME"].startswith("/tmp/h/")
    settings = json.loads(launch.files[f"{env['GEMINI_CLI_HOME']}/.gemini/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    assert launch.report_file == "/tmp/h/gemini-report.json"


def test_gemini_cli_settings_and_model_can_be_changed(
    validate_harness_job: Callable[[dict[str, Any]], None],
) -> None:
    harness = GeminiCliHarness(
        model="auto", settings={"general": {"maxAttempts": 2}, "tools": {"exclude": ["web_fetch"]}}
    )
    launch = harness.launch("x", "/tmp/h", "policy")
    assert launch.argv[launch.argv.index("-m") + 1] == "auto"
    settings = json.loads(launch.files[f"{launch.env['GEMINI_CLI_HOME']}/.gemini/settings.json"])
    assert settings["general"] == {
        "enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 2,
    }  # fmt: skip
    assert settings["tools"] == {"exclude": ["web_fetch"]}
    assert settings["telemetry"] == {"enabled": False}
    validate_harness_job(
        {"harness": {"type": "gemini_cli", "model": "auto"}, "task": load_swe_tasks()[0].instance}
    )


def test_gemini_clis_command_line_survives_any_instruction(tmp_path: Path) -> None:
    """The instruction is one argument whatever it holds; the report lands in its file."""
    fake = tmp_path / "gemini"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    instruction = 'Fix it\'; touch pwned; echo "$(id)" `id` > x #\nline two'
    launch = GeminiCliHarness(command=str(fake)).launch(instruction, str(tmp_path), "policy")
    done = subprocess.run(launch.argv, cwd=tmp_path, capture_output=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout == b""
    report = Path(launch.report_file or "").read_text()
    assert report.endswith(f"-p\n{instruction}\n")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "x").exists()
