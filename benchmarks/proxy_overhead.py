"""The recording LLM proxy under load: added latency per chat call at 200 concurrent rollouts.

Each rollout has its own proxy on its own Unix socket (as in production) and holds a
multi-turn conversation with an `agentroll scripted-llm` process (`--latency`: simulated
generation time per call), spending `--think` seconds (jittered) between calls as a harness
runs its tools. Two measurements:

- through the proxy: a keep-alive client posts `/v1/chat/completions` to the rollout's socket;
  the proxy tokenizes through the backend, matches the chain, samples through the gate and
  answers. Added latency of one call = what the client waited - what the proxy itself waited
  on the backend for that call (tokenization, sampling; recorded per call). This is the
  proxy's own cost at that load: HTTP on the socket, parsing, chain matching, JSON, and event
  loop contention among 200 rollouts. The clients run in this process too, so their CPU is
  charged to the proxy: the figure is an upper bound.
- direct: the same conversations, each turn the same two backend calls (`/tokenize` with the
  messages, `/v1/completions` with the token ids) made straight from the LLM layer. The
  difference of the two medians is printed for reference (it also carries the proxy's extra
  background `/tokenize` of each reply, which loads the backend).

Target (issue 8): <= 2 ms median added latency per chat call at 200 concurrent rollouts.

    .venv/bin/python benchmarks/proxy_overhead.py [--rollouts 200] [--turns 5] [--latency 1.0]
        [--think 1.0]     # --latency 0.05 --think 0: a firehose that saturates a small machine
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import cpu_seconds, report

from agentroll.handlers import ProxyLimits
from agentroll.handlers.toolcalls import get_parser
from agentroll.server.launch import agentroll_process
from agentroll.server.llm import BackendPool, HTTPClient, TokenSession
from agentroll.server.llm.gate import GenerationGate
from agentroll.server.proxy import RolloutProxy, open_proxy
from agentroll.server.schema import BackendSpec

SYSTEM = {"role": "system", "content": "You repeat what you are told, nothing else."}
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "at", "noon"]


def say(k: int, turn: int) -> dict[str, str]:
    words = " ".join(WORDS[(k + turn + i) % len(WORDS)] for i in range(8))
    return {"role": "user", "content": f"Repeat after me: {words} ({k}.{turn})"}


class UnixClient:
    """A minimal keep-alive HTTP/1.1 client on a Unix socket (what a harness's SDK does)."""

    def __init__(self, path: str, key: str) -> None:
        self._path, self._key = path, key
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        if self._conn is None:
            self._conn = await asyncio.open_unix_connection(self._path)
        reader, writer = self._conn
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: rollout\r\nAuthorization: Bearer {self._key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        headers = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
        length = int(headers.split("content-length:")[1].split("\r\n")[0])
        payload = json.loads(await reader.readexactly(length))
        if not headers.startswith("http/1.1 200"):
            raise RuntimeError(f"proxy answered {headers.splitlines()[0]}: {payload}")
        return payload

    def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()


def session(pool: BackendPool, gate: GenerationGate, k: int) -> TokenSession:
    return TokenSession(
        pool,
        sampling={"temperature": 1.0, "max_tokens": 48, "seed": k},
        max_response_tokens=32768,
        max_context_tokens=None,
        gate=gate,
        request_timeout_s=120,
    )


async def through_proxy(
    proxy: RolloutProxy, k: int, turns: int, think: float, lat: list[float]
) -> None:
    client = UnixClient(proxy.socket_path, proxy.api_key)
    history: list[dict[str, Any]] = [SYSTEM, say(k, 0)]
    rng = random.Random(k)
    try:
        for turn in range(turns):
            await asyncio.sleep(think * rng.uniform(0.5, 1.5))  # the harness runs its tools
            began = time.monotonic()
            body = await client.post("/v1/chat/completions", {"messages": history})
            lat.append(time.monotonic() - began)
            history += [body["choices"][0]["message"], say(k, turn + 1)]
    finally:
        client.close()


async def direct(pool: BackendPool, k: int, turns: int, think: float, lat: list[float]) -> None:
    client = pool.all()[0].client
    history: list[dict[str, Any]] = [SYSTEM, say(k, 0)]
    rng = random.Random(k)
    for turn in range(turns):
        await asyncio.sleep(think * rng.uniform(0.5, 1.5))
        began = time.monotonic()
        prompt = await client.tokenize_messages(history, None, add_generation_prompt=True)
        done = await client.complete(
            prompt.token_ids, {"temperature": 1.0, "max_tokens": 48, "seed": k}, timeout_s=120
        )
        lat.append(time.monotonic() - began)
        history += [{"role": "assistant", "content": done.text}, say(k, turn + 1)]


async def measure(
    url: str, backend_pid: int, rollouts: int, turns: int, latency: float, think: float
) -> None:
    http = HTTPClient(timeout_s=120)
    pool = BackendPool(http)
    pool.add(BackendSpec(id="b0", base_url=url, max_concurrency=100_000))  # type: ignore[arg-type]
    gate = GenerationGate()
    with tempfile.TemporaryDirectory(dir="/tmp") as sockets:
        proxies = [
            await open_proxy(
                session(pool, gate, k), Path(sockets), inside_dir=sockets, name=f"r{k}.sock",
                limits=ProxyLimits(), parser=get_parser("hermes"), max_sampled_tokens=32768,
                context_tokens=None, label=f"r{k}",
            )
            for k in range(rollouts)
        ]  # fmt: skip
        await asyncio.gather(*(direct(pool, k, 1, 0.0, []) for k in range(rollouts)))  # warm up

        direct_lat: list[float] = []
        await asyncio.gather(*(direct(pool, k, turns, think, direct_lat) for k in range(rollouts)))

        per_rollout: list[list[float]] = [[] for _ in proxies]
        cpu0, b0 = os.times(), cpu_seconds(backend_pid)
        started = time.monotonic()
        await asyncio.gather(
            *(through_proxy(p, k, turns, think, per_rollout[k]) for k, p in enumerate(proxies))
        )
        wall = time.monotonic() - started
        cpu1, b1 = os.times(), cpu_seconds(backend_pid)
        for p in proxies:
            await p.close()
    await http.close()

    # A rollout's calls are sequential: its k-th latency is its proxy's k-th call record.
    proxy_lat = [lat for lats in per_rollout for lat in lats]
    added = [
        lat - record["backend_s"]
        for lats, p in zip(per_rollout, proxies, strict=True)
        for lat, record in zip(lats, p.calls, strict=True)
    ]
    outside = [
        lat - record["seconds"]
        for lats, p in zip(per_rollout, proxies, strict=True)
        for lat, record in zip(lats, p.calls, strict=True)
    ]
    inside = [r["seconds"] - r["backend_s"] for p in proxies for r in p.calls]
    ours = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    med_added = statistics.median(added) * 1000
    p90_added = statistics.quantiles(added, n=10)[-1] * 1000
    med_direct = statistics.median(direct_lat) * 1000
    med_proxy = statistics.median(proxy_lat) * 1000
    print(
        f"proxy_overhead: {rollouts} concurrent rollouts x {turns} chat calls, scripted backend "
        f"with {latency:g} s latency, {think:g} s harness time between calls, "
        f"{os.cpu_count()} cores"
    )
    print(
        f"  proxied calls: {len(added)} in {wall:.2f} s; agentroll+clients CPU {ours:.2f} s, "
        f"backend CPU {b1 - b0:.2f} s"
    )
    print(
        f"  median call latency: direct {med_direct:.2f} ms, through the proxy "
        f"{med_proxy:.2f} ms (difference {med_proxy - med_direct:+.2f} ms; it includes the "
        "extra backend load)"
    )
    print(
        f"  split: on the wire {statistics.median(outside) * 1000:.2f} ms, in the proxy "
        f"{statistics.median(inside) * 1000:.2f} ms (medians)"
    )
    report("added latency per chat call (median)", med_added, "ms", "<= 2", med_added <= 2.0)
    report("added latency per chat call (p90)", p90_added, "ms", "(info)", True)
    report("agentroll+client CPU per proxied call", ours * 1000 / len(added), "ms", "(info)", True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--latency", type=float, default=1.0, help="generation time per call")
    parser.add_argument(
        "--think", type=float, default=1.0, help="mean harness time between calls (tools)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        llm_args = ["scripted-llm", "--port", "0", "--latency-s", str(args.latency)]
        llm = stack.enter_context(agentroll_process(llm_args, Path(tmp), "llm"))
        asyncio.run(measure(llm.url, llm.pid, args.rollouts, args.turns, args.latency, args.think))


if __name__ == "__main__":
    main()
