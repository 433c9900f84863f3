"""Text no UTF-8 can encode never breaks reading: a lone surrogate the policy leaves in a tool
call, an error or the grader's info is stored as its escape's characters, so `GET /v1/jobs/{id}`,
`/v1/results` pages and the SSE stream stay readable by a strict JSON parser (orjson reads
them here, as a trainer in another language would), and the token ids are untouched."""

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import orjson
import pytest
from tests.conftest import ServerFactory

from agentroll.handlers import AgentError, AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

LONE = "\ud800"
ESCAPED = "\\ud800"  # the six characters a strict reader gets instead


class OddText(AgentHandler):
    """One turn, then the reply is described as a tool call whose arguments hold what a
    model's `"\\ud800"` escape parses to; with `odd`, the error and the grader's info too."""

    name: ClassVar[str] = "odd_text"

    async def run(self, ctx: RolloutContext) -> None:
        odd = LONE if ctx.instance["odd"] else "é"
        await ctx.llm.start([{"role": "user", "content": "Repeat after me: one"}])
        turn = await ctx.llm.generate()
        arguments = f'{{"command": "echo {odd}"}}'
        call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": arguments}}
        reply = {"role": "assistant", "content": turn.text, "tool_calls": [call]}
        ctx.llm.describe_last_reply(reply)
        raise AgentError(f"the tool refused {odd}", cause="tool_refused")

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0, info={"note": f"graded {LONE if ctx.instance['odd'] else 'é'}"})


@pytest.fixture
async def backend() -> AsyncIterator[RunningServer]:
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(policy=["echo"])))
    yield server
    await server.stop()


def arguments(result: dict[str, Any]) -> str:
    return str(result["messages"][1]["tool_calls"][0]["function"]["arguments"])


async def test_a_lone_surrogate_leaves_every_read_path_strict_json(
    agentroll_server: ServerFactory, backend: RunningServer
) -> None:
    registry = HandlerRegistry()
    registry.register(OddText)
    jobs = [
        {"job_id": "odd", "handler": "odd_text", "instance": {"odd": True}},
        {"job_id": "plain", "handler": "odd_text", "instance": {"odd": False}},  # the control
    ]
    async with agentroll_server(registry=registry) as (server, client):
        await client.add_backend({"id": "b0", "base_url": backend.url})
        await client.submit(jobs)
        await client.wait_for(["odd", "plain"], 60)
        headers = auth_headers(server.url)
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
            views = {j: await http.get(f"/v1/jobs/{j}") for j in ("odd", "plain")}
            page = await http.get("/v1/results", params={"after": 0})
            async with http.stream("GET", "/v1/results/stream") as stream:
                events: list[dict[str, Any]] = []
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        events.append(orjson.loads(line[6:]))
                    if len(events) == 2:
                        break
    for view in views.values():
        assert view.status_code == 200, view.text
    odd = orjson.loads(views["odd"].content)["result"]
    assert (odd["outcome"], odd["reward"]) == ("agent_error", 1.0)
    assert arguments(odd) == f'{{"command": "echo {ESCAPED}"}}'
    assert odd["error"]["message"] == f"the tool refused {ESCAPED}"
    assert odd["reward_info"]["note"] == f"graded {ESCAPED}"
    # The control keeps its text as it was (nothing else is escaped).
    plain = orjson.loads(views["plain"].content)["result"]
    assert arguments(plain) == '{"command": "echo é"}'
    assert plain["reward_info"]["note"] == "graded é"
    # Whole pages and the stream parse; the token ids are the ones the job view has.
    results = {r["job_id"]: r for r in orjson.loads(page.content)["results"]}
    assert set(results) == {"odd", "plain"} and {e["job_id"] for e in events} == {"odd", "plain"}
    assert results["odd"]["response_ids"] == odd["response_ids"] and odd["response_ids"]
    assert arguments(results["odd"]) == arguments(odd)
