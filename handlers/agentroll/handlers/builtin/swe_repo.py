"""Repository work for the `swe` handler, all of it inside a sandbox through `Sandbox.exec`.

- `checkout`: a real git checkout at `base_commit` in the sandbox's workdir, either from a
  bundled repository (its files are uploaded and committed with a fixed identity and date,
  so the commit id is reproducible and checked against `base_commit`) or by cloning a git
  repository that the image (or a bind) provides at `repo_source`.
- `agent_diff`: everything the agent changed against `base_commit` (new files included).
- `PrivateIndex`: a patch applied to an index of `base_commit` of our own, to see exactly
  which paths it changes (git's own reading of the patch) and their contents before and
  after, without touching the worktree.

Failures of the machinery raise `InfraError`; what the agent caused comes back as data.
"""

import json
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from agentroll.handlers.builtin.sandbox_files import read_text
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
MAX_PATCH_BYTES = 32 << 20
SYMLINK_MODE = "120000"
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
    """The agent's changes as a git diff against `base_commit` (new files included); None if
    git cannot tell (the agent removed or broke the repository). `UnreadableFile` if the
    diff is over `MAX_PATCH_BYTES`: it is written to a file and read back bounded."""
    diff_file = f"/tmp/agentroll-diff-{secrets.token_hex(6)}"
    script = (
        "git add -A && git diff --cached --binary --no-color --no-ext-diff --no-textconv "
        f"{shlex.quote(base_commit)} > {diff_file}"
    )
    done = await sh(sandbox, script)
    if done.exit_code != 0:
        return None
    try:
        return await read_text(sandbox, diff_file, max_bytes=MAX_PATCH_BYTES)
    finally:
        await sh(sandbox, f"rm -f {diff_file}")


def patched_files(patch: str) -> list[str]:
    return sorted({m.group(2) for m in _PATCHED_FILE.finditer(patch)})


async def apply(sandbox: Sandbox, patch: str) -> ExecResult:
    return await sh(sandbox, "git apply --whitespace=nowarn -", input=patch.encode())


@dataclass(frozen=True, slots=True)
class Change:
    """One path a patch changes, with its git modes before and after ("000000": absent)."""

    path: str
    old_mode: str
    new_mode: str

    @property
    def symlink(self) -> bool:
        return SYMLINK_MODE in (self.old_mode, self.new_mode)


def parse_raw_diff(text: str) -> list[Change]:
    """`git diff --raw -z` records: ":old_mode new_mode old_sha new_sha status" NUL path NUL."""
    fields = text.split("\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if meta.startswith(":"):
            old_mode, new_mode = meta[1:].split()[:2]
            changes.append(Change(path, old_mode, new_mode))
    return changes


class PrivateIndex:
    """Git indexes of `base_commit` in a folder of their own, to apply patches to and compare
    without touching the worktree or the repository's index: `base` is the commit itself,
    `apply(name, patch)` adds an index `name` = base + patch."""

    def __init__(self, sandbox: Sandbox, base_commit: str, folder: str) -> None:
        self.sandbox, self.base_commit, self.folder = sandbox, base_commit, folder

    @classmethod
    async def create(cls, sandbox: Sandbox, base_commit: str) -> "PrivateIndex":
        index = cls(sandbox, base_commit, f"/tmp/agentroll-index-{secrets.token_hex(6)}")
        done = await index._git("base", f"git read-tree {shlex.quote(base_commit)}")
        if done.exit_code != 0:
            raise _failed(f"reading {base_commit} into an index", done)
        return index

    async def _git(self, name: str, script: str, input: bytes | None = None) -> ExecResult:
        env = {"GIT_INDEX_FILE": f"{self.folder}/{name}.idx"}
        return await sh(self.sandbox, f"mkdir -p {self.folder} && {script}", env=env, input=input)

    async def apply(self, name: str, patch: str) -> ExecResult:
        base = f"{self.folder}/base.idx"
        script = f'cp {base} "$GIT_INDEX_FILE" && git apply --cached --whitespace=nowarn -'
        return await self._git(name, script, input=patch.encode())

    async def changes(self, name: str) -> list[Change]:
        """Every path index `name` changes against the commit (renames as delete + add)."""
        script = f"git diff-index --cached --raw -z --no-renames {shlex.quote(self.base_commit)}"
        done = await self._git(name, script)
        if done.exit_code != 0:
            raise _failed("listing the patch's changes", done)
        return parse_raw_diff(done.stdout)

    async def export(self, name: str, paths: Sequence[str]) -> str:
        """A folder holding `paths` as index `name` has them (those it has)."""
        folder = f"{self.folder}/{name}-files/"
        # Paths the index does not have are reported and skipped: the exit status is not ours.
        script = (
            f"mkdir -p {folder} && {{ git checkout-index -z --stdin --prefix={folder}; true; }}"
        )
        await self._git(name, script, input=b"\0".join(p.encode() for p in paths))
        return folder


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


def as_list(value: Any) -> list[str]:
    """SWE-bench rows store test lists as JSON strings; accept both forms."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of test ids (or a JSON string of one)")
    return value
