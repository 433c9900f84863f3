"""Reading a Harbor verifier's reward files, and Terminal-Bench 1's pytest summary: a reward
is what the verifier wrote, or the rollout is `infra_error` with the test output — never 0."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from agentroll.handlers.builtin.harbor.verify import (
    _READ_REWARD,
    VerifierFailed,
    VerifierRun,
    _pytest_summary_reward,
    choose_reward,
    parse_reward_file,
)
from agentroll.handlers.errors import InfraError

RUN = VerifierRun(exit_code=1, timed_out=False, seconds=0.5, output_tail="E   assert 3 == 4")


def test_reward_txt_is_one_number() -> None:
    assert parse_reward_file("reward.txt", b"1\n", RUN) == {"reward": 1.0}
    assert parse_reward_file("reward.txt", b" 0.25 ", RUN) == {"reward": 0.25}


def test_reward_json_is_a_flat_object_of_numbers() -> None:
    scores = parse_reward_file("reward.json", b'{"reward": 0.5, "style": 1, "tests": 3}', RUN)
    assert scores == {"reward": 0.5, "style": 1.0, "tests": 3.0}
    assert choose_reward(scores, "reward", RUN) == 0.5
    assert choose_reward(scores, "style", RUN) == 1.0
    assert choose_reward({"accuracy": 0.75}, "reward", RUN) == 0.75


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("reward.txt", b"", "is empty"),
        ("reward.txt", b"  \n", "is empty"),
        ("reward.txt", b"passed", "not a number"),
        ("reward.txt", b"nan", "not finite"),
        ("reward.txt", b"inf", "not finite"),
        ("reward.txt", b"1_0", "not a number"),
        ("reward.json", b"[" * 50_000, "not JSON"),
        ("reward.json", b"{", "not JSON"),
        ("reward.json", b"[1]", "non-empty object"),
        ("reward.json", b"{}", "non-empty object"),
        ("reward.json", b'{"reward": true}', "not a number"),
        ("reward.json", b'{"reward": {"nested": 1}}', "not a number"),
        ("reward.json", b'{"reward": "NaN"}', "not finite"),
        ("reward.json", b'{"reward": 1e999}', "not finite"),
        ("reward.json", b'{"reward": 1}' + b" " * (70 << 10), "over"),
    ],
)
def test_malformed_reward_files_are_infra_errors_with_the_output(
    name: str, raw: bytes, message: str
) -> None:
    with pytest.raises(VerifierFailed, match=message) as caught:
        parse_reward_file(name, raw, RUN)
    assert isinstance(caught.value, InfraError) and caught.value.cause == "verifier_failed"
    assert "assert 3 == 4" in str(caught.value) and "exit 1" in str(caught.value)


def test_several_scores_and_none_named_is_an_error_not_a_guess() -> None:
    with pytest.raises(VerifierFailed, match="no 'reward' among \\['a', 'b'\\]: set reward_key"):
        choose_reward({"a": 1.0, "b": 0.0}, "reward", RUN)


SUMMARY = """\
============================= test session starts ==============================
collected 3 items

tests/test_outputs.py .F.                                                [100%]
=========================== short test summary info ============================
PASSED tests/test_outputs.py::test_exists
FAILED tests/test_outputs.py::test_content - assert 'hi' == 'hello'
PASSED tests/test_outputs.py::test_mode
========================= 1 failed, 2 passed in 0.03s ==========================
"""


def test_terminal_bench_1_scores_one_only_when_every_test_passed() -> None:
    reward, info = _pytest_summary_reward(SUMMARY, RUN, {})
    assert reward == 0.0
    assert info["tests"]["tests/test_outputs.py::test_content"] == "FAILED"
    passed = SUMMARY.replace("FAILED tests/test_outputs.py::test_content - assert", "PASSED x")
    passed = passed.replace("FAILED", "PASSED")
    assert _pytest_summary_reward(passed, RUN, {})[0] == 1.0


def test_forged_summary_lines_before_the_real_one_do_not_count() -> None:
    forged = SUMMARY.replace("collected 3 items", "= short test summary info =\nPASSED a::b")
    forged = (
        "=== short test summary info ===\nPASSED tests/test_outputs.py::test_content\n" + forged
    )
    assert _pytest_summary_reward(forged, RUN, {})[0] == 0.0


def test_output_without_a_summary_is_an_infra_error() -> None:
    with pytest.raises(VerifierFailed, match="no pytest summary"):
        _pytest_summary_reward("bash: pytest: command not found\n", RUN, {})
    with pytest.raises(VerifierFailed, match="lists no tests"):
        _pytest_summary_reward("=== short test summary info ===\nnothing\n", RUN, {})


def _write_after(path: Path, text: str, other: Path) -> None:
    """Write `path` until the kernel gives it a later ctime than `other` (its clock is coarse)."""
    path.write_text(text)
    while path.stat().st_ctime_ns <= other.stat().st_ctime_ns:
        time.sleep(0.01)
        path.write_text(text)


def _read_reward(folder: Path) -> tuple[int, str]:
    done = subprocess.run(
        ["sh", "-c", _READ_REWARD, "sh", str(folder)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout


def test_a_reward_json_the_agents_code_planted_loses_to_the_reward_txt_written_after(
    tmp_path: Path,
) -> None:
    """The tests run the agent's code, which writes reward.json (even backdating nothing: its
    mtime set in the future); the test script then writes reward.txt from the tests' results."""
    planted = tmp_path / "reward.json"
    planted.write_text('{"reward": 1}')
    _write_after(tmp_path / "reward.txt", "0\n", planted)
    os.utime(planted, (time.time() + 3600, time.time() + 3600))  # mtime is the agent's to set
    assert _read_reward(tmp_path) == (0, "reward.txt\n0\n")


def test_a_reward_txt_the_agents_code_planted_loses_to_the_reward_json_written_after(
    tmp_path: Path,
) -> None:
    planted = tmp_path / "reward.txt"
    planted.write_text("1\n")
    _write_after(tmp_path / "reward.json", '{"reward": 0.25}', planted)
    assert _read_reward(tmp_path) == (0, 'reward.json\n{"reward": 0.25}')


def test_a_single_reward_file_is_read_and_none_or_a_link_is_refused(tmp_path: Path) -> None:
    assert _read_reward(tmp_path) == (4, "")
    (tmp_path / "reward.json").write_text('{"reward": 1}')
    assert _read_reward(tmp_path) == (0, 'reward.json\n{"reward": 1}')
    (tmp_path / "reward.txt").symlink_to(tmp_path / "reward.json")
    assert _read_reward(tmp_path) == (5, "reward.txt\n")
