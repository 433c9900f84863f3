"""A task family is its folder plus its scripted rule: one dropped into the built-in package
(here a temporary folder on its `__path__`) is served by the name it declares, and its jobs
run through the real server, with no other file naming it."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers import HandlerRegistry
from agentroll.handlers import builtin as builtin_package
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, default_rules

pytestmark = pytest.mark.integration

FOLDER = "tmpfam_capital"
FAMILY = '''"""Name a country's capital."""

from typing import ClassVar

from agentroll.handlers import AgentResult, Reward, RolloutContext
from agentroll.handlers.agent import FinalAnswer, ToolAgentHandler, no_answer

HANDLERS = {"capital": "CapitalHandler"}


class CapitalHandler(ToolAgentHandler):
    name = "capital"
    final_answer: ClassVar[FinalAnswer] = FinalAnswer()

    def task_prompt(self, ctx: RolloutContext) -> str:
        return f"Name the capital of {ctx.instance['country']}."

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        predicted = self.final_answer.given(ctx, result)
        if predicted is None:
            return no_answer()
        return Reward(float(predicted == ctx.instance["capital"]), {"predicted": predicted})
'''
PROMPT = "Name the capital of "
KNOWN = {"France": "Paris", "Japan": "Tokyo"}


def capital_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """The family's scripted policy: it knows two capitals and guesses the rest wrong."""
    user = conv.last("user")
    if user is None or not user.content.startswith(PROMPT):
        return None
    return Reply(KNOWN.get(user.content.removeprefix(PROMPT).rstrip("."), "Atlantis"))


@pytest.fixture
def capital_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / "__init__.py").write_text(FAMILY)
    monkeypatch.setattr(builtin_package, "__path__", [*builtin_package.__path__, str(tmp_path)])
    yield
    sys.modules.pop(f"{builtin_package.__name__}.{FOLDER}", None)


@pytest.mark.usefixtures("capital_family")
async def test_a_family_folder_runs_jobs_by_its_declared_name(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    registry = HandlerRegistry()
    assert type(registry.get("capital")).__module__ == f"{builtin_package.__name__}.{FOLDER}"
    rules = default_rules()
    rules.register("capital", capital_rule)
    jobs = [
        {"job_id": country, "handler": "capital", "instance": {"country": country, **gold}}
        for country, gold in [
            ("France", {"capital": "Paris"}),
            ("Japan", {"capital": "Tokyo"}),
            ("Peru", {"capital": "Lima"}),  # the control: a wrong answer earns nothing
        ]
    ]
    async with (
        scripted_backend(0.0, rules, policy="capital") as backend,
        rollout_service(agentroll_server, tmp_path, backend, registry) as client,
    ):
        done = await run_jobs(client, jobs)
    rewards = {job_id: (t.outcome, t.reward) for job_id, t in done.items()}
    assert rewards == {
        "France": (Outcome.ok, 1.0),
        "Japan": (Outcome.ok, 1.0),
        "Peru": (Outcome.ok, 0.0),
    }
    assert done["Peru"].reward_info == {"predicted": "Atlantis"}
    assert (
        done["France"].messages[0]["content"] == "You are a helpful assistant. Answer the request."
    )
