"""Wire models of the v1 HTTP API, shared by the server and the trainer clients.

Import-light on purpose: pydantic and the standard library only (no FastAPI), so that
`pip install agentroll[client]` is enough to use them.
"""

from agentroll.server.schema.backends import BackendKind, BackendSpec, BackendView
from agentroll.server.schema.errors import ErrorBody, ErrorEnvelope
from agentroll.server.schema.jobs import (
    DEFAULT_POLICY,
    AgentLimits,
    AgentSpec,
    CancelFilter,
    CancelResponse,
    JobRequest,
    JobState,
    JobView,
    SamplingParams,
    SubmitBatch,
    SubmitResponse,
    SubmittedJob,
)
from agentroll.server.schema.status import (
    AdmissionStatus,
    PauseMode,
    PauseRequest,
    PauseResponse,
    PolicyStatus,
    PoolSizes,
    PoolsPatch,
    ResultsPage,
    ResumeRequest,
    StageStatus,
    StatusResponse,
)
from agentroll.server.schema.trajectory import (
    TRAJECTORY_SCHEMA,
    AgentTrace,
    ErrorInfo,
    Outcome,
    Segment,
    StageTiming,
    Timing,
    Trajectory,
)

__all__ = [
    "DEFAULT_POLICY",
    "TRAJECTORY_SCHEMA",
    "AdmissionStatus",
    "AgentLimits",
    "AgentSpec",
    "AgentTrace",
    "BackendKind",
    "BackendSpec",
    "BackendView",
    "CancelFilter",
    "CancelResponse",
    "ErrorBody",
    "ErrorEnvelope",
    "ErrorInfo",
    "JobRequest",
    "JobState",
    "JobView",
    "Outcome",
    "PauseMode",
    "PauseRequest",
    "PauseResponse",
    "PolicyStatus",
    "PoolSizes",
    "PoolsPatch",
    "ResultsPage",
    "ResumeRequest",
    "SamplingParams",
    "Segment",
    "StageStatus",
    "StageTiming",
    "StatusResponse",
    "SubmitBatch",
    "SubmitResponse",
    "SubmittedJob",
    "Timing",
    "Trajectory",
]
