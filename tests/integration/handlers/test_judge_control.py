"""`llm_judge` failures blamed by a control: an answer that makes the judgment unparseable
(it tells a naive judge to reply in JSON) or overflows the judge's context is the policy's
doing — reward 0 with the reason — because the judge still grades the reference answer; the
judge is asked about the reference once per task, however many rollouts broke it. A judge
broken for everyone (the control fails too) stays `infra_error`."""

from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import run_jobs
from tests.integration.handlers.test_llm_judge import judged, judging

from agentroll.handlers.builtin.control import CONTROLS
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm.rules import redteam_graders
from agentroll.testing.scripted_llm.rules.judge import OTHER_FORMAT_REPLY

pytestmark = pytest.mark.integration

ATTACKER = f"{redteam_graders.RULE},echo"
JUDGE = {"config": {"max_model_len": 1024}}
"""Room for the judge prompt of a short answer, not for `OVERFLOW_WORDS` words."""
SMALL = {"max_tokens": 64}


def attack(job_id: str, name: str) -> dict[str, Any]:
    job = judged(job_id, "Paris", **SMALL)
    job["instance"]["question"] = f"[redteam-judge:{name}] What is the capital of France?"
    return job


async def test_an_answer_that_breaks_the_judgment_earns_zero_when_the_reference_is_judged(
    agentroll_server: ServerFactory,
) -> None:
    jobs = [
        judged("honest", "Paris", **SMALL),
        *(attack(f"injected-{i}", "format") for i in range(3)),
        attack("overflow", "overflow"),
        # The question alone overflows the judge: broken for everyone, whatever the answer.
        {**judged("task-overflows", "Paris", **SMALL), "instance": {
            "question": "Repeat after me: Paris. " + "Background: " + "lorem ipsum " * 400,
            "reference": "Paris", "judge": SMALL}},
    ]  # fmt: skip
    CONTROLS.clear()
    runs = CONTROLS.runs
    async with judging(agentroll_server, {"j": dict(JUDGE)}, ATTACKER) as (client, *_):
        results = await run_jobs(client, jobs)

    honest = results["honest"]
    assert (honest.outcome, honest.reward) == (Outcome.ok, 1.0), honest.error
    for i in range(3):
        t = results[f"injected-{i}"]
        assert (t.outcome, t.reward, t.reward_info.get("reason")) == (
            Outcome.ok, 0.0, "judge_unparseable",
        ), (t.error, t.reward_info)  # fmt: skip
        assert t.metadata["judge"]["raw"] == OTHER_FORMAT_REPLY
        assert t.reward_info["control"]["passed"] is True
        assert "Score: 10/10" in t.reward_info["control"]["detail"]
    over = results["overflow"]
    assert (over.outcome, over.reward, over.reward_info.get("reason")) == (
        Outcome.ok, 0.0, "judge_context_overflow",
    ), (over.error, over.reward_info)  # fmt: skip
    assert "does not fit the judge's context" in over.reward_info["failure"]

    broken = results["task-overflows"]
    assert (broken.outcome, broken.reward) == (Outcome.infra_error, None)
    assert broken.error is not None and broken.error.type == "judge_context_overflow"
    assert "control answer too" in broken.error.message

    # One control per task: the three injected rollouts of one task share theirs.
    assert CONTROLS.runs - runs == 3
