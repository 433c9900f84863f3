"""`agentroll export`: a served rollout with tool calls, out of the store as ATIF.

The ATIF documents are checked against Harbor's schema (`agentroll.testing.atif_schema`,
written from Harbor 0.26.0's `src/harbor/models/trajectories/`), and their token metrics
against what the scripted vLLM backend really sampled, call by call.
"""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.tool_handlers import QUESTION, TOOLS, ToolMath

from agentroll.handlers import HandlerRegistry
from agentroll.server.cli import main
from agentroll.server.schema import Outcome, Trajectory
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.atif_schema import validate_atif
from agentroll.testing.prime_env_client import branch, check_episode, reward
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app

pytestmark = pytest.mark.integration


@pytest.fixture
async def backend() -> AsyncIterator[RunningServer]:
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=5, wrong_rate=0.0)))
    yield server
    await server.stop()


async def _serve(
    agentroll_server: ServerFactory, backend: RunningServer, jobs: list[dict[str, Any]]
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    registry = HandlerRegistry()
    registry.register(ToolMath)
    async with agentroll_server(registry=registry) as (_, client):
        await client.add_backend({"id": "b0", "base_url": backend.url})
        await client.submit(jobs)
        done = await client.wait_for([j["job_id"] for j in jobs], 60)
    async with httpx.AsyncClient(base_url=backend.url) as http:
        log = (await http.get("/scripted/requests")).json()["requests"]
    return {job_id: t.model_dump_json() for job_id, t in done.items()}, log


def _job(job_id: str) -> dict[str, Any]:
    return {"job_id": job_id, "group_id": "g1", "handler": "tool-math", "instance": {}}


async def test_a_served_tool_rollout_exports_as_atif_with_the_sampled_tokens(
    agentroll_server: ServerFactory, backend: RunningServer, tmp_path: Path
) -> None:
    served, log = await _serve(agentroll_server, backend, [_job("t1")])
    out = tmp_path / "atif"
    assert main(["export", "--db", str(tmp_path / "agentroll.db"), "--out", str(out), "t1"]) == 0
    document = json.loads((out / "t1.atif.json").read_text())
    atif = validate_atif(document)  # Harbor's schema, every rule

    stored = json.loads(served["t1"])
    assert stored["outcome"] == Outcome.ok and stored["reward"] == 1.0
    assert [s.source for s in atif.steps] == ["system", "user", "agent", "agent"]
    first, last = atif.steps[2], atif.steps[3]
    assert first.tool_calls is not None and last.tool_calls is not None
    assert first.tool_calls[0].function_name == "python"
    assert first.tool_calls[0].arguments == {"code": "print(sum(range(1, 21)))"}
    assert first.observation is not None
    assert first.observation.results[0].source_call_id == first.tool_calls[0].tool_call_id
    assert first.observation.results[0].content == "210\n"
    assert last.tool_calls[0].function_name == "submit"
    assert last.tool_calls[0].arguments == {"answer": "210"}

    # Each agent step's metrics are exactly one generation call of the backend's.
    assert len(log) == 2
    for step, call in zip((first, last), log, strict=True):
        assert step.metrics is not None
        assert step.metrics.prompt_token_ids == call["prompt_token_ids"]
        assert step.metrics.completion_token_ids == call["token_ids"]
        assert step.metrics.logprobs == call["logprobs"]
        assert step.metrics.extra is not None
        assert step.metrics.extra["loss_mask"] == [1] * len(call["token_ids"])
        assert step.metrics.extra["segments"][0]["policy_version"] == 0
    assert atif.extra is not None
    summary = atif.extra["agentroll"]
    assert (summary["job_id"], summary["outcome"], summary["reward"]) == ("t1", "ok", 1.0)
    assert atif.agent.tool_definitions == TOOLS
    assert atif.final_metrics is not None
    assert atif.final_metrics.total_completion_tokens == sum(len(c["token_ids"]) for c in log)


async def test_export_as_json_is_the_stored_trajectory_and_names_what_it_lacks(
    agentroll_server: ServerFactory,
    backend: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served, _ = await _serve(agentroll_server, backend, [_job("j1"), _job("j2")])
    db = str(tmp_path / "agentroll.db")
    capsys.readouterr()
    assert main(["export", "--db", db, "--format", "json", "--group", "g1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    exported = {json.loads(line)["job_id"]: json.loads(line) for line in lines}
    assert exported == {job_id: json.loads(raw) for job_id, raw in served.items()}

    assert main(["export", "--db", db, "j1", "nope"]) == 2
    assert "no stored result for job(s) nope" in capsys.readouterr().err
    assert main(["export", "--db", db]) == 2
    assert "JOB_ID..., --group GROUP or --all" in capsys.readouterr().err
    assert main(["export", "--db", str(tmp_path / "missing.db"), "--all"]) == 2
    assert "no store at" in capsys.readouterr().err


async def test_export_as_a_verifiers_episode_carries_the_task_and_the_tokens(
    agentroll_server: ServerFactory,
    backend: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = {**_job("v1"), "instance": {"question": QUESTION}}
    served, _ = await _serve(agentroll_server, backend, [job])
    capsys.readouterr()
    db = str(tmp_path / "agentroll.db")
    assert main(["export", "--db", db, "--format", "verifiers", "v1"]) == 0
    episode = json.loads(capsys.readouterr().out)
    check_episode(episode)
    stored = Trajectory.model_validate_json(served["v1"])
    assert episode["task"] == {"type": "tool-math", "data": {"question": QUESTION}}
    (trace,) = episode["traces"]
    tokens, _, _ = branch(trace)
    assert tokens == stored.prompt_ids + stored.response_ids[: stored.segments[-1].end]
    assert reward(trace) == stored.reward == 1.0
