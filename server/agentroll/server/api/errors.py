"""One JSON error envelope for every non-2xx response, with real status codes.

4xx for the caller's fault, 5xx for ours; `type` is stable and machine-readable; no
exception class paths ever go over the wire.
"""

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentroll.handlers import RegistryError, UnknownHandlerError
from agentroll.server.api.middleware import BodyTooLarge
from agentroll.server.service import SubmissionError
from agentroll.server.store import StoreError

log = logging.getLogger("agentroll.server.api")

_TYPE_BY_STATUS = {
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


class ApiError(Exception):
    def __init__(self, status: int, type_: str, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.detail = detail


def error_response(
    status: int,
    type_: str,
    message: str,
    detail: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"type": type_, "message": message, "detail": detail}}
    return JSONResponse(body, status_code=status, headers=dict(headers) if headers else None)


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()[:50]
    ]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.type, str(exc), exc.detail)

    @app.exception_handler(SubmissionError)
    async def _submission(_: Request, exc: SubmissionError) -> JSONResponse:
        headers = {"Retry-After": "5"} if exc.status in (429, 503) else None
        return error_response(exc.status, exc.type, str(exc), exc.detail, headers)

    @app.exception_handler(UnknownHandlerError)
    async def _unknown_handler(_: Request, exc: UnknownHandlerError) -> JSONResponse:
        return error_response(400, "unknown_handler", str(exc), {"known": exc.known})

    @app.exception_handler(RegistryError)
    async def _registry(_: Request, exc: RegistryError) -> JSONResponse:
        return error_response(400, "handler_unavailable", str(exc))

    @app.exception_handler(StoreError)
    async def _store(_: Request, exc: StoreError) -> JSONResponse:
        log.error("store unavailable: %s", exc)
        return error_response(503, "store_unavailable", str(exc), headers={"Retry-After": "10"})

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_: Request, exc: BodyTooLarge) -> JSONResponse:
        return error_response(413, "payload_too_large", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(
            400, "invalid_request", "request validation failed", _validation_detail(exc)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = _TYPE_BY_STATUS.get(exc.status_code, "error")
        return error_response(exc.status_code, type_, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal server error")
