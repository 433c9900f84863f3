"""Which token ids a backend is never sent, and which backend failures are a request's."""

from typing import Any

import pytest

from agentroll.handlers import UnservableRequest
from agentroll.server.llm.base import BackendError, BackendPaused
from agentroll.server.llm.poison import (
    MAX_TOKEN_ID,
    RequestQuarantine,
    check_token_ids,
    failed_on_request,
    refused_request,
    token_digest,
)


@pytest.mark.parametrize(
    ("ids", "vocab", "shown"),
    [
        ([-1], 100, "prompt[0] = -1"),
        ([5, 100], 100, "prompt[1] = 100"),
        ([True], 100, "prompt[0] = true"),
        ([3, False], None, "prompt[1] = false"),
        ([2**63], None, f"prompt[0] = {2**63}"),
        ([MAX_TOKEN_ID + 1], None, f"prompt[0] = {MAX_TOKEN_ID + 1}"),
        ([1.0], 100, "prompt[0] = 1.0"),
        (["7"], 100, "prompt[0] = '7'"),
    ],
)
def test_ids_no_engine_should_see_are_refused(
    ids: list[Any], vocab: int | None, shown: str
) -> None:
    with pytest.raises(UnservableRequest) as refused:
        check_token_ids(ids, vocab)
    assert str(refused.value).startswith(f"{shown} is not a token id of this model")


def test_ids_inside_the_vocabulary_pass() -> None:
    check_token_ids([0, 99], 100)
    check_token_ids([0, MAX_TOKEN_ID], None)  # no vocabulary known: what an engine can hold
    with pytest.raises(UnservableRequest, match="holds no token ids"):
        check_token_ids([], 100)


@pytest.mark.parametrize(
    ("error", "failed", "refused"),
    [
        (BackendError("500", retryable=True, status=500), True, False),
        (BackendError("reset", retryable=True), True, False),  # dropped after sending
        (BackendError("refused", retryable=True, sent=False), False, False),  # never sent
        (BackendError("slow", retryable=True, timed_out=True), False, False),
        (BackendPaused("paused"), False, False),
        (BackendError("malformed answer", retryable=False), False, False),  # backend's fault
        (BackendError("400 out of vocabulary", retryable=False, status=400), False, True),
        (BackendError("429", retryable=True, status=429), False, False),
        (BackendError("404", retryable=True, status=404), False, False),
    ],
)
def test_whose_failure_a_backend_error_is(error: BackendError, failed: bool, refused: bool) -> None:
    assert (failed_on_request(error), refused_request(error)) == (failed, refused)


def test_the_quarantine_refuses_a_request_again_and_forgets_the_oldest() -> None:
    quarantine = RequestQuarantine(capacity=2)
    first, second, third = (token_digest([i], ["stop"]) for i in (1, 2, 3))
    assert token_digest([1], ["stop"]) == first != token_digest([1], [])
    quarantine.add(first, "b1")
    with pytest.raises(UnservableRequest, match="backend b1 failed right after this request"):
        quarantine.check(first)
    quarantine.add(second, "b1")
    quarantine.add(third, "b2")
    quarantine.check(first)  # bounded: the oldest is forgotten
    with pytest.raises(UnservableRequest):
        quarantine.check(third)
    assert len(quarantine) == 2
