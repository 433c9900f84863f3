"""Sentinel scanning and command quoting for the pty bash session."""

import subprocess

import pytest

from agentroll.runtime.action.shell_io import Scanner, ansi_c_quote, sentinel_command

NONCE = "0123456789abcdef"


def test_sentinel_split_across_chunks_is_found_and_removed() -> None:
    scanner = Scanner(1000, NONCE)
    stream = b"hello\nworld" + f"__AR_{NONCE}_17__\n".encode() + b"late background output"
    for i in range(len(stream)):
        scanner.feed(stream[i : i + 1])
    assert scanner.found and scanner.exit_code == 17
    assert scanner.finish() == ("hello\nworld", False)


def test_sentinel_of_an_abandoned_command_is_dropped_not_matched() -> None:
    scanner = Scanner(1000, NONCE)
    scanner.feed(b"part one\n__AR_ffffffffffffffff_0__\npart two\n")
    assert not scanner.found
    scanner.feed(f"__AR_{NONCE}_130__\n".encode())
    assert scanner.exit_code == 130
    assert scanner.finish()[0] == "part one\npart two\n"


def test_the_start_marker_says_the_line_began_and_is_not_output() -> None:
    scanner = Scanner(1000, NONCE)
    scanner.feed(b"__AR_ffffffffffffffff_go__\n")  # an older line's: not this one's start
    assert not scanner.started
    scanner.feed(f"__AR_{NONCE}_go__\nout\n".encode())
    assert scanner.started and not scanner.found
    scanner.feed(f"__AR_{NONCE}_0__\n".encode())
    assert scanner.found and scanner.finish()[0] == "out\n"


def test_crlf_and_invalid_utf8_are_normalised() -> None:
    scanner = Scanner(1000, NONCE)
    scanner.feed(b"a\r\nb\xff\xc3")
    scanner.feed(b"\xa9\n" + f"__AR_{NONCE}_0__\n".encode())
    assert scanner.finish()[0] == "a\nb\ufffd\u00e9\n"


@pytest.mark.parametrize(
    "text",
    ["plain", 'it\'s "quoted" \\ back', "tab\tnew\nline\r", "ctrl \x03\x04\x15\x1a\x7f", "héllo ✓"],
)
def test_ansi_c_quote_round_trips_through_real_bash(text: str) -> None:
    out = subprocess.run(
        ["bash", "-c", f"printf %s {ansi_c_quote(text)}"],
        capture_output=True,
        timeout=10,
        check=True,
    )
    assert out.stdout.decode() == text
    assert all(ord(c) >= 0x20 and c != "\x7f" for c in ansi_c_quote(text))


def test_sentinel_command_line_never_contains_the_sentinel_itself() -> None:
    line = sentinel_command(NONCE)
    assert f"__AR_{NONCE}_" not in line
    out = subprocess.run(
        ["bash", "-c", f"(exit 5); {line}"], capture_output=True, timeout=10, check=True
    )
    assert out.stdout.decode() == f"__AR_{NONCE}_5__\n"
