"""Attacks on the `code` runner from processes that outlive their test, and from exceptions
that builtins read as control flow; each with an honest control that still passes.

Real runs of the runner (no sandbox), as in `test_code_runner`; as root, they run as an
unprivileged user, as in a sandbox: root may open any process's files through /proc, the
sandbox's user (the solution's too) may not open a grader process's."""

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.code.code_grading import (
    read_runner_output,
    runner_argv,
    runner_spec,
)

pytestmark = pytest.mark.integration

TOKEN = "5eed" * 8
NOBODY = 65534
# Rewrites the verdict of every grader process of the runner it sees start (its stdout, a
# regular file: a judge's verdict) as a pass, while `keep_going()`; with `chain`, as a fork
# chain: each generation forks the next and exits, so a sweep that lists processes, then
# kills them, keeps finding one that has already gone.
FORGER = """import os, stat

FORGED = b'{"passed": true, "detail": ""}\\n'


def rewrite_once_written(fd):
    for _ in range(3_000_000):  # a judge writes its verdict once, at its very end
        if os.fstat(fd).st_size:
            os.ftruncate(fd, 0)
            os.pwrite(fd, FORGED, 0)
            return


def forge_verdicts(keep_going, chain):
    seen = set(os.listdir("/proc"))
    while keep_going():
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or entry in seen:
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
                if b"Hidden-test runner" not in cmdline or b"--callee" in cmdline[-40:]:
                    seen.add(entry)
                    continue
                fd = os.open(f"/proc/{entry}/fd/1", os.O_RDWR)  # refused: try it again
                seen.add(entry)
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    rewrite_once_written(fd)
                os.close(fd)
            except OSError:
                pass
        if chain and os.fork() != 0:
            os._exit(0)
"""
# The first test starts the chain; it lives while the runner does (the judge's parent).
CHAIN = """{function}


def _parent_of(pid):
    with open(f"/proc/{{pid}}/stat", "rb") as fh:
        return int(fh.read().rsplit(b")", 1)[1].split()[1])


if not os.path.exists("chain.started"):
    open("chain.started", "w").close()
    runner = _parent_of(_parent_of(os.getpid()))
    if os.fork() == 0:
        os.setsid()
        forge_verdicts(lambda: os.path.exists(f"/proc/{{runner}}"), chain=True)
        os._exit(0)
"""
WRONG = "def double(x):\n    return x\n"
RIGHT = "def double(x):\n    return 2 * x\n"
CHECKS = [f"assert double({n}) == {2 * n}" for n in range(1, 7)]


@pytest.fixture
def folder() -> Iterator[Path]:
    """The solution's folder, writable by the user the runner runs as."""
    path = Path(tempfile.mkdtemp(prefix="agentroll-leftovers-"))
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path)


def unprivileged() -> dict[str, Any]:
    """How to start a process as the sandbox would: not root (no capability)."""
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def python() -> str:
    return "/usr/bin/python3" if os.geteuid() == 0 else sys.executable  # one `nobody` can run


def run_runner(folder: Path, solution: str, tests: list[Any]) -> list[dict[str, Any]]:
    (folder / "solution.py").write_text(solution)
    os.chmod(folder / "solution.py", 0o644)
    done = subprocess.run(
        runner_argv(python(), str(folder)),
        input=runner_spec(TOKEN, "solution.py", tests, 20),
        capture_output=True,
        timeout=300,
        check=False,
        **unprivileged(),
    )
    started, final = read_runner_output(done.stdout.decode(), TOKEN)
    assert started and final is not None, done.stderr
    return list(final["results"])


@pytest.mark.parametrize("function", [WRONG, RIGHT])
def test_a_process_that_outlives_its_test_cannot_forge_a_later_verdict(
    folder: Path, function: str
) -> None:
    """The chain races the sweep (it may or may not live on); it never forges a verdict.
    Control: the honest solution leaving the same chain behind passes every test."""
    results = run_runner(folder, FORGER + CHAIN.format(function=function), CHECKS)
    assert (folder / "chain.started").exists()
    if function == RIGHT:
        assert results == [{"passed": True, "detail": ""}] * len(CHECKS)
    else:
        assert [r["passed"] for r in results] == [False] * len(CHECKS), results


@pytest.mark.parametrize("function", [WRONG, RIGHT])
def test_a_process_watching_every_judge_start_cannot_forge_a_verdict(
    folder: Path, function: str
) -> None:
    """What a process that did outlive its test would do, run for certain: a watcher of the
    sandbox's user outside the runner's tree. Control: the honest solution passes."""
    watching = "print('watching', flush=True)\nforge_verdicts(lambda: True, chain=False)\n"
    watcher = subprocess.Popen(
        [python(), "-c", FORGER + watching], stdout=subprocess.PIPE, **unprivileged()
    )
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == b"watching\n"
        results = run_runner(folder, function, CHECKS)
    finally:
        watcher.kill()
        watcher.wait()
    if function == RIGHT:
        assert results == [{"passed": True, "detail": ""}] * len(CHECKS)
    else:
        assert [r["passed"] for r in results] == [False] * len(CHECKS), results
        assert all(r["detail"].startswith("AssertionError: assert double(") for r in results)


# Builtins that iterate (map, filter, zip...) read a StopIteration from the function they
# call as the end of the data: a result that never came would make `all(...)` true.
ITERATING_CHECKS = [
    "assert all(map(lambda x: double(x) == 2 * x, [1, 2, 3]))",
    "assert not any(map(lambda x: double(x) != 2 * x, [1, 2]))",
]


@pytest.mark.parametrize("raised", ["StopIteration", "StopAsyncIteration"])
def test_a_function_that_raises_stopiteration_does_not_end_the_tests_iteration(
    folder: Path, raised: str
) -> None:
    solution = f"class Done({raised}):\n    pass\n\n\ndef double(x):\n    raise Done('no more')\n"
    results = run_runner(folder, solution, ITERATING_CHECKS)
    detail = f"RuntimeError: double() raised {raised}: no more"
    assert results == [{"passed": False, "detail": detail}] * len(ITERATING_CHECKS)


def test_iterating_over_an_honest_functions_results_passes(folder: Path) -> None:
    results = run_runner(folder, RIGHT, ITERATING_CHECKS)
    assert results == [{"passed": True, "detail": ""}] * len(ITERATING_CHECKS)
