"""One JSON error envelope for every non-2xx response, with real status codes.

4xx for the caller's fault, 5xx for ours; `type` is stable and machine-readable; no
exception class paths ever go over the wire. The server's own errors (`agentroll.server.errors`)
get their status, `type` and Retry-After from one table, `WIRE_ERRORS`: the layers below the
API raise typed errors and never choose a status code.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentroll.handlers import RegistryError, UnknownHandlerError
from agentroll.server.errors import (
    BackendConflict,
    InvalidBackend,
    InvalidInstances,
    JobConflict,
    NotFound,
    PauseTimeout,
    ServerError,
    ShuttingDown,
    StoreError,
    TooManyJobs,
    VersionConflict,
)
from agentroll.server.http_body import BodyTooLarge

log = logging.getLogger("agentroll.server.api")

TYPE_BY_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    429: "too_many_requests",
    503: "unavailable",
}


@dataclass(frozen=True, slots=True)
class WireError:
    """How one kind of server error is answered."""

    status: int
    type: str
    retry_after: str | None = None
    """Seconds for the `Retry-After` header: the same request may succeed then."""
    logged: bool = False
    """Worth an error in the server's log (the server's own trouble, not the caller's)."""


WIRE_ERRORS: dict[type[ServerError], WireError] = {
    InvalidInstances: WireError(400, "invalid_instance"),
    InvalidBackend: WireError(400, "invalid_backend"),
    NotFound: WireError(404, "not_found"),
    JobConflict: WireError(409, "conflict"),
    BackendConflict: WireError(409, "conflict"),
    VersionConflict: WireError(409, "conflict"),
    BodyTooLarge: WireError(413, "payload_too_large"),
    TooManyJobs: WireError(429, "too_many_jobs", retry_after="5"),
    ShuttingDown: WireError(503, "shutting_down", retry_after="5"),
    StoreError: WireError(503, "store_unavailable", retry_after="10", logged=True),
    PauseTimeout: WireError(504, "pause_timeout"),
}
"""Server errors the API answers, by type (a subclass is answered as its nearest entry).
Anything else is a bug: 500 `internal_error`."""


def _wire_error(exc: ServerError) -> WireError:
    return next(WIRE_ERRORS[t] for t in type(exc).__mro__ if t in WIRE_ERRORS)


def envelope(type_: str, message: str, detail: Any = None) -> dict[str, Any]:
    """The body of every non-2xx response."""
    return {"error": {"type": type_, "message": message, "detail": detail}}


def error_response(
    status: int,
    type_: str,
    message: str,
    detail: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = envelope(type_, message, detail)
    return JSONResponse(body, status_code=status, headers=dict(headers) if headers else None)


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()[:50]
    ]


def install_error_handlers(app: FastAPI) -> None:
    async def _server_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServerError)
        wire = _wire_error(exc)
        if wire.logged:
            log.error("%s on %s %s: %s", wire.type, request.method, request.url.path, exc)
        headers = {"Retry-After": wire.retry_after} if wire.retry_after else None
        return error_response(wire.status, wire.type, str(exc), exc.detail, headers)

    for error_type in WIRE_ERRORS:
        app.add_exception_handler(error_type, _server_error)

    @app.exception_handler(UnknownHandlerError)
    async def _unknown_handler(_: Request, exc: UnknownHandlerError) -> JSONResponse:
        return error_response(400, "unknown_handler", str(exc), {"known": exc.known})

    @app.exception_handler(RegistryError)
    async def _registry(_: Request, exc: RegistryError) -> JSONResponse:
        return error_response(400, "handler_unavailable", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            400, "invalid_request", "request validation failed", _validation_detail(exc)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = TYPE_BY_STATUS.get(exc.status_code, "error")
        return error_response(exc.status_code, type_, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal server error")
