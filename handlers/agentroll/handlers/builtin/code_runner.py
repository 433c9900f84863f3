"""Hidden-test runner for the `code` handler, uploaded into the sandbox at EVAL only.

Standalone (standard library only; it runs under the sandbox's Python, which may not have
agentroll installed):

    python3 code_runner.py SPEC.json        -> one JSON object on stdout

SPEC: {"solution_file": "solution.py", "timeout_s": 10, "tests": [...]}; a test is either
Python code run after `from <solution module> import *` (it passes if it exits 0), or
{"stdin": "...", "stdout": "..."} for a program (it passes if the output matches, trailing
whitespace ignored). Each test runs in its own process under its own time limit.
"""

import json
import os
import subprocess
import sys
from typing import Any

MAX_DETAIL = 300


def _tail(text: str) -> str:
    return text.strip()[-MAX_DETAIL:]


def _normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def run_test(test: Any, solution_file: str, timeout_s: float) -> dict[str, Any]:
    if isinstance(test, str):
        module = os.path.splitext(os.path.basename(solution_file))[0]
        argv = [sys.executable, "-c", f"from {module} import *\n{test}"]
        stdin = ""
    else:
        argv = [sys.executable, solution_file]
        stdin = str(test.get("stdin", ""))
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return {"passed": False, "detail": f"timed out after {timeout_s:g} s"}
    if isinstance(test, str):
        return {"passed": done.returncode == 0, "detail": _tail(done.stderr)}
    if done.returncode != 0:
        return {"passed": False, "detail": f"exit code {done.returncode}: {_tail(done.stderr)}"}
    passed = _normalised(done.stdout) == _normalised(str(test.get("stdout", "")))
    return {"passed": passed, "detail": "" if passed else f"printed {_tail(done.stdout)!r}"}


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    results = [
        run_test(test, spec["solution_file"], float(spec["timeout_s"])) for test in spec["tests"]
    ]
    print(json.dumps({"results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
