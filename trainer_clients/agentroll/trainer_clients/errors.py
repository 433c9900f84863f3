"""Errors raised by the trainer clients.

ClientError
├── ApiError                      the server answered with its error envelope
│   ├── NotFound(ApiError, LookupError)            404
│   ├── Conflict(ApiError, ValueError)             409: job id reused for another request
│   └── InvalidRequest(ApiError, ValueError)       400 / 413 / 422
└── ServerUnavailable(ClientError, ConnectionError) no answer, or 503
"""

from typing import Any


class ClientError(Exception):
    pass


class ApiError(ClientError):
    def __init__(self, status: int, type_: str, message: str, detail: Any = None) -> None:
        super().__init__(f"{status} {type_}: {message}")
        self.status = status
        self.type = type_
        self.message = message
        self.detail = detail


class NotFound(ApiError, LookupError):
    pass


class Conflict(ApiError, ValueError):
    pass


class InvalidRequest(ApiError, ValueError):
    pass


class ServerUnavailable(ClientError, ConnectionError):
    pass


def error_from_response(status: int, body: Any) -> ApiError:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"type": "error", "message": str(body)[:500]}
    args = (status, str(error.get("type", "error")), str(error.get("message", "")))
    detail = error.get("detail")
    if status == 404:
        return NotFound(*args, detail)
    if status == 409:
        return Conflict(*args, detail)
    if status in (400, 413, 422):
        return InvalidRequest(*args, detail)
    return ApiError(*args, detail)
