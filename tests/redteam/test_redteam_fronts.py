"""The NeMo Gym front against a web page in a browser on the same machine.

`agentroll nemo-gym-agent` listens on loopback and answers without authentication, acting with
the agentroll token it holds. Loopback keeps the network out, not this machine's browser: a
page on a name its attacker re-points at 127.0.0.1 (DNS rebinding) is same-origin with the
front, so it could POST rows and read the answers. Its requests name the attacker's host in
`Host`; the front serves only requests addressed to a loopback name.
"""

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.test_nemo_gym_run import nemo_gym_front
from tests.integration.server.tool_handlers import QUESTION, TOOLS, ToolMath

from agentroll.handlers import HandlerRegistry
from agentroll.server.nemo_gym_agent import create_agent_app
from agentroll.server.serving import start_in_loop
from agentroll.testing.redteam_budgets import BUDGET_POLICY, budget_attack
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app

pytestmark = [pytest.mark.redteam, pytest.mark.timeout(300)]

ROW: dict[str, Any] = {
    "agent_ref": {"name": "agentroll_agent"},
    "responses_create_params": {
        "input": [{"role": "user", "content": QUESTION}],
        "tools": TOOLS,
        "max_output_tokens": 256,
    },
    "expected_answer": "210",
}


async def test_a_page_on_a_rebound_name_runs_nothing(agentroll_server: ServerFactory) -> None:
    async with nemo_gym_front(agentroll_server) as (url, client):
        port = httpx.URL(url).port
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            for host in (
                f"attacker.example:{port}",  # the rebound name
                f"127.0.0.1.attacker.example:{port}",  # a name that starts like loopback
                f"localhost.attacker.example:{port}",
            ):
                refused = await http.post("/run", json=ROW, headers={"host": host})
                assert refused.status_code == 403, (host, refused.text)
                assert refused.json()["error"]["type"] == "host_not_loopback"
            # The control: NeMo Gym's own client names the address it was given.
            for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
                served = await http.post("/run", json=ROW, headers={"host": host})
                assert served.status_code == 200, served.text
                assert served.json()["reward"] == 1.0
        page = await client.results(after=0)
    assert len(page.results) == 2  # the two controls' jobs, none of the refused requests


@pytest.mark.parametrize(
    "payload",
    [
        {"sampling": ["temperature", 0.7]},  # sampling not an object
        {"sampling": {"temperature": "hot"}},  # a value agentroll refuses
        {"client": "http://127.0.0.1:1"},  # client not an object
        {"task_data": ["what", "is", "2+2"]},  # task data not an object
    ],
)
async def test_a_malformed_env_request_gets_an_error_reply_not_silence(
    agentroll_server: ServerFactory, payload: dict[str, Any]
) -> None:
    """prime-rl's orchestrator waits for each reply: a request the env server cannot take
    must be answered (a failed episode), and the next one served."""
    from agentroll.server.prime_env.server import PrimeEnvServer
    from agentroll.testing.prime_env_client import EnvClient, EnvServerError

    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=5, wrong_rate=0.0)))
    registry = HandlerRegistry()
    registry.register(ToolMath)
    try:
        async with agentroll_server(registry=registry) as (_, client):
            server = PrimeEnvServer(client, handler="tool-math", address="tcp://127.0.0.1:0")
            serving = asyncio.create_task(server.serve())
            env = EnvClient(server.address)
            try:
                run = {
                    "task_data": {"question": QUESTION, "expected_answer": "210"},
                    "client": {"type": "train", "base_url": f"{backend.url}/v1"},
                    "model": "policy",
                    "sampling": {"max_tokens": 256},
                }
                with pytest.raises(EnvServerError) as refused:
                    await env.request("run", {**run, **payload}, timeout_s=30)
                assert "Error" in str(refused.value)  # names what was wrong
                served = await env.request("run", run, timeout_s=120)  # the control
                assert served["episode"]["ok"] is True
            finally:
                await env.close()
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
    finally:
        await backend.stop()


FRONT_TIMEOUT_S = 90.0


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap")
async def test_a_policy_that_spends_the_fronts_time_is_scored_never_retried(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """A policy that sleeps instead of answering must reach NeMo RL as a scored 0 (200), not
    as the front's own timeout (504, which NeMo RL retries as infrastructure): the front's
    time is the job's deadline, inside which the policy's budget ends."""
    policy = ScriptedLLMConfig(policy=BUDGET_POLICY, wrong_rate=0.0)
    backend = await start_in_loop(create_scripted_app(policy))
    sandbox = {"type": "bwrap", "state_dir": str(tmp_path / "sandboxes")}
    try:
        async with agentroll_server(sandbox=sandbox) as (_, client):
            await client.add_backend({"id": "scripted", "base_url": backend.url})
            app = create_agent_app(client, handler="math", timeout_s=FRONT_TIMEOUT_S)
            front = await start_in_loop(app)
            try:
                async with httpx.AsyncClient(base_url=front.url, timeout=300) as http:
                    attack, control = await asyncio.gather(
                        *(
                            http.post("/run", json={**ROW, **budget_attack(name)})
                            for name in ("sleep_flood", "slow_honest")
                        )
                    )
            finally:
                await front.stop()
    finally:
        await backend.stop()
    assert attack.status_code == 200, attack.text
    assert attack.json()["reward"] == 0.0
    assert attack.json()["agentroll"]["outcome"] == "agent_error"
    assert control.status_code == 200, control.text  # the control: slow, inside its budget
    assert control.json()["reward"] == 1.0


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap")
async def test_a_policy_that_spends_the_env_servers_time_is_scored_never_dropped(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The same through prime-env-server: a scored episode with reward 0, not the failed
    episode of the server's own timeout, which prime-rl drops and resamples."""
    from agentroll.server.prime_env.server import PrimeEnvServer
    from agentroll.testing.prime_env_client import EnvClient, reward

    policy = ScriptedLLMConfig(policy=BUDGET_POLICY, wrong_rate=0.0)
    backend = await start_in_loop(create_scripted_app(policy))
    sandbox = {"type": "bwrap", "state_dir": str(tmp_path / "sandboxes")}
    try:
        async with agentroll_server(sandbox=sandbox) as (_, client):
            server = PrimeEnvServer(
                client, handler="math", address="tcp://127.0.0.1:0", timeout_s=FRONT_TIMEOUT_S
            )
            serving = asyncio.create_task(server.serve())
            env = EnvClient(server.address)
            try:
                attack, control = await asyncio.gather(
                    *(
                        env.run(f"{backend.url}/v1", "policy", {}, budget_attack(name), 300)
                        for name in ("sleep_flood", "slow_honest")
                    )
                )
            finally:
                await env.close()
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
    finally:
        await backend.stop()
    assert attack["ok"] is True and reward(attack["traces"][0]) == 0.0
    assert control["ok"] is True and reward(control["traces"][0]) == 1.0  # the control


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_a_cross_site_form_or_beacon_is_refused_before_its_body_is_read(
    agentroll_server: ServerFactory, content_type: str | None
) -> None:
    """A page on any site may POST to 127.0.0.1 without asking (a form, `fetch` with
    `no-cors`, a beacon): such a request can only carry these content types, and the front
    would read its body, however large, before refusing it. JSON, which NeMo Gym sends, needs
    the browser to ask first, and nothing here answers that question."""
    async with nemo_gym_front(agentroll_server) as (url, client):
        headers = {} if content_type is None else {"content-type": content_type}
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            body = json.dumps(ROW).encode()
            refused = await http.post("/run", content=body, headers=headers)
            asked = await http.options("/run", headers={"origin": "https://attacker.example"})
            served = await http.post("/run", json=ROW)  # the control: NeMo Gym's own request
        page = await client.results(after=0)
    assert refused.status_code == 415, refused.text
    assert refused.json()["error"]["type"] == "not_json"
    assert "access-control-allow-origin" not in asked.headers
    assert served.status_code == 200 and served.json()["reward"] == 1.0
    assert len(page.results) == 1
