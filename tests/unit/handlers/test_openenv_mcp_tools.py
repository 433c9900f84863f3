"""An OpenEnv environment's tools served to a harness over `/mcp` (`served_tools`), against a
scripted session endpoint: whose fault a slow, refused, malformed or oversize answer is, and
the tool loop's step budget and invalid-call rule under a harness."""

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from agentroll.handlers.builtin.openenv.handler import StepTool
from agentroll.handlers.builtin.openenv.mcp_tools import served_tools
from agentroll.handlers.builtin.openenv.session import Episode, open_session
from agentroll.handlers.errors import AgentError, InfraError
from agentroll.handlers.mcp import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, McpServer
from agentroll.testing.openenv import scripted_env

# openenv-core's own answers to a `call_tool` step.
CORRECT = {"observation": {"result": {"content": [{"type": "text", "text": "ok"}]}}}
TOOL_TIMEOUT = {"error": {"error_type": "timeout", "message": "timed out after 30 seconds"}}
REFUSED = {"type": "error", "data": {"code": "VALIDATION_ERROR", "errors": [{"msg": "bad"}]}}


def observation(data: dict[str, Any], reward: float = 0.5) -> dict[str, Any]:
    return {"type": "observation", "data": {**data, "reward": reward, "done": False}}


def tool_observation(observation_data: dict[str, Any]) -> dict[str, Any]:
    return observation({"observation": observation_data})


async def call(server: McpServer, n: int = 1) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    answer = await server.answer({**message, "params": {"name": "guess", "arguments": {"n": n}}})
    assert answer is not None
    return answer


async def test_a_tool_the_environment_timed_out_is_the_policys_slow_call_not_infra() -> None:
    """The environment bounds a tool call itself (30 s) and answers `timeout`: agentroll waits
    longer than that bound past its own `timeout_s`, so that answer arrives and is the
    policy's (a failed result; the step's reward counts)."""
    steps: list[str] = []

    async def slow_tool(frame: dict[str, Any]) -> dict[str, Any]:
        steps.append(frame["type"])
        await asyncio.sleep(1.5)  # past timeout_s=1, as the environment's 30 s bound is
        return tool_observation({**CORRECT["observation"], **TOOL_TIMEOUT})

    episode = Episode()
    async with (
        scripted_env(slow_tool) as url,
        served_tools(url, 1.0, {}, episode, (10, 3)) as tools,
    ):
        answer = await call(McpServer(tools))
    assert answer["result"]["isError"] is True
    assert answer["result"]["content"][0]["text"] == "timeout: timed out after 30 seconds"
    assert steps == ["step"] and episode.reward == 0.5


async def test_a_listing_the_environment_never_answers_is_still_infra() -> None:
    """The other door: a frame that is no tool call (`tools/list`) has no bound of the
    environment's, and no answer within `timeout_s` is the environment's."""

    async def silent(frame: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(3)
        return {"type": "mcp", "data": {"result": {"tools": []}}}

    async with scripted_env(silent) as url:
        with pytest.raises(InfraError) as raised:
            async with served_tools(url, 0.5, {}, Episode(), (10, 3)) as tools:
                answer = await McpServer(tools).answer(
                    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
                )
                assert answer is not None and answer["error"]["code"] == INTERNAL_ERROR
    assert raised.value.cause == "openenv_timeout"


async def test_steps_past_the_turn_limit_are_answered_without_stepping() -> None:
    steps: list[dict[str, Any]] = []

    async def rewarded(frame: dict[str, Any]) -> dict[str, Any]:
        steps.append(frame["data"])
        return tool_observation(CORRECT["observation"])

    episode = Episode()
    async with scripted_env(rewarded) as url, served_tools(url, 5, {}, episode, (3, 3)) as tools:
        server = McpServer(tools)
        within = [await call(server, n) for n in (1, 2, 3)]
        past = [await call(server, n) for n in (4, 5)]
    # The control: every step within the budget ran and earned its reward.
    assert [a["result"]["content"][0]["text"] for a in within] == ["ok"] * 3
    assert [s["arguments"]["n"] for s in steps] == [1, 2, 3]
    assert episode.reward == pytest.approx(1.5)
    for answer in past:
        assert answer["result"]["isError"] is True
        assert answer["result"]["content"][0]["text"] == "The step budget is spent (3 steps)."


async def test_invalid_calls_in_a_row_end_the_rollout_as_agent_error_still_scored() -> None:
    script = [REFUSED, REFUSED, REFUSED, tool_observation(CORRECT["observation"])]
    steps: list[dict[str, Any]] = []

    async def refusing(frame: dict[str, Any]) -> dict[str, Any]:
        steps.append(frame)
        return script[len(steps) - 1]

    episode = Episode()
    async with scripted_env(refusing) as url:
        with pytest.raises(AgentError) as raised:
            async with served_tools(url, 5, {}, episode, (30, 3)) as tools:
                server = McpServer(tools)
                answers = [await call(server) for _ in range(4)]
    assert raised.value.cause == "invalid_tool_calls"
    assert raised.value.finish_reason == "tool_errors"
    assert [a["error"]["code"] for a in answers] == [INVALID_PARAMS] * 4
    assert "no more steps are taken" in answers[3]["error"]["message"]
    assert len(steps) == 3 and episode.invalid_actions == 3


async def test_a_valid_call_between_invalid_ones_keeps_the_rollout_going() -> None:
    """The control: the rule counts invalid calls in a row, as the tool loop does."""
    good = tool_observation(CORRECT["observation"])
    script = [REFUSED, REFUSED, good, REFUSED, REFUSED, good]
    steps: list[dict[str, Any]] = []

    async def mixed(frame: dict[str, Any]) -> dict[str, Any]:
        steps.append(frame)
        return script[len(steps) - 1]

    episode = Episode()
    async with scripted_env(mixed) as url, served_tools(url, 5, {}, episode, (30, 3)) as tools:
        server = McpServer(tools)
        answers = [await call(server) for _ in script]
    assert ["result" in a for a in answers] == [False, False, True, False, False, True]
    assert episode.reward == pytest.approx(1.0) and episode.invalid_actions == 4


@pytest.mark.parametrize(
    "malformed",
    [
        {"type": "observation", "data": ["not", "an", "object"]},
        observation({"observation": "not an object"}),
        tool_observation({"result": {"content": [{"type": "text"}]}}),  # text without its text
    ],
    ids=["data", "observation", "content"],
)
async def test_a_malformed_step_answer_is_the_environments_failure(
    malformed: dict[str, Any],
) -> None:
    """Not `method not found`, not a crash of /mcp, not graded ok: openenv_error."""

    async def answer(frame: dict[str, Any]) -> dict[str, Any]:
        return malformed

    async with scripted_env(answer) as url:
        with pytest.raises(InfraError) as raised:
            async with served_tools(url, 5, {}, Episode(), (30, 3)) as tools:
                server = McpServer(tools)
                answers = [await call(server) for _ in range(2)]
    assert raised.value.cause == "openenv_error"
    assert [a["error"]["code"] for a in answers] == [INTERNAL_ERROR] * 2
    assert json.dumps(malformed)[:40] in answers[0]["error"]["message"]


async def test_a_method_the_server_does_not_serve_is_still_method_not_found() -> None:
    async def unused(frame: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no step")

    async with scripted_env(unused) as url, served_tools(url, 5, {}, Episode(), (30, 3)) as tools:
        answer = await McpServer(tools).answer({"jsonrpc": "2.0", "id": 7, "method": "x/y"})
    assert answer == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": METHOD_NOT_FOUND, "message": "method not found: x/y"},
    }


async def test_a_run_cancelled_during_a_step_stays_cancelled() -> None:
    """A stage timeout cancels the harness's run while a step is in flight: the cancellation
    is what leaves, not a second receive's RuntimeError nor the step's InfraError."""
    stepping = asyncio.Event()

    async def stuck(frame: dict[str, Any]) -> dict[str, Any]:
        stepping.set()
        await asyncio.sleep(15)  # past aiohttp's 10 s wait for the closing handshake
        return tool_observation(CORRECT["observation"])

    calls: list[asyncio.Task[dict[str, Any]]] = []

    async def harness(url: str) -> None:
        async with served_tools(url, 60, {}, Episode(), (30, 3)) as tools:
            calls.append(asyncio.create_task(call(McpServer(tools))))
            await asyncio.sleep(60)

    async with scripted_env(stuck) as url:
        run = asyncio.create_task(harness(url))
        await asyncio.wait_for(stepping.wait(), 10)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, 60)
        # The call in flight is answered as the environment gone (once aiohttp's wait for
        # the server's closing handshake is over), not left hanging.
        answer = await asyncio.wait_for(calls[0], 60)
        assert answer["error"]["code"] == INTERNAL_ERROR


def printed(mib: int) -> dict[str, Any]:
    """A tool's answer of `mib` MiB of text (what `print("x" * 20_000_000)` makes)."""
    return tool_observation({"result": {"content": [{"type": "text", "text": "x" * (mib << 20)}]}})


async def test_an_answer_too_big_for_a_frame_is_the_policys_call_and_ends_the_episode() -> None:
    """The policy's tool printed 17 MiB: not the environment's connection lost, but the
    policy's doing, scored with the rewards so far; no later call takes a step."""
    script = [tool_observation(CORRECT["observation"]), printed(15), printed(17)]
    steps: list[dict[str, Any]] = []

    async def printing(frame: dict[str, Any]) -> dict[str, Any]:
        steps.append(frame)
        return script[len(steps) - 1]

    episode = Episode()
    async with scripted_env(printing) as url:
        with pytest.raises(AgentError) as raised:
            async with served_tools(url, 5, {}, episode, (30, 3)) as tools:
                server = McpServer(tools)
                answers = [await call(server) for _ in range(4)]
    assert raised.value.cause == "openenv_answer_too_large"
    # The control: 15 MiB is within the frame limit, answered whole, rewarded.
    assert len(answers[1]["result"]["content"][0]["text"]) == 15 << 20
    assert answers[2]["result"] == {
        "content": [
            {
                "type": "text",
                "text": "the environment's answer to this step exceeded 16 MiB; "
                "the episode is over",
            }
        ],
        "isError": True,
    }
    assert answers[3]["error"]["code"] == INVALID_PARAMS
    assert len(steps) == 3 and episode.reward == pytest.approx(1.0)


async def test_under_the_tool_loop_too_big_an_answer_is_agent_error_too() -> None:
    """The other door: the tool loop's `step` tool (the same session) raises the policy's
    error, which ends the rollout `agent_error`, scored."""

    async def printing(frame: dict[str, Any]) -> dict[str, Any]:
        return printed(17)

    episode = Episode()
    async with scripted_env(printing) as url, aiohttp.ClientSession() as http:
        session = await open_session(http, url, 5, {}, episode)
        tool = StepTool(session, episode, {"properties": {"n": {"type": "integer"}}}, 60)
        with pytest.raises(AgentError) as raised:
            await tool.call(None, {"n": 1}, limit_s=5, max_chars=1000)
        await session.close()
    assert raised.value.cause == "openenv_answer_too_large"


async def test_too_big_an_answer_to_a_listing_is_the_environments() -> None:
    """No action of the policy's made `tools/list` big: infra, as before."""

    async def listing(frame: dict[str, Any]) -> dict[str, Any]:
        return {"type": "mcp", "data": {"result": {"tools": [], "pad": "x" * (17 << 20)}}}

    async with scripted_env(listing) as url:
        with pytest.raises(InfraError) as raised:
            async with served_tools(url, 5, {}, Episode(), (30, 3)) as tools:
                await McpServer(tools).answer({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert raised.value.cause == "openenv_connection_lost"
