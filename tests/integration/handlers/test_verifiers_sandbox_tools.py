"""The `verifiers` handler with toolsets that declare where they run, end to end: a real
verifiers 0.4.0 taskset (`agentroll-vf-notes` in `tests/fixtures/verifiers_sandbox_pkg`) whose
task has a `Notes` toolset declared on a container runtime (`DockerConfig`) and a `Probe`
toolset declared nowhere (verifiers' own host), a real `agentroll serve` and the scripted
backend (`notes`: reads the note, writes the task's word, reads it back, asks `probe_look`
whether the note is where it was kept, starts a keeper process and asks whether it still runs,
answers the word). The container toolset runs in the rollout's own sandbox: the file it writes
and the process it starts are there for the rollout's later calls, never on the host nor in
the worker, and gone with the rollout; the other toolset stays in the confined worker.
Rewards are what verifiers itself gives the same conversations; tokens are the backend's."""

import asyncio
import os
import signal
from collections.abc import Callable
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
from tests.integration.handlers.test_verifiers_env import sleepers
from tests.integration.handlers.verifiers_reference import reference_rewards, run_in_verifiers

from agentroll.handlers.builtin.verifiers_env import (
    UnsupportedEnvironment,
    ensure_verifiers_venv,
    verifiers_instances,
)
from agentroll.handlers.builtin.verifiers_env.sandbox_tools import (
    SCRIPT,
    SOCKET,
    SandboxedTool,
    sandbox_spec,
    start_toolsets,
)
from agentroll.runtime import procs
from agentroll.runtime.action.errors import ActionRequestError
from agentroll.runtime.bwrap import BwrapRuntime, BwrapSandbox
from agentroll.runtime.config import BwrapConfig
from agentroll.runtime.errors import SandboxError
from agentroll.server.schema import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

PACKAGE = str(Path(__file__).resolve().parents[2] / "fixtures" / "verifiers_sandbox_pkg")
TASKSET = "agentroll-vf-notes"
WORKER_ENV = (
    Path(__file__).resolve().parents[3]
    / "handlers/agentroll/handlers/builtin/verifiers_env/worker_env.py"
)


KEEPER_SECONDS = "3271"
"""The keeper process `notes_start` starts: `sleep 3271`."""
TEARDOWN_WAIT_S = 120.0


async def keepers_after_teardown() -> list[str]:
    """The keeper processes still running once the rollouts' sandboxes are torn down (each
    rollout's teardown may finish just after its result: waited for, generously)."""
    deadline = asyncio.get_running_loop().time() + TEARDOWN_WAIT_S
    while (left := await asyncio.to_thread(sleepers, KEEPER_SECONDS)) and (
        asyncio.get_running_loop().time() < deadline
    ):
        await asyncio.sleep(0.5)
    return left


def jobs(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"job_id": i["task"]["id"], "handler": "verifiers", "instance": i} for i in instances]


async def test_a_container_toolset_runs_in_the_rollouts_own_sandbox_and_dies_with_it(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=120)
    assert [i["task"]["id"] for i in instances] == ["note-0", "note-1", "note-2"]

    async with (
        scripted_backend(wrong_rate=0.0, policy="notes") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        # note-0 ends before the others start: a later rollout finds none of its note.
        results = await run_jobs(client, jobs(instances[:1]), timeout_s=600)
        results |= await run_jobs(client, jobs(instances[1:]), timeout_s=600)
        log = await request_log(backend)
        keepers_left = await keepers_after_teardown()

    assert all(t.outcome is Outcome.ok for t in results.values()), {
        j: (t.outcome, t.error) for j, t in results.items()
    }
    tool_answers = {
        j: [m["content"] for m in t.messages if m["role"] == "tool"] for j, t in results.items()
    }
    in_worker = "verifiers: /app/note.txt absent"  # the host-run probe: the worker's own host
    keeper = ["keeper started", "keeper running"]  # a later call finds the process it started
    assert tool_answers == {
        # the sandbox's host name: the note is kept there, and read back by a later call
        "note-0": ["(no note)", "kept on sandbox in /app/note.txt", "apple", in_worker, *keeper],
        "note-1": ["(no note)", "kept on sandbox in /app/note.txt", "banana", in_worker, *keeper],
        # the sandboxed tool raised on the model's call: its error is the model's to read
        "note-2": [
            "(no note)",
            "Error executing tool write: there is nothing to write",
            "(no note)",
            in_worker,
            *keeper,
        ],
    }
    assert not await asyncio.to_thread(Path("/app/note.txt").exists)  # not on the host
    assert keepers_left == []  # the processes the tool started died with their sandboxes

    replies = {j: t.messages[-1]["content"] for j, t in results.items()}
    assert replies == {"note-0": "apple", "note-1": "banana", "note-2": "I could not keep it."}
    expected = await reference_rewards(
        TASKSET, [(j, list(t.messages)) for j, t in results.items()], PACKAGE
    )
    assert expected == {"note-0": 1.5, "note-1": 1.5, "note-2": 0.0}  # correct + kept (0.5)
    assert {j: t.reward for j, t in results.items()} == expected
    assert results["note-0"].reward_info["rewards"] == {"correct": 1.0, "kept": 1.0}

    # Tokens exact: seven backend calls per rollout (six tool calls, the answer), the sampled
    # ids the backend's, the tools' answers between them masked out.
    assert len(log) == 7 * len(results)
    by_prompt = {tuple(c["prompt_token_ids"]): c for c in log}
    for t in results.values():
        assert len(t.segments) == 7
        for seg in t.segments:
            call = by_prompt[tuple(t.prompt_ids + t.response_ids[: seg.start])]
            assert t.response_ids[seg.start : seg.end] == list(call["token_ids"])
            assert t.response_mask[seg.start : seg.end] == [1] * (seg.end - seg.start)
        for before, after in zip(t.segments, t.segments[1:], strict=False):
            between = range(before.end, after.start)
            assert between and all(t.response_mask[i] == 0 for i in between)


async def test_a_toolset_on_a_hosted_sandbox_provider_is_refused_not_run(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """A runtime agentroll does not stand in for (here Prime's hosted sandboxes) makes no
    jobs; a job submitted for it anyway is infra_error before the policy is asked anything."""
    taskset = "agentroll-vf-notes-remote"
    with pytest.raises(UnsupportedEnvironment, match="toolset Notes needs a prime runtime"):
        await verifiers_instances(taskset, [PACKAGE])
    spec = {"taskset": taskset, "packages": [PACKAGE]}
    task = {"id": "remote-0", "prompt": "Keep this word in a note, then read it back: <apple>"}
    job = {
        "job_id": "remote",
        "handler": "verifiers",
        "instance": {"environment": spec, "task": task},
    }

    async with (
        scripted_backend(wrong_rate=0.0, policy="notes") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, [job], timeout_s=600)
        log = await request_log(backend)

    t = results["remote"]
    assert t.outcome is Outcome.infra_error and t.reward is None
    assert t.error is not None and t.error.type == "verifiers_load_failed"
    assert "toolset Notes needs a prime runtime" in t.error.message
    assert log == []


PLACEMENTS = """
import importlib.util, json, sys
import verifiers.v1 as vf
from verifiers.v1.runtimes import (
    ApptainerConfig, DockerConfig, E2BConfig, ModalConfig, PodmanConfig, PrimeConfig,
)
from agentroll_vf_notes import Notes

spec = importlib.util.spec_from_file_location("agentroll_worker_env", json.load(sys.stdin))
env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(env)
configs = {
    "default": vf.ToolsetConfig(),
    "colocated": vf.ToolsetConfig(colocated=True),
    "docker": vf.ToolsetConfig(runtime=DockerConfig()),
    "podman": vf.ToolsetConfig(runtime=PodmanConfig()),
    "apptainer": vf.ToolsetConfig(runtime=ApptainerConfig(workdir="/app")),
    "docker node": vf.ToolsetConfig(runtime=DockerConfig(image="node:20")),
    "podman gpu": vf.ToolsetConfig(runtime=PodmanConfig(gpu="1")),
    "docker workdir": vf.ToolsetConfig(runtime=DockerConfig(workdir="/srv")),
    "modal": vf.ToolsetConfig(runtime=ModalConfig()),
    "e2b": vf.ToolsetConfig(runtime=E2BConfig()),
    "prime": vf.ToolsetConfig(runtime=PrimeConfig()),
    "url": vf.ToolsetConfig(url="http://tools.example/mcp"),
}
print(json.dumps({
    name: [env.placement(Notes(c)), env.toolset_problems(Notes(c))]
    for name, c in configs.items()
}))
"""


async def test_where_each_declared_runtime_runs_or_why_it_is_refused() -> None:
    """Every runtime verifiers 0.4.0 declares: its own host runs in the worker; a container
    runtime (any of the three) or colocated, in the rollout's sandbox; a hosted provider (any
    of the three), an image, a GPU or a working directory the sandbox does not stand in for,
    or a URL, refused with why."""
    got = await run_in_verifiers(PLACEMENTS, TASKSET, str(WORKER_ENV), PACKAGE)
    placements = {name: where for name, (where, _) in got.items()}
    problems = {name: "; ".join(p) for name, (_, p) in got.items()}
    assert placements["default"] == "worker"
    for name in ("colocated", "docker", "podman", "apptainer"):
        assert (placements[name], problems[name]) == ("sandbox", ""), name
    assert "names the image 'node:20'" in problems["docker node"]
    assert "needs a GPU (1)" in problems["podman gpu"]
    assert "works in /srv" in problems["docker workdir"]
    for hosted in ("modal", "e2b", "prime"):
        assert f"needs a {hosted} runtime (a hosted sandbox provider)" in problems[hosted]
    assert "is a remote server (http://tools.example/mcp)" in problems["url"]
    assert problems["default"] == ""


def in_sandbox(sandbox: BwrapSandbox, marker: str) -> list[int]:
    """The host pids of the processes in `sandbox` whose command line holds `marker`."""
    assert sandbox.init is not None
    namespace = procs.pidns_of(sandbox.init.pid)
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # it ended meanwhile
    return [pid for pid in found if procs.pidns_of(pid) == namespace]


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait for `check` (in a thread), generously: a loaded node may be slow."""
    deadline = asyncio.get_running_loop().time() + TEARDOWN_WAIT_S
    while not await asyncio.to_thread(check):
        assert asyncio.get_running_loop().time() < deadline, f"never {what}"
        await asyncio.sleep(0.2)


async def test_a_failed_sandboxed_call_is_the_policys_while_its_sandbox_lives_infra_once_it_dies(
    tmp_path: Path,
) -> None:
    """The environment's code and agentroll's scripts are read-only in the sandbox. A call
    whose server no longer answers (here stopped) is the call's failure, told to the policy;
    a call under which the rollout's sandbox dies is the sandbox's: `SandboxError`
    (infra_error `sandbox_failure`), decided by a plain command run there after the call."""
    venv = await ensure_verifiers_venv([PACKAGE])
    runtime = BwrapRuntime(BwrapConfig(state_dir=tmp_path / "sandboxes"))
    sandbox = await runtime.start(sandbox_spec(venv.python, "sandbox-dies"), timeout=120)
    try:
        assert isinstance(sandbox, BwrapSandbox) and sandbox.init is not None
        task = {"id": "note-0", "prompt": "keep it", "word": "apple"}
        await start_toolsets(sandbox, venv.python, {"id": TASKSET}, task)
        write = {"type": "function", "function": {"name": "notes_write", "parameters": {}}}
        tool = SandboxedTool(venv.python, {"id": TASKSET}, task, write)  # type: ignore[arg-type]
        args = {"text": "apple"}
        answer = await tool.call(sandbox, args, limit_s=60, max_chars=1000)
        assert answer == "kept on sandbox in /app/note.txt"

        # What the sandbox shares with the worker that scores (the environment's code, agentroll's
        # scripts) is read-only there: code a call runs cannot change how any rollout is scored.
        for shared in (venv.root, SCRIPT.parent):
            planted = shared / "planted.py"
            wrote = await sandbox.exec(["sh", "-c", f"echo x > {planted}"], timeout=60)
            assert wrote.exit_code != 0 and "Read-only file system" in wrote.stderr
            assert not await asyncio.to_thread(planted.exists)

        (server,) = in_sandbox(sandbox, "sandbox_call.py")
        os.kill(server, signal.SIGSTOP)  # it takes the call, and never answers
        with pytest.raises(ActionRequestError, match="the tool call timed out"):
            await tool.call(sandbox, args, limit_s=3, max_chars=1000)

        hanging = asyncio.create_task(tool.call(sandbox, args, limit_s=600, max_chars=1000))
        await until(lambda: bool(in_sandbox(sandbox, SOCKET)), "asked the server")
        os.kill(sandbox.init.pid, signal.SIGKILL)  # the sandbox dies under the call
        with pytest.raises(SandboxError):
            await asyncio.wait_for(hanging, TEARDOWN_WAIT_S)
    finally:
        await sandbox.stop()
        await runtime.close()
