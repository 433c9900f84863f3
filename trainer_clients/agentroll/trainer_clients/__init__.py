"""Trainer-side clients for agentroll: submit jobs, pull trajectories, manage backends.

Needs only `pip install agentroll[client]` (pydantic + httpx).

- `RolloutClient` / `AsyncRolloutClient`: one server, every endpoint.
- `ServerPool` / `AsyncServerPool`: several servers as one (sharding by load, health
  checks, failover, barrier fan-out of backend registration and pause/resume).
- `GroupCollector` / `AsyncGroupCollector`: GRPO groups, returned only whole or marked
  invalid, membership fixed by sample index (retries, spares for infra failures,
  staleness judged at hand-out, zero-variance flag, stats with the bias it could not avoid).
- `agentroll.trainer_clients.adapters`: padded numpy batches and verl / NeMo RL / OpenRLHF
  formats (needs numpy; imported only on demand).
- `agentroll.trainer_clients.weights`: push new weights into running vLLM engines between a
  pause and a resume (torch + safetensors for a state dict; imported only on demand).
"""

from agentroll.trainer_clients.client import AsyncRolloutClient, RolloutClient
from agentroll.trainer_clients.collector import AsyncGroupCollector
from agentroll.trainer_clients.errors import (
    ApiError,
    ClientError,
    Conflict,
    FanOutError,
    FeedError,
    InvalidRequest,
    InvalidResponse,
    NoServerAvailable,
    NotFound,
    ServerUnavailable,
)
from agentroll.trainer_clients.groups import CollectorStats, Group, GroupSpec, sample_job_id
from agentroll.trainer_clients.pool import AsyncServerPool, Failover, read_server_list
from agentroll.trainer_clients.sync import GroupCollector, ServerPool

__all__ = [
    "ApiError",
    "AsyncGroupCollector",
    "AsyncRolloutClient",
    "AsyncServerPool",
    "ClientError",
    "CollectorStats",
    "Conflict",
    "Failover",
    "FanOutError",
    "FeedError",
    "Group",
    "GroupCollector",
    "GroupSpec",
    "InvalidRequest",
    "InvalidResponse",
    "NoServerAvailable",
    "NotFound",
    "RolloutClient",
    "ServerPool",
    "ServerUnavailable",
    "read_server_list",
    "sample_job_id",
]
