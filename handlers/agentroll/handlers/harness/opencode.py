"""OpenCode (npm `opencode-ai`, tested with 1.18.33), unmodified, headless.

    {"type": "opencode", "timeout_s": 900}

`opencode run` takes the instruction on stdin (verbatim: an argument with spaces would be
sent quoted) and runs it to its end. Its configuration comes in `OPENCODE_CONFIG_CONTENT`:
one provider, `@ai-sdk/openai-compatible` (built into the binary: nothing is installed for
it), at the proxy's `/v1` with the rollout's key, serving the proxy's model, which is also
its small model (the session title); every tool allowed without asking, but web fetch and
search (there is no network); no auto-update, sharing or snapshots (a shadow git copy of the
repository at every step). `OPENCODE_DISABLE_MODELS_FETCH` keeps it off models.dev.

It sends two calls per prompt: the session title (no tools, its own system prompt), served
and recorded as a side call, then the agent's loop. At every start it also npm-installs its
plugin SDK (`@opencode-ai/plugin`) into its config directory in the background; the preset
lays that directory out as already installed, so nothing is fetched. Its transcript lives in
a SQLite database, not read back.

Its runtime (Bun) reserves about 7 GiB of address space at start and crashes under 5 GiB,
so the preset raises the sandbox's per-process address space (`address_space_bytes`).
"""

import json
import shlex
from dataclasses import replace
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
)

PROVIDER = "agentroll"
PLUGIN_SDK = "@opencode-ai/plugin"
CONFIG_ENV = "OPENCODE_CONFIG_CONTENT"


def configuration(model: str) -> dict[str, Any]:
    name = f"{PROVIDER}/{model}"
    return {
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER,
                "options": {"baseURL": f"{LLM_ORIGIN}/v1", "apiKey": API_KEY},
                "models": {model: {"name": model}},
            }
        },
        "model": name,
        "small_model": name,
        "permission": {"*": "allow", "webfetch": "deny", "websearch": "deny"},
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
    }


class OpenCodeHarness(HarnessBase):
    type: Literal["opencode"] = "opencode"
    command: str = "opencode"
    config: dict[str, Any] = Field(default_factory=dict)
    """Laid over the preset's configuration (nested objects merged), e.g. `{"agent": {...}}`."""
    address_space_bytes: int | None = Field(8 << 30, ge=1 << 26)

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        prompt = f"{folder}/instruction.txt"
        config_dir = f"{folder}/config/opencode"
        argv = [
            "sh", "-c", f'exec "$@" < {shlex.quote(prompt)}', "sh",
            self.command, "run", "--model", f"{PROVIDER}/{model}",
        ]  # fmt: skip
        env = {
            CONFIG_ENV: json.dumps(merged(configuration(model), self.config)),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "XDG_CONFIG_HOME": f"{folder}/config",
        }
        # Its check for the plugin SDK: node_modules there, and the lock listing every
        # dependency package.json names.
        dependencies = json.dumps({"dependencies": {PLUGIN_SDK: "*"}}).encode()
        lock = json.dumps({"packages": {"": {"dependencies": {PLUGIN_SDK: "*"}}}}).encode()
        files = {
            prompt: instruction.encode(),
            f"{config_dir}/package.json": dependencies,
            f"{config_dir}/package-lock.json": lock,
            f"{config_dir}/node_modules/.keep": b"",
        }
        return Launch(argv, {**env, **self.env}, files)

    speaks_mcp: ClassVar[bool] = True

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """`mcp.SERVER` in its configuration, a `remote` server (streamable HTTP) with the
        key as a header and no OAuth discovery; its tools are `SERVER_TOOL`."""
        entry = {
            "type": "remote",
            "url": MCP_URL,
            "headers": MCP_HEADERS,
            "oauth": False,
            "enabled": True,
        }
        config = merged(json.loads(launch.env[CONFIG_ENV]), {"mcp": {server: entry}})
        return replace(launch, env={**launch.env, CONFIG_ENV: json.dumps(config)})
