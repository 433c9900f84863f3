"""Reading files the agent wrote, from inside a sandbox, without trusting them.

`read_text` goes through `Sandbox.exec` (a fresh process in the sandbox, not the agent's
tool server) and bounds what it reads: a file the agent made huge, a FIFO that never ends, a
device or a folder in its place is an `UnreadableFile` (the agent's doing), never an endless
read. A sandbox that fails raises its own `SandboxError` (infrastructure).
"""

from agentroll.handlers.errors import MissingFile, UnreadableFile
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
