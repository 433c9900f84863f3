"""agentroll groups into atroposlib's own trajectory API, and back out of its `GET /batch`.

The API is atroposlib 0.4.0's `run-api` in a cached virtual environment of its own
(`agentroll.testing.atropos_api`); the trainer's side is played as an Atropos trainer does:
`POST /register`, then `GET /batch`.
"""

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from tests.conftest import ServerFactory

from agentroll.handlers import AgentHandler, HandlerRegistry, InfraError, Reward, RolloutContext
from agentroll.server.schema import Outcome, Trajectory
from agentroll.server.serving import start_in_loop
from agentroll.testing.atropos_api import atropos_api
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.adapters.atropos import AtroposPusher
from agentroll.trainer_clients.errors import ServerUnavailable

pytestmark = pytest.mark.integration

TRAINER = {
    "wandb_group": "g",
    "wandb_project": "p",
    "batch_size": 4,
    "max_token_len": 4096,
    "checkpoint_dir": "/nonexistent",
    "save_checkpoint_interval": 0,
    "starting_step": 0,
    "num_steps": 10,
}


class TwoTurns(AgentHandler):
    """Two sampled turns around a user message (mask-0 tokens inside the response); the
    sample named in `infra` fails as the infrastructure's fault."""

    name: ClassVar[str] = "two-turns"

    async def run(self, ctx: RolloutContext) -> None:
        if ctx.job_id in ctx.instance.get("infra", []):
            raise InfraError("sandbox vanished", cause="sandbox_lost")
        await ctx.llm.start([{"role": "user", "content": "Repeat after me: alpha"}])
        await ctx.llm.generate()
        await ctx.llm.add_messages([{"role": "user", "content": "Repeat after me: bravo"}])
        await ctx.llm.generate()

    async def eval(self, ctx: RolloutContext) -> Reward:
        replies = [m["content"] for m in ctx.llm.messages if m["role"] == "assistant"]
        second_sample = 0.5 if ctx.job_id.endswith("-s1") else 0.0  # unequal scores
        return Reward(float(replies == ["alpha", "bravo"]) + second_sample)


async def _groups(agentroll_server: ServerFactory) -> list[Trajectory]:
    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=7)))
    registry = HandlerRegistry()
    registry.register(TwoTurns)
    jobs = [
        {"job_id": f"{g}-s{k}", "group_id": g, "handler": "two-turns", "instance": instance}
        for g, instance in (("ga", {}), ("gb", {}), ("gc", {"infra": ["gc-s1"]}))
        for k in range(2)
    ]
    try:
        async with agentroll_server(registry=registry) as (_, client):
            await client.add_backend({"id": "b0", "base_url": backend.url})
            await client.submit(jobs)
            done = await client.wait_for([j["job_id"] for j in jobs], 60)
    finally:
        await backend.stop()
    return [done[j["job_id"]] for j in jobs]


def _expected(t: Trajectory) -> tuple[list[int], list[int]]:
    masks = [-100] * len(t.prompt_ids) + [
        token if keep else -100 for token, keep in zip(t.response_ids, t.response_mask, strict=True)
    ]
    return t.prompt_ids + t.response_ids, masks


async def test_atropos_serves_agentroll_groups_back_token_for_token(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    trajectories = await _groups(agentroll_server)
    by_job = {t.job_id: t for t in trajectories}
    assert by_job["gc-s1"].outcome is Outcome.infra_error
    assert all(0 in by_job[j].response_mask for j in ("ga-s0", "gb-s1"))  # the user turn

    async with atropos_api(tmp_path) as url, httpx.AsyncClient(base_url=url) as trainer:
        assert (await trainer.post("/register", json=TRAINER)).status_code == 200
        assert (await trainer.get("/batch")).json() == {"batch": None}  # the trainer started
        with AtroposPusher(url, group_size=2, max_token_length=4096) as env:
            report = await asyncio.to_thread(env.push, trajectories)
        assert report.sent == ["ga", "gb"]
        assert report.skipped == {"gc": "gc-s1: outcome infra_error has no reward"}

        batch: list[dict[str, Any]] = (await trainer.get("/batch")).json()["batch"]
        status = (await trainer.get("/status")).json()

    assert status["queue_size"] == 0  # the infra group was never sent, nothing else waits
    served = sorted(batch, key=lambda group: group["tokens"][0])
    sent = sorted(
        ([by_job[f"{g}-s0"], by_job[f"{g}-s1"]] for g in ("ga", "gb")),
        key=lambda group: group[0].prompt_ids + group[0].response_ids,
    )
    assert len(served) == 2
    for group, samples in zip(served, sent, strict=True):
        tokens, masks = zip(*(_expected(t) for t in samples), strict=True)
        assert json.dumps(group["tokens"]) == json.dumps(list(tokens))
        assert json.dumps(group["masks"]) == json.dumps(list(masks))
        assert group["scores"] == [t.reward for t in samples]
        assert group["env_id"] == 0
        for logprobs, t, mask in zip(group["inference_logprobs"], samples, masks, strict=True):
            trained = [lp for lp, m in zip(logprobs, mask, strict=True) if m != -100]
            assert trained == [
                lp for lp, keep in zip(t.response_logprobs, t.response_mask, strict=True) if keep
            ]
            assert {lp for lp, m in zip(logprobs, mask, strict=True) if m == -100} == {1.0}
        assert [m["content"] for m in group["messages"][0]][-1] == samples[0].messages[-1][
            "content"
        ]


async def test_an_environment_waits_for_the_trainer_and_says_so(tmp_path: Path) -> None:
    async with atropos_api(tmp_path) as url:
        env = AtroposPusher(url, group_size=2, max_token_length=64, register_wait_s=0.5, poll_s=0.1)
        with env, pytest.raises(ServerUnavailable, match="trainer did not start"):
            await asyncio.to_thread(env.register)
