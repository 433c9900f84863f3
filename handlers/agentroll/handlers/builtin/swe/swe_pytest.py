"""Running the graded tests of a `swe` instance and judging the run from channels the agent
cannot write.

The instance's `test_cmd` names the interpreter: `[VAR=value ...] PYTHON [options] -m pytest
[ARGS]`. The grader runs that interpreter on its own launcher instead of `-m pytest`:
`PYTHON [options] -I <scratch>/agentroll_report_<random>.py ARGS`, a file in the grader's
private scratch folder (`swe_repo.GRADER_SCRATCH`) that takes the report channel and imports
pytest before any folder of the repository is on `sys.path` (`swe_pytest_report.py`). Any
other form of `test_cmd` fails the probe: `infra_error`, before the agent's diff. Under `-I`
the interpreter reads no `PYTHON*` variable: the launcher applies `$PYTHONPATH` itself, the
others (`PYTHONHASHSEED`, `PYTHONWARNINGS`, ...) have no effect; use interpreter options
(`-W`, `-X`) in `test_cmd` instead.

Statuses come only from the JSON report it writes to our exec's own stdout (pytest's output
goes to a file), never from printed output or from a file a process of the sandbox could
rewrite; the runner's exit status must agree with it.

Who broke what: `probe` runs the same command with the plugin on the repository before the
agent's change is in it (a collection of a path that does not exist: pytest starts, loads
the plugin, reads the repository's configuration, writes a report and stops). If that fails,
the runner or the instance is broken: `InfraError`. Once it has worked, a run that breaks
afterwards broke on what changed since, the agent's diff: reward 0 with the reason. A test id
that does not exist in the instance at all also ends there (reward 0): validate instances
with their reference patch.

What this cannot stop: the code under test runs inside pytest's own process, so code written
to find this plugin (or pytest's internals) and rewrite the outcome can still forge one.
Printed output, test hooks and configuration (refused before the run, see `swe_infra`), the
exit status and missing tests are all closed channels.
"""

import json
import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from agentroll.handlers.builtin.swe.swe_repo import grader_folder, write_file
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox
from agentroll.runtime.cpulimit import grading_wall_s

PROBE_TIMEOUT_S = 300.0
MAX_REPORT_BYTES = 8 << 20
OUTPUT_TAIL_BYTES = 4000
PASSING = ("passed", "xpassed")
FAILING = ("failed", "error")
# pytest's exit statuses other than 0 (all passed) and 1 (some failed).
BROKEN_RUN = {
    2: "the run was interrupted (a test module failed to import or collect)",
    3: "pytest hit an internal error",
    4: "pytest refused its arguments (a listed test does not exist)",
    5: "no tests were collected",
}


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^(.*/)?python[0-9.]*$")
_RUN_PYTEST = re.compile(r"(?<=\s)-m\s+pytest(?=\s|$)")


def interpreter(test_cmd: str) -> str | None:
    """The interpreter of a `[VAR=value ...] PYTHON [options] -m pytest [ARGS]` command; None
    for any other form."""
    try:
        words = shlex.split(test_cmd)
    except ValueError:
        return None
    n = 0
    while n < len(words) and _ASSIGNMENT.match(words[n]):
        n += 1
    if n == len(words) or not _PYTHON.match(words[n]):
        return None
    rest = words[n + 1 :]
    while rest and rest[0] != "-m":
        option = rest.pop(0)
        if not option.startswith("-") or option.startswith("-c") or option == "-":
            return None  # a script, a command or stdin: not pytest's module
        if option in ("-W", "-X") and rest:  # the options that take a separate value
            rest.pop(0)
    return words[n] if rest[:2] == ["-m", "pytest"] else None


def launch_command(test_cmd: str, launcher: str, extra: Sequence[str]) -> str | None:
    """`test_cmd` (`[VAR=value ...] PYTHON [options] -m pytest [ARGS]`) with `-m pytest`
    replaced by `-I launcher`, and `extra` appended; None for any other form. The rest keeps
    its shell text (quotes, `$VARIABLES`)."""
    if interpreter(test_cmd) is None:
        return None
    launched = _RUN_PYTEST.sub(f"-I {shlex.quote(launcher)}", test_cmd, count=1)
    return " ".join([launched, *(shlex.quote(a) for a in extra)])


@cache
def plugin_source() -> bytes:
    return (
        resources.files("agentroll.handlers.builtin.swe")
        .joinpath("swe_pytest_report.py")
        .read_bytes()
    )


@dataclass(frozen=True, slots=True)
class Report:
    exitstatus: int
    tests: dict[str, str]
    collection_errors: list[str]


def parse_report(text: str) -> Report:
    """The plugin's JSON report; `ValueError` if it is not one."""
    raw = json.loads(text)
    tests, errors = raw["tests"], raw["collection_errors"]
    if not (
        isinstance(raw["exitstatus"], int)
        and isinstance(tests, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in tests.items())
        and isinstance(errors, list)
        and all(isinstance(e, str) for e in errors)
    ):
        raise ValueError("the report does not have the plugin's shape")
    return Report(raw["exitstatus"], tests, errors)


@dataclass(frozen=True, slots=True)
class PytestRun:
    exit_code: int | None
    timed_out: bool
    report: Report | None
    report_problem: str
    """Why `report` is None ("" when there is one)."""
    output_tail: str


async def run_pytest(
    sandbox: Sandbox, test_cmd: str, args: Sequence[str], *, timeout_s: float
) -> PytestRun:
    """`test_cmd ARGS` with the report plugin, in the sandbox's workdir.

    The output goes to a file and only its tail comes back: however much the tests print,
    the server holds a few KiB of it (the sandbox's file size limit ends a flood)."""
    folder = grader_folder("grade")
    launcher = f"{folder}/agentroll_report_{secrets.token_hex(8)}.py"
    command = launch_command(test_cmd, launcher, args)
    if command is None:
        problem = f"test_cmd is not `PYTHON -m pytest ...`: {test_cmd[:200]!r}"
        return PytestRun(None, False, None, problem, "")
    await write_file(sandbox, launcher, plugin_source())
    log = f"{folder}/output.log"
    # fd 3 is our stdout (the report's channel), pytest's own output goes to the log; $HOME
    # is the grader's folder, not the repository (whose dotfiles the agent wrote).
    script = f"export HOME={folder} AGENTROLL_REPORT_FD=3\n( {command} ) 3>&1 > {log} 2>&1"
    done = await sandbox.exec(
        ["sh", "-c", script], timeout=grading_wall_s(timeout_s), cpu_limit_s=timeout_s
    )
    report, problem = read_report(done.stdout)
    tail = await _tail(sandbox, log)
    return PytestRun(done.exit_code, done.timed_out, report, problem, tail)


def read_report(text: str) -> tuple[Report | None, str]:
    """The plugin's report from what its channel carried, or None and why not."""
    if not text.strip():
        return None, "pytest ended without writing its report"
    if len(text) > MAX_REPORT_BYTES:
        return None, f"the report is over {MAX_REPORT_BYTES} bytes"
    try:
        return parse_report(text), ""
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return None, f"the report is malformed: {exc!r}"


async def _tail(sandbox: Sandbox, log: str) -> str:
    """The end of pytest's output (diagnostics only: nothing is judged from it)."""
    done = await sandbox.exec(["tail", "-c", str(OUTPUT_TAIL_BYTES), log], timeout=30)
    return f"{done.stdout}\n{done.stderr}".strip()[-2000:]


async def probe(sandbox: Sandbox, test_cmd: str) -> None:
    """Check that `test_cmd` runs pytest with the report plugin here; `InfraError` if not."""
    run = await run_pytest(sandbox, test_cmd, probe_args(), timeout_s=PROBE_TIMEOUT_S)
    require_working_runner(run)


def probe_args() -> list[str]:
    """pytest starts, loads the plugin, reads the configuration, reports and stops: the
    collection of a path that does not exist."""
    return ["--collect-only", "-q", f".agentroll-probe-{secrets.token_hex(4)}"]


def require_working_runner(run: PytestRun) -> None:
    """`InfraError` unless the probe's run wrote a report and passed pytest's status through."""
    if run.report is None:
        raise InfraError(
            f"test_cmd does not run pytest with the grader's plugin ({run.report_problem}; exit "
            f"code {run.exit_code}): {run.output_tail[-500:]}",
            cause="test_runner_failed",
        )
    if run.exit_code != run.report.exitstatus:
        raise InfraError(
            f"test_cmd exits {run.exit_code} where pytest ended with status "
            f"{run.report.exitstatus}; it must pass pytest's exit status through",
            cause="test_runner_failed",
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    resolved: bool
    reason: str
    """"" when resolved, else why not (a short code)."""
    detail: str
    info: dict[str, Any]


def judge(run: PytestRun, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]) -> Verdict:
    """Every listed test must be in the report and pass, and the run must have ended cleanly."""
    return listed_verdict(
        run.report.tests if run.report is not None else {},
        fail_to_pass,
        pass_to_pass,
        problem=run_problem(run),
        run=(run.exit_code, run.timed_out, run.output_tail),
        source="pytest's report",
    )


def listed_verdict(
    statuses: dict[str, str],
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    *,
    problem: tuple[str, str],
    run: tuple[int | None, bool, str],
    source: str,
    passing: Sequence[str] = PASSING,
) -> Verdict:
    """The verdict once `problem` ((reason, detail) or ("", "")) says whether the run can be
    trusted: then every listed test must be in `statuses` (read from `source`) and pass.
    `run` is the tests' (exit code, timed out, output tail)."""
    exit_code, timed_out, output_tail = run
    ids = [*fail_to_pass, *pass_to_pass]
    missing = [t for t in ids if t not in statuses]
    info: dict[str, Any] = {
        "FAIL_TO_PASS": summary(statuses, fail_to_pass, passing),
        "PASS_TO_PASS": summary(statuses, pass_to_pass, passing),
        "missing": missing,
        "tests_exit_code": exit_code,
        "tests_timed_out": timed_out,
    }
    reason, detail = problem
    if not reason:
        unresolved = [t for t in ids if statuses.get(t) not in passing]
        if unresolved:
            reason = "tests_failed"
            detail = (
                f"{len(unresolved)} of {len(ids)} listed tests did not pass, "
                f"{len(missing)} of them missing from {source}"
            )
    if reason:
        info["tests_output_tail"] = output_tail[-1000:]
    return Verdict(not reason, reason, detail, info)


def summary(
    statuses: dict[str, str], ids: Sequence[str], passing: Sequence[str] = PASSING
) -> dict[str, list[str]]:
    ok = [t for t in ids if statuses.get(t) in passing]
    return {"success": ok, "failure": [t for t in ids if t not in ok]}


def run_problem(run: PytestRun) -> tuple[str, str]:
    """(reason, detail) when the run itself cannot be trusted to say which tests passed."""
    if run.timed_out:
        return "tests_timed_out", "the tests did not finish within test_timeout_s"
    report = run.report
    if report is None:
        # The probe showed that pytest writes the report here; only code running inside the
        # test process (the agent's: os._exit, a crash, a kill) stops it before it does.
        return "no_test_report", (
            f"the test run ended (exit code {run.exit_code}) without pytest's report: "
            f"{run.report_problem}"
        )
    if run.exit_code != report.exitstatus:
        return "inconsistent_test_report", (
            f"the test run exited {run.exit_code}, but pytest ended with status "
            f"{report.exitstatus}: code that ran after pytest changed the outcome"
        )
    if report.exitstatus not in (0, 1):
        what = BROKEN_RUN.get(report.exitstatus, f"pytest ended with status {report.exitstatus}")
        if report.collection_errors:
            what += f"; collection errors in {', '.join(report.collection_errors[:20])}"
        return "test_run_broken", what
    failed = any(s in FAILING for s in report.tests.values())
    if failed != (report.exitstatus == 1):
        return "inconsistent_test_report", (
            f"pytest ended with status {report.exitstatus}, but its report "
            f"{'has' if failed else 'has no'} failed tests"
        )
    return "", ""
