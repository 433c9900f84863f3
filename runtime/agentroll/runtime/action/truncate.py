"""Bounded output capture: keep the head and the tail, drop the middle with a visible marker.

Tool output can be gigabytes (``yes``, a runaway ``print`` loop); memory stays O(limit) no
matter how much arrives, and the agent sees both how the output started and how it ended.
"""

from __future__ import annotations

MIN_LIMIT = 200


def truncation_marker(dropped: int) -> str:
    return f"\n[... {dropped} characters truncated ...]\n"


class HeadTailBuffer:
    """Accumulates text; ``text()`` returns at most ``limit`` characters plus a marker."""

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), MIN_LIMIT)
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self._dropped = 0  # characters discarded between head and tail

    @property
    def total_chars(self) -> int:
        return self._head_len + self._dropped + self._tail_len

    def feed(self, chunk: str) -> None:
        if not chunk:
            return
        room = self.limit - self._head_len
        if room > 0:
            self._head.append(chunk[:room])
            self._head_len += min(room, len(chunk))
            chunk = chunk[room:]
            if not chunk:
                return
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        # Trim only when the tail doubles its budget, so trimming is amortised O(1) per char.
        if self._tail_len > 2 * self.limit:
            joined = "".join(self._tail)
            cut = len(joined) - self.limit
            self._dropped += cut
            self._tail = [joined[cut:]]
            self._tail_len = self.limit

    def text(self) -> tuple[str, bool]:
        """The kept text and whether anything was cut."""
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self.total_chars <= self.limit:
            return head + tail, False
        keep_head = self.limit // 2
        keep_tail = self.limit - keep_head
        if self._dropped == 0:
            whole = head + tail
            dropped = len(whole) - self.limit
            return whole[:keep_head] + truncation_marker(dropped) + whole[-keep_tail:], True
        dropped = self.total_chars - self.limit
        return head[:keep_head] + truncation_marker(dropped) + tail[-keep_tail:], True


def truncate_text(text: str, limit: int) -> tuple[str, bool]:
    """One-shot form of :class:`HeadTailBuffer`."""
    buffer = HeadTailBuffer(limit)
    buffer.feed(text)
    return buffer.text()
