"""One red-team batch: every attack beside honest rollouts, through the real server.

A real `agentroll serve` process with bubblewrap sandboxes and a scripted backend whose
`redteam` rule plays the attack named in each marked task; honest tasks of every family run in
the same batch. While it runs, `/healthz` is polled and its worst latency kept, and sandboxes are
counted, so the suite can assert that no attack stalled the server, harmed a neighbour or
leaked a process.
"""

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Trajectory
from agentroll.testing import redteam_codegrade
from agentroll.testing.redteam_swegrade import SWEGRADE_ATTACKS, SWEGRADE_GAMING
from agentroll.testing.sandboxes import lease_ids, sandbox_pids
from agentroll.trainer_clients import AsyncRolloutClient

POLICY = "redteam,redteam_codegrade,echo,swe,code,stem,math"
REMOTE_NICE = 10
"""The scripted backend stands in for GPU servers on other nodes: it yields the CPU."""
TOOL_ATTACK_AGENT = {"tools": ["bash", "python", "submit"], "tool_timeout_s": 15, "max_turns": 6}


def math_attack(name: str, **agent: Any) -> dict[str, Any]:
    """A bundled math task whose policy plays `name` with its tools, then answers right."""
    task = load_math_tasks()[1]
    return {
        "question": f"[redteam:{name}] {task.question}",
        "answer": task.answer,
        "agent": {**TOOL_ATTACK_AGENT, **agent},
    }


def answer_attack(name: str, gold: str) -> dict[str, Any]:
    """A plain math task answered with `name`'s pathological or ambiguous answer."""
    return {"question": f"[redteam:{name}] What is the value asked for?", "answer": gold}


def swe_attack(name: str) -> dict[str, Any]:
    task = dict(load_swe_tasks()[0].instance)
    task["problem_statement"] = f"[redteam-swe:{name}] {task['problem_statement']}"
    return task


def code_attack(name: str) -> dict[str, Any]:
    task = load_code_tasks()[0].instance()
    task["prompt"] = f"[redteam-code:{name}] {task['prompt']}"
    return task


# A harness driven by the policy can send anything to its rollout's LLM proxy. Each script
# attacks first, then holds an honest conversation whose last reply carries the right answer.
_PROXY_CLIENT = """
import json, os, socket, sys, time, urllib.error, urllib.request
BASE, KEY = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
HOST, PORT = BASE.split("//")[1].split("/")[0].split(":")
def raw(data, read=True):
    s = socket.create_connection((HOST, int(PORT)), timeout=30)
    try:
        s.sendall(data)
        return s.recv(200) if read else s
    except OSError as exc:
        return repr(exc).encode()
def head(extra, key=KEY):
    return (f"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n"
            f"Authorization: Bearer {key}\\r\\n{extra}\\r\\n").encode()
def chat(messages):
    body = {"model": os.environ["OPENAI_MODEL"], "messages": messages}
    while True:
        req = urllib.request.Request(BASE + "/chat/completions", json.dumps(body).encode(),
            {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.load(resp)["choices"][0]["message"]
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise
            time.sleep(float(exc.headers.get("Retry-After") or 1))
def honest():
    h = [{"role": "user", "content": "Repeat after me: the answer is \\\\boxed{210}"}]
    print(chat(h)["content"])
"""
PROXY_SCRIPTS = {
    "proxy_oversized": _PROXY_CLIENT
    + """
print(raw(head("Transfer-Encoding: chunked\\r\\n") + b"7fffffff\\r\\n" + b"x" * 65536))
print(raw(head("Content-Length: 999999999999\\r\\n")))
print(raw(head("Content-Length: 30000000\\r\\n", key="not-the-key") + b"x" * 65536))
many = b"".join(b"%x\\r\\n%s\\r\\n" % (1 << 20, b"y" * (1 << 20)) for _ in range(20))
print(raw(head("Transfer-Encoding: chunked\\r\\n") + many))
honest()
""",
    "proxy_flood": _PROXY_CLIENT
    + """
refused = 0
for _ in range(300):
    req = urllib.request.Request(BASE + "/models", headers={"Authorization": "Bearer " + KEY})
    try:
        urllib.request.urlopen(req, timeout=60).read()
    except urllib.error.HTTPError as exc:
        refused += exc.code == 429
print("refused", refused)
honest()
""",
    "proxy_slow": _PROXY_CLIENT
    + """
held = [raw(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n", read=False)
        for _ in range(20)]
honest()
""",
}


def proxy_attack(name: str) -> dict[str, Any]:
    return {
        "harness": {"type": "shell", "command": ["python3", "-c", PROXY_SCRIPTS[name]]},
        "evaluator": "math",
        "task": {"question": "What is the sum of the first 20 positive integers?", "answer": "210"},
    }


TOOL_ATTACKS = (
    "kill_all_bash",
    "kill_all_python",
    "kill_server",
    "socket_shutdown",
    "ptrace_server",
    "fork_bomb_bash",
    "fork_bomb_python",
    "memory_hog_python",
    "memory_hog_bash",
    "disk_fill",
    "disk_fill_workspace",
    "steal_api_token",
)
ATTACKS: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: ("math", math_attack(name)) for name in TOOL_ATTACKS},
    # Writing a gigabyte beside fork bombs can take longer than the other calls' 15 s.
    "disk_fill_workspace": ("math", math_attack("disk_fill_workspace", tool_timeout_s=180)),
    "pathological_power": ("math", answer_attack("pathological_power", "3")),
    "pathological_factorial": ("math", answer_attack("pathological_factorial", "3")),
    "ambiguous_commas": ("math", answer_attack("ambiguous_commas", "12")),
    "forged_test_output": ("swe", swe_attack("forge_output")),
    "test_infra_edit": ("swe", swe_attack("conftest_hook")),
    "exit_early": ("code", code_attack("exit_early")),
    "eval_hijack": ("code", code_attack("eval_hijack")),
    **{name: ("harness", proxy_attack(name)) for name in PROXY_SCRIPTS},
    **redteam_codegrade.ATTACKS,
    **SWEGRADE_ATTACKS,
}
GAMING = (
    "pathological_power",
    "pathological_factorial",
    "ambiguous_commas",
    "forged_test_output",
    "test_infra_edit",
    "exit_early",
    "eval_hijack",
    *redteam_codegrade.GAMING,
    *SWEGRADE_GAMING,
)
HONEST_REWARD = {name: 0.0 if name in GAMING else 1.0 for name in ATTACKS}
"""What an honest grader gives each attack: nothing for gaming the grader; for attacks on
the service, what the answer the attacker gave afterwards deserves (right: 1.0). Outcome `ok`
for all: every attack is the policy's own doing."""


def honest_jobs(count: int) -> list[dict[str, Any]]:
    """Honest rollouts of every sandboxed family (a perfect policy: reward 1.0 each)."""
    math_tasks, code_tasks, swe_tasks = load_math_tasks(), load_code_tasks(), load_swe_tasks()
    jobs = []
    for i in range(count):
        kind = ("math", "code", "swe")[i % 3]
        if kind == "math":
            instance = math_tasks[i % len(math_tasks)].instance(tools=True)
        elif kind == "code":
            instance = code_tasks[i % len(code_tasks)].instance()
        else:
            instance = dict(swe_tasks[i % len(swe_tasks)].instance)
        jobs.append({"job_id": f"honest-{i:03d}", "handler": kind, "instance": instance})
    return jobs


@dataclass
class BatchResult:
    attacks: dict[str, Trajectory]
    honest: dict[str, Trajectory]
    healthz_worst_s: float
    healthz_polls: int
    leaked_pids: set[int] = field(default_factory=set)
    sandboxes_seen: int = 0


async def _watch_healthz(url: str, stop: asyncio.Event, worst: list[float]) -> int:
    polls = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        while not stop.is_set():
            began = time.monotonic()
            response = await http.get("/healthz")
            worst[0] = max(worst[0], time.monotonic() - began)
            assert response.status_code == 200
            polls += 1
            await asyncio.sleep(0.05)
    return polls


def _server_env(workdir: Path) -> dict[str, str]:
    sandbox = {"type": "bwrap", "state_dir": str(workdir / "sandboxes")}
    return {
        "AGENTROLL_SANDBOX": json.dumps(sandbox),
        "AGENTROLL_POOLS__INIT": "16",
        "AGENTROLL_POOLS__RUN": "64",
        "AGENTROLL_POOLS__EVAL": "16",
        "AGENTROLL_POOLS__READY_BUFFER": "32",
        "AGENTROLL_SHUTDOWN_GRACE_S": "5",
    }


async def _collect(
    client: AsyncRolloutClient, jobs: list[dict[str, Any]], state_dir: Path, seen: set[str]
) -> dict[str, Trajectory]:
    done: dict[str, Trajectory] = {}
    cursor = 0
    async with asyncio.timeout(600):
        while len(done) < len(jobs):
            seen.update(lease_ids(state_dir))
            page = await client.results(after=cursor, limit=1000, wait=0.5)
            done.update({t.job_id: t for t in page.results})
            cursor = page.next_cursor
    return done


async def _leftovers(seen: set[str], timeout_s: float = 30) -> set[int]:
    """Sandbox processes still alive once every rollout ended (teardown runs in background)."""
    deadline = time.monotonic() + timeout_s
    # Processes give no event to wait on: polling them is the honest tool.
    while (left := sandbox_pids(seen)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return left


async def run_batch(
    workdir: Path,
    attacks: dict[str, tuple[str, dict[str, Any]]],
    honest: int,
    *,
    policy: str = POLICY,
    requests: Mapping[str, Mapping[str, Any]] | None = None,
    judges: Mapping[str, tuple[list[str], dict[str, Any]]] | None = None,
    env: Mapping[str, str] | None = None,
) -> BatchResult:
    """Every attack and `honest` honest rollouts through a real `agentroll serve` process
    (and a `scripted-llm` one playing `policy`), so `/healthz` measures the server's own
    event loop. `requests`: more job fields (e.g. `limits`) for the attacks they name.
    `judges`: more `scripted-llm` processes, by backend id: their extra arguments and
    registration fields (tags, policy). `env`: added to the server's environment."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    state_dir = workdir / "sandboxes"
    more = requests or {}
    jobs = [
        {"job_id": f"attack-{name}", "handler": handler, "instance": instance, **more.get(name, {})}
        for name, (handler, instance) in attacks.items()
    ] + honest_jobs(honest)
    seen: set[str] = set()
    stop, worst = asyncio.Event(), [0.0]
    llm_args = ["scripted-llm", "--port", "0", "--policy", policy, "--wrong-rate", "0"]
    serve_args = ["serve", "--port", "0", "--db", str(workdir / "agentroll.db")]
    server_env = {**_server_env(workdir), **(env or {})}
    with contextlib.ExitStack() as stack:
        llm = stack.enter_context(agentroll_process(llm_args, workdir, "llm", nice=REMOTE_NICE))
        registrations = [{"id": "scripted", "base_url": llm.url}]
        for backend_id, (args, fields) in (judges or {}).items():
            judge = stack.enter_context(
                agentroll_process(
                    ["scripted-llm", "--port", "0", *args], workdir, backend_id, nice=REMOTE_NICE
                )
            )
            registrations.append({"id": backend_id, "base_url": judge.url, **fields})
        server = stack.enter_context(
            agentroll_process(serve_args, workdir, "server", env=server_env)
        )
        async with AsyncRolloutClient(server.url, token=server.token, timeout_s=120) as client:
            for registration in registrations:
                await client.add_backend(registration)
            watcher = asyncio.create_task(_watch_healthz(server.url, stop, worst))
            try:
                await client.submit(jobs)
                done = await _collect(client, jobs, state_dir, seen)
                leaked = await _leftovers(seen)
            finally:
                stop.set()
                polls = await watcher
        server.kill(signal.SIGTERM)  # a graceful stop: it tears down whatever is left
    return BatchResult(
        attacks={name: done[f"attack-{name}"] for name in attacks},
        honest={k: v for k, v in done.items() if k.startswith("honest-")},
        healthz_worst_s=worst[0],
        healthz_polls=polls,
        leaked_pids=leaked | sandbox_pids(seen),
        sandboxes_seen=len(seen),
    )
