"""From prompt ids to samples: context-length rules per vLLM version, seeding, the policy.

Randomness is derived from text seeds (`random.Random(str)` hashes with SHA-512, so it is the
same in every process): greedy requests (temperature 0) depend on the prompt only; seeded
requests on (seed, choice, prompt); unseeded ones also on a per-server counter.
"""

import hashlib
import random
from array import array

from agentroll.testing.scripted_llm.config import VllmVersion
from agentroll.testing.scripted_llm.engine import Engine
from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.sampling import Sample, SamplingParams, sample
from agentroll.testing.scripted_llm.template import PromptTurn, parse_chatml
from agentroll.testing.scripted_llm.tokenizer import ScriptedTokenizer

THOUGHT = "The user wants this repeated exactly; I will answer with just that."


def prompt_digest(ids: list[int]) -> str:
    return hashlib.blake2b(array("q", ids).tobytes(), digest_size=12).hexdigest()


def conversation_of(tok: ScriptedTokenizer, ids: list[int]) -> Conversation:
    """Read the prompt back as ChatML; a prompt without ChatML is one user message."""
    text = tok.decode(ids)
    messages = parse_chatml(text) if "<|im_start|>" in text else [PromptTurn("user", text)]
    return Conversation(tuple(messages), text)


def check_prompt_ids(engine: Engine, ids: list[int]) -> None:
    """Refuse, fail on or crash on ids outside the vocabulary, as `config.out_of_vocab` says."""
    tok = engine.tokenizer
    if not ids:
        raise ProtocolError("Prompt cannot be empty.", param="prompt")
    mode = engine.config.out_of_vocab
    if mode != "refuse" and not all(0 <= i < tok.vocab_size for i in ids):
        if mode == "crash":
            engine.healthy = False
        raise ProtocolError(
            "EngineCore encountered an issue: index out of range in self",
            status=500,
            err_type="InternalServerError",
        )
    if min(ids) < 0:
        raise ProtocolError(
            "1 validation error:\n  prompt: token ids must be >= 0", err_type="Bad Request"
        )
    top = max(ids)
    if top >= tok.vocab_size:
        raise ProtocolError(f"Token id {top} is out of vocabulary", param="prompt")


def check_stop_strings(engine: Engine, stop: tuple[str, ...]) -> None:
    """Fail (500) on a stop string holding `config.failing_stop`."""
    mark = engine.config.failing_stop
    if mark is not None and any(mark in s for s in stop):
        raise ProtocolError(
            "EngineCore encountered an issue: stop string",
            status=500,
            err_type="InternalServerError",
        )


def _too_small(max_tokens: int) -> ProtocolError:
    return ProtocolError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")


def check_context(version: VllmVersion, prompt_len: int, max_tokens: int, limit: int) -> int:
    """Apply the version's context-length rule; return the max_tokens that will be used."""
    if max_tokens < 1:
        raise _too_small(max_tokens)
    if version == "0.33":  # only the prompt alone can be too long; max_tokens is clamped
        if prompt_len > limit:
            raise ProtocolError(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {prompt_len} input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt.",
                param="input_tokens",
            )
        if max_tokens > limit:
            raise ProtocolError(
                f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens.",
                param="max_tokens",
            )
        clamped = min(max_tokens, limit - prompt_len)
        if clamped < 1:
            raise _too_small(clamped)
        return clamped
    if prompt_len + max_tokens <= limit:
        return max_tokens
    if version == "0.2x":
        raise ProtocolError(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {prompt_len} input tokens, "
            f"for a total of {prompt_len + max_tokens} tokens. Please reduce the length of the "
            "input prompt or the number of requested output tokens."
        )
    raise ProtocolError(  # 0.11 prints the input budget, not the model length
        f"This model's maximum context length is {limit - max_tokens} tokens. However, your "
        f"request has {prompt_len} input tokens. Please reduce the length of the input messages."
    )


def seed_text(engine: Engine, seed: int | None, greedy: bool, choice: int, digest: str) -> str:
    base = engine.config.seed
    if greedy:
        return f"{base}:greedy:{digest}"
    if seed is not None:
        return f"{base}:seed={seed}:{choice}:{digest}"
    return f"{base}:nonce={engine.next_nonce()}:{choice}:{digest}"


def generate(
    engine: Engine, prompt: list[int], params: SamplingParams, n: int, seed: int | None
) -> list[Sample]:
    """`n` samples for one prompt."""
    tok = engine.tokenizer
    conv = conversation_of(tok, prompt)
    digest = prompt_digest(prompt)
    greedy = params.temperature == 0
    samples = []
    for choice in range(n):
        rng = random.Random(seed_text(engine, seed, greedy, choice, digest))
        reply = engine.policy.reply(conv, RuleContext(rng, engine.config.wrong_rate))
        if engine.config.thinking:
            reply = Reply(f"<think>{THOUGHT}</think>\n{reply.text}", reply.ends_turn)
        samples.append(sample(tok, reply, params, rng, engine.config.split_rate))
    return samples
