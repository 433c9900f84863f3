"""The server's API tokens: configured, or generated once and kept in its state directory.

With no `api_token` configured the server is never open: it generates a token
(`secrets.token_urlsafe`) and keeps it in `token_file` (default `api-token` beside the store).
The file is created complete and private, or not at all: written to a fresh `0600` file first,
then linked into place, so no reader ever sees it half-written or readable by others, and two
servers starting on one state directory agree on one token (the second reads the first's).

It is reused across restarts: a trainer's client, holding the token, keeps working when the
server comes back on the same state directory. To rotate it, stop the server, delete the file.
A token file that another user owns or could read is refused (it may have leaked), and so is
one where host-root sandboxes would see it.
"""

import errno
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from agentroll.runtime.hostroot import seen_by_sandboxes
from agentroll.server.schema.auth import MAX_TOKEN_FILE_BYTES, default_token_file, parse_token
from agentroll.server.settings import Settings, UnsafeSettingsError

log = logging.getLogger("agentroll.server")


@dataclass(frozen=True)
class ApiTokens:
    api: str
    """Every route but the open ones."""
    admin: str | None
    """When set, the only token for the admin routes (and it works on every other route)."""


def api_tokens(settings: Settings) -> ApiTokens:
    """The tokens this server checks: the configured ones, else one kept in the token file."""
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    if settings.api_token is not None:
        return ApiTokens(settings.api_token.get_secret_value(), admin)
    path = settings.token_file or default_token_file(settings.db_path)
    return ApiTokens(load_or_create_token(path), admin)


def load_or_create_token(path: Path) -> str:
    """The token kept in `path`, generated and written there first if there is none."""
    if seen_by_sandboxes(path):
        raise UnsafeSettingsError(
            f"token file {path} is in a directory sandboxes see: move the store (db_path) "
            "or token_file elsewhere"
        )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return _read_private(path)
    except FileNotFoundError:
        pass
    if _create(path, secrets.token_urlsafe(32)):
        log.info("generated an API token in %s (clients on this machine read it there)", path)
    return _read_private(path)  # ours, or that of a server that linked its file first


def _read_private(path: Path) -> str:
    """The token in `path` if only this user can read it (never through a symlink)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UnsafeSettingsError(f"token file {path} is a symbolic link: refused") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise UnsafeSettingsError(
                f"token file {path} is not a private file of this user (mode "
                f"{stat.filemode(st.st_mode)}, uid {st.st_uid}): it may have leaked; delete it "
                "to have a new token generated"
            )
        return parse_token(os.read(fd, MAX_TOKEN_FILE_BYTES + 1), str(path))
    finally:
        os.close(fd)


def _create(path: Path, token: str) -> bool:
    """Link a complete `0600` file holding `token` at `path`, unless one is there already
    (False)."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(staging, flags, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
            os.write(fd, f"{token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(staging, path)  # never replaces: a file already there wins
        except FileExistsError:
            return False
    finally:
        staging.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the link survives a crash: the next start reuses this token
    finally:
        os.close(dir_fd)
    return True
