"""`serve` in a real subprocess on a real loopback socket."""

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentroll.testing.scripted_llm import get_chat_template, get_tokenizer

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def server_url(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    log = (tmp_path / "scripted-llm.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentroll.server.cli",
        "scripted-llm",
        "--port",
        str(port),
        "--version",
        "0.2x",
        "--latency-s",
        "0.2",
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=2) as client, asyncio.timeout(60):
            while True:
                assert proc.returncode is None, (tmp_path / "scripted-llm.log").read_text()
                try:
                    if (await client.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        yield url
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(10):
                    await proc.wait()
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        log.close()
    assert proc.returncode is not None


async def test_real_socket_round_trip(server_url: str) -> None:
    tok = get_tokenizer()
    prompt = get_chat_template().encode(
        [{"role": "user", "content": "Repeat after me: over a real socket"}],
        add_generation_prompt=True,
    )
    async with httpx.AsyncClient(base_url=server_url, timeout=30) as client:
        assert (await client.get("/version")).json() == {"version": "0.26.0"}
        r = await client.post(
            "/v1/completions", json={"prompt": prompt, "return_token_ids": True, "seed": 1}
        )
        choice = r.json()["choices"][0]
        assert choice["text"] == "over a real socket"
        assert choice["token_ids"][-1] == tok.eos_token_id  # same tokenizer in both processes
        assert tok.decode(choice["token_ids"][:-1]) == choice["text"]

        chunks = []
        async with client.stream(
            "POST",
            "/v1/completions",
            json={"prompt": prompt, "return_token_ids": True, "seed": 1, "stream": True},
        ) as s:
            async for line in s.aiter_lines():
                if line.startswith("data: "):
                    chunks.append(line[len("data: ") :])
        assert chunks[-1] == "[DONE]"
        streamed = [i for c in chunks[:-1] for i in json.loads(c)["choices"][0]["token_ids"]]
        assert streamed == choice["token_ids"]

        log = (await client.get("/scripted/requests")).json()["requests"]
        assert [e["token_ids"] for e in log] == [choice["token_ids"]] * 2
