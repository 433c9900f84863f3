"""The proxy's `/mcp` when it closes: a task's tool call still being answered (the task may
already have applied it, e.g. an environment's step and its reward) is finished and recorded,
not cancelled with its connection; one that never ends is cancelled after the bound, and a
cancelled rollout's at once. The harness agent closes its proxy on every path."""

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.proxy.proxy_support import client_for, rig

from agentroll.handlers import InfraError
from agentroll.handlers.harness import HarnessAgent, ShellHarness
from agentroll.handlers.harness import agent as harness_agent
from agentroll.server.proxy import ProxyCaps, RolloutProxy

pytestmark = pytest.mark.integration

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "step"}}


async def test_close_finishes_an_mcp_answer_in_flight_after_its_connection_is_gone(
    tmp_path: Path,
) -> None:
    started, applied = asyncio.Event(), asyncio.Event()
    recorded: list[Any] = []

    async def answer(message: Any) -> dict[str, Any]:
        started.set()
        await applied.wait()  # the environment still applying the step
        recorded.append(message["id"])
        return {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}

    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        proxy.serve_mcp(answer)
        async with client_for(proxy) as http:
            call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
            await asyncio.wait_for(started.wait(), 30)
            closing = asyncio.create_task(proxy.close(mcp_wait_s=60))
            # The harness's connection is closed under its call ...
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(call, 30)
            assert not closing.done()  # ... and the close waits for the answer.
            applied.set()
            await asyncio.wait_for(closing, 30)
    assert recorded == [1]
    assert not proxy.listening


async def test_close_cancels_an_mcp_answer_that_outlives_its_bound(tmp_path: Path) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def answer(message: Any) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        proxy.serve_mcp(answer)
        async with client_for(proxy) as http:
            call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
            await asyncio.wait_for(started.wait(), 30)
            await asyncio.wait_for(proxy.close(mcp_wait_s=0.2), 30)
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(call, 30)
    assert cancelled.is_set()


async def test_a_cancelled_close_cancels_an_mcp_answer_at_once(tmp_path: Path) -> None:
    """A cancelled rollout keeps no reward: its proxy does not wait out the bound."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def answer(message: Any) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        proxy.serve_mcp(answer)

        async def rollout() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await proxy.close(mcp_wait_s=60)

        async with client_for(proxy) as http:
            call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
            await asyncio.wait_for(started.wait(), 30)
            running = asyncio.create_task(rollout())
            await asyncio.sleep(0)
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(running, 30)
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(call, 30)
    assert cancelled.is_set() and not proxy.listening


class SlowTools:
    """A task's tools whose one call is still being applied when the harness's run ends."""

    name = "openenv"

    def __init__(self) -> None:
        self.started, self.applied = asyncio.Event(), asyncio.Event()
        self.recorded: list[str] = []

    async def list_tools(self) -> list[dict[str, Any]]:
        return []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.started.set()
        await self.applied.wait()
        self.recorded.append(name)
        return {"content": [], "isError": False}


@dataclass
class Limits:
    max_turns: int = 30
    run_timeout_s: float = 1800.0
    eval_timeout_s: float = 600.0
    deadline_s: float = 7200.0


@dataclass
class HarnessContext:
    """What `HarnessAgent.run_with` reads of a rollout, its proxy a real one."""

    proxy: RolloutProxy
    limits: Limits = field(default_factory=Limits)
    instance: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    sandbox: object = "sandbox"
    agent_time_s: float = 0.0

    async def open_llm_proxy(self, sandbox: object, **settings: Any) -> RolloutProxy:
        return self.proxy

    def agent_time(self) -> float:
        return self.agent_time_s


def failing_run(tools: SlowTools) -> Any:
    """A harness's run that ends by an exception (its sandbox failing) while the environment
    applies its tool call (done 0.2 s later)."""

    async def run(sandbox: object, proxy: RolloutProxy, *args: Any, **kw: Any) -> Any:
        async with client_for(proxy) as http:
            call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
            await asyncio.wait_for(tools.started.wait(), 30)
            asyncio.get_running_loop().call_later(0.2, tools.applied.set)
            call.cancel()
            raise InfraError("the sandbox died", cause="sandbox_gone")

    return run


async def test_the_harness_agent_closes_its_proxy_when_the_run_fails_and_keeps_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = SlowTools()
    monkeypatch.setattr(harness_agent, "run_harness", failing_run(tools))
    agent = HarnessAgent(ShellHarness(command="agent"), instruction="go")
    async with rig() as r:
        ctx = HarnessContext(await r.proxy(tmp_path))
        with pytest.raises(InfraError, match="the sandbox died"):
            await asyncio.wait_for(agent.run_with(ctx, None, tools), 30)  # type: ignore[arg-type]
    assert not ctx.proxy.listening
    assert tools.recorded == ["step"]


async def test_a_step_in_flight_at_the_end_of_runs_budget_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy's slow call just as its budget runs out must not carry RUN past its timeout
    (`timed_out`, dropped): with no budget left, the step is cancelled at once."""
    tools = SlowTools()
    monkeypatch.setattr(harness_agent, "run_harness", failing_run(tools))
    agent = HarnessAgent(ShellHarness(command="agent"), instruction="go")
    async with rig() as r:
        ctx = HarnessContext(await r.proxy(tmp_path), agent_time_s=Limits().run_timeout_s)
        with pytest.raises(InfraError, match="the sandbox died"):
            await asyncio.wait_for(agent.run_with(ctx, None, tools), 30)  # type: ignore[arg-type]
        await asyncio.sleep(0.5)  # past the moment the environment would have answered
    assert not ctx.proxy.listening
    assert tools.recorded == []


async def test_the_harness_agent_closes_its_proxy_when_the_run_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = SlowTools()

    async def endless_run(sandbox: object, proxy: RolloutProxy, *args: Any, **kw: Any) -> Any:
        async with client_for(proxy) as http:
            await http.post("http://rollout/mcp", json=CALL)
        raise AssertionError("unreachable")

    monkeypatch.setattr(harness_agent, "run_harness", endless_run)
    agent = HarnessAgent(ShellHarness(command="agent"), instruction="go")
    async with rig() as r:
        ctx = HarnessContext(await r.proxy(tmp_path))
        running = asyncio.create_task(agent.run_with(ctx, None, tools))  # type: ignore[arg-type]
        await asyncio.wait_for(tools.started.wait(), 30)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(running, 30)
    assert not ctx.proxy.listening
    assert tools.recorded == []  # a cancelled rollout's call is not waited for


async def test_mcp_calls_whose_harness_hung_up_still_count_against_the_connection_cap(
    tmp_path: Path,
) -> None:
    """An answer outlives its client's hanging up; a harness that calls and hangs up, again
    and again, cannot pile up answers: each holds its connection until it is answered, so the
    proxy's connection cap bounds them and the next call is 429."""
    release, started = asyncio.Event(), asyncio.Queue[None]()

    async def answer(message: Any) -> dict[str, Any]:
        started.put_nowait(None)
        await release.wait()
        return {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}

    async with rig() as r:
        proxy = await r.proxy(tmp_path, caps=ProxyCaps(max_connections=2))
        proxy.serve_mcp(answer)
        for _ in range(2):  # each call's connection closed before its answer
            async with client_for(proxy) as http:
                call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
                await asyncio.wait_for(started.get(), 30)
                call.cancel()
        async with client_for(proxy) as http:
            refused = await asyncio.wait_for(http.post("http://rollout/mcp", json=CALL), 30)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["message"] == "more than 2 open connections to this proxy"
        release.set()
        await asyncio.wait_for(proxy.close(), 30)
