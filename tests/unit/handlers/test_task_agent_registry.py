"""Composing a job's task with the agent it names: the registry's lookup and refusals, and
the request fields that name them (which leave every older request as it was)."""

from collections.abc import Mapping
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from agentroll.handlers import (
    Agent,
    AgentResult,
    ComposedHandler,
    HandlerRegistry,
    RegistryError,
    Reward,
    RolloutContext,
    UnknownAgentError,
)
from agentroll.handlers.agent import ToolAgentHandler
from agentroll.handlers.harness import HarnessConfig
from agentroll.handlers.harness.agent import HarnessAgent
from agentroll.handlers.registry import BUILTIN_AGENTS, HARNESS_AGENT
from agentroll.server.fingerprint import request_fingerprint
from agentroll.server.schema import JobRequest

QUESTION = {"question": "What is 6 * 7?", "answer": "42"}


class Quiet(Agent):
    """An agent that never asks the model: it answers 42."""

    @classmethod
    def from_config(cls, kind: str, config: Mapping[str, Any]) -> "Quiet":
        return cls()

    async def run(self, ctx: RolloutContext, task: ToolAgentHandler) -> AgentResult:
        return self.result(ctx)

    def result(self, ctx: RolloutContext) -> AgentResult:
        return AgentResult("\\boxed{42}")


class EvalOnly(ToolAgentHandler):
    """A task written before agents: it grades in `eval(ctx)`, reading the tool loop."""

    name = "eval_only"

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(float(self.agent_run(ctx).submitted))


class Ungraded(ToolAgentHandler):
    name = "ungraded"


def job(**fields: Any) -> JobRequest:
    return JobRequest.model_validate({"instance": QUESTION, **fields})


def test_task_is_the_handler_spelled_otherwise_and_an_unset_agent_changes_nothing() -> None:
    by_handler, by_task = job(handler="math"), job(task="math")
    assert by_task.handler == "math"
    assert by_task.model_dump() == by_handler.model_dump()
    assert "agent" not in by_handler.model_dump(mode="json")
    assert request_fingerprint(by_task) == request_fingerprint(by_handler)
    named = job(task="math", agent={"type": "tool_loop"})
    assert request_fingerprint(named) != request_fingerprint(by_handler)
    with pytest.raises(ValidationError, match="task"):
        job(handler="math", task="stem")


def test_a_job_without_an_agent_runs_its_tasks_own_handler() -> None:
    registry = HandlerRegistry()
    assert registry.for_job(job(handler="math")) is registry.get("math")


def test_a_named_agent_runs_the_task_and_the_task_keeps_its_sandbox_rules() -> None:
    registry = HandlerRegistry()
    composed = registry.for_job(job(task="swe", agent={"type": "mini_swe_agent"}))
    assert isinstance(composed, ComposedHandler) and isinstance(composed.agent, HarnessAgent)
    assert composed.task is registry.get("swe")
    assert (composed.eval_sandbox, composed.stop_agent_before_eval) == ("reuse", True)


def test_agents_resolve_like_handlers_registered_by_path_and_unknown_ones_listed() -> None:
    registry = HandlerRegistry()
    by_path = registry.for_job(job(task="math", agent={"type": f"{__name__}:Quiet"}))
    assert isinstance(by_path, ComposedHandler) and isinstance(by_path.agent, Quiet)
    registry.agents.register("quiet", Quiet)
    assert "quiet" in registry.agents.names()
    with pytest.raises(UnknownAgentError, match="unknown agent 'nope'; known agents: answer, "):
        registry.for_job(job(task="math", agent={"type": "nope"}))
    with pytest.raises(ValueError, match="'type' must name an agent"):
        registry.for_job(job(task="math", agent={"max_turns": 3}))


def test_wrong_agent_settings_are_refused_at_submission() -> None:
    registry = HandlerRegistry()
    with pytest.raises(ValueError, match="unknown tool-call parser 'xml9'"):
        registry.for_job(job(task="math", agent={"type": "tool_loop", "parser": "xml9"}))
    with pytest.raises(ValueError, match="agent 'answer': the answer agent takes no settings"):
        registry.for_job(job(task="math", agent={"type": "answer", "max_turns": 3}))
    with pytest.raises(ValueError, match="timeout_s"):
        registry.for_job(job(task="swe", agent={"type": "shell", "command": "x", "timeout_s": 0}))
    unknown_tool = job(task="math", agent={"type": "tool_loop", "tools": ["telnet"]})
    with pytest.raises(ValueError, match="unknown tool"):
        registry.for_job(unknown_tool).validate_instance(QUESTION)


def test_a_handler_that_runs_its_own_agents_takes_no_agent() -> None:
    request = job(handler="solve_verify", agent={"type": "tool_loop"})
    with pytest.raises(ValueError, match="runs its own agents"):
        HandlerRegistry().for_job(request)


def test_a_task_that_grades_only_in_eval_runs_only_under_its_default_agent() -> None:
    registry = HandlerRegistry()
    registry.register(EvalOnly)
    registry.for_job(job(handler="eval_only")).validate_instance(QUESTION)
    composed = registry.for_job(job(handler="eval_only", agent={"type": "answer"}))
    with pytest.raises(ValueError, match="grades only through eval"):
        composed.validate_instance(QUESTION)


def test_a_task_that_grades_nothing_is_refused_when_registered() -> None:
    with pytest.raises(RegistryError, match="does not implement grade"):
        HandlerRegistry().register(Ungraded)


def test_every_harness_preset_is_an_agent() -> None:
    presets = {cls.model_fields["type"].default for cls in get_args(get_args(HarnessConfig)[0])}
    assert presets == {name for name, path in BUILTIN_AGENTS.items() if path == HARNESS_AGENT}
    registry = HandlerRegistry()
    for name in registry.agents.names():
        settings = {"command": "x"} if name == "shell" else {}
        assert isinstance(registry.agents.build({"type": name, **settings}), Agent), name
