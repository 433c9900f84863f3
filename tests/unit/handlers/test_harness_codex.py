"""The `codex` harness preset: how Codex CLI is started headless, offline, against the proxy."""

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.harness import LLM_ORIGIN, CodexHarness, Launch, bridge

CONFIG = "/tmp/h/codex/config.toml"


def config_of(launch: Launch) -> dict[str, Any]:
    return tomllib.loads(launch.files[CONFIG].decode())


def test_codex_runs_one_prompt_headless_against_the_proxy() -> None:
    launch = CodexHarness().launch("-v: fix the bug.", "/tmp/h", "policy")
    assert launch.argv[:2] == ["codex", "exec"]
    assert {"--skip-git-repo-check", "--ephemeral"} <= set(launch.argv)
    # The task goes last, after `--`: one starting with a dash is still the prompt.
    assert launch.argv[-2:] == ["--", "-v: fix the bug."]
    assert launch.env["CODEX_HOME"] == "/tmp/h/codex"
    assert launch.render == (CONFIG,) and launch.report_file is None
    config = config_of(launch)
    assert (config["model"], config["model_provider"]) == ("policy", "agentroll")
    assert config["model_providers"]["agentroll"] == {
        "name": "agentroll",
        "base_url": f"{LLM_ORIGIN}/v1",
        "env_key": "OPENAI_API_KEY",
        "wire_api": "responses",
        "stream_idle_timeout_ms": 900_000,
    }
    # Our sandbox is the boundary; Codex asks nobody and runs commands as they are.
    assert (config["approval_policy"], config["sandbox_mode"]) == ("never", "danger-full-access")
    assert config["allow_login_shell"] is False


def test_codex_is_kept_offline_and_to_the_tools_the_proxy_serves() -> None:
    config = config_of(CodexHarness().launch("x", "/tmp/h", "policy"))
    assert config["check_for_update_on_startup"] is False
    assert config["web_search"] == "disabled"
    assert config["analytics"] == {"enabled": False}
    assert config["feedback"] == {"enabled": False}
    assert config["otel"] == {"exporter": "none"}
    assert config["agents"] == {"enabled": False}
    assert config["features"] == {
        "plugins": False,
        "apps": False,
        "goals": False,
        "view_image": False,
        "shell_snapshot": False,
    }


def test_the_bridge_fills_the_proxy_address_into_codexs_config(tmp_path: Path) -> None:
    launch = CodexHarness(timeout_s=60).launch("x", "/tmp/h", "policy")
    path = tmp_path / "config.toml"
    path.write_bytes(launch.files[CONFIG])
    bridge.render(str(path), {LLM_ORIGIN: "http://127.0.0.1:4242"})
    provider = tomllib.loads(path.read_text())["model_providers"]["agentroll"]
    assert provider["base_url"] == "http://127.0.0.1:4242/v1"
    assert provider["stream_idle_timeout_ms"] == 60_000


def test_model_overrides_and_env_can_be_changed() -> None:
    harness = CodexHarness(
        model="gpt-5.5", overrides=["model_context_window=32768"], env={"RUST_LOG": "warn"}
    )
    launch = harness.launch("x", "/tmp/h", "policy")
    assert config_of(launch)["model"] == "gpt-5.5"
    at = launch.argv.index("-c")
    assert launch.argv[at : at + 2] == ["-c", "model_context_window=32768"]
    assert at < launch.argv.index("--") and launch.env["RUST_LOG"] == "warn"
    # The model name goes into TOML: nothing that could end its string.
    with pytest.raises(ValidationError):
        CodexHarness(model='x"\nsandbox_mode = "read-only')


def test_a_codex_job_instance_validates(
    validate_harness_job: Callable[[dict[str, Any]], None],
) -> None:
    task = load_swe_tasks()[0].instance
    validate_harness_job({"harness": {"type": "codex", "model": "o3"}, "task": task})
    with pytest.raises(ValueError, match="harness"):
        validate_harness_job({"harness": {"type": "codex", "x": 1}, "task": task})
