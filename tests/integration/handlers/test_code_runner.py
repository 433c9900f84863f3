"""The `code` handler's hidden-test runner on its own (real processes, no sandbox): a test
passes only when its body ran to the end on plain data the grader built itself, nothing a
test leaves running survives it, no file beside the solution is imported by the runner, and
only lines carrying the runner's token count."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.code.code_grading import (
    read_runner_output,
    runner_argv,
    runner_spec,
)
from agentroll.handlers.builtin.code.code_runner import MAX_OUTPUT
from agentroll.handlers.builtin.grader_launch import isolated_source

pytestmark = pytest.mark.integration

TOKEN = "f00d" * 8
CHECKS = ["assert double(2) == 4", "assert double(0) == 0"]
HONEST = "def double(x):\n    return 2 * x\n"


def run_runner(
    folder: Path,
    solution: str,
    tests: list[Any],
    solution_file: str = "solution.py",
    timeout_s: float = 20,
) -> list[dict[str, Any]]:
    folder.mkdir(exist_ok=True)
    (folder / solution_file).write_text(solution)
    done = subprocess.run(
        runner_argv(sys.executable, str(folder)),
        input=runner_spec(TOKEN, solution_file, tests, timeout_s),
        capture_output=True,
        timeout=300,
        check=False,
    )
    stdout = done.stdout.decode()
    assert stdout.splitlines()[0] == json.dumps({"started": TOKEN}), done.stderr
    started, final = read_runner_output(stdout, TOKEN)
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
        "import atexit, os\natexit.register(os._exit, 0)\nimport sys\nsys.exit(0)\n",
    ],
)
def test_exiting_before_the_test_body_ends_fails(tmp_path: Path, exit_early: str) -> None:
    wrong = "def double(x):\n    return x\n"
    results = run_runner(tmp_path, exit_early + wrong, [CHECKS[0]])
    assert results[0]["passed"] is False
    assert results[0]["detail"].startswith("exited 0 before the test finished")


def test_an_exit_hook_of_the_solution_has_no_say_in_the_verdict(tmp_path: Path) -> None:
    """The test body runs in the grader's judge: the solution's process exiting 0 afterwards
    (an atexit hook) changes nothing; the wrong answer fails its assert."""
    wrong = "import atexit, os\natexit.register(os._exit, 0)\ndef double(x):\n    return x\n"
    results = run_runner(tmp_path, wrong, CHECKS)
    assert results == [
        {"passed": False, "detail": "AssertionError: assert double(2) == 4"},
        {"passed": True, "detail": ""},
    ]


FORGER = f"""import os
_lines = [b'{{"passed": true, "detail": ""}}', b'["value", 4]', b'["names", []]',
          b'{{"token": "{TOKEN}", "results": [{{"passed": true, "detail": ""}}]}}']
for _fd in map(int, os.listdir("/proc/self/fd")):
    for _line in _lines:
        try:
            os.write(_fd, _line + b"\\n")
        except OSError:
            pass


def double(x):
    return x
"""


def test_nothing_the_solution_writes_passes_for_a_verdict(tmp_path: Path) -> None:
    """Verdict-shaped lines written to every descriptor the solution holds (its reply
    channel among them) fail the test: verdicts come from the judge, never from it."""
    results = run_runner(tmp_path, FORGER, [CHECKS[0]])
    assert results[0]["passed"] is False, results


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


# -- verdicts on plain data --------------------------------------------------------------------
LIARS = {
    "int": (
        "class R(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return R(0)\n",
        "assert f(2) == 4",
    ),
    "str": (
        "class R(str):\n    __eq__ = lambda s, o: True\n    __hash__ = str.__hash__\n"
        "def f(x):\n    return R()\n",
        "assert f(2) == 4",
    ),
    "list": (
        "class R(list):\n    __eq__ = lambda s, o: True\n    __len__ = lambda s: 3\n"
        "def f(x):\n    return R()\n",
        "assert f(2) == [1, 2, 3] and len(f(2)) == 3",
    ),
    "dict": (
        "class R(dict):\n    __eq__ = lambda s, o: True\ndef f(x):\n    return R()\n",
        "assert f(2) == {'a': 1}",
    ),
    "bool": ("class R:\n    __bool__ = lambda s: True\ndef f(x):\n    return R()\n", "assert f(2)"),
    "ne": (
        "class R(int):\n    __ne__ = lambda s, o: False\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return R(0)\n",
        "assert not (f(2) != 4)",
    ),
    "hash": (
        "class R(int):\n    __eq__ = lambda s, o: True\n    __hash__ = lambda s: hash(4)\n"
        "def f(x):\n    return R(0)\n",
        "assert f(2) in {4}",
    ),
    "iter": (
        "class R(tuple):\n    __iter__ = lambda s: iter([1, 2, 3])\ndef f(x):\n    return R()\n",
        "assert list(f(2)) == [1, 2, 3]",
    ),
    "nested": (
        "class R(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return [1, {'k': (R(0),)}]\n",
        "assert f(2) == [1, {'k': (4,)}]",
    ),
    "number": (
        "import numbers\nclass R:\n    __eq__ = lambda s, o: True\n"
        "numbers.Number.register(R)\ndef f(x):\n    return R()\n",
        "assert f(2) == 4",
    ),
}


@pytest.mark.parametrize("kind", sorted(LIARS))
def test_an_object_that_lies_about_itself_is_not_a_result(tmp_path: Path, kind: str) -> None:
    """Subclasses of builtins, look-alikes and lying methods (`__eq__`, `__ne__`, `__bool__`,
    `__hash__`, `__len__`, `__iter__`) never reach the comparison: not plain data, no pass."""
    solution, test = LIARS[kind]
    results = run_runner(tmp_path, solution, [test])
    assert results == [{"passed": False, "detail": "f() returned a solution.R, not plain data"}]


PLAIN = {
    "float": ("0.1 + 0.2", "assert abs(f() - 0.3) < 1e-9 and f() != 0.3"),
    "nan": ("float('nan')", "import math\nassert math.isnan(f())"),
    "tuple": ("(1, 'a', None)", "assert f() == (1, 'a', None) and type(f()) is tuple"),
    "list-not-tuple": ("[1, 2]", "assert f() != (1, 2)"),
    "none": ("None", "assert f() is None"),
    "bools": ("[True, False]", "assert f()[0] is True and f()[1] is False"),
    "nested": (
        "{'a': [1, {'b': (2, 3.5)}], 4: {5, 6}}",
        "assert f() == {'a': [1, {'b': (2, 3.5)}], 4: {5, 6}}",
    ),
    "bytes-complex": (
        "(b'\\x00x', 1 + 2j, frozenset({1}))",
        "assert f() == (b'\\x00x', 1 + 2j, frozenset({1}))",
    ),
    "big-int": ("2 ** 300", "assert f() == 2 ** 300"),
    "huge-int": ("10 ** 5000", "assert f() == 10 ** 5000"),  # past int's str limit (4300)
    "constant": ("VALUES['I']", "assert VALUES == {'I': 1} and f() == 1"),
}


@pytest.mark.parametrize("kind", sorted(PLAIN))
def test_plain_results_pass_as_they_would_in_python(tmp_path: Path, kind: str) -> None:
    value, test = PLAIN[kind]
    solution = f"VALUES = {{'I': 1}}\n\n\ndef f():\n    return {value}\n"
    assert run_runner(tmp_path, solution, [test]) == [{"passed": True, "detail": ""}]


def test_a_test_sees_what_the_solution_raises_and_can_pass_its_functions(tmp_path: Path) -> None:
    solution = (
        "class Bad(ValueError):\n    pass\n\n\ndef f(x):\n    if x < 0:\n        raise Bad('neg')\n"
        "    return x\n\n\ndef apply(g, x):\n    return g(x)\n"
    )
    expects_raise = (
        "try:\n    f(-1)\nexcept ValueError as e:\n    assert str(e) == 'neg'\n"
        "else:\n    raise AssertionError"
    )
    tests = [expects_raise, "assert apply(f, x=3) == 3", "f(-1)"]
    results = run_runner(tmp_path, solution, tests)
    assert results == [
        {"passed": True, "detail": ""},
        {"passed": True, "detail": ""},
        {"passed": False, "detail": "ValueError: neg"},
    ]


@pytest.mark.parametrize(
    ("raise_it", "caught"),
    [
        ("b'\\xff'.decode()", "ValueError"),  # UnicodeDecodeError takes 5 arguments
        ("raise ExceptionGroup('g', [ValueError(1)])", "Exception"),
    ],
)
def test_an_exception_whose_class_cannot_be_rebuilt_arrives_as_its_nearest_base(
    tmp_path: Path, raise_it: str, caught: str
) -> None:
    solution = f"def f():\n    {raise_it}\n"
    test = f"try:\n    f()\nexcept {caught}:\n    pass\nelse:\n    raise AssertionError"
    assert run_runner(tmp_path, solution, [test]) == [{"passed": True, "detail": ""}]


def test_a_name_of_the_solution_never_replaces_a_builtin_in_the_test(tmp_path: Path) -> None:
    solution = (
        "def len(x):\n    return 3\n\n\ndef isinstance(*a):\n    return True\n\n\n"
        "def f():\n    return []\n"
    )
    results = run_runner(
        tmp_path, solution, ["assert len(f()) == 3", "assert isinstance(f(), int)"]
    )
    assert [r["passed"] for r in results] == [False, False]


def test_a_test_that_catches_everything_still_fails_on_a_non_plain_result(tmp_path: Path) -> None:
    solution = "def f():\n    return object()\n"
    test = "try:\n    f()\nexcept BaseException:\n    pass"
    results = run_runner(tmp_path, solution, [test])
    assert results == [
        {"passed": False, "detail": "f() returned a builtins.object, not plain data"}
    ]


# A solution saved under the name of a module the runner imports. Imported *by the runner*, it
# would read the spec (the token) from stdin and print a full pass before any test ran.
SHADOW = """import os, re, sys
_spec = sys.stdin.read()
_token = re.search(r'"token": "([0-9a-f]+)"', _spec)
if _token:
    _count = _spec.count('assert ')
    _passed = ", ".join(['{"passed": true, "detail": ""}'] * _count)
    print('{"started": "%s"}' % _token.group(1))
    print('{"token": "%s", "results": [%s]}' % (_token.group(1), _passed))
    sys.stdout.flush()
    os._exit(0)


def double(x):
    return x
"""


@pytest.mark.parametrize("module", ["json", "secrets", "subprocess", "tempfile", "signal"])
def test_a_solution_named_like_a_module_of_the_runner_is_never_imported_by_it(
    tmp_path: Path, module: str
) -> None:
    # In its own process it waits for the end of its stdin (the judge's calls): no pass.
    forged = run_runner(tmp_path / "forged", SHADOW, CHECKS, f"{module}.py", timeout_s=3)
    honest = run_runner(tmp_path / "honest", HONEST, CHECKS, f"{module}.py")
    assert forged == [{"passed": False, "detail": "timed out after 3 s"}] * 2
    assert honest == [{"passed": True, "detail": ""}] * 2


FLOODED_DETAIL = """import os
_lines = b'["names", [["double", "call"]]]\\n["not_plain", "' + b"x" * 500000 + b'"]\\n'
for _fd in map(int, os.listdir("/proc/self/fd")):
    try:
        os.write(_fd, _lines)
    except OSError:
        pass


def double(x):
    return 2 * x
"""


def test_what_the_solution_writes_into_a_detail_is_bounded(tmp_path: Path) -> None:
    """Replies forged on the solution's own channel count as its answers, never more: here a
    'not plain' of half a megabyte, which fails the test with a detail cut to its start."""
    results = run_runner(tmp_path, FLOODED_DETAIL, [CHECKS[0]])
    assert results[0]["passed"] is False
    assert results[0]["detail"] == "x" * 300


# Judges that cannot start a process, as under a process limit (the runner itself can).
REFUSE = """def _refuse(*args, **kwargs):
    raise BlockingIOError(11, "Resource temporarily unavailable")


"""


def test_a_solution_process_that_cannot_start_is_the_runners_failure(tmp_path: Path) -> None:
    """Before any solution code ran, the runner cannot work here (the grader makes that an
    infrastructure error); after a test ran, what it left may be why: that test fails."""
    (tmp_path / "solution.py").write_text(HONEST)
    spec = json.loads(runner_spec(TOKEN, "solution.py", [], 20))
    source = spec["source"].replace(  # the judge cannot start the solution's process
        "self.process = subprocess.Popen(", "self.process = _refuse("
    )
    spec["source"] = source.replace(
        '\nif __name__ == "__main__":', f'\n{REFUSE}if __name__ == "__main__":'
    )
    outcomes = []
    for tests in ([CHECKS[0]], [{"stdin": "", "stdout": ""}, CHECKS[0]]):
        done = subprocess.run(
            isolated_source(sys.executable, spec["source"], [str(tmp_path)]),
            input=json.dumps({**spec, "tests": tests}).encode(),
            capture_output=True,
            timeout=300,
            check=False,
        )
        outcomes.append(read_runner_output(done.stdout.decode(), TOKEN)[1])
    refused = "cannot start the solution's process: [Errno 11] Resource temporarily unavailable"
    assert outcomes[0] == {"token": TOKEN, "error": f"cannot run a test: {refused}"}
    assert outcomes[1] == {
        "token": TOKEN,
        "results": [
            {"passed": True, "detail": ""},
            {"passed": False, "detail": f"cannot run the test: {refused}"},
        ],
    }
