"""The built-in two-agent handler: a solver and a verifier, each on its own policy's scripted
backend. Right answers accepted score 1; a solver that is always wrong is retried up to
`max_rounds` and scores 0 while the verifier that caught it scores 1; a verifier that never
gives a verdict scores 0 (its fault, scored: not an infrastructure error)."""

from contextlib import AsyncExitStack
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import request_log, run_jobs, scripted_backend
from tests.integration.server.multi_agent_support import agent, assert_trace_exact

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.handlers.builtin.math.answers import MAX_ANSWER_CHARS
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, default_rules
from agentroll.testing.scripted_llm.rules.math import find_math_task
from agentroll.trainer_clients import AsyncRolloutClient

pytestmark = pytest.mark.integration


def solve_verify_job(job_id: str, task: int, **instance: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "handler": "solve_verify",
        "instance": {**load_math_tasks()[task].instance(), **instance},
        "agents": {
            "solver": {"policy": "solver"},
            "verifier": {"policy": "verifier", "trainable": False},
        },
        "sampling": {"seed": 1},
    }


async def _run(
    agentroll_server: ServerFactory,
    jobs: list[dict[str, Any]],
    solver: dict[str, Any],
    verifier: dict[str, Any],
) -> tuple[dict[str, Trajectory], list[dict[str, Any]], list[dict[str, Any]]]:
    async with AsyncExitStack() as stack:
        solver_llm = await stack.enter_async_context(scripted_backend(**solver))
        verifier_llm = await stack.enter_async_context(scripted_backend(**verifier))
        _, client = await stack.enter_async_context(agentroll_server())
        assert isinstance(client, AsyncRolloutClient)
        await client.add_backend({"id": "s", "base_url": solver_llm.url, "policy": "solver"})
        await client.add_backend({"id": "v", "base_url": verifier_llm.url, "policy": "verifier"})
        results = await run_jobs(client, jobs)
        return results, await request_log(solver_llm), await request_log(verifier_llm)


async def test_a_right_answer_is_accepted_and_both_traces_are_exact(
    agentroll_server: ServerFactory,
) -> None:
    results, solver_log, verifier_log = await _run(
        agentroll_server,
        [solve_verify_job("ok", 0)],
        solver={"wrong_rate": 0.0, "policy": "math"},
        verifier={"wrong_rate": 0.0, "policy": "verify,math"},
    )
    t = results["ok"]
    assert (t.outcome, t.reward, t.finish_reason) == (Outcome.ok, 1.0, "accepted")
    solver, verifier = agent(t, "solver"), agent(t, "verifier")
    assert (solver.reward, verifier.reward) == (1.0, 1.0)
    assert (solver.num_turns, verifier.num_turns) == (1, 1)
    assert verifier.trainable is False and verifier.policy == "verifier"
    assert_trace_exact(solver, solver_log)
    assert_trace_exact(verifier, verifier_log)
    assert verifier.messages[-1]["content"].endswith("VERDICT: correct")
    assert t.reward_info["rounds"] == [
        {"answer": load_math_tasks()[0].answer, "verdict": "correct", "correct": True}
    ]


async def test_a_wrong_solver_is_retried_and_the_verifier_that_caught_it_is_rewarded(
    agentroll_server: ServerFactory,
) -> None:
    results, solver_log, verifier_log = await _run(
        agentroll_server,
        [solve_verify_job("wrong", 1, max_rounds=3)],
        solver={"wrong_rate": 1.0, "policy": "math"},
        verifier={"wrong_rate": 0.0, "policy": "verify,math"},
    )
    t = results["wrong"]
    assert (t.outcome, t.reward, t.finish_reason) == (Outcome.ok, 0.0, "max_rounds")
    solver, verifier = agent(t, "solver"), agent(t, "verifier")
    assert (solver.reward, verifier.reward) == (0.0, 1.0)
    assert solver.num_turns == verifier.num_turns == 3 == len(solver_log) == len(verifier_log)
    assert [r["verdict"] for r in t.reward_info["rounds"]] == ["incorrect"] * 3
    assert_trace_exact(solver, solver_log)
    assert_trace_exact(verifier, verifier_log)


async def test_a_verifier_that_never_gives_a_verdict_scores_zero(
    agentroll_server: ServerFactory,
) -> None:
    results, _, _ = await _run(
        agentroll_server,
        [solve_verify_job("mute", 2, max_rounds=2)],
        solver={"wrong_rate": 0.0, "policy": "math"},
        verifier={"wrong_rate": 0.0, "policy": "math"},  # answers the question, no verdict
    )
    t = results["mute"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0)  # the solver was right all along
    assert (agent(t, "solver").reward, agent(t, "verifier").reward) == (1.0, 0.0)
    assert [r["verdict"] for r in t.reward_info["rounds"]] == [None, None]


def padded_answer_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """A solver that pads the gold answer past the grader's length limit and then changes
    it (`42<spaces>+1`): cut at the limit, it would read as the gold answer."""
    task = find_math_task(conv.messages[1].content) if len(conv.messages) > 1 else None
    if task is None:
        return None
    return Reply(f"\\boxed{{{task.answer}{' ' * MAX_ANSWER_CHARS}+1}}")


async def test_an_answer_padded_past_the_limit_earns_the_solver_nothing(
    agentroll_server: ServerFactory,
) -> None:
    """What is graded, and what the verifier judged, is the whole answer as sampled."""
    rules = default_rules()
    rules.register("padded", padded_answer_rule)
    results, _, _ = await _run(
        agentroll_server,
        [solve_verify_job("padded", 0, max_rounds=1)],
        solver={"wrong_rate": 0.0, "policy": "padded", "rules": rules},
        verifier={"wrong_rate": 0.0, "policy": "verify,math"},
    )
    t = results["padded"]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0)
    assert (agent(t, "solver").reward, agent(t, "verifier").reward) == (0.0, 1.0)
    (shown,) = t.reward_info["rounds"]
    assert (shown["verdict"], shown["correct"]) == ("incorrect", False)
    assert len(shown["answer"]) == MAX_ANSWER_CHARS  # reported bounded, graded whole
