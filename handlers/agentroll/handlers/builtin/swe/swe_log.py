"""Grading a `swe` instance by the official `swebench` log parser (`log_parser`), for the
SWE-bench repositories whose test commands and test ids are the official harness's.

The official harness writes the test output to a log file in the container and parses it:
whatever the code under test prints, or writes over that file, grades as the tests' result,
and a script's own exit status is the last git command's. Here:

- the tests run in the fresh EVAL sandbox (the agent's processes are in another one), as
  `bash -c test_cmd` in the workdir, their stdout and stderr captured by agentroll from the
  exec's own pipe (at most `MAX_OUTPUT_BYTES`: more is reward 0), never read from a file;
- the test command's exit status comes back on a descriptor the tests do not inherit, and
  must agree with the parsed output: 0 with a failing test in it, or non-zero with none, is
  not a result;
- where the runner is pytest (`pytest_report`, the default), our report plugin
  (`swe_pytest_report`) is loaded into it through `PYTEST_ADDOPTS` and its report, on a
  private descriptor, must arrive, agree with pytest's exit status, and call every listed
  test it names passed: printed "PASSED" lines, an `os._exit(0)` or a fake log cannot pass
  a test pytest saw fail. A probe before the agent's diff shows the plugin loads (else
  `InfraError`, as in `swe_pytest`);
- every FAIL_TO_PASS and PASS_TO_PASS id must be in the parsed output and PASSED (or XFAIL,
  as the official grading counts it).

The parser runs in a worker process (`swe_log_parse`) with a deadline and a memory cap; a
parser that fails or overruns on the output is reward 0; a package or parser missing here,
or a worker that dies without an answer, is `InfraError`.

What this cannot stop, for runners other than pytest (`pytest_report: false`: Django's
`runtests.py`, sympy's `bin/test`): the code under test prints into the very stream that is
parsed, so code written to print a runner's success lines and exit 0 is graded as passing.
"""

import asyncio
import json
import re
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from agentroll.handlers.builtin.swe.swe_pytest import (
    PASSING,
    PytestRun,
    Report,
    Verdict,
    listed_verdict,
    plugin_source,
    probe_args,
    read_report,
    require_working_runner,
    run_problem,
)
from agentroll.handlers.builtin.swe.swe_repo import grader_folder, write_file
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox, procs
from agentroll.runtime.cpulimit import grading_wall_s
from agentroll.runtime.sandbox import spawn

MAX_OUTPUT_BYTES = 16 << 20
PARSE_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 600.0
PARSER_WORKER = "agentroll.handlers.builtin.swe.swe_log_parse"
OFFICIAL_PASSING = ("PASSED", "XFAIL")
OFFICIAL_FAILING = ("FAILED", "ERROR")
_EXIT_LINE = re.compile(r"\nagentroll-exit (\d+)\Z")


@dataclass(frozen=True, slots=True)
class LoggedRun:
    exit_code: int | None
    """The test command's exit status (None: unknown, see `disrupted`)."""
    timed_out: bool
    disrupted: str
    """Why the grader's own wrapper did not finish cleanly ("" when it did)."""
    output: str
    truncated: bool
    report: Report | None
    report_problem: str


async def run_logged(
    sandbox: Sandbox, test_cmd: str, *, timeout_s: float, pytest_args: Sequence[str] = ()
) -> LoggedRun:
    """`bash -c test_cmd` in the sandbox's workdir, any pytest in it with our report plugin
    (and `pytest_args`). stdout: the tests' output, cut at `MAX_OUTPUT_BYTES`; stderr: the
    plugin's report (fd 3), then the exit status line, written on fd 4, which the tests do
    not inherit."""
    token = secrets.token_hex(8)
    folder, module = grader_folder("grade"), f"agentroll_report_{token}"
    await write_file(sandbox, f"{folder}/{module}.py", plugin_source())
    addopts = " ".join(["-p", module, *pytest_args])
    script = (
        f'export HOME={folder} PYTHONPATH={folder}"${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'AGENTROLL_REPORT_FD=3 PYTEST_ADDOPTS="{addopts}${{PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}}"\n'
        "exec 3>&2 4>&2\n"
        '{ bash -c "$1" 2>&1 4>&-; printf "\\nagentroll-exit %s" "$?" >&4; } '
        f"| head -c {MAX_OUTPUT_BYTES}"
    )
    done = await sandbox.exec(
        ["sh", "-c", script, "sh", test_cmd],
        timeout=grading_wall_s(timeout_s),
        cpu_limit_s=timeout_s,
    )
    exit_line = _EXIT_LINE.search(done.stderr)
    disrupted = ""
    if done.timed_out:
        exit_code = None
    elif done.exit_code != 0 or exit_line is None:
        exit_code, disrupted = None, f"the grader's wrapper ended with status {done.exit_code}"
    else:
        exit_code = int(exit_line.group(1))
    report_text = done.stderr[: exit_line.start()] if exit_line else done.stderr
    report, problem = read_report(report_text)
    truncated = len(done.stdout.encode(errors="replace")) >= MAX_OUTPUT_BYTES
    return LoggedRun(exit_code, done.timed_out, disrupted, done.stdout, truncated, report, problem)


async def probe(sandbox: Sandbox, test_cmd: str) -> None:
    """Check, before the agent's diff, that the pytest `test_cmd` runs loads our plugin."""
    run = await run_logged(sandbox, test_cmd, timeout_s=PROBE_TIMEOUT_S, pytest_args=probe_args())
    require_working_runner(_as_pytest_run(run))


def _as_pytest_run(run: LoggedRun) -> PytestRun:
    return PytestRun(run.exit_code, run.timed_out, run.report, run.report_problem, run.output)


async def parse(
    parser: str, output: str, *, instance_id: str, repo: str, version: str
) -> dict[str, str] | None:
    """The official parser's statuses for `output`; None if it fails or overruns on it;
    `InfraError` if the package or the parser is missing, or the worker dies unanswered."""
    request = {
        "parser": parser,
        "log": output,
        "instance_id": instance_id,
        "repo": repo,
        "version": version,
    }
    worker = await spawn(
        sys.executable,
        "-m",
        PARSER_WORKER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(PARSE_TIMEOUT_S):
            out, err = await worker.communicate(json.dumps(request).encode())
    except TimeoutError:
        procs.kill_led_group(worker)
        await worker.wait()
        return None
    except BaseException:
        procs.kill_led_group(worker)
        await asyncio.shield(worker.wait())
        raise
    try:
        answer = json.loads(out)
    except ValueError:
        answer = {}
    if worker.returncode != 0 or not isinstance(answer, dict) or not answer:
        raise InfraError(
            f"the log parser worker ended with status {worker.returncode}: {err[-500:]!r}",
            cause="log_parser_failed",
        )
    if "unavailable" in answer:
        raise InfraError(answer["unavailable"], cause="log_parser_unavailable")
    if "parser_failed" in answer:
        return None
    return {str(k): str(v) for k, v in answer["statuses"].items()}


def judge_log(
    run: LoggedRun,
    statuses: dict[str, str] | None,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    *,
    pytest_report: bool,
) -> Verdict:
    """Every listed test must be PASSED in the parsed output (and, with `pytest_report`,
    not failed in our report), and the run must have ended in a way that agrees with both."""
    return listed_verdict(
        statuses or {},
        fail_to_pass,
        pass_to_pass,
        problem=_problem(run, statuses, [*fail_to_pass, *pass_to_pass], pytest_report),
        run=(run.exit_code, run.timed_out, run.output),
        source="the parsed output",
        passing=OFFICIAL_PASSING,
    )


def _problem(
    run: LoggedRun, statuses: dict[str, str] | None, ids: Sequence[str], pytest_report: bool
) -> tuple[str, str]:
    """(reason, detail) when the run cannot be trusted to say which tests passed."""
    if run.timed_out:
        return "tests_timed_out", "the tests did not finish within test_timeout_s"
    if run.disrupted:
        return "test_run_disrupted", run.disrupted
    if run.truncated:
        return "test_output_too_large", f"the tests printed over {MAX_OUTPUT_BYTES} bytes"
    if pytest_report:
        reason, detail = run_problem(_as_pytest_run(run))
        if reason:
            return reason, detail
    if statuses is None:
        return "test_output_unparseable", "the official log parser failed on the output"
    reported = run.report.tests if run.report is not None else {}
    contradicted = [t for t in ids if statuses.get(t) in OFFICIAL_PASSING and t in reported]
    contradicted = [t for t in contradicted if reported[t] not in PASSING]
    if contradicted:
        return "output_contradicts_report", (
            f"the output says {len(contradicted)} listed tests passed that pytest's report "
            f"says did not: {', '.join(contradicted[:5])}"
        )
    failed = any(s in OFFICIAL_FAILING for s in statuses.values())
    if run.exit_code == 0 and failed:
        return "inconsistent_test_output", "the tests exited 0, but their output has failures"
    if run.exit_code != 0 and not failed:
        return "test_run_broken", (
            f"the tests exited {run.exit_code}, and their output names no failing test"
        )
    return "", ""
