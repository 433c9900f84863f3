"""Pause/resume/abort semantics per vLLM version (docs/protocol.md §7), with simulated latency."""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from agentroll.handlers.builtin.math import load_math_tasks

ClientFactory = Callable[..., Any]  # the `scripted` fixture (conftest.py)
ChatIds = Callable[[str], list[int]]


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def body(chat_ids: ChatIds, **extra: Any) -> dict[str, Any]:
    return {
        "prompt": chat_ids(load_math_tasks()[0].question),
        "max_tokens": 400,
        "seed": 4,
        "return_token_ids": True,
        "return_weight_versions": True,
        **extra,
    }


async def reference(scripted: ClientFactory, chat_ids: ChatIds) -> dict[str, Any]:
    async with scripted() as (client, _):
        r = await client.post("/v1/completions", json=body(chat_ids))
        choice: dict[str, Any] = r.json()["choices"][0]
        return choice


async def test_033_abort_returns_partial_ids_and_refuses_new_requests(
    scripted: ClientFactory, chat_ids: ChatIds
):
    full = await reference(scripted, chat_ids)
    async with scripted(latency_s=2.0) as (client, engine):
        task = asyncio.create_task(client.post("/v1/completions", json=body(chat_ids)))
        await until(lambda: any(engine.progress(r) > 0.2 for r in engine.running))
        paused = await client.post("/pause", params={"mode": "abort"})
        r = await task
        refused = await client.post("/v1/completions", json=body(chat_ids))
        health = await client.get("/health")
        is_paused = (await client.get("/is_paused")).json()
        await client.post("/resume")
        after = await client.post("/v1/completions", json=body(chat_ids, max_tokens=3))
    assert paused.json() == {"status": "paused"}
    choice = r.json()["choices"][0]
    assert r.status_code == 200
    assert (choice["finish_reason"], choice["stop_reason"]) == ("abort", None)
    assert 0 < len(choice["token_ids"]) < len(full["token_ids"])
    assert choice["token_ids"] == full["token_ids"][: len(choice["token_ids"])]
    assert full["text"].startswith(choice["text"])
    assert refused.status_code == 503
    assert refused.json()["error"] == {
        "message": "Generation is paused. Please retry after it resumes.",
        "type": "ServiceUnavailableError",
        "param": None,
        "code": 503,
    }
    assert health.status_code == 200 and is_paused == {"is_paused": True}
    assert after.status_code == 200


async def test_033_wait_drains_in_flight_requests(scripted: ClientFactory, chat_ids: ChatIds):
    full = await reference(scripted, chat_ids)
    async with scripted(latency_s=0.5) as (client, engine):
        task = asyncio.create_task(client.post("/v1/completions", json=body(chat_ids)))
        await until(lambda: bool(engine.running))
        paused = await client.post("/pause", params={"mode": "wait"})
        assert task.done()  # the pause call returned only after the drain
        refused = await client.post("/v1/completions", json=body(chat_ids))
    choice = (await task).json()["choices"][0]
    assert paused.json() == {"status": "paused"}
    assert choice["token_ids"] == full["token_ids"] and choice["finish_reason"] == "stop"
    assert refused.status_code == 503


async def test_033_keep_freezes_then_continues_and_reports_weight_versions(
    scripted: ClientFactory, chat_ids: ChatIds
):
    full = await reference(scripted, chat_ids)
    async with scripted(latency_s=0.6, weight_version="step-1") as (client, engine):
        task = asyncio.create_task(client.post("/v1/completions", json=body(chat_ids)))
        await until(lambda: any(engine.progress(r) > 0.3 for r in engine.running))
        await client.post("/pause", params={"mode": "keep"})
        queued = asyncio.create_task(
            client.post("/v1/completions", json=body(chat_ids, max_tokens=2))
        )
        await until(lambda: engine.waiting == 1)
        frozen_at = [engine.progress(r) for r in engine.running]
        await asyncio.sleep(0.7)  # longer than the whole generation: nothing may finish
        assert not task.done() and not queued.done()
        assert [engine.progress(r) for r in engine.running] == frozen_at
        metrics = (await client.get("/metrics")).text
        load = (await client.get("/load")).json()
        version = await client.post("/update_weight_version", json={"new_version": "step-2"})
        await client.post("/resume")
        r = await task
        q = await queued
    assert 'vllm:num_requests_waiting{engine="0",model_name="policy"} 1.0' in metrics
    assert 'vllm:num_requests_running{engine="0",model_name="policy"} 1.0' in metrics
    assert load == {"server_load": 2}
    assert version.json() == {"success": True, "new_version": "step-2"}
    choice = r.json()["choices"][0]
    assert choice["token_ids"] == full["token_ids"] and choice["finish_reason"] == "stop"
    ranges = choice["weight_versions"]
    n = len(full["token_ids"])
    assert [w["version"] for w in ranges] == ["step-1", "step-2"]
    assert ranges[0]["start"] == 0 and ranges[0]["end"] == ranges[1]["start"]
    assert 0 < ranges[1]["start"] < n and ranges[1]["end"] == n
    assert q.status_code == 200
    assert q.json()["choices"][0]["weight_versions"] == [
        {"version": "step-2", "start": 0, "end": 2}
    ]


async def test_02x_new_requests_wait_for_resume_instead_of_503(
    scripted: ClientFactory, chat_ids: ChatIds
):
    async with scripted(version="0.2x") as (client, engine):
        await client.post("/pause", params={"mode": "abort"})
        held = asyncio.create_task(
            client.post("/v1/completions", json=body(chat_ids, max_tokens=3))
        )
        await until(lambda: engine.waiting == 1)
        await asyncio.sleep(0.05)
        assert not held.done()
        await client.post("/resume")
        r = await held
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


async def test_02x_legacy_wait_flag_and_033_ignoring_it(scripted: ClientFactory, chat_ids: ChatIds):
    for version, expected in (("0.2x", "wait"), ("0.33", "abort")):
        async with scripted(version=version) as (client, engine):
            await client.post("/pause", params={"wait_for_inflight_requests": "true"})
            assert engine.pause_mode == expected


async def test_bad_mode_and_011_has_no_pause(scripted: ClientFactory):
    async with scripted() as (client, _):
        bad = await client.post("/pause", params={"mode": "later"})
    assert bad.status_code == 400 and isinstance(bad.json()["error"], str)
    async with scripted(version="0.11") as (client, _):
        assert (await client.post("/pause")).status_code == 404
        assert (await client.get("/is_paused")).status_code == 404


@pytest.mark.parametrize("stream", [False, True])
async def test_abort_requests_by_engine_id(
    scripted: ClientFactory, chat_ids: ChatIds, stream: bool
):
    async with scripted(latency_s=5.0) as (client, engine):
        task = asyncio.create_task(
            client.post("/v1/completions", json=body(chat_ids, request_id="r1", stream=stream))
        )
        await until(lambda: bool(engine.running))
        other = await client.post("/abort_requests", json={"request_ids": ["cmpl-zzz-0"]})
        hit = await client.post("/abort_requests", json={"request_ids": ["cmpl-r1-0"]})
        r = await task
    assert other.json() == {"status": "aborted", "aborted": 0}
    assert hit.json() == {"status": "aborted", "aborted": 1}
    if stream:
        last = [line for line in r.text.split("\n\n") if line.startswith("data: {")][-1]
        assert '"finish_reason":"abort"' in last and r.text.endswith("data: [DONE]\n\n")
    else:
        assert r.json()["choices"][0]["finish_reason"] == "abort"
    assert not engine.running


async def test_033_streaming_request_during_pause_gets_an_error_event(
    scripted: ClientFactory, chat_ids: ChatIds
):
    async with scripted() as (client, _):
        await client.post("/pause", params={"mode": "abort"})
        r = await client.post("/v1/completions", json=body(chat_ids, stream=True))
    assert r.status_code == 200
    events = [line for line in r.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[0][len("data: ") :])["error"]
    assert (error["code"], error["type"]) == (503, "ServiceUnavailableError")
