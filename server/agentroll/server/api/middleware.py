"""ASGI middleware: request body size limit and bearer-token authentication."""

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentroll.server.api import ui_auth
from agentroll.server.api.errors import TYPE_BY_STATUS, envelope
from agentroll.server.http_body import BodyTooLarge

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without a token: liveness and readiness probes carry none, and these say nothing
but up/ready and a count of backends."""
ADMIN_STATE_KEY = "agentroll_admin"
"""Set on each authenticated request's `scope["state"]`: whether it carries admin rights."""


async def _send_error(send: Send, status: int, message: str) -> None:
    body = json.dumps(envelope(TYPE_BY_STATUS[status], message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 429:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _bearer(token: str) -> bytes:
    return f"Bearer {token}".encode()


class GuardMiddleware:
    """Refuses, before any route runs: calls without a valid token (401; there always is a
    token), clients over their concurrency limit (429), oversized bodies (413).

    It marks each authenticated request with whether it may use admin routes (the admin
    token, or the one token when no admin token is set); the admin routes check the mark.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        api_token: str,
        admin_token: str | None = None,
        open_paths: frozenset[str] = OPEN_PATHS,
        max_requests_per_client: int = 512,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self._token = _bearer(api_token)
        self._ui_tokens = [api_token] + ([admin_token] if admin_token is not None else [])
        self._admin_token = None if admin_token is None else _bearer(admin_token)
        self._open_paths = open_paths
        self._per_client = max_requests_per_client
        self._active: dict[str, int] = {}

    def _rights(self, given: bytes) -> bool | None:
        """None: no valid token; else whether it carries admin rights. Both comparisons always
        run, in constant time."""
        user = hmac.compare_digest(given, self._token)
        if self._admin_token is None:
            return True if user else None
        admin = hmac.compare_digest(given, self._admin_token)
        return True if admin else (False if user else None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # None is served; one added later must not slip past the token unchecked.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan
            return
        headers = dict(scope["headers"])
        if ui_auth.is_ui_path(scope["path"]):
            # The viewer's read-only pages: a browser's cookie or `?token=` (never admin).
            token = ui_auth.query_token(scope)
            if token is not None and self._rights(_bearer(token)) is not None:
                await ui_auth.redirect_with_cookie(scope, send, token)
                return
            bearer = self._rights(headers.get(b"authorization", b""))
            if bearer is None and not ui_auth.has_cookie(headers, self._ui_tokens):
                await _send_error(send, 401, "missing or invalid bearer token")
                return
            scope.setdefault("state", {})[ADMIN_STATE_KEY] = False
        elif scope["path"] not in self._open_paths:
            admin = self._rights(headers.get(b"authorization", b""))
            if admin is None:
                await _send_error(send, 401, "missing or invalid bearer token")
                return
            scope.setdefault("state", {})[ADMIN_STATE_KEY] = admin
        client = (scope.get("client") or ("unknown", 0))[0]
        if self._active.get(client, 0) >= self._per_client:
            await _send_error(send, 429, "too many concurrent requests")
            return
        self._active[client] = self._active.get(client, 0) + 1
        try:
            await self._guarded(scope, receive, send, headers)
        finally:
            left = self._active[client] - 1
            if left:
                self._active[client] = left
            else:
                del self._active[client]  # no growth from clients that come and go

    async def _guarded(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await _send_error(send, 413, self._too_large())
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:  # a body sent without Content-Length
                    raise BodyTooLarge(self._too_large())
            return message

        await self.app(scope, limited_receive, send)

    def _too_large(self) -> str:
        return f"request body exceeds {self.max_body_bytes} bytes"
