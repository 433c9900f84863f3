"""The one error envelope every non-2xx response carries."""

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    type: str
    """Stable, machine-readable kind, e.g. `invalid_request`, `not_found`, `conflict`."""
    message: str
    detail: Any = None


class ErrorEnvelope(BaseModel):
    error: ErrorBody
