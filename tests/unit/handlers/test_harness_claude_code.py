"""The `claude_code` harness preset: how it runs Claude Code, and what it reads back."""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.harness import API_KEY, LLM_ORIGIN, ClaudeCodeHarness
from agentroll.handlers.harness.runner import MAX_REPORT_BYTES, read_report


def test_claude_code_runs_headless_against_the_proxy_with_outside_traffic_off() -> None:
    launch = ClaudeCodeHarness().launch("Fix the bug.\n" * 3, "/tmp/h", "policy")
    shell, flag, script, name, *argv = launch.argv
    assert (shell, flag, name) == ("sh", "-c", "claude")
    # The instruction comes on stdin (any length), the JSON result goes to the report file.
    assert script == 'exec "$@" < /tmp/h/instruction.txt > /tmp/h/result.json'
    assert launch.files == {"/tmp/h/instruction.txt": b"Fix the bug.\n" * 3}
    assert launch.report_file == "/tmp/h/result.json"
    assert argv == [
        "claude", "-p", "--output-format", "json",
        "--dangerously-skip-permissions", "--no-session-persistence",
    ]  # fmt: skip
    env = launch.env
    assert (env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]) == (LLM_ORIGIN, API_KEY)
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "policy"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["CLAUDE_CODE_DISABLE_THINKING"] == "1"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    assert env["ENABLE_TOOL_SEARCH"] == "false"
    assert env["CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS"] == "1"


def test_its_tools_arguments_and_environment_can_be_set() -> None:
    harness = ClaudeCodeHarness(
        command="/opt/claude",
        tools=["Bash", "Read", "Edit"],
        args=["--append-system-prompt", "Be terse."],
        env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096", "IS_SANDBOX": "0"},
    )
    launch = harness.launch("x", "/tmp/h", "m")
    argv = launch.argv[4:]
    assert argv[0] == "/opt/claude"
    assert argv[-4:] == ["--tools", "Bash,Read,Edit", "--append-system-prompt", "Be terse."]
    assert launch.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
    assert launch.env["IS_SANDBOX"] == "0"  # the job's own environment wins


def test_a_job_names_it_by_type(validate_harness_job: Callable[[dict[str, Any]], None]) -> None:
    task = load_swe_tasks()[0].instance
    validate_harness_job({"harness": {"type": "claude_code"}, "task": task})
    with pytest.raises(ValueError, match="harness"):
        validate_harness_job({"harness": {"type": "claude_code", "model": "x"}, "task": task})


class FileSandbox:
    """Just enough of a sandbox to download one file."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    async def download(self, path: str) -> bytes:
        return self.files[path]


def read(data: bytes | None) -> dict[str, Any] | None:
    files = {} if data is None else {"/tmp/h/result.json": data}
    return asyncio.run(read_report(FileSandbox(files), "/tmp/h/result.json"))  # type: ignore[arg-type]


def test_the_report_is_read_back_only_when_it_is_a_json_object_of_bounded_size() -> None:
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "Fixed."}
    assert read(json.dumps(result).encode()) == result
    # The policy decides what Claude Code writes there (its final text), and its commands
    # may overwrite the file: junk, a list, or a flood is no report, never a stalled server.
    flood = json.dumps({"result": "x" * MAX_REPORT_BYTES}).encode()
    for junk in (None, b"not json", b"[1, 2]", flood):
        assert read(junk) is None
