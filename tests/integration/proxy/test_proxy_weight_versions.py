"""Through the recording proxy too: a call parked in the engine before its first token and
sampled after a weight update carries the new version (the engine says so: vLLM 0.33)."""

import asyncio
from pathlib import Path

import httpx
import pytest
from tests.integration.proxy.proxy_support import client_for, rig

pytestmark = pytest.mark.integration


async def running(url: str) -> float:
    async with httpx.AsyncClient(base_url=url) as http:
        text = (await http.get("/metrics")).text
    line = next(x for x in text.splitlines() if x.startswith("vllm:num_requests_running"))
    return float(line.split()[-1])


async def test_a_proxied_call_parked_before_its_first_token_carries_the_new_version(
    tmp_path: Path,
) -> None:
    async with rig(latency_s=8.0) as r:  # its few tokens are due seconds after the pause
        proxy = await r.proxy(tmp_path)
        body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
        async with client_for(proxy) as client, httpx.AsyncClient(base_url=r.backend.url) as engine:
            call = asyncio.create_task(client.post("/chat/completions", json=body))
            async with asyncio.timeout(60):
                while await running(r.backend.url) < 1:
                    await asyncio.sleep(0.02)
            r.gate.close("keep")
            (await engine.post("/pause", params={"mode": "keep"})).raise_for_status()
            await engine.post("/update_weight_version", json={"new_version": "1"})
            r.gate.announce(1)
            (await engine.post("/resume")).raise_for_status()
            r.gate.open(1)
            answer = await call
        assert answer.status_code == 200, answer.text
        t = proxy.trajectory()
        await proxy.close()
    assert t is not None
    assert [(s.policy_version, s.start, s.end) for s in t.segments] == [(1, 0, len(t.response_ids))]
    assert proxy.mixed_version_segments == 0
