"""Talking to bash through a tty: quoting a command onto one line, and finding where it ended.

A command is sent as ``eval $'...'`` (ANSI-C quoted, control characters escaped so the tty's
line discipline never acts on them) between two ``printf`` markers of a per-call nonce: one
that says the line began, one that carries ``$?``. :class:`Scanner` watches the pty's bytes for
them and keeps a bounded head/tail of everything in between.
"""

from __future__ import annotations

import codecs
import re

from agentroll.runtime.action.truncate import HeadTailBuffer

# "\r" before the newline: the agent may turn the terminal's CR insertion on (stty onlcr).
SENTINEL = re.compile(rb"__AR_([0-9a-f]{16})_(go|-?\d+)__\r?\n")
SENTINEL_MAX_LEN = 40
_QUOTE_TABLE = {ord("\\"): "\\\\", ord("'"): "\\'"}
_QUOTE_TABLE.update({c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]})


def ansi_c_quote(text: str) -> str:
    """Quote ``text`` as bash ``$'...'`` with every control character escaped.

    Control characters must not reach the tty raw: its line discipline would act on them
    (``^C`` interrupts, ``^U`` erases the line, ``^D`` ends input).
    """
    return "$'" + text.replace("\x00", "").translate(_QUOTE_TABLE) + "'"


def sentinel_command(nonce: str) -> str:
    # Format and arguments are separate, so the line itself never contains the sentinel.
    return f"printf '__AR_%s_%s__\\n' {nonce} \"$?\""


def start_command(nonce: str) -> str:
    """The marker a line prints first: seen, the command may have run; unseen, it never did."""
    return f"printf '__AR_%s_go__\\n' {nonce}"


class Scanner:
    """Feeds pty bytes into a head/tail buffer until the awaited sentinel shows up."""

    def __init__(self, limit: int, nonce: str) -> None:
        self.buffer = HeadTailBuffer(limit)
        self.nonce = nonce.encode()
        self.exit_code: int | None = None
        self.started = False
        self.found = False
        self._hold = bytearray()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def expect(self, nonce: str) -> None:
        self.nonce = nonce.encode()
        self.found = False

    def feed(self, data: bytes) -> None:
        if self.found:
            return  # output after the sentinel belongs to nobody (e.g. a background job)
        self._hold += data
        while True:
            match = SENTINEL.search(self._hold)
            if match is None:
                break
            nonce, code = match.group(1), match.group(2)  # before the buffer changes
            self._emit(bytes(self._hold[: match.start()]))
            del self._hold[: match.end()]
            if nonce != self.nonce:
                continue  # a marker from an earlier, interrupted line: drop it, keep scanning
            if code == b"go":
                self.started = True
                continue
            self.exit_code = int(code)
            self.found = True
            return
        if len(self._hold) > SENTINEL_MAX_LEN:
            self._emit(bytes(self._hold[:-SENTINEL_MAX_LEN]))
            del self._hold[:-SENTINEL_MAX_LEN]

    def _emit(self, data: bytes) -> None:
        self.buffer.feed(self._decoder.decode(data).replace("\r\n", "\n"))

    def finish(self) -> tuple[str, bool]:
        if not self.found:
            self._emit(bytes(self._hold))
            self._hold.clear()
        self.buffer.feed(self._decoder.decode(b"", final=True))
        return self.buffer.text()
