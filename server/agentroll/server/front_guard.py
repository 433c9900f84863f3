"""The protocol fronts (`nemo-gym-agent`, `prime-env-server`) hold an agentroll API token and
have no authentication of their own (their upstream clients send none): whoever reaches one
runs jobs, and registers backends, with that token. So they listen on loopback unless told,
in so many words, that the network they listen on is the trainer's alone."""

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from agentroll.server.schema.auth import is_loopback

ALLOW_FLAG = "--allow-remote"
RESULT_GRACE_S = 60.0
"""A front's time for a row is its job's deadline (`limits.deadline_s`), so the server ends
the job and says whose doing that was: a policy that spends the time is stopped inside it and
scored, never reported as the front's timeout (which trainers retry as infrastructure). The
front waits this much longer for the result the deadline ends with."""


def zmq_host(address: str) -> str:
    """The host of a ZMQ endpoint (`ipc://` and `inproc://` ones are this machine's)."""
    if not address.startswith("tcp://"):
        return "localhost"
    return address.removeprefix("tcp://").rsplit(":", 1)[0]


def require_loopback(host: str, allowed: bool, what: str) -> None:
    """`ValueError` when `host` is not loopback and the operator did not allow it."""
    if not allowed and not is_loopback(urlsplit(f"//{host}").hostname or host):
        raise ValueError(
            f"{what} would listen on {host}: it has no authentication of its own and acts "
            f"with the agentroll token it holds; pass {ALLOW_FLAG} if only the trainer's "
            "network reaches that address"
        )


class LoopbackHostOnly:
    """ASGI middleware: 403 to a request whose `Host` is not a loopback name.

    Loopback keeps the network out, not this machine's browser: a web page on a name its
    attacker re-points at 127.0.0.1 (DNS rebinding) is same-origin with a front there, so it
    could send requests and read the answers. Its requests carry the attacker's name in
    `Host`; a trainer's client names the loopback address it was given."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not is_loopback(urlsplit(f"//{host}").hostname or ""):
                why = f"this front serves loopback names only, not Host {host!r}"
                await _refuse(send, 403, "host_not_loopback", why)
                return
        await self.app(scope, receive, send)


class JsonBodiesOnly:
    """ASGI middleware: 415 to a request with a body that is not declared JSON, before the
    body is read.

    A page on any site may send this machine's loopback a POST without asking first (a
    form, `fetch` with `no-cors`, a beacon), but only as text, a form or no content type at
    all; a JSON request makes the browser ask first (CORS), and a front grants nobody."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            declared = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
            media = declared.split(";", 1)[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                why = f"the body must be JSON (application/json), not {declared or 'undeclared'}"
                await _refuse(send, 415, "not_json", why)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
