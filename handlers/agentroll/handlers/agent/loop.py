"""The tool-calling agent loop: generate, parse calls, run them in the sandbox, observe, repeat.

    start(system + task, tool schemas) ─► generate ─► parse ─┬─ submit called ──────► done
                         ▲                                   ├─ no tool call ────────► done
                         └──── add tool observations ◄───────┴─ run calls (or errors)

It ends when the model calls `submit` (finish_reason `submit`), replies without a tool call
(`stop`), or hits a limit: turns (`max_turns`), tokens (`length`, raised by the session as
`ContextLengthExceeded`), time (`wall_time`), more calls in one reply than
`max_calls_per_reply` (`too_many_calls`) or too many malformed turns in a row
(`tool_errors`). Limits end the rollout as `agent_error` (the policy's doing; the reward is
still computed). Progress lives in `ctx.state["agent"]` (an `AgentRun`) from the first turn,
so EVAL sees what happened however the loop ended.

Time is budgeted before every generation and every tool call, and each call's own limit is
clipped to what is left (`agentroll.handlers.budget`): a reply full of `sleep`s ends the loop
at its budget, inside RUN's timeout, and is graded -- never `timed_out`.
"""

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from agentroll.handlers.agent.config import AgentConfig
from agentroll.handlers.agent.tools import Tool, check_arguments
from agentroll.handlers.budget import run_budget
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.errors import AgentError, ContextLengthExceeded
from agentroll.handlers.toolcalls import (
    ParsedReply,
    SchemaAwareParser,
    ToolCall,
    ToolCallParser,
    assistant_message,
    error_observation,
    get_parser,
    tool_message,
)
from agentroll.runtime.action.errors import ActionRequestError
from agentroll.server.schema.messages import ChatMessage

STATE_KEY = "agent"
MIN_TOOL_TIMEOUT_S = 1.0
# Models trained on other harnesses end with `finish`; accept it as `submit`.
ALIASES = {"finish": "submit"}


@dataclass
class AgentRun:
    """What the loop did so far; EVAL reads it from `ctx.state["agent"]`."""

    ended: str | None = None
    """Why it ended: submit, stop, max_turns, length, wall_time, too_many_calls, tool_errors
    (None: running)."""
    submission: dict[str, Any] | None = None
    """The arguments of the `submit` call, when there was one."""
    final_text: str = ""
    """The last assistant reply."""
    turns: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    invalid_calls: int = 0
    tool_s: float = 0.0

    @property
    def submitted(self) -> bool:
        return self.ended == "submit"


class AgentLoop:
    """One rollout's loop. Build it with the tools, then `await loop.run(ctx, messages)`."""

    def __init__(self, tools: Sequence[Tool], config: AgentConfig) -> None:
        self.tools = {t.name: t for t in tools}
        self.schemas = [t.schema() for t in tools]
        self.config = config
        parser = get_parser(config.parser)
        if isinstance(parser, SchemaAwareParser):  # formats whose arguments are untyped text
            parser = parser.with_tools(self.schemas)
        self.parser: ToolCallParser = parser

    async def run(self, ctx: RolloutContext, messages: Sequence[ChatMessage]) -> AgentRun:
        run = AgentRun()
        ctx.state[STATE_KEY] = run
        config = self.config
        max_turns = min(config.max_turns or ctx.limits.max_turns, ctx.limits.max_turns)
        budget = run_budget(ctx, config.wall_time_s)
        deadline = time.monotonic() + budget
        await ctx.llm.start(messages, tools=self.schemas)
        consecutive_errors = 0
        while True:
            self._check_time(ctx, run, deadline, budget, 0.0)
            try:
                turn = await ctx.llm.generate()
            except ContextLengthExceeded:
                self._end(ctx, run, "length")
                raise
            run.turns += 1
            run.final_text = turn.text
            reply = self.parser.parse(turn.text).with_call_ids(f"call_{run.turns}_")
            ctx.llm.describe_last_reply(assistant_message(reply))  # readable view: tool_calls
            if not reply.calls and not reply.errors:
                self._end(ctx, run, "stop" if turn.finish_reason != "length" else "length")
                return run
            self._check_calls(ctx, run, reply)
            observations, executed = await self._act(ctx, run, reply, deadline, budget)
            if run.ended == "submit":
                return run
            consecutive_errors = 0 if executed else consecutive_errors + 1
            if consecutive_errors >= config.max_consecutive_errors:
                self._fail(
                    ctx,
                    run,
                    "tool_errors",
                    f"{consecutive_errors} turns in a row without a valid tool call",
                    cause="invalid_tool_calls",
                )
            if ctx.llm.num_turns >= max_turns:
                self._fail(
                    ctx, run, "max_turns", f"turn limit of {max_turns} reached without submitting"
                )
            try:
                await ctx.llm.add_messages(observations)
            except ContextLengthExceeded:
                self._end(ctx, run, "length")
                raise

    def _end(self, ctx: RolloutContext, run: AgentRun, reason: str) -> None:
        run.ended = reason
        ctx.set_finish_reason(reason)

    def _fail(
        self, ctx: RolloutContext, run: AgentRun, reason: str, message: str, cause: str = ""
    ) -> NoReturn:
        """End the loop for `reason` as the policy's failure (`agent_error`, still graded)."""
        self._end(ctx, run, reason)
        raise AgentError(message, cause=cause or reason, finish_reason=reason)

    def _check_calls(self, ctx: RolloutContext, run: AgentRun, reply: ParsedReply) -> None:
        """End the loop (`too_many_calls`) on a reply with more calls than the cap. None of it
        runs: running the first ones would still pay the flood in work done on the node."""
        cap = self.config.max_calls_per_reply
        if len(reply.calls) <= cap:
            return
        self._fail(
            ctx,
            run,
            "too_many_calls",
            f"{len(reply.calls)} tool calls in one reply; the limit is {cap}",
        )

    def _check_time(
        self, ctx: RolloutContext, run: AgentRun, deadline: float, budget: float, need_s: float
    ) -> None:
        """End the loop (`wall_time`) once less than `need_s` of its budget is left."""
        if deadline - time.monotonic() > need_s:
            return
        self._fail(
            ctx, run, "wall_time", f"time budget of {budget:.0f} s used up without submitting"
        )

    async def _act(
        self,
        ctx: RolloutContext,
        run: AgentRun,
        reply: ParsedReply,
        deadline: float,
        budget: float,
    ) -> tuple[list[ChatMessage], int]:
        """Run the reply's calls in order, each only while the budget lasts; returns the
        observations and how many ran."""
        observations: list[ChatMessage] = []
        executed = 0
        for call in reply.calls:
            tool = self.tools.get(ALIASES.get(call.name, call.name))
            runs_in_sandbox = tool is not None and not tool.ends_episode
            self._check_time(ctx, run, deadline, budget, MIN_TOOL_TIMEOUT_S * runs_in_sandbox)
            text, ok = await self._call(ctx, run, call, deadline)
            if not ok:
                run.invalid_calls += 1
                observations.append(tool_message(call, f"Error: {text}"))
                continue
            executed += 1
            if self.tools[ALIASES.get(call.name, call.name)].episode_over():
                run.submission = dict(call.arguments)
                self._end(ctx, run, "submit")
                break
            observations.append(tool_message(call, text))
        if reply.errors:
            # Malformed calls answer no call id: the feedback is a user turn.
            run.invalid_calls += len(reply.errors)
            hint = getattr(self.parser, "format_hint", None)
            observations.append({"role": "user", "content": error_observation(reply, hint)})
        return observations, executed

    async def _call(
        self, ctx: RolloutContext, run: AgentRun, call: ToolCall, deadline: float
    ) -> tuple[str, bool]:
        tool = self.tools.get(ALIASES.get(call.name, call.name))
        if tool is None:
            return f"unknown tool {call.name!r}; available tools: {', '.join(self.tools)}", False
        problems = check_arguments(tool.parameters, call.arguments)
        if problems:
            return f"invalid arguments for {tool.name}: " + "; ".join(problems), False
        timeout = min(self.config.tool_timeout_s, deadline - time.monotonic())
        began = time.monotonic()
        try:
            text = await tool.call(
                ctx.sandbox,
                call.arguments,
                limit_s=timeout,
                max_chars=self.config.max_observation_chars,
            )
        except ActionRequestError as exc:  # the action server refused the arguments
            return f"{tool.name}: {exc}", False
        finally:
            seconds = time.monotonic() - began
            run.tool_calls[tool.name] += 1
            run.tool_s += seconds
            ctx.record_tool_call(tool.name, seconds)
        return text, True
