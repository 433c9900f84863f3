"""Every scored rollout is graded: a failure the policy caused where no grader could run (in
INIT, or in EVAL itself) still ends `agent_error` with a reward -- 0, and why -- never null."""

from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, job, make_registry

from agentroll.server.schema import Outcome


async def test_a_policy_failure_in_init_or_eval_is_scored_zero_with_its_reason(
    agentroll_server: ServerFactory,
) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        await client.submit(
            [
                job("agent-init", reward=0.5, fail={"stage": "init", "kind": "agent"}),
                job("agent-eval", reward=0.5, fail={"stage": "eval", "kind": "agent"}),
                job("control", reward=0.5),
            ]
        )
        done = await client.wait_for(["agent-init", "agent-eval", "control"], 10)
    for name, stage in [("agent-init", "init"), ("agent-eval", "eval")]:
        t = done[name]
        assert (t.outcome, t.status, t.reward) == (Outcome.agent_error, "completed", 0.0), name
        assert t.reward_info == {"reason": "bad_tool_call"}, name
        assert t.error is not None and (t.error.stage, t.error.type) == (stage, "bad_tool_call")
    assert (done["control"].outcome, done["control"].reward) == (Outcome.ok, 0.5)
