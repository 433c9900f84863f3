"""The verifier, run honestly in the agent's sandbox once the agent is gone.

Harbor runs `tests/test.sh` in the agent's own container with the agent's processes still
alive. Here, in order (the pipeline has already killed every process the agent started):

1. `/tests` and `/logs` (private tmpfs directories of the sandbox, see `SCRATCH`) are
   emptied, whatever the agent left there (stale reward files, a planted `conftest.py`,
   symlinks, unreadable folders), and `/logs/verifier` is made anew: a folder no agent
   process ever saw. Only the agent ever wrote there, so if they cannot be emptied, that is
   its doing: reward 0 (`verifier_dirs_unusable`).
2. Only then are the task's tests copied to `/tests`.
3. The test script runs under the sandbox's limits, its output to
   `/logs/verifier/test-stdout.txt`, bounded by `[verifier].timeout_sec`, with a fresh
   `HOME` (`/logs/home`), Python's user site off and `PYTHONSAFEPATH=1` (the agent's working
   directory is the sandbox's `HOME` during RUN, and the tests often run from it: a
   `~/.local/.../x.pth`, a `~/.bashrc` or a module named like a stdlib one planted there must
   not run inside the verifier).
4. The moment the test script exits, every process the tests started is frozen
   (`containment.py`), then killed before anything is read, so nothing they started (the
   agent's code, say) can write the reward or the output afterwards. A process still alive at
   that moment, one that outlived its parent and exited before it (the sandbox's count of
   orphans grew while the test script ran), or a wrapper the tests killed, marks the run
   `disrupted`.
5. The reward file is read as Harbor parses it: `reward.txt` (one number) or `reward.json`
   (a flat object of numbers). Where both exist, the one written last counts (by ctime, which
   no process can set): a file the agent's code planted while the tests ran is older than the
   one the test script writes once they finished, whichever name it took. Terminal-Bench 1
   tasks are graded from pytest's printed summary instead.

Outcomes: a reward file that is missing, empty or malformed raises `VerifierFailed` with the
end of the test output; the handler blames it, and a disrupted run, with a control (the
reference solution's run). A verifier that outruns its time limit scores 0
(`verifier_timeout`): the agent's code under test is what usually hangs, and a policy must not
learn that hanging the tests avoids a low reward.

What this cannot fix: code the tests execute (the agent's program) runs with the verifier's
rights while the tests run, as in Harbor; a test script should write its reward from what the
tests reported, after they finished. What a task's own `[verifier].env` or test script sets
wins over the variables above (a test script that unsets `PYTHONSAFEPATH`, or runs
`python -c` with the working directory on its path, chooses to import what the agent wrote).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import re
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentroll.handlers.builtin.harbor.containment import contained, read_report
from agentroll.handlers.builtin.harbor.task import HarborTask
from agentroll.handlers.context import Reward
from agentroll.handlers.errors import InfraError, VerifierFailed
from agentroll.runtime import Sandbox
from agentroll.runtime.cpulimit import grading_wall_s

TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
VERIFIER_DIR = "/logs/verifier"
SCRATCH = (TESTS_DIR, LOGS_DIR)
OUTPUT_FILE = f"{VERIFIER_DIR}/test-stdout.txt"
REWARD_FILES = ("reward.txt", "reward.json")  # Harbor's order
OUTPUT_SHOWN_BYTES = 8 << 10
SUMMARY_READ_BYTES = 256 << 10
MAX_REWARD_BYTES = 64 << 10
SETUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
RUN_RESERVE_S = STOP_TIMEOUT_S + 2 * SETUP_TIMEOUT_S
"""What the verifier does after its test script (stop, read the output and the reward): its
wall-clock backstop ends this much before the grading stage does."""

VERIFIER_HOME = f"{LOGS_DIR}/home"
VERIFIER_ENV = {
    "TEST_DIR": TESTS_DIR,
    "HOME": VERIFIER_HOME,
    "PYTHONNOUSERSITE": "1",
    # `python -m pytest` run from the agent's working directory would put it first on
    # sys.path: a module planted there (named like a stdlib or pytest-dependency module)
    # would run inside the verifier.
    "PYTHONSAFEPATH": "1",
}
_RESET = f"""
for d in {TESTS_DIR} {LOGS_DIR}; do
  chmod -R u+rwX "$d" 2>/dev/null
  find "$d" -mindepth 1 -delete || exit 1
done
mkdir {VERIFIER_DIR} {LOGS_DIR}/agent {VERIFIER_HOME}
"""
# Prints the name of the reward file the verifier wrote last, then at most MAX_REWARD_BYTES + 1
# of its bytes. Last by ctime, which only the kernel sets (a process can backdate a file's
# mtime, never its ctime): a reward.json the agent's code planted while the tests ran is older
# than the reward.txt the test script writes once they finished, and the other way round. A
# tie, or no `stat`, keeps Harbor's order: reward.txt, then reward.json.
_READ_REWARD = f"""
cd "$1" || exit 3
pick= latest=
for f in {" ".join(REWARD_FILES)}; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  if [ -L "$f" ] || [ ! -f "$f" ]; then echo "$f"; exit 5; fi
  changed=$(stat -c %z -- "$f" 2>/dev/null)
  later=$(printf '%s\\n' "$changed" "$latest" | LC_ALL=C sort | tail -n 1)
  if [ -z "$pick" ]; then
    pick=$f latest=$changed
  elif [ "$changed" != "$latest" ] && [ "$later" = "$changed" ]; then
    pick=$f latest=$changed
  fi
done
[ -n "$pick" ] || exit 4
echo "$pick"
exec head -c {MAX_REWARD_BYTES + 1} "$pick"
"""
# What Harbor's `float(text)` accepts, less Python's digit underscores ("1_0" is not 10).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", re.I)
_SUMMARY = re.compile(r"^=+ short test summary info =+$", re.MULTILINE)
_RESULT = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class VerifierRun:
    exit_code: int | None
    """The test script's exit status."""
    timed_out: bool
    seconds: float
    output_tail: str
    disrupted: str | None = None
    """Why the run cannot be trusted: the tests left processes alive, or killed the wrapper
    (`containment.py`); None when it can."""
    frozen: bool = False
    """Whether the tests' processes were frozen the moment the test script exited."""
    orphans: int | None = None
    """Processes the tests started that outlived their parent (None: not counted here)."""

    def info(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "seconds": round(self.seconds, 3),
            "output_tail": self.output_tail,
            "disrupted": self.disrupted,
            "frozen": self.frozen,
            "orphans": self.orphans,
        }


async def verify(
    sandbox: Sandbox, task: HarborTask, *, time_limit: Callable[[], float], reward_key: str
) -> Reward:
    reset = await sandbox.exec(["sh", "-c", _RESET], timeout=SETUP_TIMEOUT_S)
    if reset.exit_code != 0:
        detail = (reset.stderr or reset.stdout)[-2000:]
        return Reward(0.0, {"format": task.format, "reason": "verifier_dirs_unusable",
                            "detail": detail})  # fmt: skip
    await install_tests(sandbox, task)
    tb1 = task.format == "terminal-bench-1"  # graded from the output: read more of it
    run, output = await _run_tests(
        sandbox, task, time_limit(), SUMMARY_READ_BYTES if tb1 else OUTPUT_SHOWN_BYTES
    )
    info: dict[str, Any] = {"format": task.format, "verifier": run.info()}
    if run.timed_out:
        return Reward(0.0, info | {"reason": "verifier_timeout"})
    if tb1:
        return Reward(*_pytest_summary_reward(output, run, info))
    name, raw = await _reward_file(sandbox, run)
    scores = parse_reward_file(name, raw, run)
    return Reward(choose_reward(scores, reward_key, run), info | {"source": name, "scores": scores})


async def install_tests(sandbox: Sandbox, task: HarborTask) -> None:
    """Copy the task's tests (and its test script) into /tests, modes kept, as one tar."""
    await install_files(sandbox, task, tests_archive, TESTS_DIR)


async def install_files(
    sandbox: Sandbox, task: HarborTask, archive_of: Callable[[HarborTask], bytes], dest: str
) -> None:
    """Unpack `archive_of(task)` into the (existing) folder `dest` of the sandbox."""
    try:
        archive = await asyncio.to_thread(archive_of, task)
    except OSError as exc:
        raise InfraError(f"could not read the task's files: {exc}", cause="verifier_setup") from exc
    result = await sandbox.exec(
        ["tar", "-x", "--no-same-owner", "-C", dest], timeout=SETUP_TIMEOUT_S, input=archive
    )
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout)[-2000:]
        raise InfraError(f"could not copy the task's files in: {detail}", cause="verifier_setup")


def tests_archive(task: HarborTask) -> bytes:
    """The tests folder and the test script as a tar (files inside the task folder only)."""
    files = folder_files(task.root, task.tests)
    files[task.test_script.name] = task.test_script
    return tar_of(files)


def folder_files(root: Path, folder: Path | None) -> dict[str, Path]:
    """The files of `folder` by their path in it, those that resolve inside `root` only."""
    inside = root.resolve()
    files: dict[str, Path] = {}
    if folder is not None:
        for path in sorted(folder.rglob("*")):
            real = path.resolve()
            if real.is_file() and real.is_relative_to(inside):
                files[path.relative_to(folder).as_posix()] = real
    return files


def tar_of(files: dict[str, Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in files.items():
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


async def _run_tests(
    sandbox: Sandbox, task: HarborTask, timeout_s: float, read_bytes: int
) -> tuple[VerifierRun, str]:
    """The run, and the last `read_bytes` of its output."""
    env = {**VERIFIER_ENV, **task.verifier_env}
    script = f"{TESTS_DIR}/{task.test_script.name}"
    command = f"env {shlex.join(f'{k}={v}' for k, v in env.items())} bash {script}"
    wrapper = contained(f"{command} >{OUTPUT_FILE} 2>&1 </dev/null")
    # Read after the agent's processes were stopped and reaped (before EVAL, or the reference
    # solution's in a control): only what the tests start can grow the count.
    orphans_before = await sandbox.orphans_reaped()
    result = await sandbox.exec(
        ["bash", "-c", wrapper],
        timeout=grading_wall_s(timeout_s, reserve_s=RUN_RESERVE_S),
        cpu_limit_s=timeout_s,
    )
    # After the freeze, before the kill (whose victims are orphans too).
    orphans = None
    if orphans_before is not None:
        orphans_after = await sandbox.orphans_reaped()
        orphans = None if orphans_after is None else orphans_after - orphans_before
    # Frozen by the wrapper; now killed before anything is read: nothing the tests started
    # may write the reward or the output.
    await sandbox.stop_agent(timeout=STOP_TIMEOUT_S)
    tail = await sandbox.exec(["tail", "-c", str(read_bytes), OUTPUT_FILE], timeout=SETUP_TIMEOUT_S)
    shown = tail.stdout[-OUTPUT_SHOWN_BYTES:]
    report = read_report(result.stdout, result.exit_code, orphans or 0)
    run = VerifierRun(
        report.status,
        result.timed_out,
        result.duration_s,
        shown,
        None if result.timed_out else report.disrupted,
        report.frozen,
        orphans,
    )
    return run, tail.stdout


async def _reward_file(sandbox: Sandbox, run: VerifierRun) -> tuple[str, bytes]:
    found = await sandbox.exec(
        ["sh", "-c", _READ_REWARD, "sh", VERIFIER_DIR], timeout=SETUP_TIMEOUT_S
    )
    name, _, content = found.stdout.partition("\n")
    if found.exit_code == 5:
        raise _failed(f"{name} is not a regular file (a link or a folder)", run)
    if found.exit_code != 0 or name not in REWARD_FILES:
        raise _failed(f"the verifier wrote no {' or '.join(REWARD_FILES)}", run)
    return name, content.encode()


def parse_reward_file(name: str, raw: bytes, run: VerifierRun) -> dict[str, float]:
    """Harbor's rewards: reward.json is a flat object of numbers; reward.txt one number."""
    if len(raw) > MAX_REWARD_BYTES:
        raise _failed(f"{name} is {len(raw)} bytes, over {MAX_REWARD_BYTES}", run)
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        raise _failed(f"{name} is empty", run)
    if name == "reward.txt":
        return {"reward": _finite(text, name, run)}
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _failed(f"reward.json is not JSON: {exc}", run) from exc
    if not isinstance(data, dict) or not data:
        raise _failed("reward.json must be a non-empty object of numbers", run)
    return {str(k): _finite(v, f"reward.json[{k!r}]", run) for k, v in data.items()}


def choose_reward(scores: dict[str, float], key: str, run: VerifierRun) -> float:
    """The score named `key`, or the only one; several and none named `key` is an error."""
    if key in scores:
        return scores[key]
    if len(scores) == 1:
        return next(iter(scores.values()))
    raise _failed(f"reward.json has no {key!r} among {sorted(scores)}: set reward_key", run)


def _finite(value: object, what: str, run: VerifierRun) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _failed(f"{what} is not a number: {str(value)[:100]!r}", run)
    if isinstance(value, str) and not _NUMBER.fullmatch(value.strip()):
        raise _failed(f"{what} is not a number: {value[:100]!r}", run)
    try:
        number = float(value)
    except ValueError:
        raise _failed(f"{what} is not a number: {str(value)[:100]!r}", run) from None
    if not math.isfinite(number):
        raise _failed(f"{what} is not finite: {number}", run)
    return number


def _pytest_summary_reward(
    output: str, run: VerifierRun, info: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """Terminal-Bench 1: 1 when every test in pytest's `-rA` summary passed, else 0."""
    marks = list(_SUMMARY.finditer(output))
    if not marks:
        raise _failed("no pytest summary (`-rA`) in the test output", run)
    results = dict((t, s) for s, t in _RESULT.findall(output[marks[-1].end() :]))
    if not results:
        raise _failed("pytest's summary lists no tests", run)
    failed = sorted(t for t, s in results.items() if s not in ("PASSED", "XFAIL", "SKIPPED"))
    return float(not failed), info | {"source": "pytest summary", "tests": results}


def _failed(message: str, run: VerifierRun) -> VerifierFailed:
    return VerifierFailed(
        f"{message} (verifier exit {run.exit_code}); test output ends:\n{run.output_tail}", run
    )
