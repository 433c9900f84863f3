"""`JudgeCaller`: one-off, unrecorded chat calls to a judge backend chosen by tag.

A judge (a model that scores the policy's answer) is a registered backend like any other,
carrying a tag such as `judge`. Its calls take the same path as the policy's (routing,
retries on another backend, the pause gate of the policy the judge serves, the request
timeout) through a throwaway `TokenSession`, but nothing of them is recorded: not in the
trajectory, not in the policy's token budget or timing. Their latency, tokens and failures
are metrics of their own (`agentroll_judge_*`).
"""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentroll.handlers import JudgeReply, LLMUnavailable
from agentroll.server.llm.backend_pool import Backend, BackendPool
from agentroll.server.llm.base import Completion
from agentroll.server.llm.gate import GenerationAborted
from agentroll.server.llm.policies import Policies
from agentroll.server.llm.session import TokenSession
from agentroll.server.schema import DEFAULT_POLICY
from agentroll.server.schema.messages import ChatMessage

if TYPE_CHECKING:
    from agentroll.server.metrics import ServerMetrics

MAX_ABORTED_TRIES = 4
"""A judgment a pause (or the backend) aborted is asked again from scratch, this often."""


@dataclass(frozen=True, eq=False)
class JudgeCaller:
    pool: BackendPool
    policies: Policies
    request_timeout_s: float
    backend_wait_s: float
    metrics: "ServerMetrics | None" = None

    def policy_of(self, tag: str) -> str:
        """The one policy the backends carrying `tag` serve (`default` when none is
        registered yet: the call then waits for one, as a rollout waits for its backend)."""
        served = sorted({b.policy for b in self.pool.all() if tag in b.tags})
        if len(served) > 1:
            raise LLMUnavailable(
                f"backends tagged {tag!r} serve several policies ({', '.join(served)}): "
                "name the judge's policy",
                cause="judge_policy_ambiguous",
            )
        return served[0] if served else DEFAULT_POLICY

    async def ask(
        self,
        messages: Sequence[ChatMessage],
        *,
        tag: str,
        policy: str | None,
        max_tokens: int,
        timeout_s: float,
    ) -> JudgeReply:
        """Greedy decoding of one reply; `LLMUnavailable` if none came within `timeout_s`."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s) as timer:
                completion, backend, prompt_tokens = await self._answer(
                    messages, tag, policy or self.policy_of(tag), max_tokens, timeout_s
                )
        except TimeoutError as exc:
            if not timer.expired():
                raise
            self._count_failure("judge_timeout")
            raise LLMUnavailable(
                f"no backend tagged {tag!r} answered within {timeout_s:g} s", cause="judge_timeout"
            ) from exc
        except LLMUnavailable as exc:
            self._count_failure(exc.cause)
            raise
        seconds = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.judge_seconds.labels(backend.id).observe(seconds)
            tokens = self.metrics.judge_tokens
            tokens.labels(backend.id, "prompt").inc(prompt_tokens)
            tokens.labels(backend.id, "completion").inc(len(completion.token_ids))
        return JudgeReply(
            text=completion.text,
            finish_reason=completion.finish_reason,
            backend_id=backend.id,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(completion.token_ids),
            seconds=seconds,
        )

    async def _answer(
        self,
        messages: Sequence[ChatMessage],
        tag: str,
        policy: str,
        max_tokens: int,
        timeout_s: float,
    ) -> tuple[Completion, Backend, int]:
        session = TokenSession(
            self.pool,
            sampling={"temperature": 0.0, "max_tokens": max_tokens},
            tags=frozenset({tag}),
            max_response_tokens=max_tokens,
            max_context_tokens=None,
            gate=self.policies.get(policy).gate,
            request_timeout_s=min(self.request_timeout_s, timeout_s),
            metrics=self.metrics,
            # Give up waiting for a registration before the call's own limit, so the answer
            # says what is missing.
            backend_wait_s=min(self.backend_wait_s, timeout_s / 2),
            policy=policy,
        )
        prompt = await session.tokenize_chat(messages, None, add_generation_prompt=True)
        for _ in range(MAX_ABORTED_TRIES):
            try:
                completion, backend, _ = await session.sample(prompt.token_ids, session.sampling)
            except GenerationAborted:
                continue  # nothing came back: ask again once generation resumes
            if completion.finish_reason != "abort":
                return completion, backend, len(prompt.token_ids)
        raise LLMUnavailable(
            f"the judgment was aborted {MAX_ABORTED_TRIES} times", cause="judge_aborted"
        )

    def _count_failure(self, cause: str) -> None:
        if self.metrics is not None:
            self.metrics.judge_failures.labels(cause).inc()
