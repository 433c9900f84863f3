"""Tasks and agents: a job names its task and the agent that runs it. A harness preset runs on
a task installed from a separate package (found only through its entry point), and a task's
other agents run it as its default ones would."""

import shutil
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

LINES = ["ok start", "error: disk", "ok", "error: net", "warning", "error again"]
# A third-party agent in the sandbox: counts with grep (GREP_FLAGS), then has the model say
# the count through the rollout's proxy (the `echo` policy repeats it) and prints the reply.
COUNTING_AGENT = """
import json, os, re, subprocess, urllib.request
word = re.search(r"contain the word '(\\w+)'", os.environ["AGENTROLL_INSTRUCTION"]).group(1)
grep = ["grep", "-c", *os.environ.get("GREP_FLAGS", "").split(), word, "log.txt"]
count = subprocess.run(grep, capture_output=True, text=True).stdout.split()[0]
body = {"model": os.environ["OPENAI_MODEL"],
        "messages": [{"role": "user", "content": "Repeat after me: " + count}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    json.dumps(body).encode(),
    {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"])
"""


def shell_agent(grep_flags: str = "") -> dict[str, object]:
    command = ["python3", "-c", COUNTING_AGENT]
    return {"type": "shell", "command": command, "env": {"GREP_FLAGS": grep_flags}}


async def test_a_harness_preset_runs_an_installed_task(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    instance = {"lines": LINES, "word": "ok"}
    jobs = [
        {"job_id": "right", "task": "linecount", "agent": shell_agent(), "instance": instance},
        # The control: the same agent counting the other lines earns nothing, and is no fault.
        {"job_id": "wrong", "task": "linecount", "agent": shell_agent("-v"), "instance": instance},
        # The older spelling: the installed task as a `harness` job's evaluator.
        {
            "job_id": "form",
            "handler": "harness",
            "instance": {"harness": shell_agent(), "evaluator": "linecount", "task": instance},
        },
    ]
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=120)
    right, wrong, form = results["right"], results["wrong"], results["form"]
    assert (right.outcome, right.reward) == (Outcome.ok, 1.0), right.error
    assert right.reward_info == {"gold": 2, "count": 2}
    assert right.handler == "linecount"
    assert right.metadata["harness"]["evaluator"] == "linecount"
    assert right.metadata["harness"]["exit_code"] == 0
    assert right.metadata["llm_proxy"]["calls"] == 1
    assert (wrong.outcome, wrong.reward) == (Outcome.ok, 0.0), wrong.error
    assert wrong.reward_info == {"gold": 2, "count": 4}  # grep -v: the other lines
    assert (form.outcome, form.reward, form.handler) == (Outcome.ok, 1.0, "harness"), form.error


async def test_a_task_runs_under_the_agent_a_job_names(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    question = load_math_tasks()[2].instance()
    jobs = [
        # math answers in text by default; the job names the tool loop instead.
        {"job_id": "tools", "task": "math", "agent": {"type": "tool_loop"}, "instance": question},
        {"job_id": "plain", "task": "math", "agent": {"type": "answer"}, "instance": question},
    ]
    async with (
        scripted_backend(wrong_rate=0.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=120)
    tools, plain = results["tools"], results["plain"]
    assert (tools.outcome, tools.reward) == (Outcome.ok, 1.0), tools.error
    assert tools.metadata["agent"]["ended"] == "submit"
    assert tools.metadata["tool_calls"] == {"python": 1, "submit": 1}
    assert (plain.outcome, plain.reward) == (Outcome.ok, 1.0), plain.error
    assert "agent" not in plain.metadata and "tool_calls" not in plain.metadata
