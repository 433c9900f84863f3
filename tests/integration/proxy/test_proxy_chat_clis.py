"""OpenCode and Qwen Code, unmodified (from npm, in the agent-cli image), solve a bundled SWE
task through the recording proxy inside a bubblewrap sandbox with the network off, speaking
OpenAI chat completions; the trajectory holds exactly the ids the backend sampled."""

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
from tests.support.cli_image import cli_image
from tests.support.images import needs_real_build

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.scripted_llm import default_rules
from agentroll.testing.scripted_llm.rules.chat_clis import DONE

pytestmark = [pytest.mark.integration, *needs_real_build]

# Each CLI's tool calls in the scripted session, and its calls beside the agent's loop.
SESSIONS = {
    "opencode": (["bash", "read", "bash", "edit", "bash"], 1),  # + the session title
    "qwen_code": (["run_shell_command", "read_file", "run_shell_command", "edit",
                   "run_shell_command"], 0),
}  # fmt: skip
LOOP_CALLS = 6  # five tool calls, then the closing text


@pytest.fixture(scope="module")
def image() -> Path:
    return cli_image()


async def run_cli(
    agentroll_server: ServerFactory, tmp_path: Path, image: Path, cli: str, wrong_rate: float
) -> tuple[Trajectory, list[dict[str, Any]]]:
    task = {**load_swe_tasks()[0].instance, "image": str(image)}
    job = {
        "job_id": cli,
        "handler": "harness",
        "instance": {"harness": {"type": cli, "timeout_s": 240}, "evaluator": "swe", "task": task},
        "sampling": {"seed": 3, "max_tokens": 512},
        "limits": {"run_timeout_s": 300},
    }
    async with (
        # Their system prompts and tool schemas alone are ~10k (OpenCode) and ~30k tokens.
        scripted_backend(
            wrong_rate=wrong_rate, rules=default_rules(), policy=cli, max_model_len=131072
        ) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        t = (await run_jobs(client, [job], timeout_s=290))[cli]
        log = await request_log(backend)
    assert t.outcome == Outcome.ok, (t.error, t.metadata.get("harness"))
    return t, log


def assert_loop_exact(t: Trajectory, log: list[dict[str, Any]], cli: str) -> None:
    """One chain for the agent's loop, every call after its first extended it, every sampled
    id and logprob the backend's; the side calls served, recorded and marked."""
    tools, side_calls = SESSIONS[cli]
    proxy = t.metadata["llm_proxy"]
    assert proxy["calls"] == len(log) == LOOP_CALLS + side_calls
    assert proxy["side_calls"] == side_calls and proxy["num_chains"] == 1 + side_calls
    main, *aside = proxy["chains"]
    assert main["main"] and main["broken"] is None and len(main["calls"]) == LOOP_CALLS
    assert proxy["prefix_extended"] == LOOP_CALLS - 1
    # Breaks are counted on the agent's loop only: a side chain is not one.
    assert proxy["prefix_broken"] == 0
    assert all(not c["main"] and len(c["calls"]) == 1 for c in aside)
    for call in proxy["call_log"]:
        assert call["api"] == "openai_chat" and call["stream"] is True
        assert call["side"] == (call["call"] not in main["calls"])
    assert t.num_turns == len(t.segments) == LOOP_CALLS
    by_prompt = {tuple(e["prompt_token_ids"]): e for e in log}
    for seg in t.segments:
        # Invariant 3: every prompt continues exactly from the recorded tokens ...
        sent = by_prompt[tuple(t.prompt_ids + t.response_ids[: seg.start])]
        # ... and invariant 1: the sampled ids, byte for byte, and their logprobs.
        assert t.response_ids[seg.start : seg.end] == sent["token_ids"]
        assert t.response_logprobs[seg.start : seg.end] == sent["logprobs"]
        assert set(t.response_mask[seg.start : seg.end]) == {1}
    assert t.segments[-1].end == len(t.response_ids)
    # The readable view is the CLI's own conversation, with its own tool names.
    calls = [m["tool_calls"][0]["function"]["name"] for m in t.messages if m.get("tool_calls")]
    assert calls == tools and t.messages[-1]["content"] == DONE
    # What the commands printed reached the model, the first one's included.
    results = [text_of(m["content"]) for m in t.messages if m["role"] == "tool"]
    assert "textkit/slug.py:7:def slugify" in results[0]
    assert "'hello--world-'" in results[2]


def text_of(content: str | list[dict[str, str]]) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cli", sorted(SESSIONS))
async def test_the_cli_solves_a_swe_task_with_exact_tokens(
    agentroll_server: ServerFactory, tmp_path: Path, image: Path, cli: str
) -> None:
    t, log = await run_cli(agentroll_server, tmp_path, image, cli, wrong_rate=0.0)
    assert t.reward == 1.0 and t.reward_info["resolved"] is True
    assert t.finish_reason == "harness_exit"
    assert t.metadata["harness"]["exit_code"] == 0
    assert t.artifacts["patch"].startswith("diff --git a/textkit/slug.py")
    assert_loop_exact(t, log, cli)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cli", sorted(SESSIONS))
async def test_a_wrong_fix_scores_zero_and_the_run_is_still_ok(
    agentroll_server: ServerFactory, tmp_path: Path, image: Path, cli: str
) -> None:
    t, log = await run_cli(agentroll_server, tmp_path, image, cli, wrong_rate=1.0)
    assert t.reward == 0.0 and t.reward_info["resolved"] is False
    assert t.artifacts["patch"].startswith("diff --git a/textkit/slug.py")
    assert_loop_exact(t, log, cli)
