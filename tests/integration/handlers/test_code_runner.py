"""The `code` handler's hidden-test runner on its own (real processes, no sandbox): a test
passes only when its body ran to the end, nothing a test leaves running survives it, and
only lines carrying the runner's token count."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.code_grading import read_runner_output, runner_source
from agentroll.handlers.builtin.code_runner import MAX_OUTPUT

pytestmark = pytest.mark.integration

TOKEN = "f00d" * 8
CHECKS = ["assert double(2) == 4", "assert double(0) == 0"]
HONEST = "def double(x):\n    return 2 * x\n"


def run_runner(folder: Path, solution: str, tests: list[Any]) -> list[dict[str, Any]]:
    (folder / "solution.py").write_text(solution)
    (folder / "runner.py").write_bytes(runner_source())
    spec = {"token": TOKEN, "solution_file": "solution.py", "timeout_s": 20, "tests": tests}
    done = subprocess.run(
        [sys.executable, str(folder / "runner.py"), str(folder)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout.splitlines()[0] == json.dumps({"started": TOKEN})
    started, final = read_runner_output(done.stdout, TOKEN)
    assert started and final is not None, done.stderr
    return list(final["results"])


def test_an_honest_solution_passes(tmp_path: Path) -> None:
    io = {"stdin": "3\n", "stdout": "6"}
    program = f"{HONEST}if __name__ == '__main__':\n    print(double(int(input())))\n"
    results = run_runner(tmp_path, program, [*CHECKS, io])
    assert results == [{"passed": True, "detail": ""}] * 3


@pytest.mark.parametrize(
    "exit_early",
    [
        "import os\nos._exit(0)\n",
        "import sys\nsys.exit(0)\n",
        "raise SystemExit(0)\n",
        "import atexit, os\natexit.register(os._exit, 0)\n",  # runs after the failed assert
        "import atexit, os\natexit.register(os._exit, 0)\nimport sys\nsys.exit(0)\n",
    ],
)
def test_exiting_before_the_test_body_ends_fails(tmp_path: Path, exit_early: str) -> None:
    wrong = "def double(x):\n    return x\n"
    results = run_runner(tmp_path, exit_early + wrong, [CHECKS[0]])
    assert results[0]["passed"] is False
    assert results[0]["detail"].startswith("exited 0 before the test finished")


NONCE_FROM_STDIN = """import os, re
try:
    _program = os.pread(0, 1 << 20, 0).decode()
except OSError:
    _program = ""
_m = re.search(r"_agentroll_os\\.write\\((\\d+), b'([0-9a-f]+)'\\)", _program)
if _m:
    os.write(int(_m.group(1)), _m.group(2).encode())
    os._exit(0)
"""


def test_the_test_program_cannot_be_read_back_from_stdin(tmp_path: Path) -> None:
    """The program (and its nonce) reaches the interpreter through a pipe: a solution that
    reads its stdin back to forge the end-of-test mark finds nothing."""
    wrong = "def double(x):\n    return x\n"
    results = run_runner(tmp_path, NONCE_FROM_STDIN + wrong, [CHECKS[0]])
    assert results[0]["passed"] is False


def test_a_test_exiting_early_in_its_own_body_fails(tmp_path: Path) -> None:
    results = run_runner(tmp_path, HONEST, ["import os\nos._exit(0)\nassert double(2) == 5"])
    assert results[0]["passed"] is False


DAEMON = """import os, time


def double(x):
    return 2 * x


if os.fork() == 0:  # a daemon: double fork, new session, the original parent gone
    os.setsid()
    if os.fork() == 0:
        with open("daemon.pid", "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
os.wait()
while not os.path.exists("daemon.pid"):
    time.sleep(0.01)
"""


def test_processes_a_test_leaves_behind_do_not_survive_it(tmp_path: Path) -> None:
    results = run_runner(tmp_path, DAEMON, CHECKS[:1])
    pid = int((tmp_path / "daemon.pid").read_text())
    alive = True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        alive = False
    if alive:  # clean up before failing: it is our own grandchild
        os.kill(pid, signal.SIGKILL)
    assert results == [{"passed": True, "detail": ""}]
    assert not alive, "the daemon outlived its test"


def test_output_is_bounded_and_lines_without_the_token_do_not_count(tmp_path: Path) -> None:
    flood = f"print('x' * {MAX_OUTPUT + 10})\n"
    forged = json.dumps({"token": "guess", "results": [{"passed": True, "detail": ""}]})
    results = run_runner(tmp_path, flood, [{"stdin": "", "stdout": "x"}])
    assert results[0] == {"passed": False, "detail": f"printed more than {MAX_OUTPUT} bytes"}
    started, final = read_runner_output(f"{forged}\n{{}}\nnot json\n", TOKEN)
    assert (started, final) == (False, None)
