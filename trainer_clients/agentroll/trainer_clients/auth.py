"""Which bearer token a client sends when it is not handed one.

A server started without a configured token generates one and keeps it in its state
directory (see `agentroll.server.schema.auth`), so a client on the same machine finds it
there; a trainer on another node is handed the token (`token=`), as the server's operator
configured it.
"""

import os
from collections.abc import Generator

import httpx

from agentroll.server.schema.auth import (
    API_TOKEN_ENV,
    TOKEN_FILE_ENV,
    default_token_file,
    is_loopback,
    read_token_file,
)

TokenFile = str | os.PathLike[str]


def resolve_token(
    base_url: str, token: str | None = None, token_file: TokenFile | None = None
) -> str | None:
    """The token for `base_url`, from the first source named: `token`; `token_file`;
    `$AGENTROLL_API_TOKEN`; `$AGENTROLL_TOKEN_FILE`; and, for a server on this machine's
    loopback only, the token a server with the default store (`var/agentroll.db`, relative
    to the working directory) generated in `var/api-token`.

    None when the file of the first source named does not exist (yet: a server writes it
    when it starts). `ValueError` when it holds no token.
    """
    if token is not None:
        return token
    if token_file is None and (from_env := os.environ.get(API_TOKEN_ENV)):
        return from_env
    path: TokenFile | None = token_file or os.environ.get(TOKEN_FILE_ENV)
    if path is None and is_loopback(httpx.URL(base_url).host):
        path = default_token_file()
    try:
        return None if path is None else read_token_file(path)
    except FileNotFoundError:
        return None


class FoundToken(httpx.Auth):
    """Sends the token `resolve_token` finds, looking again before each request until it
    finds one (a client may well be made before its server has started and written it)."""

    def __init__(self, base_url: str, token: str | None, token_file: TokenFile | None) -> None:
        self._base_url, self._token_file = base_url, token_file
        self._token = resolve_token(base_url, token, token_file)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._token is None:
            self._token = resolve_token(self._base_url, None, self._token_file)
        if self._token is not None:
            request.headers["authorization"] = f"Bearer {self._token}"
        yield request


def auth_headers(
    base_url: str, token: str | None = None, token_file: TokenFile | None = None
) -> dict[str, str]:
    """The `authorization` header for `base_url` (for plain HTTP calls: curl, httpx, a
    scraper), with the token `resolve_token` finds; empty when there is none."""
    found = resolve_token(base_url, token, token_file)
    return {"authorization": f"Bearer {found}"} if found else {}
