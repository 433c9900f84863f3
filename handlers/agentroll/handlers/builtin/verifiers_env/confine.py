"""A verifiers worker runs confined: a bubblewrap sandbox of its own, with no network.

An environment's reward functions read the policy's reply, and some run it (a code task that
executes the completion to test it). So the worker never runs with the server's reach: it sees
the host's system directories read-only (`/etc`'s private files masked, as in every sandbox:
`agentroll.runtime.hostroot`), its own virtual environment and base interpreter and the folder of
its script, all read-only, and a private `/tmp`; not `/root`, `/home`, the server's state or
the job store. It has no network (its own empty network namespace), no capabilities, its own
user, PID and IPC namespaces, and dies with the server. What reaches the server is its reply on
a pipe: numbers and names.

Without bubblewrap, verifiers environments do not run (a worker that cannot start:
`infra_error`), rather than run unconfined.
"""

import shutil
from collections.abc import Mapping
from pathlib import Path

from agentroll.handlers.errors import Unconfinable
from agentroll.runtime.bwrap import root_args

THP_SETTINGS = Path("/sys/kernel/mm/transparent_hugepage")
"""The kernel's transparent huge page settings, the one part of `/sys` the worker sees
(read-only): its malloc asks for huge pages only where they say the kernel offers them
(`workers.FORK_FRIENDLY_ENV`)."""

SANDBOX_UID = 65534
"""The worker's user inside its sandbox (nobody): host files it can read are world-readable."""


def base_prefix(python: Path) -> Path:
    """The base interpreter's prefix a virtual environment runs on (its `pyvenv.cfg` home)."""
    config = python.parent.parent / "pyvenv.cfg"
    for line in config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).resolve().parent
    raise Unconfinable(f"{config} names no base interpreter")


def confined_argv(
    python: Path, command: list[str], script_dir: Path, env: Mapping[str, str] | None = None
) -> list[str]:
    """`command` (run by the venv's `python`) inside a sandbox of its own, whose environment
    holds `PATH`, `HOME` and `env`, nothing of the server's."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise Unconfinable(
            "bubblewrap (bwrap) is not installed: verifiers environments run only confined"
        )
    venv = python.parent.parent
    argv = [
        bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "verifiers",
    ]  # fmt: skip
    argv += root_args(None)
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if THP_SETTINGS.is_dir():  # read by glibc's malloc before it asks for huge pages
        argv += ["--ro-bind", str(THP_SETTINGS), str(THP_SETTINGS)]
    for path in sorted({str(venv), str(base_prefix(python)), str(script_dir)}):
        argv += ["--ro-bind", path, path]
    argv += ["--remount-ro", "/", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin"]
    argv += ["--setenv", "HOME", "/tmp"]
    for name, value in (env or {}).items():
        argv += ["--setenv", name, value]
    argv += ["--chdir", "/tmp", "--", *command]
    return argv
