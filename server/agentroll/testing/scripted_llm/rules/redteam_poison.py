"""`engine_failure`: a prompt the engine fails on, as real engines fail on some inputs.

A conversation whose last user message holds `ENGINE_FAILURE_MARK` makes the engine answer
500 (vLLM's `EngineCore encountered an issue`); every other prompt is served by the rules
after it. Tests of poison containment use it as the request a harness shaped that a
backend fails on, while the same backend still serves a control request.

Named in a config as `agentroll.testing.scripted_llm.rules.redteam_poison:engine_failure_rule`.
"""

from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext

ENGINE_FAILURE_MARK = "<engine-failure>"
RULE_PATH = "agentroll.testing.scripted_llm.rules.redteam_poison:engine_failure_rule"


def engine_failure_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    user = conv.last("user")
    if user is not None and ENGINE_FAILURE_MARK in user.content:
        raise ProtocolError(
            "EngineCore encountered an issue. See stack trace for the root cause.",
            status=500,
            err_type="InternalServerError",
        )
    return None
