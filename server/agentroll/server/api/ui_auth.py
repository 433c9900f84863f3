"""How a browser carries the API token to the viewer's pages (`/ui`), and only there.

A browser cannot add a bearer header to a link, so `/ui...?token=T` with a valid token is
answered with a redirect to the same page without it, setting an `HttpOnly`,
`SameSite=Strict` cookie scoped to `/ui`. The cookie holds a keyed hash of the token, not the
token: it opens the read-only pages and nothing else (the API never reads cookies), so a
leaked cookie cannot call the API, and a rotated token ends every cookie made from it.
"""

import hashlib
import hmac
from urllib.parse import parse_qsl, quote, urlencode

from starlette.requests import cookie_parser
from starlette.types import Scope, Send

UI_PREFIX = "/ui"
UI_COOKIE = "agentroll_ui"
_COOKIE_KEY = b"agentroll viewer cookie v1"


def is_ui_path(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def cookie_value(token: str) -> str:
    return hmac.new(token.encode(), _COOKIE_KEY, hashlib.sha256).hexdigest()


def _query(scope: Scope) -> list[tuple[str, str]]:
    return parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def query_token(scope: Scope) -> str | None:
    """The `token` query parameter of a viewer page, if there is one."""
    return next((v for k, v in _query(scope) if k == "token"), None)


def has_cookie(headers: dict[bytes, bytes], tokens: list[str]) -> bool:
    """Whether the request carries the viewer cookie of one of `tokens` (constant time)."""
    given = cookie_parser(headers.get(b"cookie", b"").decode("latin-1")).get(UI_COOKIE, "")
    matches = [hmac.compare_digest(given.encode(), cookie_value(t).encode()) for t in tokens]
    return any(matches)


async def redirect_with_cookie(scope: Scope, send: Send, token: str) -> None:
    """303 to the same page without `token` in its address, the cookie set."""
    rest = urlencode([(k, v) for k, v in _query(scope) if k != "token"])
    # Quoted: the decoded path may hold anything (CR LF included); the address stays on /ui.
    location = quote(scope["path"]) + (f"?{rest}" if rest else "")
    cookie = f"{UI_COOKIE}={cookie_value(token)}; Path={UI_PREFIX}; HttpOnly; SameSite=Strict"
    headers = [
        (b"location", location.encode("latin-1")),
        (b"set-cookie", cookie.encode()),
        (b"referrer-policy", b"no-referrer"),
        (b"cache-control", b"no-store"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
