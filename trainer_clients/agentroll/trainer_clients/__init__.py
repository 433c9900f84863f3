"""Trainer-side clients for agentroll: submit jobs, pull trajectories, manage backends.

Needs only `pip install agentroll[client]` (pydantic + httpx).

- `RolloutClient` / `AsyncRolloutClient`: one server, every endpoint.
- `ServerPool` / `AsyncServerPool`: several servers as one (sharding by load, health
  checks, failover, barrier fan-out of backend registration and pause/resume).
- `GroupCollector` / `AsyncGroupCollector`: GRPO groups, returned only whole or marked
  invalid, membership fixed by sample index (retries, spares for infra failures,
  staleness judged at hand-out, zero-variance flag, stats with the bias it could not avoid,
  a circuit breaker on runs of infra_errors).
- `DynamicSampler` / `AsyncDynamicSampler`: batches of groups with unequal rewards, refilled
  from a task stream in stream order; `PassRates` + `CurriculumSampler`: a persisted per-task
  pass-rate record and a seeded sampler that weights tasks by difficulty band.
- `agentroll.trainer_clients.adapters`: padded numpy batches and verl / NeMo RL / OpenRLHF
  formats (needs numpy; imported only on demand).
- `agentroll.trainer_clients.samples`: every token chain of a harness run as a sample of its
  own, chosen by kind (`Group.samples`, `pad_batch(..., chains=...)`).
- `agentroll.trainer_clients.weights`: push new weights into running vLLM engines between a
  pause and a resume (torch + safetensors for a state dict; imported only on demand).
"""

from agentroll.trainer_clients.breaker import InfraCircuitOpen
from agentroll.trainer_clients.client import AsyncRolloutClient, RolloutClient
from agentroll.trainer_clients.collector import AsyncGroupCollector
from agentroll.trainer_clients.curriculum import Band, CurriculumSampler, PassRates
from agentroll.trainer_clients.dynamic import AsyncDynamicSampler, Batch, BatchShortfall
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
from agentroll.trainer_clients.groups import (
    CollectorStats,
    DynamicSamplingStats,
    Group,
    GroupSpec,
    sample_job_id,
)
from agentroll.trainer_clients.server_pool import AsyncServerPool, Failover, read_server_list
from agentroll.trainer_clients.sync import DynamicSampler, GroupCollector, ServerPool

__all__ = [
    "ApiError",
    "AsyncDynamicSampler",
    "AsyncGroupCollector",
    "AsyncRolloutClient",
    "AsyncServerPool",
    "Band",
    "Batch",
    "BatchShortfall",
    "ClientError",
    "CollectorStats",
    "Conflict",
    "CurriculumSampler",
    "DynamicSampler",
    "DynamicSamplingStats",
    "Failover",
    "FanOutError",
    "FeedError",
    "Group",
    "GroupCollector",
    "GroupSpec",
    "InfraCircuitOpen",
    "InvalidRequest",
    "InvalidResponse",
    "NoServerAvailable",
    "NotFound",
    "PassRates",
    "RolloutClient",
    "ServerPool",
    "ServerUnavailable",
    "read_server_list",
    "sample_job_id",
]
