"""Which harness a job runs, and its settings: one pydantic model per harness, by `type`.

    {"type": "mini_swe_agent", "mode": "toolcall", "step_limit": 40, "timeout_s": 900}
    {"type": "shell", "command": "my-agent --task \"$AGENTROLL_INSTRUCTION\""}
    {"type": "claude_code", "timeout_s": 900}

Each model turns itself into a `Launch` (argv, environment, files) for a given instruction;
the runner adds the bridge and the endpoint (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, ...).
Adding a harness = one more `HarnessBase` model with its `launch()` (here, or a module of
its own), added to `HarnessConfig`.
"""

import json
from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from agentroll.handlers.harness.base import MCP_URL, HarnessBase, Launch
from agentroll.handlers.harness.claude_code import ClaudeCodeHarness
from agentroll.handlers.harness.codex import CodexHarness
from agentroll.handlers.harness.gemini_cli import GeminiCliHarness
from agentroll.handlers.harness.opencode import OpenCodeHarness
from agentroll.handlers.harness.qwen_code import QwenCodeHarness


class ShellHarness(HarnessBase):
    """Any command line. It gets `OPENAI_BASE_URL`, `OPENAI_API_BASE`, `OPENAI_API_KEY`,
    `OPENAI_MODEL`, `AGENTROLL_INSTRUCTION` and `AGENTROLL_INSTRUCTION_FILE` (and, for a task
    that serves its tools over MCP, `AGENTROLL_MCP_URL`); a string runs under `sh -c`, a list
    is an argv."""

    type: Literal["shell"] = "shell"
    command: str | list[str] = Field(..., min_length=1)

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        argv = ["sh", "-c", self.command] if isinstance(self.command, str) else self.command
        path = f"{folder}/instruction.txt"
        env = {
            "AGENTROLL_INSTRUCTION": instruction,
            "AGENTROLL_INSTRUCTION_FILE": path,
            "OPENAI_MODEL": model,
        }
        return Launch(list(argv), {**env, **self.env}, {path: instruction.encode()})

    speaks_mcp: ClassVar[bool] = True

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """The task's MCP endpoint in `AGENTROLL_MCP_URL` (the key: `OPENAI_API_KEY`)."""
        return replace(launch, env={**launch.env, "AGENTROLL_MCP_URL": MCP_URL})


class MiniSweAgentHarness(HarnessBase):
    """mini-swe-agent (PyPI `mini-swe-agent`), unmodified, through its `mini` CLI.

    `mode` picks its built-in config: `toolcall` (mini.yaml: a `bash` tool, OpenAI tool
    calls) or `text` (mini_textbased.yaml: a fenced `mswea_bash_command` block). It finishes
    by running `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`; its trajectory file is read back.
    """

    type: Literal["mini_swe_agent"] = "mini_swe_agent"
    mode: Literal["toolcall", "text"] = "toolcall"
    command: str = "mini"
    config: str | None = None
    """A config file name or sandbox path; None: the `mode`'s built-in one."""
    step_limit: int = Field(0, ge=0)
    """mini-swe-agent's own step limit (0: none; the proxy's `max_calls` still applies)."""
    command_timeout_s: int = Field(60, ge=1)
    """Limit of one bash command it runs."""
    overrides: list[str] = Field(default_factory=list)
    """Extra `-c key=value` specs, applied last."""

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        builtin = "mini.yaml" if self.mode == "toolcall" else "mini_textbased.yaml"
        settings: dict[str, Any] = {
            "agent": {"step_limit": self.step_limit, "cost_limit": 0},
            "model": {
                "model_class": "litellm" if self.mode == "toolcall" else "litellm_textbased",
                "cost_tracking": "ignore_errors",
            },
            "environment": {"timeout": self.command_timeout_s},
        }
        overrides = f"{folder}/agentroll.yaml"
        trajectory = f"{folder}/trajectory.json"
        argv = [
            self.command, "-y", "--exit-immediately", "--agent-class", "default",
            "-m", f"openai/{model}", "-t", instruction,
            "-c", self.config or builtin, "-c", overrides, "-o", trajectory,
        ]  # fmt: skip
        for spec in self.overrides:
            argv += ["-c", spec]
        env = {
            # Run headless and offline: no first-run wizard, no banner, no cost-map download,
            # and its files stay out of the repository it works on.
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{folder}/mswea",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "NO_COLOR": "1",
        }
        # JSON is YAML: no YAML library needed to write the override file.
        files = {overrides: json.dumps(settings).encode()}
        return Launch(argv, {**env, **self.env}, files, report_file=trajectory)


HarnessConfig = Annotated[
    ShellHarness
    | MiniSweAgentHarness
    | ClaudeCodeHarness
    | CodexHarness
    | GeminiCliHarness
    | OpenCodeHarness
    | QwenCodeHarness,
    Field(discriminator="type"),
]
