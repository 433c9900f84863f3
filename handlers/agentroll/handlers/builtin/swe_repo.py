"""Repository work for the `swe` handler, all of it inside a sandbox through `Sandbox.exec`.

- `checkout`: a real git checkout at `base_commit` in the sandbox's workdir, either from a
  bundled repository (its files are uploaded and committed with a fixed identity and date,
  so the commit id is reproducible and checked against `base_commit`) or by cloning a git
  repository that the image (or a bind) provides at `repo_source`.
- `agent_diff`: everything the agent changed against `base_commit` (new files included).
- `run_tests`: the listed tests with pytest's `-rA` summary, parsed into a status per test.

Failures of the machinery raise `InfraError`; what the agent caused comes back as data.
"""

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from agentroll.handlers.errors import InfraError
from agentroll.runtime import ExecResult, Sandbox

# The identity and date every bundled repository's single commit is made with.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "agentroll",
    "GIT_AUTHOR_EMAIL": "agentroll@localhost",
    "GIT_COMMITTER_NAME": "agentroll",
    "GIT_COMMITTER_EMAIL": "agentroll@localhost",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
}
COMMIT_SCRIPT = (
    "git init -q -b main && git add -A && "
    'git commit -q --no-gpg-sign -m "Initial commit" && git rev-parse HEAD'
)
GIT_TIMEOUT_S = 120.0
_STATUS_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")
_PATCHED_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


@dataclass(frozen=True, slots=True)
class BundledRepo:
    repo: str
    base_commit: str
    files: Mapping[str, str]


@cache
def bundled_repos() -> dict[str, BundledRepo]:
    """The self-made repositories shipped as `data/swe/repos/*.json`, by `repo` name."""
    folder = resources.files("agentroll.handlers.builtin").joinpath("data/swe/repos")
    out = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            raw = json.loads(entry.read_text("utf-8"))
            out[raw["repo"]] = BundledRepo(raw["repo"], raw["base_commit"], raw["files"])
    return out


async def sh(
    sandbox: Sandbox,
    script: str,
    *,
    timeout: float = GIT_TIMEOUT_S,  # noqa: ASYNC109 (passed on to Sandbox.exec)
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
) -> ExecResult:
    prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    return await sandbox.exec([*prefix, "sh", "-c", script], timeout=timeout, input=input)


def _failed(what: str, result: ExecResult) -> InfraError:
    detail = (result.stderr or result.stdout).strip()[-800:]
    return InfraError(
        f"{what} failed (exit {result.exit_code}): {detail}", cause="repo_setup_failed"
    )


async def checkout(
    sandbox: Sandbox,
    *,
    repo: str,
    base_commit: str,
    repo_source: str | None,
    setup_cmd: str | None,
) -> None:
    """Leave a git checkout of `repo` at `base_commit` in the sandbox's workdir."""
    bundled = bundled_repos().get(repo)
    if repo_source is None and bundled is not None:
        workdir = sandbox.spec.workdir
        for path, text in sorted(bundled.files.items()):
            await sandbox.upload(f"{workdir}/{path}", text.encode())
        done = await sh(sandbox, COMMIT_SCRIPT, env=GIT_ENV)
        if done.exit_code != 0:
            raise _failed("committing the bundled repository", done)
        head = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if not head.startswith(base_commit):
            raise InfraError(
                f"bundled {repo} reproduces commit {head}, not base_commit {base_commit}",
                cause="repo_setup_failed",
            )
    elif repo_source is not None:
        script = (
            f"git clone -q --no-hardlinks {shlex.quote(repo_source)} . && "
            f"git checkout -q {shlex.quote(base_commit)}"
        )
        done = await sh(sandbox, script)
        if done.exit_code != 0:
            raise _failed(f"cloning {repo_source} at {base_commit}", done)
    else:
        raise InfraError(f"no source for repository {repo}", cause="repo_setup_failed")
    if setup_cmd:
        done = await sh(sandbox, setup_cmd, timeout=600)
        if done.exit_code != 0:
            raise _failed("the instance's setup_cmd", done)


async def agent_diff(sandbox: Sandbox, base_commit: str) -> str | None:
    """The agent's changes as a git diff against `base_commit`; None if git cannot tell
    (the agent removed or broke the repository)."""
    script = f"git add -A && git diff --cached --binary --no-color {shlex.quote(base_commit)}"
    done = await sh(sandbox, script)
    return done.stdout if done.exit_code == 0 else None


def patched_files(patch: str) -> list[str]:
    return sorted({m.group(2) for m in _PATCHED_FILE.finditer(patch)})


async def apply(sandbox: Sandbox, patch: str) -> ExecResult:
    return await sh(sandbox, "git apply --whitespace=nowarn -", input=patch.encode())


async def restore(sandbox: Sandbox, base_commit: str, paths: Sequence[str]) -> None:
    """Put `paths` back as they were at `base_commit` (removing those that did not exist)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    script = (
        f'for f in {quoted}; do git checkout -q {shlex.quote(base_commit)} -- "$f" '
        '2>/dev/null || rm -f -- "$f"; done'
    )
    done = await sh(sandbox, script)
    if done.exit_code != 0:
        raise _failed("restoring the test files", done)


def parse_pytest_statuses(output: str) -> dict[str, str]:
    """`-rA` summary lines (`PASSED tests/x.py::test_y`, `FAILED ... - msg`) by test id."""
    statuses: dict[str, str] = {}
    for line in output.splitlines():
        m = _STATUS_LINE.match(line)
        if m:
            statuses[m.group(2)] = m.group(1)
    return statuses


@dataclass(frozen=True, slots=True)
class TestRun:
    statuses: dict[str, str]
    exit_code: int | None
    timed_out: bool
    output_tail: str

    def summary(self, ids: Sequence[str]) -> dict[str, list[str]]:
        ok = [t for t in ids if self.statuses.get(t) in ("PASSED", "XPASS")]
        return {"success": ok, "failure": [t for t in ids if t not in ok]}


RUNNER_MISSING = ("No module named pytest", "pytest: not found", "command not found")


async def run_tests(
    sandbox: Sandbox, test_cmd: str, ids: Sequence[str], *, timeout_s: float
) -> TestRun:
    command = f"{test_cmd} {' '.join(shlex.quote(t) for t in ids)}"
    done = await sh(sandbox, command, timeout=timeout_s)
    text = f"{done.stdout}\n{done.stderr}"
    if done.exit_code == 127 or any(marker in text for marker in RUNNER_MISSING):
        raise InfraError(
            f"the test runner could not start: {text.strip()[-500:]}", cause="test_runner_missing"
        )
    return TestRun(
        parse_pytest_statuses(done.stdout), done.exit_code, done.timed_out, text.strip()[-2000:]
    )


def as_list(value: Any) -> list[str]:
    """SWE-bench rows store test lists as JSON strings; accept both forms."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of test ids (or a JSON string of one)")
    return value
