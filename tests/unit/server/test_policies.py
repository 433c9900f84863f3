"""Policies: routing stays within an agent's policy, and each policy's gate is its own."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.unit.server.test_session_labels import MESSAGES, FakeClient, add, session

from agentroll.handlers import LLMUnavailable
from agentroll.server.llm import BackendPool, HTTPClient
from agentroll.server.llm.base import BackendError
from agentroll.server.llm.policies import Policies


@pytest.fixture
async def pool() -> AsyncIterator[BackendPool]:
    http = HTTPClient()
    yield BackendPool(http)
    await http.close()


async def test_a_session_samples_only_from_its_policys_backends(pool: BackendPool) -> None:
    default, alpha = FakeClient(100), FakeClient(200, [BackendError("down", retryable=True)])
    add(pool, "d", default, max_concurrency=100_000)  # the least loaded by far: never chosen
    add(pool, "a0", alpha, policy="alpha")
    add(pool, "a1", alpha, policy="alpha")
    policies = Policies()
    s = session(pool, policies.get("alpha").gate, policy="alpha")
    await s.start(MESSAGES)
    turn = await s.generate()  # the first try fails: retried on the other alpha backend only
    assert turn.backend_id in ("a0", "a1") and default.calls == 0
    assert [r["backend"] for r in s.retries] == ["a0" if turn.backend_id == "a1" else "a1"]
    load = policies.get("alpha").gate.load
    assert (load.generations, load.completion_tokens) == (1, 2)
    assert policies.default.gate.load.generations == 0


def test_no_backend_for_a_policy_names_it(pool: BackendPool) -> None:
    add(pool, "d", FakeClient(100))
    with pytest.raises(LLMUnavailable, match=r"^no LLM backend for policy 'beta' is registered$"):
        pool.choose(frozenset(), affinity="d", policy="beta")
    with pytest.raises(LLMUnavailable, match=r"^no LLM backend with tags"):
        pool.choose(frozenset({"gpu"}), affinity=None)  # the default policy: as it always read


async def test_pausing_one_policy_holds_only_its_generations(pool: BackendPool) -> None:
    add(pool, "d", FakeClient(100))
    add(pool, "a", FakeClient(200), policy="alpha")
    policies = Policies(max_policy_lag=2)
    alpha, default = policies.get("alpha"), policies.default
    frozen, free = session(pool, alpha.gate, policy="alpha"), session(pool, default.gate)
    await frozen.start(MESSAGES)
    await free.start(MESSAGES)
    alpha.gate.close("wait")
    held = asyncio.create_task(frozen.generate())
    async with asyncio.timeout(10):
        while alpha.gate.waiting != 1:
            await asyncio.sleep(0)
    assert (await free.generate()).policy_version == 0  # the other policy is not held back
    assert not held.done() and default.gate.waiting == 0
    alpha.gate.open(1)
    assert (await held).policy_version == 1  # stamped with alpha's new version
    assert alpha.gate.waiting == 0 and default.gate.policy_version == 0
    assert policies.get("beta").max_policy_lag == 2  # new policies take the server's bound
    assert [p.name for p in policies] == ["default", "alpha", "beta"]


def test_status_lists_every_registered_policy(pool: BackendPool) -> None:
    add(pool, "a", FakeClient(200), policy="alpha")
    statuses = Policies().statuses(pool.all())
    assert sorted(statuses) == ["alpha", "default"]
    assert (statuses["alpha"].backends, statuses["default"].backends) == (["a"], [])
