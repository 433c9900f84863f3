"""The per-rollout recording LLM proxy: any OpenAI-speaking agent harness, exact tokens.

`open_proxy(session, socket_dir, ...)` (used by `JobContext.open_llm_proxy`) starts a
`RolloutProxy` on a Unix socket in the sandbox's socket directory. See `rollout.py` for the
request path, `chains.py` for how calls become token chains, `recording.py` for what the
trajectory gets, `caps.py` for what a harness may send (rate, body size, connections), and
`http11.py` for the wire.

Errors: the proxy answers harnesses with OpenAI error envelopes and reports its own failures
as `agentroll.handlers.InfraError` (cause `llm_proxy_failed`); `http11.BadRequest` (a
`ValueError` in the server's tree, `agentroll.server.errors`) is a malformed request, answered
400; a body that is malformed or too large (`agentroll.server.http_body.BodyError`) is answered
with its `status` (400, 413, 429).
"""

from agentroll.server.proxy.caps import ProxyCaps
from agentroll.server.proxy.chains import Chain, ChainBook, Expectation, Piece
from agentroll.server.proxy.recording import ProxyTrajectory
from agentroll.server.proxy.rollout import MODEL_NAME, RolloutProxy, open_proxy

__all__ = [
    "MODEL_NAME",
    "Chain",
    "ChainBook",
    "Expectation",
    "Piece",
    "ProxyCaps",
    "ProxyTrajectory",
    "RolloutProxy",
    "open_proxy",
]
