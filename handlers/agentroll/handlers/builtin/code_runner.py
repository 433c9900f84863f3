"""Hidden-test runner for the `code` handler, run in a fresh grading sandbox at EVAL only.

    python3 code_runner.py FOLDER < SPEC.json        -> JSON lines on stdout

Standalone (standard library only; it runs under the sandbox's Python, which may not have
agentroll installed). The spec arrives on stdin, so no file the solution could read holds
the tests or their expected output: {"token": "...", "solution_file": "solution.py",
"timeout_s": 10, "tests": [...]}. FOLDER holds the solution; each test runs there in its own
process under its own time limit:

- An assert-style test (a string) is the program `from <solution module> import *`, the
  test, then a write of a fresh random nonce to a file descriptor of its own. The program
  reaches the interpreter through a pipe on stdin (not in its command line, environment or a
  file: once read, it cannot be read back), and the test
  passes only if the process exits 0 *and* wrote the nonce: a solution that exits early
  (`os._exit(0)`, `sys.exit(0)`, `raise SystemExit(0)`, an atexit hook that exits 0) never
  gets there. Code written to search its own interpreter (the calling frame holds the nonce)
  can still forge a pass; I/O tests, compared across a process boundary, are the stronger form.
- An I/O test ({"stdin": ..., "stdout": ...}) runs the solution as a program and compares
  what it prints (trailing whitespace ignored).

The runner makes itself non-dumpable (a test cannot open its file descriptors or read its
memory through /proc) and a child subreaper: processes a test leaves behind, even
daemonised ones, become its children, and it kills them all before the next test. It reads
at most MAX_OUTPUT bytes of a test's output.

Output lines: `{"started": token}` before any solution code runs, then
`{"token": token, "results": [{"passed": bool, "detail": str}, ...]}`, or
`{"token": token, "error": "..."}` if the first test process cannot start (the runner cannot
work here). Only the runner knows the token, so nothing a test writes can pass for either.
"""

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

MAX_DETAIL = 300
MAX_OUTPUT = 1 << 20
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
SWEEP_ROUNDS = 200


def _tail(text: str) -> str:
    return text.strip()[-MAX_DETAIL:]


def _normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _prctl(option: int, value: int) -> None:
    # Not Linux: run without (a test can then reach the runner, and the sweep sees less).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _live_children() -> dict[int, list[int]]:
    """Live processes by parent pid, from /proc (zombies are dead already: not listed)."""
    tree: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return tree
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # it has just exited
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        state, ppid = stat[stat.rindex(b")") + 2 :].split()[:2]
        if state not in (b"Z", b"X"):
            tree.setdefault(int(ppid), []).append(int(entry))
    return tree


def _descendants() -> list[int]:
    tree, found, todo = _live_children(), [], [os.getpid()]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep() -> None:
    """Kill every process below the runner, round after round while forks race the kills.

    Called only once the test's own process has been waited for, so reaping here never
    takes an exit status that `subprocess` still needs."""
    for _ in range(SWEEP_ROUNDS):
        left = _descendants()
        if not left:
            break
        for pid in left:
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
        _reap()
    _reap()


def _read(fh: IO[bytes]) -> tuple[str, bool]:
    """What a test wrote to `fh` (at most MAX_OUTPUT bytes), and whether it wrote more."""
    fh.seek(0)
    data = fh.read(MAX_OUTPUT + 1)
    return data[:MAX_OUTPUT].decode(errors="replace"), len(data) > MAX_OUTPUT


def _program(module: str, test: str, fd: int, nonce: str) -> str:
    return (
        f"import os as _agentroll_os\nfrom {module} import *\n{test}\n"
        f"_agentroll_os.write({fd}, b'{nonce}')\n"
    )


def run_test(test: Any, solution_file: str, timeout_s: float) -> dict[str, Any]:
    nonce = secrets.token_hex(16)
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryFile() as finished,
    ):
        if isinstance(test, str):
            module = os.path.splitext(os.path.basename(solution_file))[0]
            argv = [sys.executable, "-"]  # the program comes on stdin
            data = _program(module, test, finished.fileno(), nonce).encode()
        else:
            argv = [sys.executable, solution_file]
            data = str(test.get("stdin", "")).encode()
        # An OSError up to here is the runner's own (main decides whose fault it is).
        # stdin is a pipe, not a file: once Python has read the program, nothing of it (the
        # nonce) can be read back from it.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            pass_fds=(finished.fileno(),),
            start_new_session=True,
        )
        try:
            proc.communicate(data, timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        sweep()
        printed, flooded = _read(out)
        errors, _ = _read(err)
        finished.seek(0)
        completed = finished.read(len(nonce) + 1) == nonce.encode()
    if code is None:
        return {"passed": False, "detail": f"timed out after {timeout_s:g} s"}
    if code != 0:
        return {"passed": False, "detail": f"exit code {code}: {_tail(errors)}"}
    if isinstance(test, str):
        if completed:
            return {"passed": True, "detail": ""}
        return {"passed": False, "detail": f"exited 0 before the test finished: {_tail(errors)}"}
    if flooded:
        return {"passed": False, "detail": f"printed more than {MAX_OUTPUT} bytes"}
    passed = _normalised(printed) == _normalised(str(test.get("stdout", "")))
    return {"passed": passed, "detail": "" if passed else f"printed {_tail(printed)!r}"}


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    spec = json.load(sys.stdin)
    token = spec["token"]
    os.chdir(argv[1])
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _emit({"started": token})
    results: list[dict[str, Any]] = []
    for test in spec["tests"]:
        try:
            results.append(run_test(test, spec["solution_file"], float(spec["timeout_s"])))
        except OSError as exc:
            if not results:  # before any solution code ran: the runner cannot work here
                _emit({"token": token, "error": f"cannot run a test: {exc}"})
                return 1
            # After a test: what it left (a full /tmp, too many processes) may be why.
            results.append({"passed": False, "detail": f"cannot run the test: {exc}"})
    _emit({"token": token, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
