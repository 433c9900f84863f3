"""Hidden tests stay hidden: not in anything the model is shown, not in the sandbox during RUN.

Each probe handler greps the agent's sandbox at the end of RUN and again after EVAL. For
`swe` in "same" mode, finding the tests after EVAL proves the probe would have seen them
during RUN. `code` grades in a sandbox of its own and hands the tests to its runner on
stdin, so they never reach the agent's sandbox, not even after EVAL; there the probe proves
itself on the agent's own solution file."""

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import (
    request_log,
    rollout_service,
    run_jobs,
    scripted_backend,
)

from agentroll.handlers import HandlerRegistry, Reward, RolloutContext
from agentroll.handlers.builtin.code import CodeHandler, load_code_tasks
from agentroll.handlers.builtin.swe import SweHandler, load_swe_tasks
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm import get_tokenizer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

CODE_MARKER = "hidden_marker_5521"
SWE_TEST = load_swe_tasks()[1].instance["FAIL_TO_PASS"][0].split("::")[-1]


async def grep(ctx: RolloutContext, needle: str) -> str:
    assert ctx.sandbox is not None
    where = f"{ctx.sandbox.spec.workdir} /tmp"
    found = await ctx.sandbox.exec(
        ["sh", "-c", f"grep -rl {needle} {where} 2>/dev/null; true"], timeout=30
    )
    return found.stdout.strip()


class ProbingCode(CodeHandler):
    name = "probing-code"

    async def run(self, ctx: RolloutContext) -> None:
        await super().run(ctx)
        ctx.state["during_run"] = await grep(ctx, CODE_MARKER)

    async def eval(self, ctx: RolloutContext) -> Reward:
        reward = await super().eval(ctx)
        reward.info.update(
            during_run=ctx.state["during_run"],
            after_eval=await grep(ctx, CODE_MARKER),
            solution_found=await grep(ctx, "def is_palindrome"),
        )
        return reward


class ProbingSwe(SweHandler):
    name = "probing-swe"

    async def run(self, ctx: RolloutContext) -> None:
        await super().run(ctx)
        ctx.state["during_run"] = await grep(ctx, SWE_TEST)

    async def eval(self, ctx: RolloutContext) -> Reward:
        reward = await super().eval(ctx)  # eval_mode "same": the tests land in this sandbox
        reward.info.update(during_run=ctx.state["during_run"], after_eval=await grep(ctx, SWE_TEST))
        return reward


def jobs() -> list[dict[str, Any]]:
    code = load_code_tasks()[0].instance()
    code["tests"] = [*code["tests"], f"{CODE_MARKER} = 1\nassert is_palindrome('x')"]
    swe = {**load_swe_tasks()[1].instance, "eval_mode": "same"}
    return [
        {"job_id": "code", "handler": "probing-code", "instance": code},
        {"job_id": "swe", "handler": "probing-swe", "instance": swe},
    ]


async def test_hidden_tests_never_reach_the_agent(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    registry = HandlerRegistry()
    registry.register(ProbingCode)
    registry.register(ProbingSwe)
    async with (
        scripted_backend(wrong_rate=0.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend, registry) as client,
    ):
        results = await run_jobs(client, jobs())
        log = await request_log(backend)
    seen_by_model = "\n".join(get_tokenizer().decode(c["prompt_token_ids"]) for c in log)
    for job_id, needle in (("code", CODE_MARKER), ("swe", SWE_TEST)):
        t = results[job_id]
        assert (t.outcome, t.reward) == (Outcome.ok, 1.0), t.error
        assert t.reward_info["during_run"] == ""  # not in the sandbox while the agent worked
        assert needle not in str(t.messages)
        assert needle not in seen_by_model  # nor in any prompt the backend received
    assert results["swe"].reward_info["after_eval"] != ""  # where the probe finds them later
    assert results["swe"].reward_info["eval_mode"] == "same"
    code = results["code"].reward_info
    assert code["after_eval"] == "" and code["solution_found"] != ""
