"""Per-job settings of the tool-calling agent loop.

A handler declares its defaults as an `AgentConfig`; a job may override any field through
the instance's `"agent"` object (validated at submission, so a typo is a 400, not a
silently ignored knob):

    {"question": "...", "answer": "...", "agent": {"max_turns": 12, "parser": "hermes"}}
"""

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TOOL_NAMES = ("bash", "python", "str_replace_editor", "submit")


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: tuple[str, ...] | None = None
    """Tool names offered to the model (from `TOOL_NAMES`); None: the handler's default set.
    `submit` is always added: without it a rollout could only end by a limit."""
    parser: str = "hermes"
    """Tool-call parser (`agentroll.handlers.toolcalls.get_parser`): hermes, qwen3_coder, ..."""
    max_turns: int | None = Field(None, ge=1, le=10_000)
    """Model turns; None: the job's `limits.max_turns` (default 30). The lower of both wins."""
    wall_time_s: float | None = Field(None, gt=0)
    """Seconds the loop may run. Whatever it is, the loop's budget also ends inside RUN's
    timeout (`limits.run_timeout_s`, less a stop margin of 10 % up to 10 s) and leaves EVAL
    its room before the job's deadline; it is checked before every generation and every tool
    call, and clips each call's limit. Running out ends the rollout `agent_error`
    (`wall_time`), graded on what it left."""
    tool_timeout_s: float = Field(60.0, gt=0, le=3600)
    """Limit of one tool call (a bash command, a Python cell); clipped to the time left."""
    max_calls_per_reply: int = Field(16, ge=1, le=1000)
    """Tool calls one reply may make. A reply with more runs none of them and ends the
    rollout `agent_error` (`too_many_calls`), graded on what earlier turns left."""
    max_consecutive_errors: int = Field(3, ge=1, le=100)
    """Turns in a row whose every call was malformed or invalid before the rollout ends as
    `agent_error` (each such turn gets an error observation the model can recover from)."""
    max_observation_chars: int = Field(10_000, ge=200, le=1_000_000)
    """Tool output beyond this is cut in the middle with a visible marker."""
    system_prompt: str | None = None
    """Replaces the handler's system prompt."""

    def merged(self, overrides: Mapping[str, Any] | None) -> "AgentConfig":
        """These defaults with a job's overrides applied (validated)."""
        if not overrides:
            return self
        return AgentConfig.model_validate({**self.model_dump(), **dict(overrides)})

    def tool_names(self, default: tuple[str, ...]) -> tuple[str, ...]:
        names = tuple(dict.fromkeys([*(self.tools if self.tools is not None else default)]))
        unknown = [n for n in names if n not in TOOL_NAMES]
        if unknown:
            raise ValueError(f"unknown tool(s) {unknown}; known tools: {', '.join(TOOL_NAMES)}")
        return names if "submit" in names else (*names, "submit")
