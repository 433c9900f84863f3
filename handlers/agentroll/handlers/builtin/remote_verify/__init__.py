"""The `remote_verify` task family: the reward comes from a NeMo Gym-style resources server
(`handler`), spoken to by `resources_client` with the policy's work as `responses_output`."""

from agentroll.handlers.builtin.remote_verify.handler import (
    RemoteVerifyHandler,
    RemoteVerifyInstance,
    VerifierSpec,
)

HANDLERS = {"remote_verify": "RemoteVerifyHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["RemoteVerifyHandler", "RemoteVerifyInstance", "VerifierSpec"]
