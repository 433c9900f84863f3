"""ASGI middleware: request body size limit and bearer-token authentication."""

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPEN_PATHS = frozenset({"/healthz"})


async def _send_error(send: Send, status: int, type_: str, message: str) -> None:
    body = json.dumps({"error": {"type": type_, "message": message, "detail": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyTooLarge(Exception):
    """Raised while a route reads a body (without Content-Length) that grows too large."""


class GuardMiddleware:
    """Refuses oversized bodies (413) and, when a token is set, unauthenticated calls (401)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, api_token: str | None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self._token = None if api_token is None else f"Bearer {api_token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self._token is not None and scope["path"] not in OPEN_PATHS:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self._token):  # constant time
                await _send_error(send, 401, "unauthorized", "missing or invalid bearer token")
                return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await _send_error(send, 413, "payload_too_large", self._too_large())
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self._too_large())
            return message

        await self.app(scope, limited_receive, send)

    def _too_large(self) -> str:
        return f"request body exceeds {self.max_body_bytes} bytes"
