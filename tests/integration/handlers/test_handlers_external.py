"""The guide's example: a tool-using handler from a separately installed package (found only
through its entry point), driven by a scripted policy written for it."""

import re
import shutil
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers import HandlerRegistry
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, default_rules
from agentroll.testing.scripted_llm.rules.steps import (
    call,
    last_tool_output,
    offered_tools,
    step,
    task_text,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]


def linecount_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """grep -c the word, then submit the number the shell printed."""
    asked = re.search(r"contain the word '(\w+)'", task_text(conv))
    if asked is None or "submit" not in offered_tools(conv):
        return None
    if step(conv) == 0:
        return call("bash", {"command": f"grep -c {asked.group(1)} log.txt"})
    return call("submit", {"count": int(last_tool_output(conv).split()[0])})


async def test_external_tool_using_handler_runs_end_to_end(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    handler = HandlerRegistry().get("linecount")
    assert type(handler).__module__ == "agentroll_example_handler.linecount"
    rules = default_rules()
    rules.register("linecount", linecount_rule)
    lines = ["ok start", "error: disk", "ok", "error: net", "warning", "error again"]
    jobs = [
        {"job_id": "errors", "handler": "linecount", "instance": {"lines": lines, "word": "error"}},
        {"job_id": "ok", "handler": "linecount", "instance": {"lines": lines, "word": "ok"}},
    ]
    async with (
        scripted_backend(wrong_rate=0.0, rules=rules, policy="linecount") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs)
    assert [(t.outcome, t.reward) for t in results.values()] == [(Outcome.ok, 1.0)] * 2
    assert results["errors"].reward_info == {"gold": 3, "count": 3}
    assert results["ok"].metadata["tool_calls"] == {"bash": 1, "submit": 1}
