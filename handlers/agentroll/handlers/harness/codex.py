"""Codex CLI (npm `@openai/codex`, tested with 0.169.0), unmodified, headless.

    {"type": "codex", "timeout_s": 900}

`codex exec` runs one prompt to its end. It speaks the OpenAI Responses API (always
streamed) to the provider its configuration names, and ignores `OPENAI_BASE_URL`: the preset
writes a `config.toml` into a fresh `CODEX_HOME` with a provider `agentroll` (the proxy's
`/v1`, the key from `OPENAI_API_KEY`, wire API `responses`) and:

- approvals `never` and sandbox `danger-full-access`: the rollout's bubblewrap sandbox is
  the boundary. Codex's own sandbox would nest bubblewrap in it, which needs the user
  namespaces ours keeps closed, so every command would fail for a reason that is not the
  policy's; it also cannot start its helper from a `CODEX_HOME` under /tmp (where a run's
  files live).
- no outside traffic: update checks, analytics, feedback, OpenTelemetry, plugins (a
  `git ls-remote` of github.com), apps, web search (a hosted tool the proxy refuses) off.
- tools the served model can use: `exec_command`/`write_stdin` (its shell) and, for models
  Codex knows, `apply_patch` (a freeform tool). Sub-agents, goals and `view_image` (images,
  which the proxy refuses) are off.
- commands run in a plain (not login) shell without Codex's shell snapshot, so they see the
  sandbox's environment (a login shell re-reads /etc/profile, which resets PATH).

Nothing is kept on disk (`--ephemeral`): its session transcript would only repeat what its
requests carry, which the proxy records whole, and it grows in the sandbox's small /tmp with
whatever the policy's commands print.

`model`: the name Codex asks for; None is the proxy's, which Codex does not know, so it uses
its generic prompt and function tools only. A model Codex knows (e.g. `gpt-5.5`) brings that
model's prompt and its freeform `apply_patch`. `overrides`: more `-c key=value` settings
(TOML values), applied over the preset's, e.g. `model_context_window=32768` so that Codex
compacts its history before the served model's context is full.
"""

import json
from typing import Any, ClassVar, Literal

from pydantic import Field

from agentroll.handlers.harness.base import (
    LLM_ORIGIN,
    MCP_HEADERS,
    MCP_URL,
    HarnessBase,
    Launch,
    with_files,
)

PROVIDER = "agentroll"


def _toml(table: dict[str, Any], prefix: str = "") -> str:
    """`table` as TOML: plain keys first, then one `[section]` per nested table."""
    lines = []
    for key, value in table.items():
        if not isinstance(value, dict):
            # JSON strings, booleans and integers are TOML's too (every value here is ours).
            lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
    for key, value in table.items():
        if isinstance(value, dict):
            lines += ["", f"[{prefix}{key}]", _toml(value, f"{prefix}{key}.").strip("\n")]
    return "\n".join(lines) + "\n"


class CodexHarness(HarnessBase):
    type: Literal["codex"] = "codex"
    command: str = "codex"
    model: str | None = Field(None, pattern=r"^[A-Za-z0-9._:/-]+$")
    """The model Codex asks for; None: the proxy's."""
    overrides: list[str] = Field(default_factory=list)
    """Extra `-c key=value` settings (the value is TOML), applied last."""

    def settings(self, model: str) -> dict[str, Any]:
        """Codex's config.toml, as a table."""
        return {
            "model": self.model or model,
            "model_provider": PROVIDER,
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "allow_login_shell": False,
            "check_for_update_on_startup": False,
            "web_search": "disabled",
            "model_providers": {
                PROVIDER: {
                    "name": PROVIDER,
                    "base_url": f"{LLM_ORIGIN}/v1",
                    "env_key": "OPENAI_API_KEY",
                    "wire_api": "responses",
                    # The proxy answers once the turn is sampled, paused generation included:
                    # Codex must not give up on a quiet stream and ask again.
                    "stream_idle_timeout_ms": int(self.timeout_s * 1000),
                },
            },
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            "otel": {"exporter": "none"},
            "history": {"persistence": "none"},
            "agents": {"enabled": False},
            "features": {
                "plugins": False,
                "apps": False,
                "goals": False,
                "view_image": False,
                "shell_snapshot": False,
            },
        }

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        home = f"{folder}/codex"
        config = f"{home}/config.toml"
        argv = [
            self.command, "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never",
        ]  # fmt: skip
        for spec in self.overrides:
            argv += ["-c", spec]
        argv += ["--", instruction]  # the task may start with a dash
        files = {config: _toml(self.settings(model)).encode()}
        env = {"CODEX_HOME": home, "NO_COLOR": "1"}
        return Launch(argv, {**env, **self.env}, files, render=(config,))

    speaks_mcp: ClassVar[bool] = True

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """`[mcp_servers.SERVER]` in its config.toml (its tools are `mcp__SERVER__TOOL`); a
        call may take as long as the run (its own limit is a minute)."""
        config = f"{folder}/codex/config.toml"
        entry = {
            "url": MCP_URL,
            "http_headers": MCP_HEADERS,
            "tool_timeout_sec": self.timeout_s,
        }
        table = _toml({"mcp_servers": {server: entry}})
        return with_files(launch, {config: launch.files[config] + table.encode()})
