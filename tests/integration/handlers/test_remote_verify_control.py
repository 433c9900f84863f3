"""The remote verifier's control keeps only a verdict that lasts. A verifier that did not
answer the control (slow, unreachable, an error status) may have been busy for a moment, with
the policy's own hanging answers say: kept for the server's life, that would make every later
failure on the row `infra_error` (resampled) instead of 0."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentroll.handlers.builtin.control import ControlCache, ControlResult
from agentroll.handlers.builtin.remote_verify.handler import (
    RemoteVerifyInstance,
    control_verification,
)
from agentroll.server.serving import start_in_loop
from agentroll.testing.fake_resources_server import FakeResourcesServer, create_app

pytestmark = pytest.mark.integration


@pytest.fixture
async def verifier_url() -> AsyncIterator[str]:
    verifier = await start_in_loop(create_app(FakeResourcesServer()))
    try:
        yield verifier.url
    finally:
        await verifier.stop()


def _task(url: str, fake: str | None) -> RemoteVerifyInstance:
    row: dict[str, Any] = {
        "responses_create_params": {"input": [{"role": "user", "content": "Say 42."}]},
        "expected_answer": "42",
    }
    if fake is not None:
        row["fake"] = fake  # how the fake verifier treats every answer of this row
    return RemoteVerifyInstance(verifier={"url": url, "timeout_s": 1.0}, row=row)


async def _twice(url: str, fake: str | None) -> tuple[ControlResult, int]:
    """The control asked for twice through one cache; how many times it ran."""
    cache = ControlCache()
    first = await cache.result("row", lambda: control_verification(_task(url, fake)))
    await cache.result("row", lambda: control_verification(_task(url, fake)))
    return first, cache.runs


@pytest.mark.parametrize("fake", ["hang", "status_500"])
async def test_a_control_the_verifier_did_not_answer_is_not_kept(
    verifier_url: str, fake: str
) -> None:
    result, runs = await _twice(verifier_url, fake)
    assert (result.passed, result.keep, runs) == (False, False, 2), result
    assert result.detail.startswith("on an empty answer: ")


async def test_a_verdict_on_the_control_is_kept(verifier_url: str) -> None:
    broken, runs = await _twice(verifier_url, "nan")  # answers, with a NaN reward: it lasts
    assert (broken.passed, broken.keep, runs) == (False, True, 1), broken
    working, runs = await _twice(verifier_url, None)
    assert (working.passed, working.detail, runs) == (
        True, "an empty answer was verified: reward 0", 1,
    )  # fmt: skip
