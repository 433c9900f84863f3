"""Where a server keeps its API token, shared by the server and the clients that find it.

A server started without `api_token` generates one and keeps it, readable by its own user
only, in `api-token` beside its store (its state directory): `var/api-token` by default, or
`token_file` (`AGENTROLL_TOKEN_FILE`). A client on the same machine reads it from there; a
client elsewhere is handed the token.
"""

import ipaddress
import os
from pathlib import Path

API_TOKEN_ENV = "AGENTROLL_API_TOKEN"
"""The server's `api_token` setting; a client given no token uses it too."""
TOKEN_FILE_ENV = "AGENTROLL_TOKEN_FILE"
"""The server's `token_file` setting; a client given no token reads the token there."""
DEFAULT_DB_PATH = Path("var/agentroll.db")
TOKEN_FILE_NAME = "api-token"


def is_loopback(host: str) -> bool:
    """`host` (a name or an address, IPv6 with or without brackets) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_token_file(db_path: Path = DEFAULT_DB_PATH) -> Path:
    """The token file of a server whose store is `db_path`: `api-token` beside it."""
    return db_path.parent / TOKEN_FILE_NAME


MAX_TOKEN_FILE_BYTES = 4096


def parse_token(raw: bytes, source: str) -> str:
    """The token in a token file's bytes (surrounding whitespace ignored); `ValueError`
    unless they hold one printable word (it goes into a header)."""
    token = raw.decode("ascii", errors="replace").strip()
    if not token or len(raw) > MAX_TOKEN_FILE_BYTES or not all(33 <= ord(c) < 127 for c in token):
        raise ValueError(f"{source} does not hold a bearer token")
    return token


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in `path`; `FileNotFoundError` if there is none, `ValueError` if it holds
    no token."""
    with open(path, "rb") as f:
        return parse_token(f.read(MAX_TOKEN_FILE_BYTES + 1), os.fspath(path))
