"""What every harness model shares, and the `Launch` it turns into.

A harness model (config.py) knows its CLI: the argv, environment and files that run it
headless against the rollout's proxy. Values it cannot know before the sandbox runs (the
proxy's loopback address, chosen by the bridge, and the rollout's key) are written as the
placeholders `LLM_ORIGIN` and `API_KEY`: the bridge fills them in the argv, the environment
and the files named in `Launch.render` just before it starts the harness.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

LLM_ORIGIN = "@AGENTROLL_LLM_ORIGIN@"
"""`http://127.0.0.1:PORT`: the proxy as the harness reaches it (no `/v1`)."""
API_KEY = "@AGENTROLL_API_KEY@"
"""The rollout's proxy key (also in `OPENAI_API_KEY`)."""
MCP_URL = f"{LLM_ORIGIN}/mcp"
"""The task's tools over MCP (streamable HTTP; `Authorization: Bearer API_KEY`)."""
MCP_HEADERS = {"Authorization": f"Bearer {API_KEY}"}
"""What every request to `MCP_URL` carries."""


@dataclass(frozen=True)
class Launch:
    """How to start one harness run inside the sandbox (paths are sandbox paths)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    """Uploaded before the start: sandbox path -> content."""
    report_file: str | None = None
    """A JSON file the harness writes (its own trajectory), read back after the run."""
    render: tuple[str, ...] = ()
    """Files (of `files`) whose `LLM_ORIGIN`/`API_KEY` placeholders the bridge fills."""


class HarnessBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(900.0, gt=0, le=86_400)
    """Wall time of the harness process; past it the harness is killed (`agent_error`)."""
    max_calls: int | None = Field(None, ge=1, le=100_000)
    """Model calls the proxy serves; None: the job's `limits.max_turns`."""
    max_sampled_tokens: int | None = Field(None, ge=1)
    """Tokens sampled over all calls; None: the job's `limits.max_response_tokens`."""
    parser: str = "hermes"
    """Tool-call parser for replies to requests that offer tools."""
    python: str = "python3"
    """Interpreter inside the sandbox that runs the bridge."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the harness."""
    address_space_bytes: int | None = Field(None, ge=1 << 26)
    """Address space of each process in the rollout's sandbox (RLIMIT_AS); None: the
    evaluator's. A CLI that reserves more virtual memory at start than that needs more."""

    def launch(self, instruction: str, folder: str, model: str) -> Launch:
        """`folder` is a fresh sandbox directory for this run's files; `model` the name the
        proxy serves."""
        raise NotImplementedError

    speaks_mcp: ClassVar[bool] = False
    """True: `with_mcp` configures this CLI for a task's MCP tools."""

    def with_mcp(self, launch: Launch, folder: str, server: str) -> Launch:
        """`launch` with the task's MCP server (named `server`, at `MCP_URL`) configured
        where this CLI reads it."""
        raise NotImplementedError(f"{type(self).__name__} cannot be given MCP tools")


def with_files(launch: Launch, files: dict[str, bytes], argv_tail: Sequence[str] = ()) -> Launch:
    """`launch` with more (or rewritten) files, placeholders filled by the bridge, and
    arguments."""
    return replace(
        launch,
        argv=[*launch.argv, *argv_tail],
        files={**launch.files, **files},
        render=(*launch.render, *(path for path in files if path not in launch.render)),
    )


def with_json_settings(launch: Launch, path: str, over: dict[str, Any]) -> Launch:
    """`launch` with `over` laid onto the JSON settings file it writes at `path`."""
    settings = merged(json.loads(launch.files[path]), over)
    return with_files(launch, {path: json.dumps(settings, indent=2).encode()})


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid onto `base` (a CLI's settings), nested objects merged key by key."""
    out = dict(base)
    for key, value in over.items():
        inner = out.get(key)
        out[key] = (
            merged(inner, value) if isinstance(inner, dict) and isinstance(value, dict) else value
        )
    return out
