"""Harnesses run by the `harness` handler in real bubblewrap sandboxes, reaching the proxy
only through the in-sandbox bridge: history rewrites, endless loops, crashes, a dead backend,
a request flood."""

import asyncio
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
from tests.integration.proxy.proxy_support import assert_chain_exact

from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

# A tiny OpenAI client on the standard library, as a harness inside the sandbox would have.
CLIENT = """
import json, os, sys, urllib.error, urllib.request
BASE, KEY = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
assert BASE.startswith("http://127.0.0.1:"), BASE
def chat(messages, stream=False):
    body = {"model": os.environ["OPENAI_MODEL"], "messages": messages, "stream": stream}
    req = urllib.request.Request(BASE + "/chat/completions", json.dumps(body).encode(),
        {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        if not stream:
            return json.load(resp)["choices"][0]["message"]
        text = ""
        for line in resp.read().decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        return {"role": "assistant", "content": text}
def say(text):
    return {"role": "user", "content": "Repeat after me: " + text}
SYSTEM = {"role": "system", "content": "You repeat things."}
"""

REWRITER = (
    CLIENT
    + """
h = [SYSTEM, say("one")]
h += [chat(h), say("two")]
h.append(chat(h))
h = [SYSTEM, say("we said one and two; now three")]   # history summarised
h += [chat(h, stream=True), say("the answer is \\\\boxed{210}")]
h.append(chat(h))
print("done")
"""
)

LOOPER = (
    CLIENT
    + """
h = [SYSTEM, say("again")]
while True:   # never stops on its own, not even when refused
    try:
        h += [chat(h), say("again")]
    except urllib.error.HTTPError as exc:
        print("refused", exc.code, file=sys.stderr)
"""
)

FLOODER = (
    CLIENT
    + """
while True:   # as fast as it can, until refused
    req = urllib.request.Request(BASE + "/models", headers={"Authorization": "Bearer " + KEY})
    try:
        urllib.request.urlopen(req, timeout=60).read()
    except urllib.error.HTTPError as exc:
        print("refused", exc.code, "retry after", exc.headers["Retry-After"], file=sys.stderr)
        sys.exit(4)
"""
)

CRASHER = (
    CLIENT
    + """
chat([SYSTEM, say("hello")])
print("Traceback: something broke in the harness", file=sys.stderr)
sys.exit(3)
"""
)


def job(job_id: str, script: str, **harness: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "handler": "harness",
        "instance": {
            "harness": {"type": "shell", "command": ["python3", "-c", script], **harness},
            "evaluator": "math",
            "task": {
                "question": "What is the sum of the first 20 positive integers?",
                "answer": "210",
            },
        },
        "sampling": {"seed": 7},
    }


@pytest.mark.timeout(120)
async def test_harness_faults_end_as_the_outcome_taxonomy_says(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        job("rewrite", REWRITER),
        job("loop", LOOPER, max_calls=4),
        job("crash", CRASHER),
    ]
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        done = await run_jobs(client, jobs, timeout_s=100)
        log = await request_log(backend)

    # A harness that rewrites its history: two chains, each exact, the break reported.
    t = done["rewrite"]
    assert t.outcome == Outcome.ok and t.reward == 1.0, t.error
    proxy = t.metadata["llm_proxy"]
    assert (proxy["num_chains"], proxy["prefix_extended"], proxy["prefix_broken"]) == (2, 2, 1)
    main, other = proxy["chains"]
    assert main["main"] and not other["main"]
    broken = [c for c in proxy["chains"] if c["broken"] is not None]
    assert [(c["calls"], c["broken"]["by_call"], c["broken"]["reason"]) for c in broken] == [
        ([0, 1], 2, "history_rewritten")
    ]
    assert t.num_turns == 2 and len(t.segments) == 2
    # The chain beside the main one is a sample of its own: the loop before its rewrite.
    assert t.chains is not None and [(c.index, c.kind) for c in t.chains] == [
        (other["index"], "continuation")
    ]
    rewrite_log = [
        e
        for e in log
        if any(e["prompt_token_ids"] == p for p in (t.prompt_ids, t.chains[0].prompt_ids))
    ]
    assert len(rewrite_log) == 2  # each chain's first call
    assert_chain_exact(t, log)
    assert_chain_exact(t.chains[0], log)

    # A harness that loops forever is stopped at its call cap: agent_error, still scored.
    t = done["loop"]
    assert t.outcome == Outcome.agent_error and t.error is not None
    assert t.error.type == "harness_max_calls" and t.finish_reason == "max_turns"
    assert t.reward == 0.0 and t.metadata["llm_proxy"]["calls"] == 4
    assert t.metadata["harness"]["stopped_by_proxy"] == "max_calls"
    assert t.num_turns == 4
    assert_chain_exact(t, log)

    # A harness that crashes: agent_error with its exit code and stderr tail.
    t = done["crash"]
    assert t.outcome == Outcome.agent_error and t.error is not None
    assert t.error.type == "harness_crashed"
    assert "exit code 3" in t.error.message and "something broke" in t.error.message
    assert t.metadata["harness"]["exit_code"] == 3 and t.num_turns == 1


@pytest.mark.timeout(60)
async def test_a_dead_backend_is_infra_error_not_a_reward(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo", fail_rate=1.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        t = (await run_jobs(client, [job("dead", LOOPER)], timeout_s=50))["dead"]
    assert t.outcome == Outcome.infra_error and t.reward is None
    assert t.error is not None and t.error.type == "llm_backend_unavailable"
    assert t.metadata["llm_proxy"]["stopped"]["kind"] == "infra"


@pytest.mark.timeout(120)
async def test_a_flooding_harness_is_rate_limited_and_its_neighbour_is_not(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    caps = {"request_burst": 5, "requests_per_s": 0.01}
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend, llm_proxy=caps) as client,
    ):
        done = await run_jobs(client, [job("flood", FLOODER), job("calm", REWRITER)], 100)

    # The flood is the policy's doing: agent_error (the harness gave up), still scored.
    t = done["flood"]
    assert t.outcome == Outcome.agent_error and t.error is not None, t.error
    assert t.error.type == "harness_crashed" and t.reward == 0.0
    assert "refused 429 retry after" in t.error.message
    assert t.metadata["llm_proxy"]["refused"] == {"rate_limited": 1}
    assert t.metadata["llm_proxy"]["stopped"] is None
    # Its neighbour (same server, its own proxy and bucket) is served in full: 4 calls.
    t = done["calm"]
    assert t.outcome == Outcome.ok and t.reward == 1.0, t.error
    assert t.metadata["llm_proxy"]["calls"] == 4 and t.metadata["llm_proxy"]["refused"] == {}


# What a command the policy runs can send to its own proxy (the key and port are in its
# environment): token ids the backend has never heard of. Then it carries on honestly.
OUT_OF_VOCABULARY = (
    CLIENT
    + """
body = {"model": os.environ["OPENAI_MODEL"], "prompt": [10**9]}
req = urllib.request.Request(BASE + "/completions", json.dumps(body).encode(),
    {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=60).read()
except urllib.error.HTTPError as exc:
    print("refused", exc.code, file=sys.stderr)
chat([SYSTEM, say("the answer is \\\\boxed{210}")])
"""
)
# A harness (the policy's) that dresses its own failure up as the bridge's.
FAKE_BRIDGE_FAILURE = (
    CLIENT
    + """
chat([SYSTEM, say("hello")])
print("agentroll-bridge: the LLM proxy went away", file=sys.stderr)
sys.exit(222)
"""
)
# The agent's conversation ends on the right answer; a side call afterwards says otherwise.
SIDE_CALL_LAST = (
    CLIENT
    + """
h = [SYSTEM, say("one")]
h += [chat(h), say("the answer is \\\\boxed{210}")]
h.append(chat(h))
chat([{"role": "user", "content": "Repeat after me: \\\\boxed{1}"}])
"""
)


@pytest.mark.timeout(120)
async def test_what_the_harness_causes_is_never_an_infra_error(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        job("oov", OUT_OF_VOCABULARY),
        job("fake-bridge", FAKE_BRIDGE_FAILURE),
        job("side-call", SIDE_CALL_LAST),
    ]
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        done = await run_jobs(client, jobs, 100)
    # The backend refused what the harness sent: the harness hears it, the rollout goes on.
    t = done["oov"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), t.error
    assert t.metadata["llm_proxy"]["refused"] == {"unservable": 1}
    # Exit 222 and a bridge-like line after the policy was sampled: the harness's own crash.
    t = done["fake-bridge"]
    assert t.outcome == Outcome.agent_error and t.error is not None, t.error
    assert t.error.type == "harness_crashed" and t.reward == 0.0
    # The answer scored is the last reply of the trajectory's own chain, not a side call's.
    t = done["side-call"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), (t.error, t.reward_info)


async def test_concurrent_calls_never_overshoot_the_sampled_token_cap(tmp_path: Path) -> None:
    from tests.integration.proxy.proxy_support import client_for, rig

    from agentroll.handlers import ProxyLimits
    from agentroll.handlers.toolcalls import get_parser
    from agentroll.server.proxy import open_proxy

    async with rig() as r:
        proxy = await open_proxy(
            r.session(seed=1), tmp_path, inside_dir=str(tmp_path), name="cap.sock",
            limits=ProxyLimits(), parser=get_parser("hermes"), max_sampled_tokens=20,
            context_tokens=None, label="cap",
        )  # fmt: skip
        message = {"role": "user", "content": "Repeat after me: " + "word " * 15}
        body = {"model": "policy", "messages": [message]}
        async with client_for(proxy) as http:
            await asyncio.gather(*(http.post("/chat/completions", json=body) for _ in range(20)))
        sampled = proxy.sampled_tokens
        await proxy.close()
    assert 0 < sampled <= 20 + 20  # each concurrent call may take at most one token past it
