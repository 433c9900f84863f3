"""The `AgentHandler` base class: one task family's init / run / eval."""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import AgentError, HandlerError
from agentroll.runtime.action.errors import ActionError
from agentroll.runtime.errors import SandboxError

Stage = Literal["init", "run", "eval"]
InstanceModel = TypeVar("InstanceModel", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ErrorDecision:
    """How a stage failure maps onto the outcome taxonomy."""

    outcome: Literal["agent_error", "infra_error"]
    cause: str
    message: str
    evaluate: bool = False
    """For run errors only: still run EVAL (the reward stays meaningful)."""


def classify_error(stage: Stage, exc: BaseException) -> ErrorDecision:
    """The default mapping: the policy's faults are agent errors, anything else is infra.

    A bug in handler code is not the policy's fault either, so it is `infra_error`: never
    train on it, never score it 0.
    """
    if isinstance(exc, AgentError):
        return ErrorDecision("agent_error", exc.cause, str(exc), evaluate=stage == "run")
    if isinstance(exc, HandlerError):
        return ErrorDecision("infra_error", exc.cause, str(exc))
    if isinstance(exc, SandboxError | ActionError):  # the sandbox or its tool server failed
        return ErrorDecision("infra_error", "sandbox_failure", f"{type(exc).__name__}: {exc}")
    return ErrorDecision("infra_error", f"{stage}_exception", f"{type(exc).__name__}: {exc}")


def instance_problems(name: str, exc: ValidationError) -> str:
    """A readable message for an instance of `name` that does not fit its model."""
    problems = "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(instance)'}: {e['msg']}" for e in exc.errors()
    )
    return f"invalid {name} instance: {problems}"


def parsed_instance(ctx: RolloutContext, model: type[InstanceModel], key: str) -> InstanceModel:
    """`ctx.instance` validated as `model` once per rollout (kept in `ctx.state[key]`);
    pydantic's `ValidationError` if it does not fit (submission validated it already)."""
    cached = ctx.state.get(key)
    if not isinstance(cached, model):
        cached = model.model_validate(dict(ctx.instance))
        ctx.state[key] = cached
    return cached


class AgentHandler(ABC):
    """Subclass, set `name`, implement `run` and `eval`; the server drives the stages.

    `run` and `eval` are abstract: the registry refuses a subclass that lacks one when it is
    registered or first resolved, so the omission never surfaces mid-rollout.

    One instance serves every rollout of its task family: keep per-rollout data in
    `ctx.state`, not on `self`.
    """

    name: ClassVar[str]
    eval_sandbox: ClassVar[Literal["reuse", "fresh"]] = "reuse"
    """Whether EVAL runs in the RUN sandbox (default) or needs a fresh one."""
    stop_agent_before_eval: ClassVar[bool] = True
    """With `reuse`: EVAL starts only once every process the agent started in its sandboxes is
    gone, so nothing the policy left running can rewrite what is graded. Turn it off only for a
    task whose grade is the state of a process the agent was asked to leave running."""
    instance_model: ClassVar[type[BaseModel] | None] = None
    """When set, task instances are validated against it at submission (a 400 if wrong)."""
    agent_names: ClassVar[tuple[str, ...]] = ()
    """A multi-agent handler's agents (`ctx.agents[name]`): a job for it must declare each of
    them, or it is refused at submission."""

    def validate_instance(self, instance: dict[str, Any]) -> None:
        """Raise `ValueError` with a readable message if the instance is unusable."""
        if self.instance_model is None:
            return
        try:
            self.instance_model.model_validate(instance)
        except ValidationError as exc:
            raise ValueError(instance_problems(self.name, exc)) from exc

    async def init(self, ctx: RolloutContext) -> None:  # noqa: B027 (optional, unlike run/eval)
        """Start and prepare the sandbox, set up tools. Default: nothing to prepare."""

    @abstractmethod
    async def run(self, ctx: RolloutContext) -> None:
        """The agent's turn: drive `ctx.llm` (and the sandbox's tools) until the task ends."""

    @abstractmethod
    async def eval(self, ctx: RolloutContext) -> Reward:
        """Score what RUN left behind; a meaningful reward, possibly 0."""

    def on_init_error(self, ctx: RolloutContext, exc: BaseException) -> ErrorDecision:
        return classify_error("init", exc)

    def on_run_error(self, ctx: RolloutContext, exc: BaseException) -> ErrorDecision:
        return classify_error("run", exc)

    def on_eval_error(self, ctx: RolloutContext, exc: BaseException) -> ErrorDecision:
        return classify_error("eval", exc)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        """Extra trajectory fields: `artifacts` (name -> text) and `metadata` (merged)."""
        return {}
