"""A hostile harness against its rollout's proxy (real Unix sockets, real scripted backend):
a wrong key with a huge body, a request flood, oversized bodies. The flooding rollout gets
refusals; its proxy keeps serving, never stops, and another rollout's proxy is untouched."""

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.proxy.proxy_support import client_for, rig

from agentroll.server.proxy import ProxyCaps, RolloutProxy

pytestmark = pytest.mark.integration

SYSTEM = {"role": "system", "content": "You repeat things."}


def chat(text: str) -> dict[str, Any]:
    return {"model": "policy", "messages": [SYSTEM, {"role": "user", "content": text}]}


async def raw_answer(proxy: RolloutProxy, head: bytes) -> tuple[bytes, dict[str, Any]]:
    """Send only `head`; the answer's head and its JSON body, read until the proxy closes."""
    reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
    writer.write(head)
    try:
        async with asyncio.timeout(10):
            answer = await reader.read()
    finally:
        writer.close()
    answer_head, _, body = answer.partition(b"\r\n\r\n")
    return answer_head, json.loads(body)


async def test_a_wrong_key_is_refused_from_the_head_before_any_body_arrives(
    tmp_path: Path,
) -> None:
    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer sk-guess\r\n"
            b"Content-Type: application/json\r\nContent-Length: 16000000\r\n\r\n"
        )
        answer_head, body = await raw_answer(proxy, head)  # 16 MB announced, none sent
        assert answer_head.startswith(b"HTTP/1.1 401") and b"Connection: close" in answer_head
        assert body["error"]["code"] == "invalid_api_key"
        # The `api-key` header (Azure-style clients) still authenticates.
        async with httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=proxy.socket_path),
            base_url="http://rollout/v1",
            headers={"api-key": proxy.api_key},
        ) as http:
            assert (await http.get("/models")).status_code == 200
        assert proxy.report()["refused"] == {"unauthorized": 1}
        assert await r.backend_log() == []
        await proxy.close()


async def test_a_flood_gets_429s_while_another_rollouts_proxy_answers_as_usual(
    tmp_path: Path,
) -> None:
    async with rig() as r:
        flooder = await r.proxy(
            tmp_path, name="flood.sock", caps=ProxyCaps(request_burst=3, requests_per_s=0.001)
        )
        neighbour = await r.proxy(tmp_path, name="calm.sock")

        async def flood() -> list[httpx.Response]:
            async with client_for(flooder) as http:
                # At once, on as many connections (fewer than the connection cap).
                gets = [http.get("/models") for _ in range(20)]
                posts = [http.post("/chat/completions", json=chat("x")) for _ in range(5)]
                return list(await asyncio.gather(*gets, *posts))

        async def calm() -> list[str]:
            texts = []
            async with client_for(neighbour) as http:
                for word in ("one", "two", "three"):
                    resp = await http.post(
                        "/chat/completions", json=chat(f"Repeat after me: {word}")
                    )
                    assert resp.status_code == 200
                    texts.append(resp.json()["choices"][0]["message"]["content"])
            return texts

        flooded, texts = await asyncio.gather(flood(), calm())
        assert texts == ["one", "two", "three"]
        refused = [resp for resp in flooded if resp.status_code == 429]
        assert len(refused) == 22 and len(flooded) - len(refused) == 3
        for resp in refused:
            assert int(resp.headers["retry-after"]) >= 1
            assert resp.json()["error"]["code"] == "rate_limit_exceeded"
        # The flood is the harness's problem: its proxy is not stopped, nothing is infra.
        assert flooder.stopped is None and neighbour.stopped is None
        assert flooder.report()["refused"] == {"rate_limited": 22}
        assert neighbour.report()["refused"] == {} and neighbour.report()["calls"] == 3
        await flooder.close()
        await neighbour.close()


async def test_a_body_over_the_rollouts_own_limit_is_a_413_and_the_proxy_serves_on(
    tmp_path: Path,
) -> None:
    async with rig() as r:
        proxy = await r.proxy(tmp_path, caps=ProxyCaps(max_body_bytes=4096))
        async with client_for(proxy) as http:
            huge = await http.post("/chat/completions", json=chat("x" * 5000))
            fine = await http.post("/chat/completions", json=chat("Repeat after me: still here"))
        assert huge.status_code == 413
        assert "larger than the limit of 4096 bytes" in huge.json()["error"]["message"]
        assert fine.status_code == 200
        assert fine.json()["choices"][0]["message"]["content"] == "still here"
        assert proxy.stopped is None and proxy.report()["calls"] == 1
        await proxy.close()
