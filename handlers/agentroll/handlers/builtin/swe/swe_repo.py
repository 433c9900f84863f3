"""Repository work for the `swe` handler, all of it inside a sandbox through `Sandbox.exec`.

- `checkout`: a real git checkout at `base_commit` in the sandbox's workdir, either from a
  bundled repository (its files are uploaded and committed with a fixed identity and date,
  so the commit id is reproducible and checked against `base_commit`) or by cloning a git
  repository that the image (or a bind) provides at `repo_source`.
- `agent_diff`: everything the agent changed against `base_commit` (new files included).
- `PrivateIndex`: a patch applied to an index of `base_commit` of our own, to see exactly
  which paths it changes (git's own reading of the patch) and their contents before and
  after, without touching the worktree or unpacking a file anywhere.

Git itself runs code a repository asks for: filters named in `.gitattributes`, hooks,
`core.fsmonitor`, drivers in `.git/config` or in `$HOME/.gitconfig` (`$HOME` is the workdir
in a sandbox). Every git command of the grader therefore runs as a `Git`: with no global or
system configuration, no hooks, no fsmonitor and a `$HOME` of its own (`GRADER_GIT_ENV`); and
in a sandbox where the agent worked, with a git directory of its own (`Git.isolated`: the
agent's objects, none of its configuration), so nothing the agent planted in its repository
runs while it is graded.

Everything the grader writes (its git directory, indexes, the diff, the test launcher and
log) goes to `GRADER_SCRATCH`, a tmpfs of the sandbox's own that is neither `/tmp` nor the
workspace: an agent that fills those cannot make grading fail. The agent could write there too
while it ran, so `clear_scratch` empties it once every process of the agent is gone (EVAL
starts after `stop_agent`), before the grader puts anything in it; what the agent left that
cannot be removed is its own doing (reward 0, `grader_scratch_blocked`).

`strip_history` leaves a repository with `base_commit`'s ancestry and nothing else: no other
branch, tag, remote, reflog, stash, note or object (packed or loose) that a later commit, the
upstream fix included, could be read from.

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

from agentroll.handlers.builtin.sandbox_files import UnreadableFile, read_text
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
}
# No configuration but the repository's own, no hooks, no fsmonitor, no replace refs; a $HOME
# that is not the workdir (git reads $HOME/.gitconfig where GIT_CONFIG_GLOBAL is too new).
GRADER_GIT_ENV = {
    "HOME": "/nonexistent/agentroll-grader",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}
GRADER_SCRATCH = "/agentroll-grader"
"""The grader's scratch folder (a `SandboxSpec.scratch` tmpfs of every `swe` sandbox)."""
COMMIT_SCRIPT = (
    "git init -q -b main && git add -A && "
    'git commit -q --no-gpg-sign -m "Initial commit" && git rev-parse HEAD'
)
GIT_TIMEOUT_S = 120.0
SETUP_TIMEOUT_S = 600.0
CLEAR_TIMEOUT_S = 300.0
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
    """The self-made repositories shipped as `data/repos/*.json`, by `repo` name."""
    folder = resources.files("agentroll.handlers.builtin.swe").joinpath("data/repos")
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
    args: Sequence[str] = (),
) -> ExecResult:
    prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    argv = [*prefix, "sh", "-c", script, *(("sh", *args) if args else ())]
    return await sandbox.exec(argv, timeout=timeout, input=input)


@dataclass(frozen=True, slots=True)
class Git:
    """Where and how the grader runs git: a sandbox, and the environment of every command."""

    sandbox: Sandbox
    env: Mapping[str, str]

    @classmethod
    def trusted(cls, sandbox: Sandbox) -> "Git":
        """A sandbox whose repository the grader made and the agent never touched."""
        return cls(sandbox, GRADER_GIT_ENV)

    @classmethod
    async def isolated(cls, sandbox: Sandbox) -> "Git":
        """A sandbox the agent worked in: a git directory of our own over the agent's
        objects and worktree, so no configuration, hook or filter of its repository runs."""
        git_dir = grader_folder("git")
        workdir = sandbox.spec.workdir
        script = (
            f"mkdir -p {git_dir} && git init -q --bare {git_dir} && "
            f"echo {shlex.quote(workdir)}/.git/objects > {git_dir}/objects/info/alternates"
        )
        done = await sh(sandbox, script, env=GRADER_GIT_ENV)
        if done.exit_code != 0:
            raise _failed("preparing the grader's git directory", done)
        return cls(sandbox, {**GRADER_GIT_ENV, "GIT_DIR": git_dir, "GIT_WORK_TREE": workdir})

    async def run(
        self, script: str, *, input: bytes | None = None, args: Sequence[str] = (), **env: str
    ) -> ExecResult:
        """`sh -c script sh ARGS...` with this environment (and `env` on top)."""
        return await sh(self.sandbox, script, env={**self.env, **env}, input=input, args=args)


def grader_folder(kind: str) -> str:
    """A fresh folder name in the grader's scratch (created by whatever first writes there)."""
    return f"{GRADER_SCRATCH}/{kind}-{secrets.token_hex(6)}"


async def write_file(sandbox: Sandbox, path: str, data: bytes) -> None:
    """Write a grader's file (the agent's file tools, and `Sandbox.upload`, reach only the
    workdir and /tmp, not the scratch)."""
    script = 'mkdir -p "$(dirname "$1")" && cat > "$1"'
    done = await sh(sandbox, script, input=data, args=[path])
    if done.exit_code != 0:
        raise _failed(f"writing {path}", done)


# Folders the agent made unwritable are opened up first (it is the same user), then emptied.
_CLEAR_SCRATCH = (
    'chmod -R u+rwX "$1" 2>/dev/null; find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf {} +'
)


async def clear_scratch(sandbox: Sandbox) -> bool:
    """Empty the grader's scratch of whatever the agent left there (call once no process of
    the agent runs); whether it is empty now. It was empty when the sandbox started and only
    the agent wrote there since: what cannot be removed (in `CLEAR_TIMEOUT_S`, say millions
    of files) is the agent's doing."""
    script = f'{_CLEAR_SCRATCH}; [ -z "$(ls -A "$1")" ]'
    done = await sh(sandbox, script, args=[GRADER_SCRATCH], timeout=CLEAR_TIMEOUT_S)
    return done.exit_code == 0


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
        done = await sh(sandbox, COMMIT_SCRIPT, env={**GRADER_GIT_ENV, **GIT_ENV})
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
        done = await sh(sandbox, script, env=GRADER_GIT_ENV)
        if done.exit_code != 0:
            raise _failed(f"cloning {repo_source} at {base_commit}", done)
    else:
        raise InfraError(f"no source for repository {repo}", cause="repo_setup_failed")
    if setup_cmd:
        done = await sh(sandbox, setup_cmd, timeout=SETUP_TIMEOUT_S)
        if done.exit_code != 0:
            raise _failed("the instance's setup_cmd", done)
    await strip_history(sandbox, base_commit)


# HEAD detached at the commit, then every ref, remote, reflog and stash goes; `repack -a -d`
# keeps only what HEAD (and the index) reach, and `prune` the loose rest. Pack `.keep` files,
# alternates, commit graphs and multi-pack indexes could name or hold later commits: removed.
_STRIP_HISTORY = """set -e
git checkout -q --detach "$1"
for remote in $(git remote); do git remote remove "$remote"; done
git for-each-ref --format='delete %(refname)' | git update-ref --stdin
g=$(git rev-parse --git-dir)
rm -rf "$g/logs" "$g/worktrees" "$g/refs/original" "$g/rr-cache"
rm -f "$g"/ORIG_HEAD "$g"/FETCH_HEAD "$g"/MERGE_HEAD "$g"/CHERRY_PICK_HEAD "$g"/REVERT_HEAD
rm -f "$g"/objects/pack/*.keep
git repack -a -d -q
rm -f "$g/objects/info/alternates" "$g/objects/info/commit-graph" \
  "$g/objects/pack/multi-pack-index"
rm -rf "$g/objects/info/commit-graphs"
git prune --expire=now
"""


async def strip_history(sandbox: Sandbox, base_commit: str) -> None:
    """Leave the workdir's repository with `base_commit`'s ancestry only (see the module's
    docstring)."""
    done = await sh(
        sandbox, _STRIP_HISTORY, env=GRADER_GIT_ENV, timeout=SETUP_TIMEOUT_S, args=[base_commit]
    )
    if done.exit_code != 0:
        raise _failed(f"removing the history beyond {base_commit}", done)


async def agent_diff(git: Git, base_commit: str) -> str | None:
    """The agent's changes as a git diff against `base_commit` (new files included); None if
    git cannot tell (the agent removed or broke the repository). `UnreadableFile` if the
    diff is over `MAX_PATCH_BYTES`: it is written to a file and read back bounded."""
    diff_file = grader_folder("diff")
    script = (
        "git add -A && git diff --cached --binary --no-color --no-ext-diff --no-textconv "
        f"{shlex.quote(base_commit)} > {diff_file}"
    )
    done = await git.run(script)
    if done.exit_code != 0:
        return None
    try:
        return await read_text(git.sandbox, diff_file, max_bytes=MAX_PATCH_BYTES)
    finally:
        await sh(git.sandbox, f"rm -f {diff_file}")


def patched_files(patch: str) -> list[str]:
    return sorted({m.group(2) for m in _PATCHED_FILE.finditer(patch)})


async def apply(git: Git, patch: str) -> ExecResult:
    return await git.run("git apply --whitespace=nowarn -", input=patch.encode())


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
    `apply(name, patch)` adds an index `name` = base + patch. Contents are read from git's
    objects (`read`, `grep`), never unpacked into files: a patch of huge files costs nothing
    here (git stores them compressed)."""

    def __init__(self, git: Git, base_commit: str, folder: str) -> None:
        self.git, self.base_commit, self.folder = git, base_commit, folder

    @classmethod
    async def create(cls, git: Git, base_commit: str) -> "PrivateIndex":
        index = cls(git, base_commit, grader_folder("index"))
        done = await index._git("base", f"git read-tree {shlex.quote(base_commit)}")
        if done.exit_code != 0:
            raise _failed(f"reading {base_commit} into an index", done)
        return index

    async def _git(
        self, name: str, script: str, input: bytes | None = None, args: Sequence[str] = ()
    ) -> ExecResult:
        return await self.git.run(
            f"mkdir -p {self.folder} && {script}",
            input=input,
            args=args,
            GIT_INDEX_FILE=f"{self.folder}/{name}.idx",
            GIT_LITERAL_PATHSPECS="1",
        )

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

    async def entries(self, name: str) -> dict[str, str]:
        """Every path in index `name`, with its git mode (`SYMLINK_MODE` for a link)."""
        done = await self._git(name, "git ls-files -s -z")
        if done.exit_code != 0:
            raise _failed("listing the files of an index", done)
        entries = {}
        for record in done.stdout.split("\0"):  # "mode sha stage<TAB>path"
            meta, _, path = record.partition("\t")
            if path:
                entries[path] = meta.split(" ", 1)[0]
        return entries

    async def read(self, name: str, path: str, *, max_bytes: int) -> str | None:
        """The text of `path` in index `name` (None: not there); `UnreadableFile` if larger
        than `max_bytes`."""
        done = await self._git(name, _READ_BLOB, args=[path, str(max_bytes)])
        if done.exit_code == _ABSENT:
            return None
        if done.exit_code == _TOO_LARGE:
            raise UnreadableFile(f"{path} has {done.stdout.strip()} bytes, over {max_bytes}")
        if done.exit_code != 0:
            raise _failed(f"reading {path} from the index", done)
        return done.stdout

    async def grep(self, name: str, paths: Sequence[str], needle: str) -> set[str]:
        """Which of `paths` in index `name` contain `needle` (a fixed string)."""
        if not paths:
            return set()
        done = await self._git(name, _GREP, args=[needle, *paths])
        if done.exit_code not in (0, 1):  # 1: no match
            raise _failed("searching the patched files", done)
        return {p for p in done.stdout.split("\0") if p}


_ABSENT, _TOO_LARGE = 3, 4
_READ_BLOB = (
    'git cat-file -e ":$1" 2>/dev/null || exit 3\n'
    'size=$(git cat-file -s ":$1") || exit 1\n'
    '[ "$size" -le "$2" ] || { echo "$size"; exit 4; }\n'
    'git cat-file blob ":$1"'
)
_GREP = 'needle=$1; shift; git grep --cached -l -z -F -I -e "$needle" -- "$@"'


def is_test_file(path: str) -> bool:
    """A test module, a conftest or anything under a `tests` folder."""
    parts = path.split("/")
    name = parts[-1]
    return (
        "tests" in parts[:-1]
        or name == "conftest.py"
        or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))
    )


def listed_test_files(test_ids: Sequence[str]) -> set[str]:
    """The files that hold the listed tests, as pytest names them (`path::Class::test[p]`),
    whatever their names (`testing/python/collect.py` in pytest's own repository): the graded
    tests run as the instance has them. Doctests of a Python module (`pkg/mod.py::pkg.mod.f`,
    a dotted name) are left out: that file is source the fix may change."""
    files = set()
    for test_id in test_ids:
        path, _, rest = test_id.partition("::")
        item = rest.split("::", 1)[0].split("[", 1)[0]  # "": the whole module is listed
        if path and ("." not in item or not path.endswith(".py")):
            files.add(path)
    return files


async def restore(git: Git, base_commit: str, paths: Sequence[str]) -> None:
    """Put `paths` back as they were at `base_commit` (removing those that did not exist)."""
    if not paths:
        return
    quoted = " ".join(shlex.quote(p) for p in paths)
    script = (
        f'for f in {quoted}; do git checkout -q {shlex.quote(base_commit)} -- "$f" '
        '2>/dev/null || rm -f -- "$f"; done'
    )
    done = await git.run(script)
    if done.exit_code != 0:
        raise _failed("restoring the test files", done)


def as_list(value: Any) -> list[str]:
    """SWE-bench rows store test lists as JSON strings; accept both forms."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of test ids (or a JSON string of one)")
    return value
