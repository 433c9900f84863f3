"""Harbor datasets by `name@version` from a local registry.json: local task folders and tasks
in git repositories (a local repository here: no network), each resolved to a `harbor`
instance whose task folder reads; unknown names, missing versions, broken tasks and paths that
leave their checkout are refused with a message that says which."""

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.harbor.handler import HarborInstance, resolve_task
from agentroll.handlers.builtin.harbor.registry import HarborRegistryError, dataset_instances
from agentroll.handlers.builtin.harbor.source import bundled_task


def write_registry(folder: Path, datasets: list[dict[str, Any]]) -> Path:
    path = folder / "registry.json"
    path.write_text(json.dumps(datasets))
    return path


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


@pytest.fixture
def local_registry(tmp_path: Path) -> Path:
    for name in ("hello-file", "word-stats", "fix-script"):
        shutil.copytree(bundled_task(name), tmp_path / "tasks" / name)
    (tmp_path / "tasks" / "empty").mkdir()
    return write_registry(
        tmp_path,
        [
            {
                "name": "demo",
                "version": "1.0",
                "description": "two tasks",
                "tasks": [
                    {"name": "hello", "path": "tasks/hello-file"},
                    {"name": "stats", "path": "tasks/word-stats"},
                ],
            },
            {
                "name": "demo",
                "version": "2.0",
                "description": "",
                "tasks": [{"name": "fix", "path": str(tmp_path / "tasks" / "fix-script")}],
            },
            {
                "name": "broken",
                "version": "1",
                "description": "",
                "tasks": [{"name": "empty", "path": "tasks/empty"}],
            },
        ],
    )


async def test_a_dataset_version_becomes_harbor_instances(
    local_registry: Path, tmp_path: Path
) -> None:
    instances = await dataset_instances(
        local_registry, "demo@1.0", checkouts=tmp_path / "co", reward_key="score"
    )
    assert instances == [
        {"path": str(tmp_path / "tasks" / "hello-file"), "reward_key": "score"},
        {"path": str(tmp_path / "tasks" / "word-stats"), "reward_key": "score"},
    ]
    for instance in instances:  # what the harbor handler accepts and reads
        assert resolve_task(HarborInstance.model_validate(instance)).instruction
    (other,) = await dataset_instances(local_registry, "demo@2.0", checkouts=tmp_path / "co")
    assert other == {"path": str(tmp_path / "tasks" / "fix-script")}


async def test_unknown_names_missing_versions_and_broken_tasks_are_refused(
    local_registry: Path, tmp_path: Path
) -> None:
    co = tmp_path / "co"
    with pytest.raises(HarborRegistryError, match=r"no dataset 'nope' .*datasets: broken, demo"):
        await dataset_instances(local_registry, "nope@1.0", checkouts=co)
    with pytest.raises(HarborRegistryError, match=r"name a version: demo@1.0, demo@2.0"):
        await dataset_instances(local_registry, "demo", checkouts=co)
    with pytest.raises(HarborRegistryError, match=r"'demo@3.0'"):
        await dataset_instances(local_registry, "demo@3.0", checkouts=co)
    with pytest.raises(HarborRegistryError, match=r"broken@1 task 'empty'"):
        await dataset_instances(local_registry, "broken@1", checkouts=co)


async def test_tasks_in_a_git_repository_are_checked_out_at_their_commit_once(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "origin"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    shutil.copytree(bundled_task("hello-file"), repo / "tasks" / "hello-file")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "a task")
    pinned = git(repo, "rev-parse", "HEAD")
    git(repo, "rm", "--quiet", "-r", "tasks")
    git(repo, "commit", "--quiet", "-m", "the task is gone at the head")
    task = {"name": "hello", "git_url": f"file://{repo}", "git_commit_id": pinned}
    registry = write_registry(
        tmp_path,
        [
            {
                "name": "remote",
                "version": "1",
                "description": "",
                "tasks": [{**task, "path": "tasks/hello-file"}],
            },
            {
                "name": "escape",
                "version": "1",
                "description": "",
                "tasks": [{**task, "path": "../../.."}],
            },
        ],
    )
    co = tmp_path / "co"

    (instance,) = await dataset_instances(registry, "remote@1", checkouts=co)

    folder = Path(instance["path"])
    assert folder.is_relative_to(co) and (folder / "task.toml").is_file()
    assert resolve_task(HarborInstance.model_validate(instance)).instruction
    (folder / "marker").write_text("kept")  # a second resolution reuses the checkout
    (again,) = await dataset_instances(registry, "remote@1", checkouts=co)
    assert again == instance and (folder / "marker").read_text() == "kept"
    with pytest.raises(HarborRegistryError, match=r"path '../../..' leaves"):
        await dataset_instances(registry, "escape@1", checkouts=co)
