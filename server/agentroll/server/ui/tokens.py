"""The token view: every token of a chain, coloured by loss mask, shaded by logprob, with
its segments' boundaries (policy version, backend, finish reason).

Token text comes from the tokenizer of the backend that sampled the chain when this machine
has it (a backend registered with `tokenizer_path`); otherwise each token shows its id.
"""

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape
from tokenizers import Tokenizer

log = logging.getLogger("agentroll.server")
LOGPROB_SHADES = 5
"""Shades of a trained token's colour: `lp0` (probability near 0) to `lp4` (near 1)."""


@dataclass(frozen=True)
class Chain:
    """One token sequence to show: a trajectory's, an agent's, or a harness side chain's."""

    title: str
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    response_mask: Sequence[int]
    response_logprobs: Sequence[float]
    segments: Sequence[dict[str, Any]]


def chains_of(result: dict[str, Any]) -> list[Chain]:
    """The trajectory's own chain, each agent's, and the side chains its LLM proxy kept."""
    chains = [_chain("main chain", result)] if result.get("response_ids") else []
    for agent in result.get("agents") or []:
        title = f"agent {agent.get('name')} (policy {agent.get('policy')})"
        chains.append(_chain(title, agent))
    proxies = result.get("metadata", {}).get("llm_proxy") or []
    for p, proxy in enumerate(proxies if isinstance(proxies, list) else [proxies]):
        for entry in proxy.get("chains", []) if isinstance(proxy, dict) else []:
            if isinstance(entry, dict) and not entry.get("main") and "response_ids" in entry:
                where = f"proxy {p} " if isinstance(proxies, list) else ""
                chains.append(_chain(f"side chain {where}#{entry.get('index')}", entry))
    return chains


def _chain(title: str, source: dict[str, Any]) -> Chain:
    return Chain(
        title,
        source.get("prompt_ids") or [],
        source.get("response_ids") or [],
        source.get("response_mask") or [],
        source.get("response_logprobs") or [],
        source.get("segments") or [],
    )


class TokenDecoder:
    """Token ids to text with the tokenizer of the backend that sampled them, where known."""

    def __init__(self, backend_specs: Sequence[dict[str, Any]]) -> None:
        self._paths = {
            str(s.get("id")): Path(s["tokenizer_path"])
            for s in backend_specs
            if s.get("tokenizer_path")
        }
        self._loaded: dict[Path, Tokenizer | None] = {}

    def _tokenizer(self, backend_id: str | None) -> Tokenizer | None:
        path = self._paths.get(backend_id or "")
        if path is None and len(set(self._paths.values())) == 1:
            path = next(iter(self._paths.values()))  # one tokenizer serves every backend
        if path is None:
            return None
        if path not in self._loaded:
            try:
                self._loaded[path] = Tokenizer.from_file(str(path / "tokenizer.json"))
            except Exception as exc:  # a missing or foreign file: show ids instead
                log.warning("viewer: no tokenizer at %s (%s): showing token ids", path, exc)
                self._loaded[path] = None
        return self._loaded[path]

    def texts(self, ids: Sequence[int], backend_id: str | None) -> list[str] | None:
        tokenizer = self._tokenizer(backend_id)
        if tokenizer is None or not ids:
            return None
        return list(tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False))


def _shade(logprob: float) -> int:
    probability = math.exp(min(logprob, 0.0)) if math.isfinite(logprob) else 0.0
    return min(int(probability * LOGPROB_SHADES), LOGPROB_SHADES - 1)


def _span(classes: str, text: str, title: str, mask: str) -> str:
    attributes = f'class="{classes}" data-mask="{mask}" title="{escape(title)}"'
    return f"<span {attributes}>{escape(text)}</span>"


def _boundary(segment: dict[str, Any]) -> str:
    version = segment.get("policy_version")
    label = f"v{version} · {segment.get('backend_id')} · {segment.get('finish_reason')}"
    return (
        f'<span class="seg" data-version="{escape(str(version))}" '
        f'title="segment [{segment.get("start")}, {segment.get("end")})">{escape(label)}</span>'
    )


def render_chain(chain: Chain, decoder: TokenDecoder) -> Markup:
    """The chain's prompt (collapsed) and response tokens as spans; `data-mask` is each
    response token's loss mask, `lp0..lp4` its logprob shade."""
    backend = str(chain.segments[0].get("backend_id")) if chain.segments else None
    prompt_texts = decoder.texts(chain.prompt_ids, backend)
    texts = decoder.texts(chain.response_ids, backend)
    prompt = "".join(
        _span("tok prompt", prompt_texts[i] if prompt_texts else f"#{t} ", f"{i}: id {t}", "")
        for i, t in enumerate(chain.prompt_ids)
    )
    starts = {int(s.get("start", -1)): s for s in chain.segments}
    parts: list[str] = []
    for i, token in enumerate(chain.response_ids):
        if i in starts:
            parts.append(_boundary(starts[i]))
        mask = int(chain.response_mask[i]) if i < len(chain.response_mask) else 0
        logprob = chain.response_logprobs[i] if i < len(chain.response_logprobs) else 0.0
        text = texts[i] if texts else f"#{token} "
        classes = f"tok m{mask}" + (f" lp{_shade(logprob)}" if mask else "")
        title = f"{i}: id {token} · mask {mask}" + (f" · logprob {logprob:.3f}" if mask else "")
        parts.append(_span(classes, text, title, str(mask)))
    decoded = "decoded" if texts else "ids (no tokenizer on this machine)"
    return Markup(
        f'<section class="chain"><h3>{escape(chain.title)} '
        f"<small>{len(chain.response_ids)} response tokens, "
        f"{sum(1 for m in chain.response_mask if m)} trained · {decoded}</small></h3>"
        f"<details><summary>prompt: {len(chain.prompt_ids)} tokens</summary>"
        f'<div class="tokens">{prompt}</div></details>'
        f'<div class="tokens response">{"".join(parts)}</div></section>'
    )
