"""An OpenEnv MCP environment's tools under a harness preset: openenv-core 0.3.0's own server
(started here) serves the guessing game with one MCP tool, `guess` (`guess_mcp_env`); the
`shell` preset runs a standard-library MCP client in the sandbox against the rollout's `/mcp`
(`AGENTROLL_MCP_URL`). It lists the tool, calls it, and the job's reward is what the
environment emitted; a call the environment refuses is the policy's (a JSON-RPC error, still
scored); the environment's process dying is infra_error."""

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.openenv import guess_mcp_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

# The harness: one model call (the rollout's LLM proxy), then MCP over streamable HTTP.
MCP_CLIENT = r"""
import json, os, sys, urllib.error, urllib.request
URL, KEY = os.environ["AGENTROLL_MCP_URL"], os.environ["OPENAI_API_KEY"]
def post(url, body, key=KEY):
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, (json.loads(r.read()) if r.status == 200 else None)
    except urllib.error.HTTPError as e:
        return e.code, None
def rpc(method, **params):
    status, answer = post(URL, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return answer
def say(*words):
    sys.stderr.write(" ".join(str(w) for w in words) + "\n")
if os.environ.get("PROBE"):  # the protocol's edges, answered without a step
    say("batch", post(URL, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}])[1]["error"]["code"])
    say("unknown", rpc("resources/list")["error"]["code"])
    say("nameless", rpc("tools/call", arguments={})["error"]["code"])
    say("ping", rpc("ping")["result"])
    stream = urllib.request.Request(URL, headers={"Authorization": "Bearer " + KEY})
    try:
        urllib.request.urlopen(stream, timeout=60)
    except urllib.error.HTTPError as e:
        say("get", e.code)
    sys.exit(0)
if os.environ.get("KILLED"):  # past its time limit while the environment still naps
    rpc("tools/call", name="nap", arguments={"seconds": 20})
chat = {"model": os.environ["OPENAI_MODEL"], "messages": [{"role": "user", "content": "go"}]}
post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", chat)
init = rpc("initialize", protocolVersion="2025-06-18", capabilities={},
           clientInfo={"name": "t", "version": "1"})["result"]
say("server", init["serverInfo"]["name"], "tools" in init["capabilities"])
say("initialized", post(URL, {"jsonrpc": "2.0", "method": "notifications/initialized"})[0])
say("keyless", post(URL, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, key="x")[0])
say("tools", [t["name"] for t in rpc("tools/list")["result"]["tools"]])
def guess(n):
    answer = rpc("tools/call", name="guess", arguments={"n": n})
    if "error" in answer:
        say("guess", n, "error", answer["error"]["code"], answer["error"]["message"][:80])
        sys.exit(1)
    result = answer["result"]
    text = result["content"][0]["text"]
    say("guess", n, "isError" if result["isError"] else "ok", text[:80])
    return text
if os.environ.get("MISTAKES"):
    bad = rpc("tools/call", name="teleport", arguments={})["error"]
    say("teleport", bad["code"], bad["message"][:80])
    guess(42)
if os.environ.get("NAP"):  # slower than the environment's own bound on a tool call
    nap = rpc("tools/call", name="nap", arguments={"seconds": 45})["result"]
    say("nap", "isError" if nap["isError"] else "ok", nap["content"][0]["text"][:80])
if os.environ.get("PARALLEL"):  # four calls at once, as a harness's parallel tool calls
    from concurrent.futures import ThreadPoolExecutor
    def text(n):
        answer = rpc("tools/call", name="guess", arguments={"n": n})
        return answer["result"]["content"][0]["text"] if "result" in answer else answer
    with ThreadPoolExecutor(4) as pool:
        say("parallel", list(pool.map(text, [1, 2, 4, 5])))
low, high = 1, 10
while True:
    n = (low + high) // 2
    feedback = guess(n)
    if feedback == "correct":
        break
    low, high = (n + 1, high) if feedback == "higher" else (low, n - 1)
if os.environ.get("MISTAKES"):
    guess(n)
"""


def job(
    job_id: str, url: str, reset: dict[str, Any], mode: str = "", timeout_s: float = 900
) -> dict[str, Any]:
    env = {mode: "1"} if mode else {}
    command = ["python3", "-c", MCP_CLIENT]
    agent = {"type": "shell", "command": command, "env": env, "timeout_s": timeout_s}
    instance = {"server": {"url": url, "timeout_s": 30}, "reset": reset}
    return {"job_id": job_id, "task": "openenv", "agent": agent, "instance": instance}


async def run(
    agentroll_server: ServerFactory, tmp_path: Path, jobs: list[dict[str, Any]]
) -> dict[str, Trajectory]:
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        return await run_jobs(client, jobs, timeout_s=300)


def said(t: Trajectory) -> list[str]:
    return t.metadata["harness"]["stderr_tail"].strip().splitlines()


def emitted(t: Trajectory) -> list[float | None]:
    return [o["reward"] for o in t.metadata["openenv"]["observations"]]


async def test_a_harness_lists_and_calls_the_environments_tools_and_earns_its_reward(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with guess_mcp_server() as env:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job("search", env.url, {"target": 7}),
                job("mistakes", env.url, {"target": 3}, "MISTAKES"),
                job("probe", env.url, {"target": 3}, "PROBE"),
                job("parallel", env.url, {"target": 3}, "PARALLEL"),
            ],
        )

    search = results["search"]
    assert search.outcome is Outcome.ok, search.error
    assert said(search) == [
        "server openenv True",
        "initialized 202",
        "keyless 401",
        "tools ['guess', 'nap']",
        "guess 5 ok higher",
        "guess 8 ok lower",
        "guess 6 ok higher",
        "guess 7 ok correct",
    ]
    assert emitted(search) == [None, -0.1, -0.1, -0.1, 1.0]
    assert search.reward == pytest.approx(0.7)
    assert search.reward_info["done"] is True and search.reward_info["steps"] == 4
    assert search.metadata["llm_proxy"]["calls"] == 1

    # The policy's mistakes: an unknown tool is a JSON-RPC error, a guess out of range a
    # failed result; the environment rewarded both steps as it chose, and the rollout is
    # scored. A call after the episode is done takes no step.
    mistakes = results["mistakes"]
    assert mistakes.outcome is Outcome.ok, mistakes.error
    lines = said(mistakes)
    assert lines[4].startswith("teleport -32602 tool_not_found: Unknown tool: 'teleport'")
    assert lines[5].startswith("guess 42 isError execution_error:")
    assert "42 is not from 1 to 10" in lines[5]
    assert lines[6:] == [
        "guess 5 ok lower",
        "guess 2 ok higher",
        "guess 3 ok correct",
        "guess 3 isError The episode is over.",
    ]
    assert emitted(mistakes) == [None, -0.1, -0.1, -0.1, -0.1, 1.0]
    assert mistakes.reward == pytest.approx(0.6)
    assert mistakes.reward_info["invalid_actions"] == 1

    # Parallel calls each get their own answer (one step at a time on the session).
    parallel = results["parallel"]
    assert parallel.outcome is Outcome.ok, parallel.error
    assert said(parallel)[4:] == [
        "parallel ['higher', 'higher', 'lower', 'lower']",
        "guess 5 ok lower",
        "guess 2 ok higher",
        "guess 3 ok correct",
    ]
    assert emitted(parallel) == [None] + [-0.1] * 6 + [1.0]

    # JSON-RPC the server does not serve: errors the client sees, no step taken.
    probe = results["probe"]
    assert probe.outcome is Outcome.ok, probe.error
    assert said(probe) == [
        "batch -32600",
        "unknown -32601",
        "nameless -32602",
        "ping {}",
        "get 405",
    ]
    assert emitted(probe) == [None] and probe.reward == 0.0


async def test_a_tool_the_environment_times_out_itself_is_the_policys_slow_call(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """openenv-core bounds a tool call at 30 s and answers `timeout`; agentroll waits that
    bound past the instance's `timeout_s` (5 s here), so the answer arrives: a failed result
    the policy's call earned, the step rewarded as the environment chose, the rollout ok."""
    async with guess_mcp_server() as env:
        slow = job("nap", env.url, {"target": 5}, "NAP")
        slow["instance"]["server"]["timeout_s"] = 5
        results = await run(agentroll_server, tmp_path, [slow])

    nap = results["nap"]
    assert nap.outcome is Outcome.ok, nap.error
    assert said(nap)[4:] == [
        "nap isError timeout: Tool 'nap' timed out after 30.0 seconds",
        "guess 5 ok correct",
    ]
    assert emitted(nap) == [None, -0.1, 1.0]
    assert nap.reward == pytest.approx(0.9)


async def test_a_step_in_flight_when_the_harness_is_killed_keeps_its_reward(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The harness runs out its time limit (5 s) while the environment applies its call (a
    20 s nap): the proxy closes only once that step's answer is in, so the step the
    environment applied is in the episode and its reward counts; the run is the policy's
    timeout, scored."""
    async with guess_mcp_server() as env:
        killed = job("killed", env.url, {"target": 5}, "KILLED", timeout_s=5)
        results = await run(agentroll_server, tmp_path, [killed])

    t = results["killed"]
    assert t.outcome is Outcome.agent_error, t.error
    assert t.error is not None and t.error.type == "harness_timeout"
    assert emitted(t) == [None, -0.1]
    assert t.reward == pytest.approx(-0.1) and t.reward_info["steps"] == 1


async def test_the_environment_dying_under_a_harness_is_infra_error(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Its process dies at the first step: the harness's call is answered INTERNAL_ERROR (the
    harness then exits 1, which would be agent_error), and the rollout is infra_error."""
    async with guess_mcp_server() as env:
        results = await run(
            agentroll_server,
            tmp_path,
            [job("dropped", env.url, {"target": 4, "crash_on_step": True})],
        )
        assert env.process.returncode is not None  # it really died

    dropped = results["dropped"]
    assert dropped.outcome is Outcome.infra_error and dropped.reward is None
    assert dropped.error is not None and dropped.error.type == "openenv_connection_lost"
    assert "dropped during step" in dropped.error.message


async def test_a_tool_call_the_environment_fails_on_alone_is_the_policys_under_a_harness(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The environment's `step` raises on `guess(6)` alone: the harness's call is answered
    INTERNAL_ERROR (it then exits 1), and once it ended the episode is replayed in a fresh
    session, the last answered `guess` (8) answered in the failing call's place: the
    call was the policy's doing, agent_error with the rewards so far. Beside it, the same
    server's honest episode is ok."""
    async with guess_mcp_server() as env:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job("chokes", env.url, {"target": 7, "raise_on_guess": 6}),
                job("honest", env.url, {"target": 7, "raise_on_guess": 9}),
            ],
        )

    chokes = results["chokes"]
    assert chokes.outcome is Outcome.agent_error, chokes.error
    assert chokes.error is not None and chokes.error.type == "action_failed_environment"
    assert said(chokes)[4:6] == ["guess 5 ok higher", "guess 8 ok lower"]
    assert said(chokes)[6].startswith("guess 6 error -32603")
    assert emitted(chokes) == [None, -0.1, -0.1]
    assert chokes.reward == pytest.approx(-0.2)
    control = chokes.reward_info["control"]
    assert control["passed"] is True
    # The control: the episode's last answered call of the same tool, in the failing one's place.
    assert '"tool_name": "guess", "arguments": {"n": 8}' in control["detail"]
    assert "chokes on 6" in chokes.reward_info["failure"]

    honest = results["honest"]
    assert honest.outcome is Outcome.ok, honest.error
    assert honest.reward == pytest.approx(0.7)
