"""The agent loop's control flow against a recording LLM session (no server, no sandbox)."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from agentroll.handlers import AgentError, ContextLengthExceeded, Message, SampledTurn
from agentroll.handlers.agent import AgentConfig, AgentLoop, SubmitTool, Tool
from agentroll.runtime import Sandbox


def call(name: str, **args: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


class Upper(Tool):
    """A tool that needs no sandbox."""

    name: ClassVar[str] = "upper"
    description: ClassVar[str] = "Upper-case a word."

    def __init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        }

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        return str(args["word"]).upper()


@dataclass
class Limits:
    max_turns: int = 30
    max_response_tokens: int = 32768
    run_timeout_s: float = 1800.0
    eval_timeout_s: float = 600.0
    deadline_s: float = 7200.0


@dataclass
class Session:
    replies: list[str]
    overflow_at: int | None = None
    messages: list[Message] = field(default_factory=list)
    tools: list[Message] = field(default_factory=list)
    num_turns: int = 0
    response_tokens: int = 0

    async def start(self, messages: Sequence[Message], tools: Sequence[Message] = ()) -> None:
        self.messages, self.tools = list(messages), list(tools)

    async def generate(self, *, max_tokens: int | None = None) -> SampledTurn:
        if self.num_turns == self.overflow_at:
            raise ContextLengthExceeded("context is full")
        text = self.replies[self.num_turns]
        self.num_turns += 1
        self.messages.append({"role": "assistant", "content": text})
        return SampledTurn(text, (1,), (0.0,), "stop", "b", 0)

    async def add_messages(self, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)

    def describe_last_reply(self, message: Message) -> None:
        self.messages[-1] = dict(message)


@dataclass
class Context:
    llm: Session
    limits: Limits = field(default_factory=Limits)
    instance: Mapping[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    sandbox: None = None
    job_id: str = "j"
    finish_reason: str | None = None
    recorded: list[str] = field(default_factory=list)

    def time_left(self) -> float:
        return 60.0

    def agent_time(self) -> float:
        return 0.0

    def set_finish_reason(self, reason: str) -> None:
        self.finish_reason = reason

    def record_tool_call(self, tool: str, seconds: float) -> None:
        self.recorded.append(tool)


def make_loop(**config: Any) -> AgentLoop:
    submit = SubmitTool(properties={"answer": {"type": "string"}}, required=["answer"])
    return AgentLoop([Upper(), submit], AgentConfig(**config))


START = [{"role": "user", "content": "go"}]


async def test_tools_run_until_submit_and_observations_come_back() -> None:
    ctx = Context(Session([call("upper", word="abc"), "done: " + call("submit", answer="ABC")]))
    run = await make_loop().run(ctx, START)  # type: ignore[arg-type]
    assert (run.ended, run.submission, run.turns) == ("submit", {"answer": "ABC"}, 2)
    assert ctx.finish_reason == "submit" and ctx.recorded == ["upper", "submit"]
    observation = ctx.llm.messages[2]
    assert observation == {
        "role": "tool",
        "content": "ABC",
        "tool_call_id": "call_1_0",
        "name": "upper",
    }
    assert [t["function"]["name"] for t in ctx.llm.tools] == ["upper", "submit"]
    assert ctx.state["agent"] is run


async def test_a_reply_without_a_tool_call_ends_the_loop() -> None:
    ctx = Context(Session(["I think the answer is 4."]))
    run = await make_loop().run(ctx, START)  # type: ignore[arg-type]
    assert (run.ended, run.submitted, run.final_text) == ("stop", False, "I think the answer is 4.")


async def test_mistakes_get_readable_observations_and_the_model_can_recover() -> None:
    replies = [
        "<tool_call>\n{not json\n</tool_call>",  # malformed
        call("shout", word="x"),  # unknown tool
        call("upper", word=3),  # wrong argument type
        call("upper", word="ok"),
        call("finish", answer="OK"),  # `finish` is accepted for `submit`
    ]
    ctx = Context(Session(replies))
    run = await make_loop(max_consecutive_errors=4).run(ctx, START)  # type: ignore[arg-type]
    assert run.ended == "submit" and run.invalid_calls == 3
    feedback = [m["content"] for m in ctx.llm.messages if m["role"] in ("tool", "user")][1:]
    assert "malformed" in feedback[0]
    assert "unknown tool 'shout'; available tools: upper, submit" in feedback[1]
    assert "argument 'word' must be of type string" in feedback[2]
    assert feedback[3] == "OK"


async def test_too_many_invalid_turns_in_a_row_is_an_agent_error() -> None:
    ctx = Context(Session([call("upper")] * 5))
    with pytest.raises(AgentError) as info:
        await make_loop(max_consecutive_errors=3).run(ctx, START)  # type: ignore[arg-type]
    assert info.value.cause == "invalid_tool_calls" and info.value.finish_reason == "tool_errors"
    assert ctx.llm.num_turns == 3 and ctx.state["agent"].invalid_calls == 3


async def test_turn_limit_is_an_agent_error_with_state_for_eval() -> None:
    ctx = Context(Session([call("upper", word="a")] * 10), limits=Limits(max_turns=4))
    with pytest.raises(AgentError) as info:
        await make_loop().run(ctx, START)  # type: ignore[arg-type]
    assert (info.value.cause, ctx.finish_reason) == ("max_turns", "max_turns")
    assert ctx.llm.num_turns == 4 and ctx.state["agent"].tool_calls["upper"] == 4
    # A job's own lower limit wins over the handler's configuration, and vice versa.
    ctx = Context(Session([call("upper", word="a")] * 10))
    with pytest.raises(AgentError):
        await make_loop(max_turns=2).run(ctx, START)  # type: ignore[arg-type]
    assert ctx.llm.num_turns == 2


async def test_context_overflow_ends_with_length() -> None:
    ctx = Context(Session([call("upper", word="a")] * 3, overflow_at=2))
    with pytest.raises(ContextLengthExceeded):
        await make_loop().run(ctx, START)  # type: ignore[arg-type]
    assert ctx.finish_reason == "length" and ctx.state["agent"].ended == "length"
