"""The `swe` grader's isolation in a real bubblewrap sandbox: the launcher keeps every module
of the repository out of pytest's process until the report channel is taken (and standard ones
out for good), a clone keeps nothing beyond `base_commit`'s ancestry, and the grader's scratch
is emptied of whatever the agent left there. The names that can be shadowed come from the
sandbox's interpreter, and in `"eval_mode": "same"` from INIT, before the agent ran. (The
image's own repository: `test_swe_image_history.py`.)"""

import shlex
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, job, marked, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers.agent import DEFAULT_LIMITS
from agentroll.handlers.builtin.swe import load_swe_tasks, swe_pytest, swe_repo, swe_shadow
from agentroll.runtime import BwrapConfig, Sandbox, SandboxSpec
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm.rules.redteam_swegrade import (
    FORGER,
    FUTURE_SHA_FILE,
    HISTORY_SETUP,
)

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
    future = (await _sh(sandbox, f"cat {FUTURE_SHA_FILE}")).strip()
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


@pytest.mark.parametrize("test_cmd", ["python -m pytest -q", "set -e\npytest -rA tests/"])
async def test_the_names_that_can_be_shadowed_come_from_the_sandboxs_interpreter(
    sandbox: Sandbox, test_cmd: str
) -> None:
    """The standard library and what is installed, never the repository's own modules (the
    interpreter of a test script: every Python 3 of the sandbox)."""
    await sandbox.upload(f"{WORKDIR}/mypkg_of_the_repo/__init__.py", b"")
    names = await swe_shadow.module_names(sandbox, test_cmd)
    assert {"json", "secrets", "tempfile", "os", "sys", "pytest", "pluggy", "iniconfig"} <= names
    assert "mypkg_of_the_repo" not in names


TASK = load_swe_tasks()[0]  # textkit
_EDIT = TASK.script["edit"]
_REPO = swe_repo.bundled_repos()[TASK.instance["repo"]]
_SOURCE = _REPO.files[_EDIT["path"]]
FIX = write(_EDIT["path"], _SOURCE.replace(_EDIT["old"], _EDIT["new"]))
SAME_MODE_ATTACKS = {
    "json": [write("json.py", FORGER)],
    "link": ["ln -s textkit pluggy"],  # `import pluggy` would be the repository's package
    "submodule": [FIX, write("textkit/json.py", "DUMPS = None\n")],
}


async def test_same_mode_refuses_shadowing_with_the_names_init_asked_for(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """In the agent's own sandbox the names come from INIT, before the agent ran."""
    jobs = [
        job(
            f"same-{name}",
            "swe",
            {
                **TASK.instance,
                "eval_mode": "same",
                "problem_statement": marked(TASK.instance["problem_statement"], name),
            },
        )
        for name in SAME_MODE_ATTACKS
    ]
    async with (
        scripted_backend(0.0, attack_rules(SAME_MODE_ATTACKS), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
    for name, path in (("json", "json.py"), ("link", "pluggy")):
        refused = results[f"same-{name}"]
        assert (refused.outcome, refused.reward) == (Outcome.ok, 0.0), refused.error
        assert refused.reward_info["reason"] == "shadows_module"
        assert refused.reward_info["shadowing_paths"] == [path]
    control = results["same-submodule"]
    # The control: a submodule named `json` shadows nothing, and the fix beside it earns 1.
    assert (control.outcome, control.reward) == (Outcome.ok, 1.0), control.error
