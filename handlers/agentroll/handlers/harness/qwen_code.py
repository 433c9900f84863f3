"""Qwen Code (npm `@qwen-code/qwen-code`, tested with 0.24.4), unmodified, headless.

    {"type": "qwen_code", "timeout_s": 900}

It speaks OpenAI chat completions (always streamed) to `OPENAI_BASE_URL` with
`OPENAI_API_KEY`, asking for `OPENAI_MODEL`, and runs one prompt to its end with every tool
call approved (`--approval-mode yolo`). The prompt comes on stdin, whatever its length or
first character (an argument is capped at 128 KiB, and one that starts with a dash is an
option); the CLI sends it followed by a blank line, and inlines the files it names as
`@path`, as it does for any user. Its home (`QWEN_HOME`: settings, chats, usage records) is
in the run's folder; its settings there say OpenAI auth, and no usage statistics (sent to
Alibaba Cloud's RUM otherwise), telemetry or update checks, and no background memory agents
(after a prompt they would start a second, tool-using conversation of their own). It greps
with the system's ripgrep: the package's own copy is not executable after an npm install
without scripts. Its shell tool runs commands as plain child processes: in a
pseudo-terminal (its default) the first command's output came back empty in the sandbox.

Node's fetch instantiates WebAssembly, which reserves ~10 GiB of address space unless its
trap handler is off: `NODE_OPTIONS=--disable-wasm-trap-handler` (without it every call fails
under the sandbox's address-space limit).
"""

import json
import shlex
from typing import Any, ClassVar, Literal

from pydantic import Field

from agentroll.handlers.harness.base import (
    MCP_HEADERS,
    MCP_URL,
    HarnessBase,
    Launch,
    merged,
    with_json_settings,
)

SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "openai"}},
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    "tools": {"useBuiltinRipgrep": False, "shell": {"enableInteractiveShell": False}},
}


class QwenCodeHarness(HarnessBase):
    type: Literal["qwen_code"] = "qwen_code"
    command: str = "qwen"
    settings: dict[str, Any] = Field(default_factory=dict)
    """Laid over the preset's settings (nested objects merged), e.g. `{"model": {...}}`."""

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        home, prompt = f"{folder}/qwen-home", f"{folder}/instruction.txt"
        argv = [
            "sh", "-c", f'exec "$@" < {shlex.quote(prompt)}', "sh",
            self.command, "--approval-mode", "yolo",
        ]  # fmt: skip
        env = {
            "OPENAI_MODEL": model,
            "QWEN_HOME": home,
            "NODE_OPTIONS": "--disable-wasm-trap-handler",
            # Its notice that yolo runs tools unsandboxed (the rollout's sandbox is the box).
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
        settings = json.dumps(merged(SETTINGS, self.settings), indent=2).encode()
        files = {prompt: instruction.encode(), f"{home}/settings.json": settings}
        return Launch(argv, {**env, **self.env}, files)

    speaks_mcp: ClassVar[bool] = True

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """`mcpServers.SERVER` in its settings: `httpUrl` is streamable HTTP (its `url` would
        be the older SSE transport); its tools are `mcp__SERVER__TOOL`, each offered in every
        request (`alwaysLoadTools`: not behind its `tool_search`/`tool_call` bridge), and a
        call may take as long as the run."""
        entry = {
            "httpUrl": MCP_URL,
            "headers": MCP_HEADERS,
            "timeout": int(self.timeout_s * 1000),
            "alwaysLoadTools": True,
        }
        path = f"{folder}/qwen-home/settings.json"
        return with_json_settings(launch, path, {"mcpServers": {server: entry}})
