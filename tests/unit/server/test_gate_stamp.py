"""`GenerationGate.stamp`: which policy version sampled which tokens of one answer.

The engine's weight labels decide only for a call that lived through a version change, and
only within the versions that call could have seen: a label from elsewhere (another run's,
a version from the future, one going back) never puts a version on tokens."""

import pytest

from agentroll.server.llm.gate import Flight, GenerationGate


async def dispatched(gate: GenerationGate) -> Flight:
    async with gate.dispatch() as flight:
        return flight


async def updated(old: int = 3, new: int = 4) -> tuple[GenerationGate, Flight]:
    """A call dispatched under `old`, answered after `new` was announced."""
    gate = GenerationGate(old)
    flight = await dispatched(gate)
    gate.close("keep")
    gate.announce(new)
    gate.open(new)
    return gate, flight


async def test_a_call_answered_before_any_new_version_keeps_its_own_whatever_the_labels():
    gate = GenerationGate(3)
    flight = await dispatched(gate)
    gate.close("abort")  # the engine cut it at the pause: answered before the update
    assert gate.stamp(flight, 5, [("4", 0, 5)]) == [(3, 0, 5)]
    gate.announce(4)
    assert gate.stamp(flight, 0, None) == [(3, 0, 0)]  # nothing sampled: nothing to place


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([("4", 0, 5)], [(4, 0, 5)]),  # parked before its first token: all new weights
        ([("3", 0, 0), ("4", 0, 5)], [(4, 0, 5)]),  # an empty span says nothing
        ([("3", 0, 2), ("4", 2, 5)], [(3, 0, 2), (4, 2, 5)]),
        ([("step-a", 0, 2), ("step-b", 2, 5)], [(3, 0, 2), (4, 2, 5)]),  # by position
        ([("3", 0, 5)], [(3, 0, 5)]),  # the engine was not updated before it finished
        ([("3", 0, 2), ("3", 2, 5)], [(3, 0, 5)]),
    ],
)
async def test_engine_labels_within_the_calls_versions_decide(
    spans: list[tuple[str, int, int]], expected: list[tuple[int, int, int]]
) -> None:
    gate, flight = await updated()
    assert gate.stamp(flight, 5, spans) == expected


@pytest.mark.parametrize(
    "spans",
    [
        None,  # vLLM 0.12-0.32 / SGLang: nothing reported
        [],
        [("9", 0, 5)],  # a version the gate never announced
        [("2", 0, 5)],  # older than the call itself
        [("default", 0, 5)],  # an engine never labelled
        [("4", 0, 2), ("3", 2, 5)],  # weights going back in time
        [("3", 0, 2), ("4", 3, 5)],  # a gap
        [("3", 0, 2), ("4", 2, 4)],  # does not cover the answer
        [("a", 0, 1), ("b", 1, 2), ("c", 2, 5)],  # three foreign labels: no position rule
        [("x", 0, 5)],  # one foreign label: old or new?
    ],
)
async def test_spans_that_cannot_be_ours_are_undecidable(
    spans: list[tuple[str, int, int]] | None,
) -> None:
    gate, flight = await updated()
    assert gate.stamp(flight, 5, spans) is None


async def test_a_call_spanning_two_updates_gets_each_labelled_version() -> None:
    gate, flight = await updated(3, 4)
    gate.announce(5)
    spans = [("3", 0, 1), ("4", 1, 3), ("5", 3, 5)]
    assert gate.stamp(flight, 5, spans) == [(3, 0, 1), (4, 1, 3), (5, 3, 5)]
