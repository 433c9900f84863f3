"""The OpenCode and Qwen Code presets: what they launch, and the sandbox they ask for."""

import json

from agentroll.handlers.builtin.harness import HarnessInstance
from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.harness import (
    API_KEY,
    LLM_ORIGIN,
    HarnessAgent,
    OpenCodeHarness,
    QwenCodeHarness,
)
from agentroll.runtime import Limits, SandboxSpec

# Starts with a dash and spans lines: must reach the CLI as one prompt.
INSTRUCTION = "--fix the bug:\n  slugify() doubles  separators.\n"


def test_opencode_reads_the_instruction_from_stdin_and_its_config_from_the_environment() -> None:
    launch = OpenCodeHarness().launch(INSTRUCTION, "/tmp/h", "policy")
    assert launch.argv == [
        "sh", "-c", "exec \"$@\" < /tmp/h/instruction.txt", "sh",
        "opencode", "run", "--model", "agentroll/policy",
    ]  # fmt: skip
    assert launch.files["/tmp/h/instruction.txt"] == INSTRUCTION.encode()
    config = json.loads(launch.env["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["agentroll"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    # The bridge fills the placeholders in the environment before the start.
    assert provider["options"] == {"baseURL": f"{LLM_ORIGIN}/v1", "apiKey": API_KEY}
    assert list(provider["models"]) == ["policy"]
    assert config["model"] == config["small_model"] == "agentroll/policy"
    assert config["permission"] == {"*": "allow", "webfetch": "deny", "websearch": "deny"}
    assert (config["autoupdate"], config["share"], config["snapshot"]) == (False, "disabled", False)
    assert launch.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    assert launch.report_file is None


def test_opencode_finds_its_plugin_sdk_installed_so_it_fetches_nothing() -> None:
    launch = OpenCodeHarness().launch("x", "/tmp/h", "policy")
    config_dir = f"{launch.env['XDG_CONFIG_HOME']}/opencode"
    assert config_dir == "/tmp/h/config/opencode"
    package = json.loads(launch.files[f"{config_dir}/package.json"])
    lock = json.loads(launch.files[f"{config_dir}/package-lock.json"])
    assert set(package["dependencies"]) == set(lock["packages"][""]["dependencies"])
    assert set(package["dependencies"]) == {"@opencode-ai/plugin"}
    assert f"{config_dir}/node_modules/.keep" in launch.files


def test_opencode_config_overrides_merge_into_the_presets() -> None:
    harness = OpenCodeHarness(
        command="/opt/bin/opencode",
        config={"permission": {"bash": "deny"}, "agent": {"build": {"steps": 9}}},
        env={"EXTRA": "1"},
    )
    launch = harness.launch("x", "/tmp/h", "m")
    config = json.loads(launch.env["OPENCODE_CONFIG_CONTENT"])
    assert config["permission"] == {"*": "allow", "webfetch": "deny", "websearch": "deny",
                                    "bash": "deny"}  # fmt: skip
    assert config["agent"] == {"build": {"steps": 9}}
    assert launch.argv[4] == "/opt/bin/opencode" and launch.env["EXTRA"] == "1"


def test_qwen_code_reads_the_prompt_from_stdin_and_its_settings_from_its_home() -> None:
    launch = QwenCodeHarness().launch(INSTRUCTION, "/tmp/h", "policy")
    assert launch.argv == [
        "sh", "-c", "exec \"$@\" < /tmp/h/instruction.txt", "sh",
        "qwen", "--approval-mode", "yolo",
    ]  # fmt: skip
    assert launch.files["/tmp/h/instruction.txt"] == INSTRUCTION.encode()
    assert launch.env["OPENAI_MODEL"] == "policy"
    assert launch.env["QWEN_HOME"] == "/tmp/h/qwen-home"
    assert launch.env["NODE_OPTIONS"] == "--disable-wasm-trap-handler"
    settings = json.loads(launch.files["/tmp/h/qwen-home/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "openai"
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["memory"] == {"enableManagedAutoMemory": False, "enableManagedAutoDream": False}
    assert settings["tools"] == {
        "useBuiltinRipgrep": False,
        "shell": {"enableInteractiveShell": False},
    }
    over = QwenCodeHarness(settings={"tools": {"shell": {"pager": "cat"}}}).launch("x", "/t", "m")
    tools = json.loads(over.files["/t/qwen-home/settings.json"])["tools"]
    assert tools["shell"] == {"enableInteractiveShell": False, "pager": "cat"}


def test_the_presets_are_harness_types_of_a_job() -> None:
    task = load_swe_tasks()[0].instance
    for kind, cls in (("opencode", OpenCodeHarness), ("qwen_code", QwenCodeHarness)):
        spec = HarnessInstance.model_validate({"harness": {"type": kind}, "task": task})
        assert isinstance(spec.harness, cls)
    assert OpenCodeHarness().address_space_bytes == 8 << 30
    assert QwenCodeHarness().address_space_bytes is None


def test_a_harness_sets_the_address_space_of_the_sandbox_it_runs_in() -> None:
    spec = SandboxSpec(
        workdir="/testbed", limits=Limits(max_memory_bytes=2 << 30, tmp_bytes=1 << 27)
    )
    raised = HarnessAgent(OpenCodeHarness(address_space_bytes=8 << 30)).sandbox_spec(spec)
    kept = HarnessAgent(QwenCodeHarness()).sandbox_spec(spec)
    assert raised.limits.max_memory_bytes == 8 << 30
    # Everything else is the evaluator's.
    assert raised.limits.tmp_bytes == 1 << 27 and raised.workdir == "/testbed"
    assert kept == spec
