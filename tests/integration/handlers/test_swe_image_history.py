"""The image's own copy of a SWE repository (SWE-bench keeps a full clone at `/testbed`) is
shown to the sandbox without its later history, in a real root-file-system image."""

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, job, marked, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend
from tests.support.images import CACHE, needs_real_build

from agentroll.handlers.builtin.swe import load_swe_tasks, swe_mirror, swe_repo
from agentroll.runtime.images import build_image
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm.rules.redteam_swegrade import (
    FUTURE_MARKER,
    FUTURE_SHA_FILE,
    HISTORY_SETUP,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800), *needs_real_build]

TASK = load_swe_tasks()[0]  # textkit
_EDIT = TASK.script["edit"]
_REPO = swe_repo.bundled_repos()[TASK.instance["repo"]]
FIX = write(_EDIT["path"], _REPO.files[_EDIT["path"]].replace(_EDIT["old"], _EDIT["new"]))


@pytest.fixture
def image_with_history(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A copy of the `swe-task` image (hard links) whose `/testbed` is the task's repository
    at its base commit, with later history of every kind; and that later commit's id."""
    built = asyncio.run(
        build_image("swe-task", fmt="rootfs", cache="versioned", images_dir=CACHE, timeout_s=900)
    )
    rootfs = Path(tempfile.mkdtemp(prefix="swegrade-image-", dir=CACHE.parent))
    try:
        subprocess.run(["cp", "-al", f"{built.path}/.", str(rootfs)], check=True)
        testbed = rootfs / "testbed"
        for path, text in _REPO.files.items():
            (testbed / path).parent.mkdir(parents=True, exist_ok=True)
            (testbed / path).write_text(text)
        env = {**os.environ, **swe_repo.GRADER_GIT_ENV, **swe_repo.GIT_ENV}
        head = subprocess.run(
            ["sh", "-c", swe_repo.COMMIT_SCRIPT], cwd=testbed, env=env, check=True,
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        assert head == _REPO.base_commit
        future_file = tmp_path / "future"
        setup = HISTORY_SETUP.replace(FUTURE_SHA_FILE, str(future_file))
        subprocess.run(["sh", "-c", setup], cwd=testbed, env=env, check=True)
        yield rootfs, future_file.read_text()
    finally:
        shutil.rmtree(rootfs)


async def test_the_images_own_repository_shows_no_later_history(
    agentroll_server: ServerFactory,
    tmp_path: Path,
    image_with_history: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SWE-bench keeps a full clone at `/testbed` in the image: the sandbox sees a copy of its
    git directory with `base_commit`'s ancestry only, and the fix cloned from it earns 1."""
    rootfs, future = image_with_history
    mirrors = tmp_path / "mirrors"
    monkeypatch.setenv(swe_mirror.CACHE_ENV, str(mirrors))
    probe = (
        f"git -C /testbed log --all --oneline; git -C /testbed show {future}; "
        "git -C /testbed cat-file --batch-all-objects --batch-check; "
        f"git log --all --oneline; git show {future}"
    )
    attacks = {"probe": [probe, FIX]}
    instance = {
        **TASK.instance,
        "problem_statement": marked(TASK.instance["problem_statement"], "probe"),
        "image": str(rootfs),
        "repo_source": "/testbed",
        "workdir": "/workspace",
        "test_cmd": "python3 -m pytest -rA -p no:cacheprovider --tb=no -q",
    }
    async with (
        scripted_backend(0.0, attack_rules(attacks), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, [job("probe", "swe", instance)], timeout_s=600)
    t = results["probe"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), (t.error, t.reward_info)
    seen = "\n".join(str(m.get("content")) for m in t.messages if m.get("role") == "tool")
    assert "Initial commit" in seen and "bad object" in seen, seen[-1500:]
    assert FUTURE_MARKER not in seen
    assert len(list(mirrors.iterdir())) == 1  # made once, then shown to both sandboxes
    # The later commit's id shows only where git says it has no such object.
    assert seen.count(future) == seen.count(f"bad object {future}") == 2, seen[-1500:]
