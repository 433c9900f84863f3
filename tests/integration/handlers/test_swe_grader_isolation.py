"""The `swe` grader's isolation in a real bubblewrap sandbox: the launcher keeps every module
of the repository out of pytest's process until the report channel is taken (and standard ones
out for good), a clone keeps nothing beyond `base_commit`'s ancestry, and the grader's scratch
is emptied of whatever the agent left there."""

import shlex
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentroll.handlers.agent import DEFAULT_LIMITS
from agentroll.handlers.builtin import swe_pytest, swe_repo
from agentroll.runtime import BwrapConfig, Sandbox, SandboxSpec
from agentroll.testing.scripted_llm.rules.redteam_swegrade import FORGER, HISTORY_SETUP

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
WORKDIR = "/testbed"
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    state = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))  # short: socket paths
    runtime = BwrapConfig(state_dir=state).build()
    spec = SandboxSpec(workdir=WORKDIR, scratch=(swe_repo.GRADER_SCRATCH,), limits=DEFAULT_LIMITS)
    try:
        box = await runtime.start(spec, timeout=120)
        try:
            yield box
        finally:
            await box.stop()
    finally:
        await runtime.close()
        shutil.rmtree(state, ignore_errors=True)


async def _sh(box: Sandbox, script: str) -> str:
    done = await swe_repo.sh(box, script, env=IDENTITY)
    assert done.exit_code == 0, (script, done.stderr)
    return done.stdout


# Named like the standard library and pytest's own dependencies; each forges a passing report.
SHADOWS = ("json.py", "secrets.py", "tempfile.py", "pluggy/__init__.py", "iniconfig/__init__.py")
TESTS = """from mypkg import VALUE
from other import NAME


def test_own_package(tmp_path):
    assert VALUE == 1 and NAME == "src"


def test_broken():
    assert False
"""


async def test_no_repository_module_runs_before_the_report_channel_is_the_graders(
    sandbox: Sandbox,
) -> None:
    files = {
        **dict.fromkeys(SHADOWS, FORGER),
        "mypkg/__init__.py": "VALUE = 1\n",
        "src/other/__init__.py": 'NAME = "src"\n',  # found through PYTHONPATH, as before
        "tests/test_a.py": TESTS,
    }
    for path, text in files.items():
        await sandbox.upload(f"{WORKDIR}/{path}", text.encode())
    run = await swe_pytest.run_pytest(
        sandbox,
        "PYTHONPATH=src python -m pytest -q -p no:cacheprovider",
        ["tests/test_a.py::test_own_package", "tests/test_a.py::test_broken"],
        timeout_s=120,
    )
    assert run.report is not None, run.output_tail
    assert run.report.tests == {
        "tests/test_a.py::test_own_package": "passed",
        "tests/test_a.py::test_broken": "failed",
    }
    assert (run.exit_code, run.report.exitstatus) == (1, 1)


async def test_a_clone_keeps_nothing_beyond_base_commits_ancestry(sandbox: Sandbox) -> None:
    source = "/tmp/upstream"
    base = (
        await _sh(
            sandbox,
            f"git init -q {source} && cd {source} && echo one > a.txt && git add a.txt && "
            "git commit -q -m first && echo two > a.txt && git commit -qam second && "
            "git rev-parse HEAD",
        )
    ).strip()
    # Later commits, a tag, a branch, a remote, notes, a stash and loose objects upstream.
    await _sh(sandbox, f"cd {source} && sh -c {shlex.quote(HISTORY_SETUP)}")
    future = (await _sh(sandbox, "cat /tmp/agentroll-future-sha")).strip()
    await _sh(sandbox, f"cd {source} && git checkout -q -b later {future}")  # a branch at it
    await swe_repo.checkout(
        sandbox, repo="x/upstream", base_commit=base, repo_source=source, setup_cmd=None
    )
    assert (await _sh(sandbox, "git rev-parse HEAD")).strip() == base
    assert (await _sh(sandbox, "git log --all --format=%s")).split("\n")[:2] == [
        "second",
        "first",
    ]
    reachable = set((await _sh(sandbox, "git rev-list --objects HEAD | cut -d' ' -f1")).split())
    stored = await _sh(sandbox, "git cat-file --batch-all-objects --batch-check='%(objectname)'")
    assert set(stored.split()) == reachable
    for probe in ("git remote", "git tag", "git stash list", "git reflog", "git branch -a"):
        assert "agentroll" not in await _sh(sandbox, probe), probe
    assert await _sh(sandbox, "git fsck --lost-found --no-progress 2>&1") == ""
    shown = await swe_repo.sh(sandbox, f"git show {future}")
    assert shown.exit_code != 0 and "bad object" in shown.stderr
    assert await _sh(sandbox, "cat a.txt; git status --porcelain") == "two\n"


async def test_the_graders_scratch_is_emptied_of_what_the_agent_left(sandbox: Sandbox) -> None:
    scratch = swe_repo.GRADER_SCRATCH
    await _sh(
        sandbox,
        f"mkdir -p {scratch}/locked/deep && touch {scratch}/locked/deep/x {scratch}/.hidden && "
        f"chmod 0 {scratch}/locked/deep {scratch}/locked && "
        f"i=0; while head -c 16000000 /dev/zero > {scratch}/fill$i; do i=$((i+1)); done",
    )
    assert await swe_repo.clear_scratch(sandbox)
    assert await _sh(sandbox, f"ls -A {scratch}") == ""
    await swe_repo.write_file(sandbox, f"{scratch}/grade-1/file", b"ours")
    assert await _sh(sandbox, f"cat {scratch}/grade-1/file") == "ours"
