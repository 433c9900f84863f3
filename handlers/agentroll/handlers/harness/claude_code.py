"""Claude Code (npm `@anthropic-ai/claude-code`), unmodified, headless against the proxy.

    {"type": "claude_code", "timeout_s": 900}

It runs in print mode: `claude -p --output-format json`, the instruction on its stdin (any
length), every tool allowed without asking (`--dangerously-skip-permissions`; `IS_SANDBOX=1`
lets it do so where the sandbox user is root), no session files kept. It speaks Anthropic
Messages to `ANTHROPIC_BASE_URL` (the proxy, without `/v1`) with the rollout's key as
`ANTHROPIC_API_KEY` (sent as `x-api-key`), and names the proxy's model for its main loop and
its small side tasks. `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` switches off its outside
traffic (telemetry, error reports, update checks, the start-up probe of the API host). Four
settings keep its requests to what the proxy serves exactly:

    CLAUDE_CODE_DISABLE_THINKING=1            no thinking config: the proxy writes no thinking
                                              blocks (the policy's reasoning stays in its text)
    CLAUDE_CODE_ATTRIBUTION_HEADER=0          no billing-header line in the system prompt
    ENABLE_TOOL_SEARCH=false                  every tool's schema in each request: no deferred
                                              tools, no tool references to resolve
    CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1  no context-management edits or other betas

A task that serves its tools over MCP (an OpenEnv environment's) is given to it as an HTTP
MCP server in an `--mcp-config` file (`--strict-mcp-config`: no other MCP server).

It ends when the model answers without a tool call; its JSON result (`subtype`, `is_error`,
`num_turns`, `result`: the final text) is written to a file and read back as the run's report.
"""

import json
import shlex
from typing import ClassVar, Literal

from pydantic import Field

from agentroll.handlers.harness.base import (
    API_KEY,
    LLM_ORIGIN,
    MCP_HEADERS,
    MCP_URL,
    HarnessBase,
    Launch,
    with_files,
)


class ClaudeCodeHarness(HarnessBase):
    type: Literal["claude_code"] = "claude_code"
    command: str = "claude"
    tools: list[str] | None = None
    """Built-in tools it offers (`--tools`, e.g. `["Bash", "Read", "Edit"]`); None: its own
    default set."""
    args: list[str] = Field(default_factory=list)
    """Extra command-line arguments (e.g. `--append-system-prompt`), after the preset's."""

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        prompt, result = f"{folder}/instruction.txt", f"{folder}/result.json"
        argv = [
            self.command, "-p", "--output-format", "json",
            "--dangerously-skip-permissions", "--no-session-persistence",
        ]  # fmt: skip
        if self.tools is not None:
            argv += ["--tools", ",".join(self.tools)]
        argv += self.args
        # The instruction on stdin, the result on stdout: both through files.
        redirect = f'exec "$@" < {shlex.quote(prompt)} > {shlex.quote(result)}'
        env = {
            "ANTHROPIC_BASE_URL": LLM_ORIGIN,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_THINKING": "1",
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            "ENABLE_TOOL_SEARCH": "false",
            "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1",
            "IS_SANDBOX": "1",
        }
        return Launch(
            ["sh", "-c", redirect, "claude", *argv],
            {**env, **self.env},
            {prompt: instruction.encode()},
            report_file=result,
        )

    speaks_mcp: ClassVar[bool] = True

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """The server in an `--mcp-config` file (its tools are `mcp__SERVER__TOOL`), and no
        other MCP server (`--strict-mcp-config`)."""
        path = f"{folder}/mcp.json"
        entry = {"type": "http", "url": MCP_URL, "headers": MCP_HEADERS}
        config = json.dumps({"mcpServers": {server: entry}}).encode()
        return with_files(launch, {path: config}, ["--strict-mcp-config", "--mcp-config", path])
