"""What the fidelity tests ask the engine directly: its own recomputation of a sequence's
logprobs, its counters, and a seed under which the model ends a turn with EOS."""

import asyncio
from typing import Any

import httpx

from agentroll.server.schema import ChainTrace, Trajectory

LOGPROB_TOLERANCE = 1e-3
"""float32 on CPU: a sampled logprob and its recomputation over a longer prompt differ in
the last bits (another batch shape), never by more."""


async def recomputed_logprobs(url: str, ids: list[int]) -> list[dict[str, Any] | None]:
    """vLLM's `prompt_logprobs` for `ids`: per position, the logprob of the id there."""
    body = {"model": "policy", "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        resp = await http.post("/v1/completions", json=body)
    resp.raise_for_status()
    entries: list[dict[str, Any] | None] = resp.json()["choices"][0]["prompt_logprobs"]
    return entries


async def sampled_mismatches(url: str, t: Trajectory) -> list[str]:
    """Each sampled position whose id or logprob is not what the engine recomputes."""
    return await _mismatches(
        url, t.prompt_ids, t.response_ids, t.response_mask, t.response_logprobs
    )


async def chain_mismatches(url: str, chain: ChainTrace) -> list[str]:
    """`sampled_mismatches` for a recording proxy's chain other than the main one (one of
    the trajectory's `chains`)."""
    return await _mismatches(
        url, chain.prompt_ids, chain.response_ids, chain.response_mask, chain.response_logprobs
    )


async def _mismatches(
    url: str, prompt: list[int], response: list[int], mask: list[int], logprobs: list[float]
) -> list[str]:
    entries = await recomputed_logprobs(url, prompt + response)
    assert len(entries) == len(prompt) + len(response)
    wrong = []
    for i, (token, sampled, logprob) in enumerate(zip(response, mask, logprobs, strict=True)):
        if not sampled:
            continue
        entry = entries[len(prompt) + i] or {}
        mine = entry.get(str(token))
        if mine is None:
            wrong.append(f"{i}: id {token} not at this position ({list(entry)})")
        elif abs(mine["logprob"] - logprob) > LOGPROB_TOLERANCE:
            wrong.append(f"{i}: id {token} logprob {logprob} vs recomputed {mine['logprob']}")
    return wrong


async def metric(url: str, name: str) -> float:
    """The sum of a vLLM Prometheus counter or gauge over its label sets."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        text = (await http.get("/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


async def render_prompt(url: str, messages: list[dict[str, Any]], tools: list[Any]) -> list[int]:
    """The engine's own chat-template rendering (the route agentroll uses for new messages)."""
    body = {"model": "policy", "messages": messages, "tools": tools, "add_generation_prompt": True}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        resp = await http.post("/tokenize", json=body)
    resp.raise_for_status()
    tokens: list[int] = resp.json()["tokens"]
    return tokens


async def _sample(http: httpx.AsyncClient, prompt: list[int], seed: int, max_tokens: int) -> Any:
    body = {
        "model": "policy",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "seed": seed,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "return_token_ids": True,
    }
    resp = await http.post("/v1/completions", json=body)
    resp.raise_for_status()
    return resp.json()["choices"][0]


async def seed_ending_in_eos(
    url: str, prompt: list[int], eos: int, max_tokens: int, seeds: range = range(96)
) -> tuple[int, list[int]]:
    """A seed whose sampled reply to `prompt` ends with EOS, and that reply's ids.

    Seeds are tried eight at a time; a hit is sampled once more alone, so the answer does
    not depend on the batch it was found in."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        for lo in range(seeds.start, seeds.stop, 8):
            batch = list(range(lo, min(lo + 8, seeds.stop)))
            choices = await asyncio.gather(*(_sample(http, prompt, s, max_tokens) for s in batch))
            for seed, choice in zip(batch, choices, strict=True):
                if choice["token_ids"][-1:] == [eos]:
                    alone = await _sample(http, prompt, seed, max_tokens)
                    if alone["token_ids"] == choice["token_ids"]:
                        return seed, list(alone["token_ids"])
    raise AssertionError(f"no seed in {seeds} ends a reply with EOS within {max_tokens} tokens")
