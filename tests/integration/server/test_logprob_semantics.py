"""What a trajectory's logprobs are, and its MoE routing: declared, required and exact, against
scripted vLLM backends started in each `--logprobs-mode` (and one serving an MoE model)."""

import base64
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.test_trajectory import WORDS, Parrot

from agentroll.handlers import HandlerRegistry
from agentroll.server.schema import Outcome, Trajectory
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.scripted_llm.config import MoERouting
from agentroll.testing.scripted_llm.logprob_modes import processed_logprob
from agentroll.testing.scripted_llm.routing import experts_at
from agentroll.trainer_clients.errors import InvalidRequest

pytestmark = pytest.mark.integration

SAMPLING = {"temperature": 0.6, "top_p": 0.9, "top_k": 50, "seed": 7}
Backends = Callable[..., AbstractAsyncContextManager[list[RunningServer]]]


@pytest.fixture
def backends() -> Backends:
    """`async with backends(config, ...) as servers`: scripted backends on loopback."""

    @asynccontextmanager
    async def start(*configs: dict[str, Any]) -> AsyncIterator[list[RunningServer]]:
        servers = [
            await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=3, **c)))
            for c in configs
        ]
        try:
            yield servers
        finally:
            for server in servers:
                await server.stop()

    return start


async def _run(
    agentroll_server: ServerFactory,
    registrations: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
) -> dict[str, Trajectory]:
    registry = HandlerRegistry()
    registry.register(Parrot)
    async with agentroll_server(registry=registry, backend_wait_s=0) as (_, client):
        for spec in registrations:
            await client.add_backend(spec)
        await client.submit(jobs)
        return await client.wait_for([j["job_id"] for j in jobs], 60)


def _job(
    job_id: str, words: list[str], backend_tags: tuple[str, ...] = (), **sampling: Any
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "handler": "parrot",
        "instance": {"words": words},
        "sampling": {**SAMPLING, **sampling},
        "backend_tags": list(backend_tags),
    }


def _sampled(t: Trajectory) -> list[float]:
    return [lp for lp, m in zip(t.response_logprobs, t.response_mask, strict=True) if m]


async def _log(server: RunningServer) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        return list((await http.get("/scripted/requests")).json()["requests"])


async def test_processed_logprobs_are_the_raw_ones_after_temperature_top_k_and_top_p(
    agentroll_server: ServerFactory, backends: Backends
) -> None:
    """Two servers of one model, raw and processed: the same seeded rollout samples the same
    tokens on both; each trajectory declares its mode (learnt from the server, not registered)
    and its sampling, and the processed logprobs are the raw ones under that sampling."""
    async with backends({}, {"logprobs_mode": "processed_logprobs"}) as (raw, processed):
        done = await _run(
            agentroll_server,
            [{"base_url": raw.url, "tags": ["a"]}, {"base_url": processed.url, "tags": ["b"]}],
            [_job("r", WORDS, backend_tags=["a"]), _job("p", WORDS, backend_tags=["b"])],
        )
    t_raw, t_proc = done["r"], done["p"]
    assert t_raw.outcome is t_proc.outcome is Outcome.ok
    assert t_raw.response_ids == t_proc.response_ids
    assert t_raw.logprobs is not None and t_proc.logprobs is not None
    assert t_raw.logprobs.model_dump() == {
        "mode": "raw_logprobs",
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 50,
    }
    assert t_proc.logprobs.mode == "processed_logprobs"
    assert {s.logprobs_mode for s in t_proc.segments} == {"processed_logprobs"}
    expected = [processed_logprob(lp, 0.6, 50, 0.9) for lp in _sampled(t_raw)]
    assert _sampled(t_proc) == pytest.approx(expected, abs=1e-12)
    assert _sampled(t_proc) != pytest.approx(_sampled(t_raw), abs=1e-3)  # the modes differ


async def test_a_job_asking_for_processed_logprobs_is_never_served_raw_ones(
    agentroll_server: ServerFactory, backends: Backends
) -> None:
    async with backends({}) as (raw,):
        done = await _run(
            agentroll_server,
            [{"id": "raw", "base_url": raw.url}],
            [
                _job("wants", ["a"], logprobs_mode="processed_logprobs"),
                _job("control", ["a"], logprobs_mode="raw_logprobs"),
            ],
        )
        log = await _log(raw)
    wants, control = done["wants"], done["control"]
    assert (wants.outcome, wants.reward) == (Outcome.infra_error, None)  # never a 0 reward
    assert wants.error is not None and wants.error.type == "logprobs_mode_unavailable"
    assert "processed_logprobs" in wants.error.message
    assert "raw_logprobs" in wants.error.message  # says what the fleet gives instead
    assert control.outcome is Outcome.ok and control.logprobs is not None
    assert control.logprobs.mode == "raw_logprobs"
    assert len(log) == 1  # only the control reached the engine


async def test_a_mixed_fleet_serves_a_required_mode_only_from_backends_in_it(
    agentroll_server: ServerFactory, backends: Backends
) -> None:
    async with backends({}, {"logprobs_mode": "processed_logprobs"}) as (raw, processed):
        registrations = [
            {"id": "raw", "base_url": raw.url, "max_concurrency": 100_000},
            {"id": "proc", "base_url": processed.url, "max_concurrency": 1},
        ]
        jobs = [_job(f"j{i}", WORDS[:2], logprobs_mode="processed_logprobs") for i in range(4)]
        done = await _run(agentroll_server, registrations, jobs)
        assert await _log(raw) == []
    for t in done.values():
        assert t.outcome is Outcome.ok and t.logprobs is not None
        assert t.logprobs.mode == "processed_logprobs"
        assert {s.backend_id for s in t.segments} == {"proc"}


async def test_a_registration_the_server_contradicts_is_refused(
    agentroll_server: ServerFactory, backends: Backends
) -> None:
    async with backends({}) as (raw,), agentroll_server() as (_, client):
        with pytest.raises(InvalidRequest, match="server runs --logprobs-mode raw_logprobs"):
            await client.add_backend(
                {"id": "liar", "base_url": raw.url, "logprobs_mode": "processed_logprobs"}
            )
        assert [b.id for b in await client.backends()] == []
        view = await client.add_backend(
            {"id": "honest", "base_url": raw.url, "logprobs_mode": "raw_logprobs"}
        )
        learnt = await client.add_backend({"id": "quiet", "base_url": raw.url, "model": "policy"})
    assert view.logprobs_mode == learnt.logprobs_mode == "raw_logprobs"


@pytest.mark.parametrize(("declared", "mode"), [(None, None), ("raw_logprobs", "raw_logprobs")])
async def test_a_server_that_cannot_tell_gives_unknown_logprobs_unless_declared(
    agentroll_server: ServerFactory, backends: Backends, declared: str | None, mode: str | None
) -> None:
    """vLLM 0.11 (or any server outside dev mode) has no `/server_info`: nothing is guessed."""
    async with backends({"version": "0.11"}) as (old,):
        spec = {"base_url": old.url, "logprobs_mode": declared}
        t = (await _run(agentroll_server, [spec], [_job("o", ["a"])]))["o"]
    assert t.outcome is Outcome.ok and t.logprobs is not None
    assert t.logprobs.mode == mode and {s.logprobs_mode for s in t.segments} == {mode}


async def test_routed_experts_are_exact_for_every_token_the_engine_read(
    agentroll_server: ServerFactory, backends: Backends
) -> None:
    moe = MoERouting(num_layers=3, num_experts=300, top_k=2)  # ids past 255: 16-bit encoding
    async with backends({"moe": moe.model_dump()}, {}) as (moe_server, dense):
        done = await _run(
            agentroll_server,
            [
                {"base_url": moe_server.url, "tags": ["moe"]},
                {"base_url": dense.url, "tags": ["dense"]},
            ],
            [_job("m", WORDS, backend_tags=["moe"]), _job("d", WORDS, backend_tags=["dense"])],
        )
        log = await _log(moe_server)
    t, t_dense = done["m"], done["d"]
    assert t.outcome is Outcome.ok and len(log) == len(WORDS) > 1
    routed = t.routed_experts
    assert routed is not None and (routed.num_layers, routed.top_k, routed.dtype) == (
        3,
        2,
        "uint16",
    )
    ids = t.prompt_ids + t.response_ids
    assert routed.positions == len(ids) - 1  # the final sampled token was never read back
    data = base64.b64decode(routed.data)
    flat = list(struct.unpack(f"<{len(data) // 2}H", data))
    expected = [e for pos in range(len(ids) - 1) for layer in range(3) for e in
                experts_at(pos, ids[pos], layer, moe)]  # fmt: skip
    assert flat == expected
    # a dense model's trajectory carries no routing at all (the key is left out)
    assert t_dense.outcome is Outcome.ok and t_dense.routed_experts is None
    assert "routed_experts" not in t_dense.model_dump_json()
