"""`harness`: the older spelling of a job that runs a task under a harness agent.

    {"handler": "harness",
     "instance": {"harness": {"type": "mini_swe_agent", "timeout_s": 900},
                  "evaluator": "swe",   # any task (built-in or installed): its INIT and EVAL
                  "task": {...},        # an instance of that task (validated by it)
                  "instruction": null}} # what the harness is told; default: the task's prompt

is the job `{"task": "swe", "agent": {"type": "mini_swe_agent", "timeout_s": 900},
"instance": {...}}` (see `agentroll.handlers.harness.agent` for what it does), but for where
the task's instance sits and an `instruction` of its own.
"""

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentroll.handlers.agent.handler import ToolAgentHandler
from agentroll.handlers.base import AgentHandler, instance_problems
from agentroll.handlers.compose import ComposedHandler
from agentroll.handlers.harness.agent import HarnessAgent
from agentroll.handlers.harness.config import HarnessConfig

NAME = "harness"


class HarnessInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    harness: HarnessConfig
    evaluator: str = Field("swe", min_length=1, max_length=256)
    task: dict[str, Any]
    instruction: str | None = Field(None, min_length=1)


def harness_job(
    instance: Mapping[str, Any], tasks: Callable[[str], AgentHandler]
) -> ComposedHandler:
    """The job's evaluator task under its harness; `ValueError` if the instance is unusable.
    `tasks` resolves the evaluator's name (the handler registry: installed tasks too)."""
    try:
        spec = HarnessInstance.model_validate(dict(instance))
    except ValidationError as exc:
        raise ValueError(instance_problems(NAME, exc)) from exc
    try:
        HarnessAgent.check_parser(spec.harness)
    except ValueError as exc:
        raise ValueError(f"invalid {NAME} instance: {exc}") from exc
    try:
        task = tasks(spec.evaluator)
    except LookupError as exc:
        raise ValueError(f"invalid {NAME} instance: evaluator: {exc}") from exc
    if not isinstance(task, ToolAgentHandler):
        raise ValueError(
            f"invalid {NAME} instance: evaluator {spec.evaluator!r} is not a task an agent can "
            "run (a ToolAgentHandler)"
        )
    agent = HarnessAgent(spec.harness, spec.instruction)
    return ComposedHandler(task, agent, instance_key="task")
