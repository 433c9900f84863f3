"""Trainer-side clients for agentroll: submit jobs, pull trajectories, manage backends.

Needs only `pip install agentroll[client]` (pydantic + httpx).
"""

from agentroll.trainer_clients.client import AsyncRolloutClient, RolloutClient
from agentroll.trainer_clients.errors import (
    ApiError,
    ClientError,
    Conflict,
    InvalidRequest,
    NotFound,
    ServerUnavailable,
)

__all__ = [
    "ApiError",
    "AsyncRolloutClient",
    "ClientError",
    "Conflict",
    "InvalidRequest",
    "NotFound",
    "RolloutClient",
    "ServerUnavailable",
]
