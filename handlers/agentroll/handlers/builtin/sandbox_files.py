"""Reading files the agent wrote, from inside a sandbox, without trusting them.

Both helpers go through `Sandbox.exec` (a fresh process in the sandbox, not the agent's
tool server, which the agent may have killed). `read_text` bounds what it reads: a file the
agent made huge, a FIFO that never ends, a device or a folder in its place is an
`UnreadableFile` (the agent's doing), never an endless read. `files_containing` searches many
files in one process. A sandbox that fails raises its own `SandboxError` (infrastructure).
"""

from collections.abc import Sequence

from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox

READ_TIMEOUT_S = 60.0
_NOT_A_FILE, _TOO_LARGE = 3, 4
# Checks the size before reading, then reads at most the limit (the file may still grow).
_READ_SCRIPT = (
    '[ -f "$1" ] || exit 3; '
    'size=$(wc -c < "$1") || exit 1; '
    '[ "$size" -le "$2" ] || { echo "$size"; exit 4; }; '
    'exec head -c "$2" -- "$1"'
)


class UnreadableFile(Exception):
    """The file is missing, not a regular file, too large or cannot be read."""


class MissingFile(UnreadableFile):
    """There is no regular file at the path."""


async def read_text(sandbox: Sandbox, path: str, *, max_bytes: int) -> str:
    """The text of `path` in `sandbox` (undecodable bytes replaced), at most `max_bytes`."""
    done = await sandbox.exec(
        ["sh", "-c", _READ_SCRIPT, "sh", path, str(max_bytes)], timeout=READ_TIMEOUT_S
    )
    if done.timed_out:
        raise UnreadableFile(f"{path} could not be read within {READ_TIMEOUT_S:g} s")
    if done.exit_code == _NOT_A_FILE:
        raise MissingFile(f"{path} does not exist or is not a regular file")
    if done.exit_code == _TOO_LARGE:
        size = done.stdout.strip()
        raise UnreadableFile(f"{path} has {size} bytes, over the limit of {max_bytes} bytes")
    if done.exit_code != 0:
        raise UnreadableFile(f"{path} cannot be read: {done.stderr.strip()[-300:]}")
    return done.stdout


async def files_containing(
    sandbox: Sandbox, root: str, paths: Sequence[str], needle: str
) -> set[str]:
    """Which of `paths` (relative to `root`) contain `needle`; missing ones do not."""
    if not paths:
        return set()
    script = 'cd "$1" && xargs -0 grep -l -Z -F -s -e "$2" --'
    done = await sandbox.exec(
        ["sh", "-c", script, "sh", root, needle],
        input=b"\0".join(p.encode() for p in paths),
        timeout=READ_TIMEOUT_S,
    )
    # xargs: 0 = every grep matched, 123 = some grep found nothing (1) or a file vanished (2).
    if done.timed_out or done.exit_code not in (0, 123):
        raise InfraError(
            f"searching files in the sandbox failed (exit {done.exit_code}): "
            f"{done.stderr.strip()[-300:]}",
            cause="sandbox_tools_missing",
        )
    return {p for p in done.stdout.split("\0") if p}
