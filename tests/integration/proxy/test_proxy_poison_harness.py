"""Poison from a real harness in a bubblewrap sandbox: the policy's shell holds the proxy's URL
and key, and sends what no engine should see. The rollout is scored (not `infra_error`), the
engines never see the poison ids, and the request an engine fails on reaches no other one."""

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import run_jobs, scripted_backend
from tests.integration.proxy.test_proxy_harness_faults import CLIENT, job

from agentroll.runtime import BwrapConfig
from agentroll.server.schema import Outcome
from agentroll.server.serving import RunningServer
from agentroll.testing.scripted_llm.export import export_tokenizer
from agentroll.testing.scripted_llm.rules.redteam_poison import ENGINE_FAILURE_MARK, RULE_PATH
from agentroll.testing.scripted_llm.tokenizer import get_tokenizer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

VOCAB = get_tokenizer().vocab_size
POISONER = (
    CLIENT
    + f"""
def completion(prompt):
    body = {{"model": os.environ["OPENAI_MODEL"], "prompt": prompt, "max_tokens": 4}}
    req = urllib.request.Request(BASE + "/completions", json.dumps(body).encode(),
        {{"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}})
    try:
        urllib.request.urlopen(req, timeout=60).read()
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
def chat_status(text):
    try:
        chat([SYSTEM, say(text)])
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
codes = [completion(p) for p in ([-1], [{VOCAB}], [True], [2**63])]
codes += [chat_status("{ENGINE_FAILURE_MARK}"), chat_status("{ENGINE_FAILURE_MARK}")]
assert codes == [400, 400, 400, 400, 502, 400], codes
chat([SYSTEM, say("the answer is \\\\boxed{{210}}")])
"""
)


async def received(server: RunningServer) -> list[Any]:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return list((await http.get("/scripted/requests")).json()["received"])


@pytest.mark.timeout(120)
async def test_a_harness_that_sends_poison_is_scored_and_costs_no_engine(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    tokenizer = str(export_tokenizer(tmp_path / "tokenizer"))
    async with (
        scripted_backend(0.0, policy=[RULE_PATH, "echo"], out_of_vocab="crash") as first,
        scripted_backend(0.0, policy=["echo"], out_of_vocab="crash") as second,
        agentroll_server(sandbox=BwrapConfig(state_dir=tmp_path / "sandboxes")) as (_, client),
    ):
        for name, backend in (("first", first), ("second", second)):
            spec = {"id": name, "base_url": backend.url, "tokenizer_path": tokenizer}
            await client.add_backend(spec)
        done = await run_jobs(client, [job("poisoner", POISONER)], timeout_s=100)
        on_first, on_second = await received(first), await received(second)
    t = done["poisoner"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), t.error
    # Ids no engine holds are a malformed request (400); the id beyond the vocabulary, the
    # request the first engine failed on and its retry are `unservable`.
    assert t.metadata["llm_proxy"]["refused"] == {"unservable": 3}
    every_id = [i for prompt in on_first + on_second for i in prompt]
    assert all(type(i) is int and 0 <= i < VOCAB for i in every_id)  # no poison id was sent

    def poisoned(prompts: list[Any]) -> int:
        return sum(ENGINE_FAILURE_MARK in get_tokenizer().decode(p) for p in prompts)

    # The request the first engine failed on went there, then a control, then the request once
    # more (it failed again: not a hiccup); nowhere else.
    assert (poisoned(on_first), poisoned(on_second)) == (2, 0)
    assert on_first.count([0]) == 1 and [0] not in on_second
