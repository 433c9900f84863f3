"""Hidden-test runner for the `code` handler, run in a fresh grading sandbox at EVAL only.

    python3 -I -c SOURCE FOLDER < SPEC.json        -> JSON lines on stdout

Standalone (standard library only; it runs under the sandbox's Python, which may not have
agentroll installed), and one module over 500 lines for that reason: its source is the
program sent to the sandbox, so it cannot import a second file of ours. It is started from
its source on the command line, in isolated mode (`-I`: no script folder, working directory,
user site or PYTHON* variable on its import path), so no file in the sandbox is the runner
and nothing in the solution's folder can be imported by it. The spec arrives on stdin, so no
file the solution could read holds the tests or their expected output: {"token": "...",
"source": SOURCE, "solution_file": "solution.py", "timeout_s": 10, "tests": [...]}. FOLDER
holds the solution; each test runs in processes of its own under its own time limit.

Why plain data, compared by the grader (and not asserts rewritten to compare safely): a
check that runs in the solution's interpreter can be undone by it (it can patch `type`,
`isinstance` or the checker itself), and any method of the solution's objects (`__eq__`,
`__bool__`, `__len__`, `__iter__`, `__hash__`...) can lie. So an assert-style test (a
string) is run by a *judge*, a grader process forked from the runner: the test's code runs
there, with every public name of the solution bound to a stand-in; calling one
sends the arguments to the solution's own process (the *callee*, which imports the
solution), and the result comes back as a line of plain data (`encode`: `None`, `bool`,
`int`, `float`, `str`, `bytes`, `complex`, and `list`, `tuple`, `dict`, `set`, `frozenset`
of those, checked by exact type). The judge builds fresh objects of its own from that line,
so every comparison, `len()`, `bool()` and iteration in the test runs on the grader's
builtins: no object, module or exit of the solution takes part in the verdict. A result
that is not plain data fails the test and says so. The expected values never enter the
solution's process at all. A test sees only what a function returns (arguments are copies);
a solution's name never replaces a builtin in the test. A function that raises
StopIteration raises RuntimeError in the test (as in a generator, PEP 479): `map()`,
`filter()` or `zip()` would take it for the end of their data, and `all()` of nothing is true.

An I/O test ({"stdin": ..., "stdout": ...}) runs the solution as a program and compares what
it prints (trailing whitespace ignored).

The runner makes itself non-dumpable before any solution code runs, and each judge is a
fork of it, never exec'd, so non-dumpable from its first instruction: no process of the
solution can open their file descriptors (a judge's verdict file) or read their memory
through /proc, at any moment. The runner is a child subreaper: processes a test leaves
behind, even daemonised ones, become its children, and it kills them before the next test,
round after round; a fork chain that keeps one step ahead of the kills may still live on,
and can then reach nothing a later test's solution process could not. It reads at most
MAX_OUTPUT bytes of a test's output or of one reply.

Output lines: `{"started": token}` before any solution code runs, then
`{"token": token, "results": [{"passed": bool, "detail": str}, ...]}`, or
`{"token": token, "error": "..."}` if the first test process cannot start (the runner cannot
work here). Only the runner knows the token, so nothing a test writes can pass for either.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import IO, Any, NoReturn

MAX_DETAIL = 300
MAX_OUTPUT = 1 << 20
MAX_DEPTH = 100
EXIT_GRACE_S = 5.0
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
SWEEP_ROUNDS = 200
WAIT_POLL_S = 0.01


def _tail(text: str) -> str:
    return text.strip()[-MAX_DETAIL:]


def _normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _any_int_as_text() -> None:
    """Plain ints of any size cross as JSON (Python 3.11 refuses over 4300 digits); a huge
    one only slows the test that gets it, under its time limit."""
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)


def _prctl(option: int, value: int) -> None:
    # Not Linux: run without (a test can then reach the runner, and the sweep sees less).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


# -- plain data ---------------------------------------------------------------------------------
class NotPlain(Exception):
    """A value that is not plain data (or a line that does not encode any)."""


class Remote:
    """A function of the solution, as the judge's test sees it: calling it asks the callee."""

    def __init__(self, name: str, call: Callable[[str, tuple, dict], Any]) -> None:
        self.name, self._call = name, call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self.name, args, kwargs)


_SCALARS = (type(None), bool, int, float, str)
_TAGGED: dict[type, str] = {tuple: "tuple", set: "set", frozenset: "frozenset"}


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as JSON, by exact type only: a subclass of a builtin is not plain data."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested more than {MAX_DEPTH} deep")
    if kind in _SCALARS:
        return value
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind in _TAGGED:
        return {_TAGGED[kind]: [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    if kind is Remote:
        return {"ref": value.name}
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__}")


def _decoder(resolve: Callable[[str], Any] | None) -> Callable[[list[tuple[str, Any]]], Any]:
    def tagged(pairs: list[tuple[str, Any]]) -> Any:
        if len(pairs) != 1:
            raise NotPlain("an untagged object")
        ((tag, inner),) = pairs
        if tag == "bytes" and type(inner) is str:
            return bytes.fromhex(inner)
        if tag == "ref" and resolve is not None and type(inner) is str:
            return resolve(inner)
        if type(inner) is not list:
            raise NotPlain(f"a {tag!r} without a list")
        if tag == "tuple":
            return tuple(inner)
        if tag in ("set", "frozenset"):
            return (set if tag == "set" else frozenset)(inner)  # unhashable: TypeError
        if tag == "dict" and all(type(p) is list and len(p) == 2 for p in inner):
            return dict(inner)
        if tag == "complex" and len(inner) == 2 and all(type(p) in (int, float) for p in inner):
            return complex(*inner)
        raise NotPlain(f"an unknown or malformed {tag!r}")

    return tagged


def decode(line: bytes, resolve: Callable[[str], Any] | None = None) -> Any:
    """A line of `encode`d JSON as fresh builtin objects (JSON yields nothing else)."""
    try:
        return json.loads(line, object_pairs_hook=_decoder(resolve))
    except (ValueError, TypeError, RecursionError) as exc:
        raise NotPlain(f"not plain data ({type(exc).__name__}: {exc})"[:MAX_DETAIL]) from None


def _send(channel: IO[bytes], message: Any) -> None:
    channel.write(json.dumps(message).encode() + b"\n")
    channel.flush()


# -- the callee: the solution's own process ----------------------------------------------------
def _exported(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)):
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if isinstance(n, str) and hasattr(module, n)]


def _builtin_base(exc: BaseException) -> str:
    """The nearest builtin class of `exc`, which the judge can raise in its place."""
    return next(c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, 0) is c)


def _answer(module: Any, request: Any) -> list[Any]:
    _, name, args, kwargs = request
    try:
        value = getattr(module, name)(*args, **dict(kwargs))
    except Exception as exc:  # a raise is an answer; an exit ends the process (no answer)
        return ["raised", _builtin_base(exc), str(exc)[:MAX_DETAIL]]
    try:
        return ["value", encode(value)]
    except (NotPlain, RecursionError) as exc:
        return ["not_plain", f"{name}() returned {exc}, not plain data"]


def callee(solution_file: str) -> None:
    """Import the solution and answer the judge's calls (see the judge). Nothing here is
    trusted: the solution can change any of it, and can only lie about its own results."""
    replies = os.fdopen(os.dup(1), "wb")  # taken before the solution exists
    os.dup2(2, 1)  # what the solution prints goes to stderr, never among the replies
    _any_int_as_text()
    sys.path[:0] = [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
    name = os.path.splitext(solution_file)[0]
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(solution_file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        _send(replies, ["raised", _builtin_base(exc), f"importing the solution: {exc}"])
        return
    manifest = []
    for export in _exported(module):
        value = getattr(module, export)
        with contextlib.suppress(NotPlain, RecursionError):  # not plain: not offered
            entry = [export, "call"] if callable(value) else [export, "value", encode(value)]
            manifest.append(entry)
    _send(replies, ["names", manifest])
    for line in sys.stdin.buffer:
        _send(replies, _answer(module, decode(line, lambda ref: getattr(module, ref))))


# -- the judge: runs an assert-style test on plain data, in a grader process -------------------
class Ungraded(BaseException):
    """The solution gave no plain answer (a BaseException: a test's `except` cannot hide it)."""


class Judge:
    def __init__(self, source: str, solution_file: str) -> None:
        argv = [sys.executable, "-I", "-c", source, "--callee", solution_file]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.failure = ""

    def receive(self, what: str) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline(MAX_OUTPUT + 1)
        if not line.endswith(b"\n"):
            if len(line) > MAX_OUTPUT:
                self.fail(f"{what}: more than {MAX_OUTPUT} bytes")
            self.fail(f"exited {self._exit_code()} before the test finished ({what})")
        try:
            return decode(line)
        except NotPlain as exc:
            self.fail(f"{what}: {exc}")

    def _exit_code(self) -> int:
        try:  # it closed its stdout: it is exiting, or it closed it and runs on
            return self.process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def fail(self, detail: str) -> NoReturn:
        self.failure = self.failure or detail[:MAX_DETAIL]  # the solution may have written it
        raise Ungraded(detail)

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        assert self.process.stdin is not None
        what = f"calling {name}()"
        try:
            request = ["call", name, encode(list(args)), encode(list(kwargs.items()))]
            _send(self.process.stdin, request)
        except BrokenPipeError:
            self.receive(what)  # says how the process ended
        reply = self.receive(what)
        if type(reply) is list and reply[:1] == ["value"] and len(reply) == 2:
            return reply[1]
        if type(reply) is list and reply[:1] == ["raised"] and len(reply) == 3:
            raise _exception(name, *reply[1:])
        return self.fail(str(reply[1] if type(reply) is list and len(reply) == 2 else reply))

    def namespace(self) -> dict[str, Any]:
        """The test's globals: the grader's builtins, then the solution's names (plain values
        and stand-ins for its functions); a name of a builtin stays the builtin."""
        reply = self.receive("importing the solution")
        if type(reply) is list and reply[:1] == ["raised"] and len(reply) == 3:
            raise _exception("import", *reply[1:])
        names = reply[1] if type(reply) is list and len(reply) == 2 else None
        if type(names) is not list or reply[0] != "names":
            self.fail(f"the solution's names are not plain data: {reply!r:.200}")
        found: dict[str, Any] = {"__name__": "__test__"}
        for entry in names:
            if type(entry) is not list or not entry or type(entry[0]) is not str:
                continue
            export = entry[0]
            if hasattr(builtins, export) or export.startswith("__"):
                continue
            if entry[1:] == ["call"]:
                found[export] = Remote(export, self.call)
            elif len(entry) == 3 and entry[1] == "value":
                found[export] = entry[2]
        return found


def _exception(function: str, name: Any, detail: Any) -> Exception:
    found = getattr(builtins, name, None) if type(name) is str else None
    if isinstance(found, type) and issubclass(found, (StopIteration, StopAsyncIteration)):
        # map(), filter(), zip()... would read it as the end of their data, and `all()` of
        # nothing is true: as in a generator (PEP 479), an escaping one is an error.
        return RuntimeError(f"{function}() raised {name}: {detail}")
    for base in found.__mro__ if isinstance(found, type) else ():
        if issubclass(base, Exception):  # one that takes a message (UnicodeDecodeError doesn't)
            with contextlib.suppress(TypeError):
                return base(detail)
    return Exception(f"{name}: {detail}")


def _failure(exc: BaseException, test: str) -> str:
    """`AssertionError: <message>`, or the line of the test that failed when it has none."""
    where, frame = "", exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename == "<test>":
            lines = test.splitlines()
            where = lines[frame.tb_lineno - 1].strip() if frame.tb_lineno <= len(lines) else ""
        frame = frame.tb_next
    return _tail(f"{type(exc).__name__}: {str(exc) or where}".rstrip(": "))


def judge(spec: dict[str, Any]) -> None:
    """One assert-style test (see the module docstring); the verdict is its one stdout line."""
    verdicts = os.fdopen(os.dup(1), "wb")  # taken before the test or the callee runs
    os.dup2(2, 1)
    try:
        session = Judge(spec["source"], spec["solution_file"])
    except OSError as exc:  # no solution code has run in this test: the runner decides
        _send(verdicts, {"cannot_start": f"cannot start the solution's process: {exc}"})
        return
    try:
        exec(compile(spec["test"], "<test>", "exec"), session.namespace())
        verdict = {"passed": True, "detail": ""}
    except Ungraded:
        verdict = {"passed": False, "detail": session.failure}
    except BaseException as exc:  # any other end of the test fails it
        verdict = {"passed": False, "detail": _failure(exc, spec["test"])}
    if session.failure:  # a test that caught Ungraded still failed
        verdict = {"passed": False, "detail": session.failure}
    _send(verdicts, verdict)
    session.process.kill()


# -- the runner ----------------------------------------------------------------------------------
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


def _verdict(printed: str) -> dict[str, Any] | None:
    """The judge's verdict; OSError if it could not start the solution's process."""
    with contextlib.suppress(ValueError):
        verdict = json.loads(printed)
        if type(verdict) is dict and type(verdict.get("cannot_start")) is str:
            raise OSError(verdict["cannot_start"])
        if type(verdict) is dict and type(verdict.get("passed")) is bool:
            return {"passed": verdict["passed"], "detail": str(verdict.get("detail"))[:MAX_DETAIL]}
    return None


def _fork_judge(test: str, spec: dict[str, Any], out: IO[bytes], err: IO[bytes]) -> int:
    """Start the judge as a fork of the runner, never exec'd: it is non-dumpable from its
    first instruction (exec would make a fresh process dumpable until it could say
    otherwise, and a process a test left behind could open its verdict file meanwhile)."""
    pid = os.fork()
    if pid != 0:
        return pid
    code = 1
    try:
        os.setsid()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        with open(os.devnull, "rb") as nothing:
            os.dup2(nothing.fileno(), 0)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the runner's report channel among them
        judge({"source": spec["source"], "solution_file": spec["solution_file"], "test": test})
        code = 0
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


def _wait(pid: int, timeout_s: float) -> int | None:
    """The exit code of `pid`, or None once it has run `timeout_s` (it is killed then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:  # as Popen.returncode (os.waitstatus_to_exitcode is Python 3.9+)
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(WAIT_POLL_S)


def run_test(test: Any, spec: dict[str, Any]) -> dict[str, Any]:
    timeout_s, solution_file = float(spec["timeout_s"]), spec["solution_file"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # An OSError up to here is the runner's own (main decides whose fault it is).
        if isinstance(test, str):
            code = _wait(_fork_judge(test, spec, out, err), timeout_s)
        else:
            argv = [sys.executable, solution_file]
            data = str(test.get("stdin", "")).encode()
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True
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
    if code is None:
        return {"passed": False, "detail": f"timed out after {timeout_s:g} s"}
    if isinstance(test, str):
        verdict = _verdict(printed)
        detail = f"the test ended without a verdict (exit code {code}): {_tail(errors)}"
        return verdict or {"passed": False, "detail": detail}
    if code != 0:
        return {"passed": False, "detail": f"exit code {code}: {_tail(errors)}"}
    if flooded:
        return {"passed": False, "detail": f"printed more than {MAX_OUTPUT} bytes"}
    passed = _normalised(printed) == _normalised(str(test.get("stdout", "")))
    return {"passed": passed, "detail": "" if passed else f"printed {_tail(printed)!r}"}


def runner(folder: str) -> int:
    report = os.fdopen(os.dup(1), "w")  # the only channel the grader reads
    os.dup2(2, 1)
    spec = json.load(sys.stdin)
    token = spec["token"]
    os.chdir(folder)
    _prctl(PR_SET_DUMPABLE, 0)
    _any_int_as_text()  # the judges are its forks
    _prctl(PR_SET_CHILD_SUBREAPER, 1)

    def emit(line: dict[str, Any]) -> None:
        report.write(json.dumps(line) + "\n")
        report.flush()

    emit({"started": token})
    results: list[dict[str, Any]] = []
    for test in spec["tests"]:
        try:
            results.append(run_test(test, spec))
        except OSError as exc:
            if not results:  # before any solution code ran: the runner cannot work here
                emit({"token": token, "error": f"cannot run a test: {exc}"})
                return 1
            # After a test: what it left (a full /tmp, too many processes) may be why.
            results.append({"passed": False, "detail": f"cannot run the test: {exc}"})
    emit({"token": token, "results": results})
    return 0


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--callee"]:
        callee(argv[2])
    else:
        return runner(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
