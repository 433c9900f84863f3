"""Multi-agent jobs: one exact trace per agent, each sampled only by its own policy's backends;
the attacks a trainer's or handler's mistake amounts to end clearly, never as a hang."""

from collections.abc import AsyncIterator

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.multi_agent_support import (
    agent,
    assert_trace_exact,
    backend_log,
    duet_job,
    registry,
    serve_policies,
)
from tests.integration.server.test_metrics import scrape

from agentroll.server.schema import Outcome
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

SPEAKER = ["alpha one", "bravo: 2", "charlie delta", "echo"]
LISTENER = ["foxtrot", "golf hotel"]


@pytest.fixture
async def backends() -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    """One scripted backend per policy (different seeds: their samples differ)."""
    alpha = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=3)))
    beta = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=4)))
    yield alpha, beta
    await alpha.stop()
    await beta.stop()


async def test_each_agents_trace_is_exactly_what_its_policys_backend_sampled(
    agentroll_server: ServerFactory, backends: tuple[RunningServer, RunningServer]
) -> None:
    alpha, beta = backends
    async with agentroll_server(registry=registry()) as (server, client):
        await serve_policies(client, alpha.url, beta.url)
        await client.submit([duet_job("d1", SPEAKER, LISTENER, group_id="g")])
        t = (await client.wait_for(["d1"], 30))["d1"]
        status = await client.status()
        metrics = await scrape(server.url)
    alpha_log, beta_log = await backend_log(alpha.url), await backend_log(beta.url)
    assert t.outcome is Outcome.ok and t.reward == 1.0
    assert t.agents is not None and [a.name for a in t.agents] == ["speaker", "listener"]
    speaker, listener = agent(t, "speaker"), agent(t, "listener")
    assert (speaker.policy, speaker.trainable, speaker.reward) == ("alpha", True, 1.0)
    assert (listener.policy, listener.trainable, listener.reward) == ("beta", False, 1.0)
    # Each policy's backend sampled exactly its agent's turns, and nothing of the other's.
    assert speaker.num_turns == len(SPEAKER) == len(alpha_log)
    assert listener.num_turns == len(LISTENER) == len(beta_log)
    assert_trace_exact(speaker, alpha_log)
    assert_trace_exact(listener, beta_log)
    assert {s.backend_id for s in speaker.segments} == {"a0"}
    assert {s.backend_id for s in listener.segments} == {"b0"}
    assert speaker.policy_versions == listener.policy_versions == [0]
    assert [m["content"] for m in speaker.messages if m["role"] == "assistant"] == SPEAKER
    # The top-level token fields hold what went through ctx.llm: nothing here.
    assert (t.prompt_ids, t.response_ids, t.segments, t.num_turns) == ([], [], [], 0)
    assert t.timing.llm_calls > 0 and t.timing.llm_s > 0  # the agents' calls are accounted
    # Status per policy: what each pool served.
    alpha_status, beta_status = status.policies["alpha"], status.policies["beta"]
    assert (alpha_status.backends, beta_status.backends) == (["a0"], ["b0"])
    assert alpha_status.generations == len(alpha_log)
    assert alpha_status.completion_tokens == sum(len(c["token_ids"]) for c in alpha_log)
    assert beta_status.prompt_tokens == sum(len(c["prompt_token_ids"]) for c in beta_log)
    assert (alpha_status.in_flight, alpha_status.queued, alpha_status.paused) == (0, 0, False)
    for policy, log in (("alpha", alpha_log), ("beta", beta_log)):
        sampled = sum(len(c["token_ids"]) for c in log)
        key = ("agentroll_policy_tokens_total", (("kind", "completion"), ("policy", policy)))
        assert metrics[key] == sampled
        assert metrics[("agentroll_policy_paused", (("policy", policy),))] == 0


async def test_two_agents_on_one_policy_share_its_backends(
    agentroll_server: ServerFactory, backends: tuple[RunningServer, RunningServer]
) -> None:
    """Self-play: both agents sample from the same weights, each still with its own trace."""
    alpha, _ = backends
    async with agentroll_server(registry=registry()) as (_, client):
        await client.add_backend({"id": "a0", "base_url": alpha.url, "policy": "alpha"})
        job = duet_job("self", SPEAKER, LISTENER)
        job["agents"]["listener"]["policy"] = "alpha"
        await client.submit([job])
        t = (await client.wait_for(["self"], 30))["self"]
    log = await backend_log(alpha.url)
    assert t.outcome is Outcome.ok and len(log) == len(SPEAKER) + len(LISTENER)
    for name in ("speaker", "listener"):
        assert_trace_exact(agent(t, name), log)


async def test_a_single_agent_job_never_reaches_another_policys_backend(
    agentroll_server: ServerFactory, backends: tuple[RunningServer, RunningServer]
) -> None:
    """A backend registered for a named policy serves only that policy's agents."""
    alpha, _ = backends
    async with agentroll_server(registry=registry(), backend_wait_s=0) as (_, client):
        await client.add_backend({"id": "a0", "base_url": alpha.url, "policy": "alpha"})
        await client.submit([{"job_id": "solo", "handler": "parrot", "instance": {"words": ["a"]}}])
        t = (await client.wait_for(["solo"], 30))["solo"]
    assert (t.outcome, t.reward) == (Outcome.infra_error, None)
    assert t.error is not None and t.error.type == "no_backend"
    assert await backend_log(alpha.url) == []


async def test_a_policy_without_a_backend_is_a_clear_infra_error_not_a_hang(
    agentroll_server: ServerFactory, backends: tuple[RunningServer, RunningServer]
) -> None:
    alpha, _ = backends
    async with agentroll_server(registry=registry(), backend_wait_s=0.5) as (_, client):
        await client.add_backend({"id": "a0", "base_url": alpha.url, "policy": "alpha"})
        await client.submit([duet_job("orphan", SPEAKER[:1], LISTENER[:1])])
        t = (await client.wait_for(["orphan"], 30))["orphan"]
    assert (t.outcome, t.reward) == (Outcome.infra_error, None)
    assert t.error is not None and t.error.type == "no_backend"
    assert t.error.message == "no LLM backend for policy 'beta' is registered"
    assert t.agents is not None and agent(t, "listener").response_ids == []
    assert all(a.reward is None for a in t.agents)


async def test_a_handler_asking_for_an_undeclared_agent_is_infra_error(
    agentroll_server: ServerFactory, backends: tuple[RunningServer, RunningServer]
) -> None:
    alpha, _ = backends
    async with agentroll_server(registry=registry()) as (_, client):
        await client.add_backend({"id": "a0", "base_url": alpha.url, "policy": "alpha"})
        await client.submit(
            [
                {
                    "job_id": "ghost",
                    "handler": "ghost",
                    "instance": {"agent": "narrator"},
                    "agents": {"speaker": {"policy": "alpha"}},
                },
                {"job_id": "single", "handler": "stray", "instance": {"agent": "narrator"}},
            ]
        )
        done = await client.wait_for(["ghost", "single"], 30)
    for job_id, declared in (("ghost", "speaker"), ("single", "none (a single-agent job)")):
        t = done[job_id]
        assert (t.outcome, t.reward) == (Outcome.infra_error, None)
        assert t.error is not None and (t.error.type, t.error.stage) == ("undeclared_agent", "run")
        assert t.error.message == (
            "the handler asked for agent 'narrator', which the job does not declare "
            f"(declared: {declared})"
        )
    assert await backend_log(alpha.url) == []


async def test_jobs_that_do_not_declare_the_handlers_agents_are_refused_at_submission(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(registry=registry()) as (server, client):
        lacking = duet_job("lacking", SPEAKER, LISTENER)
        del lacking["agents"]["listener"]
        single = {k: v for k, v in duet_job("single", SPEAKER, LISTENER).items() if k != "agents"}
        bad_name = duet_job("bad-name", SPEAKER, LISTENER)
        bad_name["agents"]["no spaces"] = {}
        extra = {**duet_job("extra", SPEAKER, LISTENER), "handler": "parrot"}
        extra["instance"] = {"words": ["a"]}
        surplus = duet_job("surplus", SPEAKER, LISTENER)
        surplus["agents"]["narrator"] = {"policy": "alpha"}
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            refused = await http.post("/v1/jobs", json={"jobs": [lacking, single]})
            unused = await http.post("/v1/jobs", json={"jobs": [extra, surplus]})
            malformed = await http.post("/v1/jobs", json={"jobs": [bad_name]})
            empty = await http.post(
                "/v1/jobs", json={"jobs": [{**duet_job("empty", SPEAKER, LISTENER), "agents": {}}]}
            )
        assert (await client.status()).jobs_by_state == {}  # nothing was admitted
    assert (refused.status_code, refused.json()["error"]["type"]) == (400, "invalid_instance")
    problems = refused.json()["error"]["detail"]
    assert [(p["job_id"], p["error"]) for p in problems] == [
        (
            "lacking",
            "handler 'duet' drives agents ['speaker', 'listener']; "
            "the job does not declare ['listener']",
        ),
        (
            "single",
            "handler 'duet' drives agents ['speaker', 'listener']; "
            "the job does not declare ['speaker', 'listener']",
        ),
    ]
    assert (unused.status_code, unused.json()["error"]["type"]) == (400, "invalid_instance")
    assert [(p["job_id"], p["error"]) for p in unused.json()["error"]["detail"]] == [
        (
            "extra",
            "handler 'parrot' is single-agent; the job declares ['speaker', 'listener'], "
            "which it never uses",
        ),
        (
            "surplus",
            "handler 'duet' drives agents ['speaker', 'listener']; "
            "the job declares ['narrator'], which it never uses",
        ),
    ]
    for answer in (malformed, empty):
        assert (answer.status_code, answer.json()["error"]["type"]) == (400, "invalid_request")
        assert "agents" in answer.json()["error"]["detail"][0]["loc"]


async def test_a_reward_for_an_undeclared_agent_is_infra_error(
    agentroll_server: ServerFactory, backends: tuple[RunningServer, RunningServer]
) -> None:
    alpha, beta = backends
    async with agentroll_server(registry=registry()) as (_, client):
        await serve_policies(client, alpha.url, beta.url)
        job = {**duet_job("bug", SPEAKER[:1], LISTENER[:1]), "handler": "misrewarded"}
        await client.submit([job])
        t = (await client.wait_for(["bug"], 30))["bug"]
    assert (t.outcome, t.reward) == (Outcome.infra_error, None)
    assert t.error is not None and t.error.type == "trajectory_failed"
    assert "narrator" in t.error.message
