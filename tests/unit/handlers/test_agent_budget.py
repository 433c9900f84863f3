"""RUN's time budget and the calls-per-reply cap: the arithmetic, and the agent loop against a
fake clock that only its tools advance (no sleeping, no dependence on the machine's speed)."""

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from tests.unit.handlers.test_agent_loop import START, Context, Limits, Session, call

from agentroll.handlers import AgentError
from agentroll.handlers.agent import AgentConfig, AgentLoop, SubmitTool, Tool
from agentroll.handlers.agent import loop as loop_module
from agentroll.handlers.budget import run_budget_s
from agentroll.runtime import Sandbox


@pytest.mark.parametrize(
    ("limits", "agent_time_s", "own_limit_s", "expected"),
    [
        # RUN's timeout less its margin (10 %, at most 10 s) binds by default.
        ({"run_timeout_s": 1800, "eval_timeout_s": 600, "deadline_s": 7200}, 0, None, 1790),
        ({"run_timeout_s": 60, "eval_timeout_s": 600, "deadline_s": 7200}, 0, None, 54),
        ({"run_timeout_s": 60, "eval_timeout_s": 600, "deadline_s": 7200}, 50, None, 4),
        # The loop's own limit, when lower.
        ({"run_timeout_s": 1800, "eval_timeout_s": 600, "deadline_s": 7200}, 100, 300, 300),
        # The deadline less EVAL's room, counted in the agent's time only.
        ({"run_timeout_s": 1800, "eval_timeout_s": 600, "deadline_s": 1500}, 0, None, 900),
        ({"run_timeout_s": 1800, "eval_timeout_s": 600, "deadline_s": 1500}, 300, None, 600),
        # A deadline shorter than EVAL's timeout keeps half of itself for EVAL.
        ({"run_timeout_s": 1800, "eval_timeout_s": 600, "deadline_s": 100}, 0, None, 50),
        # Used up: never negative.
        ({"run_timeout_s": 60, "eval_timeout_s": 600, "deadline_s": 7200}, 90, None, 0),
    ],
)
def test_the_run_budget_ends_inside_the_stage_and_leaves_eval_its_room(
    limits: dict[str, float], agent_time_s: float, own_limit_s: float | None, expected: float
) -> None:
    got = run_budget_s(**limits, agent_time_s=agent_time_s, own_limit_s=own_limit_s)
    assert got == pytest.approx(expected)


@dataclass
class Clock:
    now: float = 1000.0

    def monotonic(self) -> float:
        return self.now


class Sleep(Tool):
    """`sleep` that advances the fake clock by what it is allowed to sleep."""

    name: ClassVar[str] = "sleep"
    description: ClassVar[str] = "Sleep."

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.limits: list[float] = []
        self.parameters = {"type": "object", "properties": {"s": {"type": "number"}}}

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        self.limits.append(limit_s)
        slept = min(float(args["s"]), limit_s)
        self.clock.now += slept
        return f"slept {slept:g}"


@dataclass
class ClockedContext(Context):
    clock: Clock = field(default_factory=Clock)
    started: float = 1000.0

    def agent_time(self) -> float:
        return self.clock.now - self.started


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(loop_module, "time", fake)
    return fake


def sleeps(n: int, seconds: float) -> str:
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': 'sleep', 'arguments': {'s': seconds}})}\n</tool_call>"
        for _ in range(n)
    )


def run_loop(clock: Clock, replies: list[str], limits: Limits, **config: Any) -> tuple[Any, Sleep]:
    tool = Sleep(clock)
    submit = SubmitTool(properties={"answer": {"type": "string"}}, required=["answer"])
    loop = AgentLoop([tool, submit], AgentConfig(tool_timeout_s=30, **config))
    ctx = ClockedContext(Session(replies), limits=limits, clock=clock)
    return loop.run(ctx, START), tool  # type: ignore[arg-type]


async def test_a_sleep_flood_in_one_reply_ends_at_the_budget_as_wall_time(clock: Clock) -> None:
    limits = Limits(run_timeout_s=60)  # budget: 60 - 6 = 54 s
    running, tool = run_loop(clock, [sleeps(12, 100)], limits)
    with pytest.raises(AgentError) as info:
        await running
    assert (info.value.cause, info.value.finish_reason) == ("wall_time", "wall_time")
    # Each call's own limit was clipped to what was left; the rest never ran.
    assert tool.limits == [30, 24]
    assert clock.now - 1000.0 <= 54.0  # ended inside RUN's timeout, before its margin


async def test_sleeps_across_turns_end_at_the_budget_as_wall_time(clock: Clock) -> None:
    limits = Limits(run_timeout_s=60)
    running, tool = run_loop(clock, [sleeps(1, 20)] * 10, limits)
    with pytest.raises(AgentError) as info:
        await running
    assert info.value.finish_reason == "wall_time"
    assert tool.limits == [30, 30, 14]
    assert clock.now - 1000.0 == 54.0


async def test_the_loops_own_wall_time_setting_still_applies(clock: Clock) -> None:
    running, tool = run_loop(clock, [sleeps(1, 20)] * 10, Limits(), wall_time_s=25)
    with pytest.raises(AgentError, match="time budget of 25 s"):
        await running
    assert tool.limits == [25, 5]


async def test_an_honest_slow_agent_inside_its_budget_submits(clock: Clock) -> None:
    replies = [sleeps(4, 5), sleeps(2, 10), call("submit", answer="42")]
    running, tool = run_loop(clock, replies, Limits(run_timeout_s=60))
    run = await running
    assert (run.ended, run.submission) == ("submit", {"answer": "42"})
    assert len(tool.limits) == 6 and clock.now - 1000.0 == 40.0


async def test_a_submit_with_under_a_second_left_still_counts(clock: Clock) -> None:
    replies = [sleeps(1, 53.5), call("submit", answer="42")]
    run = await run_loop(clock, replies, Limits(run_timeout_s=60))[0]
    assert run.ended == "submit"


async def test_more_calls_in_one_reply_than_the_cap_run_none_and_end_the_loop(
    clock: Clock,
) -> None:
    running, tool = run_loop(clock, [sleeps(1, 1), sleeps(17, 1)], Limits())
    with pytest.raises(AgentError, match="17 tool calls in one reply; the limit is 16") as info:
        await running
    assert (info.value.cause, info.value.finish_reason) == ("too_many_calls", "too_many_calls")
    assert len(tool.limits) == 1  # only the first reply's call ran


async def test_a_reply_at_the_cap_runs_whole(clock: Clock) -> None:
    replies = [sleeps(4, 1), call("submit", answer="x")]
    run = await run_loop(clock, replies, Limits(), max_calls_per_reply=4)[0]
    assert run.ended == "submit" and run.tool_calls["sleep"] == 4
