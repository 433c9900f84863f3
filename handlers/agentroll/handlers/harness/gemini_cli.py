"""Gemini CLI (npm `@google/gemini-cli`, tested with 0.61.0), unmodified, headless.

    {"type": "gemini_cli", "timeout_s": 900}

It speaks Google's generateContent (`:streamGenerateContent?alt=sse`) to
`GOOGLE_GEMINI_BASE_URL` with the key `GEMINI_API_KEY` (sent as `x-goog-api-key`), and runs
one prompt (`-p`) to its end with every tool call approved (`--approval-mode yolo`). Its
home (`GEMINI_CLI_HOME`: settings, chats, history) is in the run's folder; its user settings
there say API-key auth, and no usage statistics, telemetry or update checks (without them it
looks up Google's and npm's hosts at every start). The workspace is trusted without a prompt,
so a repository's own `.gemini/settings.json` still applies over them (system settings would
not, but it reads those only from a root-owned directory). With `-o json` it prints one JSON
report at the end (the final answer, tool and token statistics, or the error), which is
written to a file and read back.

`model`: the name the CLI asks for; None is the proxy's. `auto` lets the CLI's router score
each prompt first: one plain `:generateContent` call per prompt, served and recorded as a
side call.
"""

import json
import shlex
from typing import Any, ClassVar, Literal

from pydantic import Field

from agentroll.handlers.harness.base import (
    API_KEY,
    LLM_ORIGIN,
    MCP_HEADERS,
    MCP_URL,
    HarnessBase,
    Launch,
    merged,
    with_json_settings,
)

SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


class GeminiCliHarness(HarnessBase):
    type: Literal["gemini_cli"] = "gemini_cli"
    command: str = "gemini"
    model: str | None = Field(None, min_length=1)
    """The model the CLI asks for; None: the proxy's. `auto`: its router (a side call) picks."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Settings laid over the preset's (nested objects merged), e.g. `{"tools": {...}}`."""

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        home = f"{folder}/gemini-home"
        report = f"{folder}/gemini-report.json"
        argv = [
            "sh", "-c", f'exec "$@" > {shlex.quote(report)}', "sh",
            self.command, "-m", self.model or model, "--approval-mode", "yolo",
            "-o", "json", "-p", instruction,
        ]  # fmt: skip
        env = {
            "GOOGLE_GEMINI_BASE_URL": LLM_ORIGIN,
            "GEMINI_API_KEY": API_KEY,
            "GEMINI_CLI_HOME": home,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            # It would start itself again only to raise Node's heap limit.
            "GEMINI_CLI_NO_RELAUNCH": "true",
            # Node reserves 10 GB of address space per WebAssembly memory unless told not to,
            # past the sandbox's address-space limit; the CLI's HTTP client (undici's parser)
            # and its shell-command parser are WebAssembly.
            "NODE_OPTIONS": "--disable-wasm-trap-handler",
        }
        settings = json.dumps(merged(SETTINGS, self.settings), indent=2).encode()
        files = {f"{home}/.gemini/settings.json": settings}
        return Launch(argv, {**env, **self.env}, files, report_file=report)

    speaks_mcp: ClassVar[bool] = True

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """`mcpServers.SERVER` in its user settings, streamable HTTP (`type: http`; its tools
        are `mcp_SERVER_TOOL`); a call may take as long as the run."""
        entry = {
            "type": "http",
            "url": MCP_URL,
            "headers": MCP_HEADERS,
            "timeout": int(self.timeout_s * 1000),
        }
        path = f"{folder}/gemini-home/.gemini/settings.json"
        return with_json_settings(launch, path, {"mcpServers": {server: entry}})
