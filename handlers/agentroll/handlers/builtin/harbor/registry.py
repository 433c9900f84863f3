"""Harbor datasets by `name@version` from a `registry.json`: their tasks as `harbor` instances.

A Harbor registry is a JSON list of datasets, each `{"name", "version", "description",
"tasks": [{"name", "path", "git_url"?, "git_commit_id"?}], "metrics"?}`. A task without
`git_url` is a folder on this machine (`path` absolute, or relative to the registry file's
folder); one with `git_url` is the folder `path` of that repository at `git_commit_id`
(its default branch's head when absent, as of the first checkout: pin commits for
reproducible datasets). Repositories are checked out once per URL and commit under the image
cache (`harbor-registry/`), a clone bounded in time, and reused after.

Harbor's own registry lives online (`harbor datasets list`); agentroll reads a registry file:
download it (and let the checkouts reach the repositories) on a machine with network access.
Every task folder is read (`load_task`) before its instance is returned, so a dataset with a
broken task fails here, not in a rollout.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentroll.handlers.builtin.harbor.source import cache_dir
from agentroll.handlers.builtin.harbor.task import TaskFormatError, load_task
from agentroll.handlers.errors import HarborRegistryError
from agentroll.runtime.images.cache import held
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout
from agentroll.runtime.images.proc import run_logged

CLONE_TIMEOUT_S = 600.0


class RegistryTask(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    path: str
    git_url: str | None = None
    git_commit_id: str | None = None


class RegistryDataset(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    version: str
    description: str = ""
    tasks: list[RegistryTask] = Field(default_factory=list)


def read_registry(path: Path) -> list[RegistryDataset]:
    try:
        rows = json.loads(path.read_text())
        if not isinstance(rows, list):
            raise HarborRegistryError(f"{path}: a registry is a JSON list of datasets")
        return [RegistryDataset.model_validate(row) for row in rows]
    except (OSError, ValueError, ValidationError) as exc:
        if isinstance(exc, HarborRegistryError):
            raise
        raise HarborRegistryError(f"{path}: {exc}") from exc


def find_dataset(datasets: list[RegistryDataset], ref: str) -> RegistryDataset:
    """The dataset `name@version` names (`name` alone: its only version)."""
    name, _, version = ref.partition("@")
    versions = [d for d in datasets if d.name == name]
    if not versions:
        known = ", ".join(sorted({d.name for d in datasets})) or "none"
        raise HarborRegistryError(f"no dataset {name!r} in the registry (datasets: {known})")
    if not version and len(versions) == 1:
        return versions[0]
    chosen = [d for d in versions if d.version == version]
    if not chosen:
        listed = ", ".join(f"{name}@{d.version}" for d in versions)
        raise HarborRegistryError(f"{ref!r}: name a version: {listed}")
    return chosen[0]


def _inside(root: Path, relative: str, what: str) -> Path:
    """`root/relative`, refused if it leaves `root` (`..`, an absolute path, a link out)."""
    folder = (root / relative).resolve()
    if not folder.is_relative_to(root.resolve()):
        raise HarborRegistryError(f"{what}: path {relative!r} leaves {root}")
    return folder


async def _checkout(git_url: str, commit: str | None, base: Path) -> Path:
    """The repository at `commit`, cloned once under `base` (a half clone is never kept)."""
    key = hashlib.sha256(f"{git_url}@{commit or 'HEAD'}".encode()).hexdigest()[:16]
    target = base / key
    async with held(base / ".locks" / f"{key}.lock", timeout_s=CLONE_TIMEOUT_S + 60, what=key):
        if target.is_dir():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=base))
        log = base / f"{key}.log"
        try:
            repo = scratch / "repo"
            git = ["git", "-c", "advice.detachedHead=false"]
            await run_logged(
                [*git, "clone", "--quiet", "--", git_url, str(repo)],
                log_path=log,
                timeout_s=CLONE_TIMEOUT_S,
            )
            if commit:
                await run_logged(
                    [*git, "-C", str(repo), "checkout", "--quiet", "--detach", commit, "--"],
                    log_path=log,
                    timeout_s=CLONE_TIMEOUT_S,
                )
            repo.rename(target)
        except (BuildFailed, BuildTimeout) as exc:
            raise HarborRegistryError(
                f"cannot check out {git_url} at {commit or 'HEAD'}: {exc}"
            ) from exc
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


async def dataset_instances(
    registry: Path, ref: str, *, checkouts: Path | None = None, **fields: Any
) -> list[dict[str, Any]]:
    """One `harbor` instance per task of dataset `ref` (`name@version`) in `registry`, each
    `{"path": <the task folder>, **fields}` (`fields`: `reward_key`, `agent`, `image`...)."""
    dataset = find_dataset(read_registry(registry), ref)
    base = checkouts or cache_dir() / "harbor-registry"
    base.mkdir(parents=True, exist_ok=True)
    instances = []
    for task in dataset.tasks:
        what = f"{dataset.name}@{dataset.version} task {task.name!r}"
        if task.git_url is None:
            folder = (registry.parent / task.path).resolve()
        else:
            repo = await _checkout(task.git_url, task.git_commit_id, base)
            folder = _inside(repo, task.path, what)
        try:
            load_task(folder)
        except (TaskFormatError, OSError) as exc:
            raise HarborRegistryError(f"{what}: {exc}") from exc
        instances.append({"path": str(folder), **fields})
    return instances
