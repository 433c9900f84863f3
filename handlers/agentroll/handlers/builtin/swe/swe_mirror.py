"""The image's own repository without its later history: a git directory shown in place of
`<repo_source>/.git` in every `swe` sandbox.

The instance's `repo_source` lives in the image (SWE-bench keeps a full clone at `/testbed`),
and the sandbox can read the whole image: stripping the agent's checkout alone would leave
the upstream fix one `git -C /testbed log --all` away. For an image that is a root file
system on this host, the server makes (once per image, repository and commit; cached) a bare
copy of that repository holding `base_commit`'s ancestry only, and the sandbox gets it
read-only over `<repo_source>/.git`. The checkout then clones from it, and what the agent can
read of the image's repository is what it may know. The files of the image's working tree
stay as they are (an editable install keeps working).

A `repo_source` whose `.git` is a `gitdir:` file (a linked worktree, a submodule) is refused
(`infra_error`): a copy shown over that file would leave the git directory it names, and its
history, readable.

Not covered: a `.sif` image (its file system is not a folder of this host): prepare such
images without the history (docs/swe-images.md).
"""

import asyncio
import hashlib
import os
import secrets
import shutil
from pathlib import Path

from agentroll.handlers.builtin.swe.swe_repo import GRADER_GIT_ENV
from agentroll.handlers.errors import InfraError
from agentroll.runtime import procs
from agentroll.runtime.sandbox import spawn
from agentroll.runtime.settings import CacheSettings, cache_settings

CACHE_ENV = CacheSettings.env_name("swe_mirrors")
MIRROR_TIMEOUT_S = 600.0
# A bare copy with HEAD at the commit and no ref: `repack -a -d` keeps what HEAD reaches.
_STRIP_BARE = """set -e
git update-ref --no-deref HEAD "$1"
git for-each-ref --format='delete %(refname)' | git update-ref --stdin
rm -rf logs objects/info/commit-graph objects/info/commit-graphs
rm -f objects/pack/*.keep objects/pack/multi-pack-index FETCH_HEAD ORIG_HEAD
git repack -a -d -q
rm -f objects/info/alternates
git prune --expire=now
"""


def cache_dir() -> Path:
    return cache_settings().swe_mirrors


def image_repository(image: Path | None, repo_source: str | None) -> Path | None:
    """The host folder of the image's repository when the image is a root file system here
    and `repo_source` a git work tree inside it; else None. `InfraError` where its `.git` is
    a file (a linked worktree's or a submodule's `gitdir:`): the history it points to could
    not be hidden."""
    if image is None or repo_source is None or not image.is_dir():
        return None
    root = image.resolve()
    source = (root / repo_source.lstrip("/")).resolve()
    # A link in the image (`/testbed -> /`) must not reach the host's own folders.
    if not source.is_relative_to(root):
        return None
    git = source / ".git"
    if git.exists() and not git.is_dir():
        raise InfraError(
            f"{repo_source}/.git in the image is a file (a `gitdir:` link), not a repository: "
            "its history cannot be hidden from the agent; make it a plain clone "
            "(docs/swe-images.md)",
            cause="repo_setup_failed",
        )
    return source if git.is_dir() else None


async def history_free_git_dir(source: Path, base_commit: str) -> Path:
    """A bare copy of `source` with `base_commit`'s ancestry only (cached); `InfraError` if
    git cannot make it (the image or the instance is broken)."""
    key = hashlib.sha256(f"{source}\0{base_commit}".encode()).hexdigest()[:32]
    target = cache_dir() / key
    if target.is_dir():
        return target
    building = target.with_name(f"{key}.{secrets.token_hex(4)}.tmp")
    await asyncio.to_thread(building.parent.mkdir, parents=True, exist_ok=True)
    try:
        await _git("clone", "-q", "--bare", "--no-local", "--", str(source), str(building))
        await _git("-C", str(building), "-c", "gc.auto=0", "rev-parse", "--verify", base_commit)
        await _sh(building, _STRIP_BARE, base_commit)
        try:
            await asyncio.to_thread(building.rename, target)
        except OSError:  # another rollout made it first
            if not target.is_dir():
                raise
    finally:
        await asyncio.to_thread(shutil.rmtree, building, True)
    return target


async def _git(*args: str) -> None:
    await _run(["git", *args], cwd=None)


async def _sh(cwd: Path, script: str, *args: str) -> None:
    await _run(["sh", "-c", script, "sh", *args], cwd=cwd)


async def _run(argv: list[str], cwd: Path | None) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **GRADER_GIT_ENV}
    process = await spawn(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(MIRROR_TIMEOUT_S):
            _, stderr = await process.communicate()
    except BaseException as exc:
        procs.kill_led_group(process)
        await asyncio.shield(process.wait())
        if not isinstance(exc, TimeoutError):
            raise
        raise InfraError(
            f"copying the image's repository took over {MIRROR_TIMEOUT_S:g} s",
            cause="repo_setup_failed",
        ) from None
    if process.returncode != 0:
        detail = stderr.decode(errors="replace").strip()[-800:]
        raise InfraError(
            f"copying the image's repository without its later history failed "
            f"({' '.join(argv[:3])}: exit {process.returncode}): {detail}",
            cause="repo_setup_failed",
        )
