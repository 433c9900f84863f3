"""Head/tail truncation: what the agent sees of huge output."""

import pytest

from agentroll.runtime.action.truncate import HeadTailBuffer, truncate_text


def test_short_text_is_returned_whole() -> None:
    text, cut = truncate_text("hello\nworld\n", 1000)
    assert (text, cut) == ("hello\nworld\n", False)


def test_text_at_exactly_the_limit_is_not_cut() -> None:
    text, cut = truncate_text("x" * 500, 500)
    assert (text, cut) == ("x" * 500, False)


def test_long_text_keeps_head_and_tail_with_exact_count() -> None:
    original = "".join(f"line {i}\n" for i in range(10_000))
    text, cut = truncate_text(original, 1000)
    assert cut
    head, marker_and_tail = text.split("\n[... ", 1)
    count = int(marker_and_tail.split(" characters truncated ...]\n", 1)[0])
    tail = marker_and_tail.split(" characters truncated ...]\n", 1)[1]
    assert original.startswith(head) and original.endswith(tail)
    assert len(head) + len(tail) == 1000
    assert count == len(original) - 1000


@pytest.mark.parametrize("chunk", [1, 7, 333, 4096])
def test_streamed_chunks_give_the_same_result_as_one_shot(chunk: int) -> None:
    original = "".join(f"{i}\n" for i in range(50_000))
    buffer = HeadTailBuffer(2000)
    for at in range(0, len(original), chunk):
        buffer.feed(original[at : at + chunk])
    assert buffer.text() == truncate_text(original, 2000)
    assert buffer.total_chars == len(original)


def test_memory_stays_bounded_while_streaming() -> None:
    buffer = HeadTailBuffer(1000)
    for _ in range(10_000):
        buffer.feed("y\n" * 500)
    kept = sum(map(len, buffer._head)) + sum(map(len, buffer._tail))
    assert kept <= 3 * 1000 + 1000
    text, cut = buffer.text()
    assert cut and "[... 9999000 characters truncated ...]" in text


def test_tiny_limits_are_raised_to_a_useful_minimum() -> None:
    text, cut = truncate_text("a" * 1000, 5)
    assert cut and text.startswith("a" * 100) and text.endswith("a" * 100)
