"""How a legacy environment's rubric is scored in its worker (`legacy_worker.scored`), run by
verifiers 0.3.1 itself in the legacy environment's interpreter.

verifiers' own `Rubric` logs a reward function that raises and counts it 0, so a reward code
broken for everyone would pass for the reply's score. agentroll calls the same functions with
the same arguments, but a raise fails the scoring (then blamed by a control, in the handler).
Every door of that class is checked: a plain function, an async one, one taking `**kwargs`
(verifiers calls those by another branch), one inside a nested `RubricGroup`; a metric (weight
0) that raises is reported as none and never fails the score. Where nothing raises, the sum is
verifiers' own `score_rollout`'s. Rubrics agentroll cannot score as verifiers would (group
rewards, LLM judges, a rubric's own `score_rollout`) are refused."""

from pathlib import Path
from typing import Any

import pytest
from tests.integration.handlers.verifiers_reference import run_in_verifiers

from agentroll.handlers.builtin.verifiers_env import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.venv import LEGACY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PACKAGE = str(Path(__file__).resolve().parents[2] / "fixtures" / "verifiers_legacy_pkg")
WORKER = Path(__file__).resolve().parents[3] / "handlers/agentroll/handlers/builtin/verifiers_env"

SCRIPT = """
import asyncio, importlib.util, json, sys
import verifiers as vf
from datasets import Dataset
from verifiers.legacy.types import AssistantMessage, ToolCall, ToolMessage

spec = importlib.util.spec_from_file_location("legacy_worker", json.load(sys.stdin))
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
client = worker.relay_client_class()(None)

async def state_of(env, completion):
    state = await env.init_state(env.get_dataset()[0], client, "m")
    state["completion"] = completion
    state["trajectory"] = [{"completion": [m]} for m in completion if m.role == "assistant"]
    return state

async def outcome(env, completion):
    theirs = await state_of(env, completion)
    await env.rubric.score_rollout(theirs)
    try:
        got = await worker.scored(env, await state_of(env, completion))
    except Exception as exc:
        return {"raised": f"{type(exc).__name__}: {exc}", "verifiers": theirs["reward"]}
    total = sum(r["score"] * r["weight"] for r in got["rewards"].values())
    return {"total": total, "verifiers": theirs["reward"], "metrics": got["metrics"]}

def raises(completion):
    raise RuntimeError("plain")

async def raises_async(completion):
    raise RuntimeError("async")

def raises_kwargs(**kwargs):
    raise RuntimeError("kwargs")

def one(completion):
    return 1.0

def metric_raises(completion):
    raise RuntimeError("metric")

def rows():
    return Dataset.from_list([{"question": "q", "answer": "a"}])

def single(*funcs, weights=None, rubric=None):
    rubric = rubric or vf.Rubric(funcs=list(funcs), weights=weights)
    return vf.SingleTurnEnv(dataset=rows(), rubric=rubric)

reply = [AssistantMessage(content="a")]
call = ToolCall(id="c", name="calculator_add", arguments='{"a": 2, "b": 3}')
tool_turns = [AssistantMessage(content="", tool_calls=[call]),
              ToolMessage(tool_call_id="c", content="5"), AssistantMessage(content="5")]

class OwnScoring(vf.Rubric):
    async def score_rollout(self, state):
        state["reward"] = 1.0

def group_reward(completions) -> list[float]:
    return [1.0 for _ in completions]

out = {
    "tools": asyncio.run(outcome(vf.load_environment("agentroll-vf-legacy-tools"), tool_turns)),
    "plain": asyncio.run(outcome(single(one, raises), reply)),
    "async": asyncio.run(outcome(single(raises_async), reply)),
    "kwargs": asyncio.run(outcome(single(raises_kwargs), reply)),
    "nested": asyncio.run(outcome(single(rubric=vf.RubricGroup(rubrics=[
        vf.Rubric(funcs=[one]), vf.RubricGroup(rubrics=[vf.Rubric(funcs=[raises])])])), reply)),
    "metric": asyncio.run(outcome(single(one, metric_raises, weights=[2.0, 0.0]), reply)),
    "unsupported": {
        "group": worker.unsupported(single(one, group_reward)),
        "judge": worker.unsupported(single(rubric=vf.JudgeRubric(judge_client=client))),
        "own": worker.unsupported(single(rubric=OwnScoring(funcs=[one]))),
        "plain": worker.unsupported(single(one)),
    },
}
print(json.dumps(out))
"""


async def test_a_raising_reward_fails_the_scoring_through_every_door() -> None:
    venv = await ensure_verifiers_venv([PACKAGE], stack=LEGACY)
    out: dict[str, Any] = await run_in_verifiers(
        SCRIPT, "", str(WORKER / "legacy_worker.py"), python=venv.python
    )

    # A ToolEnv's rubric group (its own rubric, the turn and tool-call monitors): the sum is
    # verifiers' own, the monitors' metrics reported.
    tools = out["tools"]
    assert tools["total"] == tools["verifiers"] == 1.5
    assert tools["metrics"] == {
        "num_turns": 2.0,
        "total_tool_calls": 1.0,
        "calculator_add_calls": 1.0,
    }

    # verifiers counts a raising reward 0 (its sum passes for a score); agentroll's scoring
    # fails instead, whatever the door.
    assert out["plain"] == {"raised": "RuntimeError: plain", "verifiers": 1.0}
    assert out["async"] == {"raised": "RuntimeError: async", "verifiers": 0.0}
    assert out["kwargs"] == {"raised": "RuntimeError: kwargs", "verifiers": 0.0}
    assert out["nested"] == {"raised": "RuntimeError: plain", "verifiers": 1.0}
    # A metric counts nothing: its failure is reported, the reward stands (as verifiers sums it).
    metric = out["metric"]
    assert metric == {
        "total": 2.0,
        "verifiers": 2.0,
        "metrics": {"metric_raises": None, "num_turns": 1.0},
    }

    problems = out["unsupported"]
    assert problems["group"] == [
        "SingleTurnEnv runs a group's rollouts together",
        "reward 'group_reward' scores a group of rollouts together",
    ]
    assert problems["judge"] == ["rubric JudgeRubric asks an LLM judge"]
    assert problems["own"] == ["rubric OwnScoring scores by its own score_rollout"]
    assert problems["plain"] == []
