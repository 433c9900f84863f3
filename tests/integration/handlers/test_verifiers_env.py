"""The `verifiers` handler end to end: a real verifiers 0.4.0 taskset package
(`tests/fixtures/verifiers_env_pkg`, installed into the verifiers environment the handler
creates), a real `agentroll serve` and the scripted backend (`echo`: the policy repeats what
the prompt asks). Every rollout's reward is what the environment's own reward functions give
on the same reply, computed here by verifiers itself in its own interpreter; tokens are the
backend's, exactly; a reward function the reply breaks is a 0, one broken for everyone is
infra_error."""

import asyncio
import json
import re
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
from tests.integration.handlers.verifiers_reference import PACKAGE, run_in_verifiers

from agentroll.handlers.builtin.control import CONTROLS
from agentroll.handlers.builtin.verifiers_env import (
    UnsupportedEnvironment,
    verifiers_instances,
)
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.server.schema import Outcome, Trajectory

# A fresh machine installs verifiers and its dependencies first (about a minute or two).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

TASKSET = "agentroll-vf-echo"

# verifiers' own scoring of a reply to a task of the taskset, in the environment's own
# interpreter: tasks from the taskset's `load()`, a trace built from verifiers' message types.
REFERENCE = """
import asyncio, json, sys
import verifiers.v1 as vf
from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

cases = json.load(sys.stdin)
config = taskset_config_type(sys.argv[1]).model_validate({"id": sys.argv[1]})
tasks = {t.data.id: t for t in taskset_class(sys.argv[1])(config)}
out = {}
for task_id, prompt, reply in cases:
    task = tasks[task_id]
    nodes = [vf.MessageNode(message=vf.UserMessage(content=prompt)),
             vf.MessageNode(parent=0, message=vf.AssistantMessage(content=reply), sampled=True)]
    trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data),
                     agent=vf.AgentInfo(config=vf.AgentConfig()), nodes=nodes)
    asyncio.run(task.score(trace))
    out[task_id] = trace.reward
print(json.dumps(out))
"""


async def reference_rewards(cases: list[tuple[str, str, str]]) -> dict[str, float]:
    result: dict[str, float] = await run_in_verifiers(REFERENCE, TASKSET, cases)
    return result


def jobs_for(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"job_id": i["task"]["id"], "handler": "verifiers", "instance": i, "group_id": "echo"}
        for i in instances
    ]


async def run_taskset(
    agentroll_server: ServerFactory, tmp_path: Path, jobs: list[dict[str, Any]]
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
        return results, await request_log(backend)


async def test_rows_become_jobs_scored_by_the_environments_own_rewards_with_exact_tokens(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=120)
    assert [i["task"]["id"] for i in instances] == [f"echo-{k}" for k in range(9)]
    assert instances[0]["task"]["prompt"] == "What is 6 times 7? Repeat after me: 42"
    assert instances[0]["task"]["answer"] == "42"  # the task's own fields travel with it
    honest = [i for i in instances if i["task"]["id"] in {"echo-0", "echo-1", "echo-2", "echo-3"}]

    results, log = await run_taskset(agentroll_server, tmp_path, jobs_for(honest))

    replies = {j: t.messages[-1]["content"] for j, t in results.items()}
    assert replies == {
        "echo-0": "42",
        "echo-1": "41",
        "echo-2": "7",
        "echo-3": "seventeen and a bit more than that",
    }
    prompts = {i["task"]["id"]: i["task"]["prompt"] for i in honest}
    expected = await reference_rewards([(j, prompts[j], r) for j, r in replies.items()])
    assert {j: t.reward for j, t in results.items()} == expected, {
        j: t.reward_info for j, t in results.items()
    }
    # correct (weight 1) + brief (weight 0.5): right and short, wrong and short, ..., long
    assert expected == {"echo-0": 1.5, "echo-1": 0.5, "echo-2": 1.5, "echo-3": 0.0}
    assert all(t.outcome is Outcome.ok for t in results.values())
    right = results["echo-0"]
    assert right.reward_info["rewards"] == {"correct": 1.0, "brief": 1.0}
    assert right.reward_info["weights"] == {"correct": 1.0, "brief": 0.5}
    assert right.reward_info["metrics"] == {"reply_chars": 2.0}

    # Tokens exact: each trajectory is the backend's one call, ids and logprobs verbatim.
    by_prompt = {tuple(c["prompt_token_ids"]): c for c in log}
    assert len(log) == len(results)
    for t in results.values():
        call = by_prompt[tuple(t.prompt_ids)]
        assert t.response_ids == list(call["token_ids"])
        assert t.response_logprobs == pytest.approx(list(call["logprobs"]))
        assert all(t.response_mask)


async def test_reward_code_a_reply_breaks_is_zero_and_reward_code_broken_for_all_is_infra(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Blame by a control: the reward functions raise on `CRASH`, never return on `HANG`
    (the worker is killed at `score_timeout_s`), score NaN on `NAN` and kill their worker on
    `EXIT`; scored again on an empty reply they work, so the reply broke them: 0 with the
    reason. A task whose reward code fails on every reply is
    the environment's fault; a taskset that is not installed fails before any reply is read."""
    CONTROLS.clear()
    # A hang is told from a slow start by this bound: generous, as on a loaded node a fresh
    # confined worker (importing verifiers) can take many seconds before it scores.
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=60)
    broken = [i for i in instances if i["task"]["id"] in {f"echo-{k}" for k in range(4, 9)}]
    missing = json.loads(json.dumps(broken[0]))
    missing["environment"]["taskset"] = "agentroll-vf-not-installed"
    missing["task"]["id"] = "not-installed"
    honest = next(i for i in instances if i["task"]["id"] == "echo-0")

    results, _ = await run_taskset(agentroll_server, tmp_path, jobs_for([*broken, missing, honest]))

    outcomes = {j: (t.outcome, t.reward) for j, t in results.items()}
    errors = {j: t.error for j, t in results.items() if t.error is not None}
    assert outcomes == {
        "echo-4": (Outcome.ok, 0.0),
        "echo-5": (Outcome.ok, 0.0),
        "echo-6": (Outcome.infra_error, None),
        "echo-7": (Outcome.ok, 0.0),
        "echo-8": (Outcome.ok, 0.0),
        "not-installed": (Outcome.infra_error, None),
        "echo-0": (Outcome.ok, 1.5),  # the control beside them: still earns its reward
    }, errors
    crash, hang, nan, exit_ = (results[f"echo-{k}"].reward_info for k in (4, 5, 7, 8))
    for info in (crash, hang, nan, exit_):
        assert info["reason"] == "reward_failed_on_answer" and info["control"]["passed"]
    assert "ValueError: the reply crashed the reward function" in crash["failure"]
    assert "timeout" in hang["failure"] and hang["scoring_attempts"] == 2
    assert "['correct'] gave no finite score" in nan["failure"]
    # The reward code's exit(3); a worker its confinement lost on a loaded node reports its own
    # status, and the control still decides the blame.
    assert re.search(r"crashed .*exit status \d+", exit_["failure"]), exit_["failure"]
    assert exit_["scoring_attempts"] == 2 and "scoring_attempts" not in crash
    for_all = results["echo-6"].error
    assert for_all is not None and for_all.type == "verifiers_reward_failed"
    assert "this task's reward code is broken" in for_all.message
    assert "control" in for_all.message
    load = results["not-installed"].error
    assert load is not None and load.type == "verifiers_load_failed"
    assert "agentroll-vf-not-installed" in load.message


async def test_an_environment_needing_what_agentroll_does_not_run_is_refused_not_scored(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """A reward that reads the task's runtime would be skipped by verifiers when scored
    without one, and the other rewards' sum would pass for the score: its taskset makes no
    jobs, and a job submitted for it anyway is infra_error, never a reward."""
    taskset = "agentroll-vf-needs-runtime"
    with pytest.raises(
        UnsupportedEnvironment, match="reward wrote_answer needs the task's runtime"
    ):
        await verifiers_instances(taskset, [PACKAGE])
    spec = {"taskset": taskset, "packages": [PACKAGE]}
    task = {"id": "workdir-0", "prompt": "Repeat after me: 42"}
    job = {
        "job_id": "runtime",
        "handler": "verifiers",
        "instance": {"environment": spec, "task": task},
    }

    results, _ = await run_taskset(agentroll_server, tmp_path, [job])

    t = results["runtime"]
    assert t.outcome is Outcome.infra_error and t.reward is None
    assert t.error is not None and t.error.type == "verifiers_load_failed"
    assert "needs the task's runtime" in t.error.message


async def test_a_large_taskset_lists_whole_and_its_config_reaches_it() -> None:
    """Thousands of tasks come back in one listing (one reply line of about a megabyte), and
    the taskset's own config fields (`repeat`) reach its `load()`."""
    instances = await verifiers_instances(TASKSET, [PACKAGE], {"repeat": 400}, limit=4000)
    assert len(instances) == 3600
    assert instances[-1]["task"]["id"] == "echo-8-r399"
    assert instances[-1]["environment"]["config"] == {"repeat": 400}
    window = await verifiers_instances(TASKSET, [PACKAGE], {"repeat": 2}, skip=8, limit=3)
    assert [i["task"]["id"] for i in window] == ["echo-8", "echo-0-r1", "echo-1-r1"]


def sleepers(seconds: str) -> list[str]:
    """Processes running a `sleep SECONDS` the reply's code started."""
    cmdline = f"sleep\x00{seconds}\x00".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes() == cmdline:
                found.append(proc.name)
        except OSError:
            continue  # it ended meanwhile
    return found


async def test_reward_code_that_runs_the_reply_reaches_nothing_of_the_host(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """A grader that executes the completion (here `exec`, as code tasks do) runs it in the
    worker's sandbox: the host's files are neither writable nor visible there, and it has no
    network. Each attempt fails inside, so the reply scores 0 (the control still scores);
    beside them, code that stays inside runs and earns its reward, and a process it leaves
    running does not outlive the grading (the worker is retired with its sandbox). A fork
    storm stops at the worker's process limit (its cgroup's `pids.max`)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's secret")
    secret.chmod(0o644)
    connections: list[str] = []
    listener = await asyncio.start_server(
        lambda r, w: connections.append("connected") or w.close(), "127.0.0.1", 0
    )
    port = listener.sockets[0].getsockname()[1]
    attempts = {
        "runs": "x = 6 * 7",
        "leaves-a-process": "import subprocess; subprocess.Popen(['sleep', '3187'])",
        "forks": "import subprocess; [subprocess.Popen(['sleep', '3188']) for _ in range(400)]",
        "writes": f"open('{tmp_path}/escaped.txt', 'w').write('out')",
        "reads": f"print(open('{secret}').read())",
        "connects": f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)",
    }
    if "pids" not in SandboxCgroup.controllers():  # the limit needs a writable cgroup
        del attempts["forks"]
    # Generous: a loaded node must not time an honest scoring out (a timeout is blamed).
    spec = {"taskset": TASKSET, "packages": [PACKAGE], "score_timeout_s": 120}
    jobs = [
        {
            "job_id": name,
            "handler": "verifiers",
            "instance": {
                "environment": spec,
                "task": {"id": name, "prompt": f"Repeat after me: EXEC:{code}", "answer": "ran"},
            },
        }
        for name, code in attempts.items()
    ]
    try:
        async with (
            scripted_backend(wrong_rate=0.0, policy="echo") as backend,
            rollout_service(agentroll_server, tmp_path, backend) as client,
        ):
            results = await run_jobs(client, jobs, timeout_s=600)
            # While the server (and its idle workers) still run: nothing the reply started.
            left_running = sleepers("3187") + sleepers("3188")
    finally:
        listener.close()
        await listener.wait_closed()

    assert results["runs"].outcome is Outcome.ok and results["runs"].reward == 1.5
    # It ran (scored), and what it started died with its worker's sandbox.
    assert results["leaves-a-process"].reward == 1.5
    assert left_running == []
    for name in ("writes", "reads", "connects", *(["forks"] if "forks" in attempts else [])):
        t = results[name]
        assert (t.outcome, t.reward) == (Outcome.ok, 0.0), (name, t.error)
        assert t.reward_info["reason"] == "reward_failed_on_answer", name
    assert "No such file or directory" in results["writes"].reward_info["failure"]
    assert "No such file or directory" in results["reads"].reward_info["failure"]
    # its own loopback only: nothing listens there, and nothing reached the host's listener
    assert "Connection refused" in results["connects"].reward_info["failure"]
    if "forks" in attempts:
        assert "Resource temporarily unavailable" in results["forks"].reward_info["failure"]
    assert not (tmp_path / "escaped.txt").exists()
    assert connections == []
