"""The `verifiers_legacy` handler end to end: legacy verifiers environments (verifiers 0.3.1,
`load_environment(**kwargs) -> vf.Environment`, in `tests/fixtures/verifiers_legacy_pkg`,
installed into the legacy verifiers environment the handler creates), a real `agentroll
serve` and the scripted backend (`guess`: a binary search over 1 to 10; `calculator`: calls
`calculator_add`, then answers with what it answered). One test per form: a `SingleTurnEnv`
with a weighted rubric, a `MultiTurnEnv` whose `env_response` drives the turns, a `ToolEnv`
whose python function runs in the confined worker. Every reward is what the environment's own
rubric gives on the same completions, computed here by verifiers itself (its own `rollout()`
replaying the policy's replies, then `rubric.score_rollout`); tokens are the backend's; a
reward or an environment the reply breaks is a 0, one broken for everyone is infra_error."""

from collections.abc import Sequence
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
from tests.integration.handlers.verifiers_reference import run_in_verifiers, run_killing_workers

from agentroll.handlers.builtin.control import CONTROLS
from agentroll.handlers.builtin.verifiers_env import ensure_verifiers_venv, legacy_instances
from agentroll.handlers.builtin.verifiers_env.venv import LEGACY
from agentroll.server.schema import Outcome, Trajectory

# A fresh machine installs verifiers 0.3.1 and its dependencies first (a minute or two).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

PACKAGE = str(Path(__file__).resolve().parents[2] / "fixtures" / "verifiers_legacy_pkg")

# verifiers' own rollout of a row, its model client replaying the policy's recorded replies,
# then the environment's own rubric on the final state (verifiers' `run_rollout` path).
REFERENCE = """
import asyncio, json, sys, time
import verifiers as vf
from verifiers.legacy.clients.client import Client
from verifiers.legacy.types import Response, ResponseMessage, ToolCall

class Replay(Client):
    def __init__(self, replies):
        super().__init__(list(replies))
    def setup_client(self, config):
        raise TypeError("replays only")
    async def to_native_tool(self, tool):
        return tool
    async def to_native_prompt(self, messages):
        return messages, {}
    async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
        return self.client.pop(0)
    async def raise_from_native_response(self, response):
        return None
    async def from_native_response(self, m):
        calls = [ToolCall(id=c["id"], name=c["function"]["name"],
                          arguments=c["function"]["arguments"])
                 for c in m.get("tool_calls") or []]
        message = ResponseMessage(content=m["content"], tool_calls=calls or None,
                                  finish_reason="tool_calls" if calls else "stop",
                                  is_truncated=False)
        return Response(id="r", created=int(time.time()), model="m", message=message)
    async def close(self):
        return None

env = vf.load_environment(sys.argv[1])
out = {}
for job_id, row, messages in json.load(sys.stdin):
    replies = [m for m in messages if m["role"] == "assistant"]
    state = asyncio.run(env.rollout(row, Replay(replies), "m", {}))
    asyncio.run(env.rubric.score_rollout(state))
    out[job_id] = {"reward": state["reward"],
                   "completion": [[m.role, m.content] for m in state["completion"]]}
print(json.dumps(out))
"""


async def reference(
    environment: str,
    instances: list[dict[str, Any]],
    results: dict[str, Trajectory],
    job_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """`{job id: {"reward", "completion"}}` of verifiers' own rollout and rubric on each
    instance's row, replaying its job's replies (the jobs `job_ids`, else the instances')."""
    venv = await ensure_verifiers_venv([PACKAGE], stack=LEGACY)
    ids = list(job_ids) or [job_id(i) for i in instances]
    cases = [(j, i["row"], list(results[j].messages)) for j, i in zip(ids, instances, strict=True)]
    out: dict[str, Any] = await run_in_verifiers(REFERENCE, environment, cases, python=venv.python)
    return out


def job_id(instance: dict[str, Any]) -> str:
    return f"{instance['environment']['id']}-{instance['row']['example_id']}"


async def play(
    agentroll_server: ServerFactory,
    tmp_path: Path,
    instances: list[dict[str, Any]],
    policy: str,
    more: Sequence[dict[str, Any]] = (),
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    """One job per instance (and the jobs `more`), through a real server and the scripted
    backend's `policy`; the results and the backend's request log."""
    group = policy.replace(",", "-")
    jobs = [
        {"job_id": job_id(i), "handler": "verifiers_legacy", "instance": i, "group_id": group}
        for i in instances
    ]
    jobs += [{"handler": "verifiers_legacy", "group_id": group, **j} for j in more]
    async with (
        scripted_backend(wrong_rate=0.0, policy=policy) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
        return results, await request_log(backend)


def assert_tokens_exact(t: Trajectory, log: list[dict[str, Any]]) -> None:
    """Each reply's ids and logprobs are one backend call's on its prompt, masked in; what
    the environment said between two replies is masked out."""
    assert t.segments
    for k, seg in enumerate(t.segments):
        prompt = t.prompt_ids + t.response_ids[: seg.start]
        sampled = (t.response_ids[seg.start : seg.end], t.response_logprobs[seg.start : seg.end])
        calls = [
            (list(c["token_ids"]), list(c["logprobs"]))
            for c in log
            if list(c["prompt_token_ids"]) == prompt
        ]
        assert sampled in calls
        assert t.response_mask[seg.start : seg.end] == [1] * (seg.end - seg.start)
        if k:
            between = range(t.segments[k - 1].end, seg.start)
            assert between and all(t.response_mask[i] == 0 for i in between)


async def test_single_turn_rows_score_by_the_rubric_and_blame_a_broken_reward(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Rows 0 and 1 are honest (right, wrong); row 2's reply `BOOM` makes the reward code
    raise, but an empty reply is scored (the reply broke it: 0); row 3's reward code raises
    on every reply, the control's too (infra_error)."""
    CONTROLS.clear()
    instances = await legacy_instances("agentroll-vf-legacy-single", [PACKAGE], score_timeout_s=120)
    assert [i["row"]["example_id"] for i in instances] == [0, 1, 2, 3]
    assert instances[0]["row"]["prompt"] == [
        {"role": "system", "content": "Answer with a number only."},
        {"role": "user", "content": "Guess my number from 1 to 10."},
    ]

    results, log = await play(agentroll_server, tmp_path, instances, "guess")

    honest = instances[:2]
    expected = await reference("agentroll-vf-legacy-single", honest, results)
    # correct (weight 1) + short (weight 0.25)
    assert {j: e["reward"] for j, e in expected.items()} == {
        "agentroll-vf-legacy-single-0": 1.25,
        "agentroll-vf-legacy-single-1": 0.25,
    }
    for j, e in expected.items():
        t = results[j]
        assert (t.outcome, t.reward) == (Outcome.ok, e["reward"]), (t.error, t.reward_info)
        assert [[m["role"], m["content"]] for m in t.messages[2:]] == e["completion"]
        assert len(t.segments) == 1
        assert_tokens_exact(t, log)
    info = results["agentroll-vf-legacy-single-1"].reward_info
    assert info["rewards"] == {"correct": 0.0, "short": 1.0}
    assert info["weights"] == {"correct": 1.0, "short": 0.25}
    assert info["metrics"] == {"num_turns": 1.0}
    assert info["reply"] == "5"

    boom = results["agentroll-vf-legacy-single-2"]
    assert (boom.outcome, boom.reward) == (Outcome.ok, 0.0), boom.error
    assert boom.reward_info["reason"] == "reward_failed_on_answer"
    assert "ValueError: the reply broke the reward code" in boom.reward_info["failure"]
    assert boom.reward_info["control"]["passed"] and boom.reward_info["reply"] == "BOOM"
    broken = results["agentroll-vf-legacy-single-3"]
    assert (broken.outcome, broken.reward) == (Outcome.infra_error, None)
    assert broken.error is not None and broken.error.type == "verifiers_reward_failed"
    assert "this row's reward code is broken" in broken.error.message
    assert "control" in broken.error.message


async def test_env_response_drives_the_turns_and_an_environment_a_reply_breaks_is_zero(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The game's `env_response` answers each guess (`higher` / `lower`) until its stop
    condition sees the right one; row 3's `BOOM` makes `env_response` raise, but empty
    replies play through (0); row 4's raises on any reply (infra_error)."""
    CONTROLS.clear()
    instances = await legacy_instances("agentroll-vf-legacy-guess", [PACKAGE], score_timeout_s=120)

    # Row 0 needs four guesses; with `limits.max_turns` 2 the rollout ends at the third
    # model call, and is scored as it stands (as verifiers scores a rollout a model error ended).
    cut = {"job_id": "cut", "instance": instances[0], "limits": {"max_turns": 2}}
    results, log = await play(agentroll_server, tmp_path, instances, "guess", [cut])

    said = {j: [(m["role"], m["content"]) for m in t.messages[1:]] for j, t in results.items()}
    assert said["agentroll-vf-legacy-guess-0"] == [
        ("assistant", "5"), ("user", "higher"), ("assistant", "8"), ("user", "lower"),
        ("assistant", "6"), ("user", "higher"), ("assistant", "7"),
    ]  # fmt: skip
    honest = instances[:3]
    expected = await reference("agentroll-vf-legacy-guess", honest, results)
    # found (weight 1) + quick (weight 0.5: one over the guesses)
    assert {j: e["reward"] for j, e in expected.items()} == pytest.approx(
        {
            "agentroll-vf-legacy-guess-0": 1.125,
            "agentroll-vf-legacy-guess-1": 1 + 0.5 / 3,
            "agentroll-vf-legacy-guess-2": 1.125,
        }
    )
    for j, e in expected.items():
        t = results[j]
        assert (t.outcome, t.reward) == (Outcome.ok, e["reward"]), (t.error, t.reward_info)
        assert [[m["role"], m["content"]] for m in t.messages[1:]] == e["completion"]
        assert len(t.segments) == sum(1 for m in t.messages if m["role"] == "assistant")
        assert_tokens_exact(t, log)

    t = results["cut"]
    assert [(m["role"], m["content"]) for m in t.messages[1:]] == said[
        "agentroll-vf-legacy-guess-0"
    ][:3]
    cut_expected = await reference("agentroll-vf-legacy-guess", [instances[0]], {"x": t}, ["x"])
    assert cut_expected["x"]["reward"] == 0.5 / 2  # not found; quick: one over two guesses
    assert (t.outcome, t.reward, t.finish_reason) == (Outcome.ok, 0.25, "max_turns"), t.error

    boom = results["agentroll-vf-legacy-guess-3"]
    assert (boom.outcome, boom.reward) == (Outcome.ok, 0.0), boom.error
    assert boom.reward_info["reason"] == "environment_failed_on_answer"
    assert "RuntimeError: the reply broke the environment" in boom.reward_info["failure"]
    assert boom.reward_info["control"]["passed"]
    broken = results["agentroll-vf-legacy-guess-4"]
    assert (broken.outcome, broken.reward) == (Outcome.infra_error, None)
    assert broken.error is not None and broken.error.type == "verifiers_env_failed"
    assert "this task's environment is broken" in broken.error.message


async def test_a_tool_envs_python_tools_run_in_its_worker_and_the_rubric_grades(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The policy calls `calculator_add` where the prompt offers it; the function runs in
    the environment's confined worker; its error (a negative number) is the model's to read."""
    CONTROLS.clear()
    instances = await legacy_instances("agentroll-vf-legacy-tools", [PACKAGE], score_timeout_s=120)

    results, log = await play(agentroll_server, tmp_path, instances, "calculator")

    tool_answers = {
        j: [m["content"] for m in t.messages if m["role"] == "tool"] for j, t in results.items()
    }
    assert tool_answers == {
        "agentroll-vf-legacy-tools-0": ["5"],
        "agentroll-vf-legacy-tools-1": ["42"],
        "agentroll-vf-legacy-tools-2": ["this calculator adds non-negative numbers only"],
    }
    expected = await reference("agentroll-vf-legacy-tools", instances, results)
    # correct (weight 1) + used_tool (weight 0.5)
    assert {j: e["reward"] for j, e in expected.items()} == {
        "agentroll-vf-legacy-tools-0": 1.5,
        "agentroll-vf-legacy-tools-1": 1.5,
        "agentroll-vf-legacy-tools-2": 0.5,
    }
    for j, e in expected.items():
        t = results[j]
        assert (t.outcome, t.reward) == (Outcome.ok, e["reward"]), (t.error, t.reward_info)
        assert [[m["role"], m["content"]] for m in t.messages[1:]] == e["completion"]
        assert len(t.segments) == 2
        assert_tokens_exact(t, log)
    metrics = results["agentroll-vf-legacy-tools-0"].reward_info["metrics"]
    assert metrics["calculator_add_calls"] == 1.0 and metrics["total_tool_calls"] == 1.0


async def test_a_reply_that_hangs_or_kills_the_environment_is_zero_beside_an_honest_game(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """`HANG` blocks the game's `env_response` past `score_timeout_s`, `EXIT` ends the child
    its rollout runs in, both times the rollout is played (the second in a fresh worker, with
    the same replies); empty replies play through, so each is the reply's doing: ok, 0.
    Beside them an honest game, in the same workers, still earns its reward."""
    CONTROLS.clear()
    game = await legacy_instances("agentroll-vf-legacy-guess", [PACKAGE], score_timeout_s=10)
    environment = game[0]["environment"]

    def said(reply: str, example_id: int) -> dict[str, Any]:
        prompt = [{"role": "user", "content": f"Repeat after me: {reply}"}]
        row = {"prompt": prompt, "answer": "4", "example_id": example_id}
        return {"environment": environment, "row": row}

    attacks = [said("HANG", 100), said("EXIT", 101)]
    results, _ = await play(agentroll_server, tmp_path, [*attacks, game[1]], "guess,echo")

    for j, failure in (("100", "timeout"), ("101", "crashed")):
        t = results[f"agentroll-vf-legacy-guess-{j}"]
        assert (t.outcome, t.reward) == (Outcome.ok, 0.0), (j, t.error)
        assert t.reward_info["reason"] == "environment_failed_on_answer"
        assert f"its code {failure}" in t.reward_info["failure"]
        assert t.reward_info["rollout_attempts"] == 2  # both times, the second in a fresh worker
        assert t.reward_info["control"]["passed"]
    honest = results["agentroll-vf-legacy-guess-1"]
    assert (honest.outcome, honest.reward) == (Outcome.ok, pytest.approx(1 + 0.5 / 3))


def slow_game(
    game: dict[str, Any],
    reply: str,
    example_id: int,
    step_s: float,
    score_timeout_s: float,
    max_turns: int = 8,
) -> dict[str, Any]:
    """An instance of `game`'s environment (`score_timeout_s`, its own `max_turns`) whose row
    is a game that never ends, each step `step_s` s long, the `echo` policy saying `reply`."""
    environment = {**game["environment"], "score_timeout_s": score_timeout_s}
    environment["args"] = {"max_turns": max_turns}
    prompt = [{"role": "user", "content": f"Repeat after me: {reply}"}]
    row = {"prompt": prompt, "answer": f"slow:{step_s}", "example_id": example_id}
    return {"environment": environment, "row": row}


async def test_a_slow_game_ends_inside_runs_budget_and_its_control_gets_each_steps_time(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """`slow:<s>` games never end, each step of the environment's code taking `<s>` s. One,
    its turn limits far off, outlives RUN (30 s, steps of 1 s within a `score_timeout_s` of
    5 s): it ends `wall_time` while two more steps still fit and is scored, never stopped by
    RUN's timeout (`timed_out`: dropped). One the reply `BOOM` breaks has a control that plays
    5 steps of 3 s, more than its `score_timeout_s` (10 s) in all, each well within it: the
    reply's doing (ok, 0), not `infra_error`. An honest game beside them earns its reward."""
    CONTROLS.clear()
    game = await legacy_instances("agentroll-vf-legacy-guess", [PACKAGE], score_timeout_s=120)
    endless = slow_game(game[0], "5", 200, 1, 5, max_turns=1000)
    long = {"job_id": "long", "instance": endless}
    long["limits"] = {"max_turns": 1000, "run_timeout_s": 30}
    broken = slow_game(game[0], "BOOM", 201, 3, 10, max_turns=5)
    results, _ = await play(agentroll_server, tmp_path, [broken, game[1]], "guess,echo", [long])

    boom = results["agentroll-vf-legacy-guess-201"]
    assert (boom.outcome, boom.reward) == (Outcome.ok, 0.0), boom.error
    assert boom.reward_info["reason"] == "environment_failed_on_answer"
    assert "RuntimeError: the reply broke the environment" in boom.reward_info["failure"]
    assert boom.reward_info["control"]["passed"], boom.reward_info["control"]

    t = results["long"]
    assert (t.outcome, t.finish_reason) == (Outcome.ok, "wall_time"), t.error
    replies = [m["content"] for m in t.messages if m["role"] == "assistant"]
    assert replies and set(replies) == {"5"}
    # not found; quick: one over the replies (27 s of budget less two 5 s steps: at most 18)
    assert 2 <= len(replies) <= 18
    assert t.reward == pytest.approx(0.5 / len(replies))
    honest = results["agentroll-vf-legacy-guess-1"]
    assert (honest.outcome, honest.reward) == (Outcome.ok, pytest.approx(1 + 0.5 / 3))


async def test_a_worker_killed_under_an_honest_game_plays_it_again_and_grades_it(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The OOM killer (here: the test) ends the workers once the policy's first reply of an
    honest game (3 steps of 1 s) is sampled: the rollout is played again in a fresh worker,
    answered with the reply already sampled, then sampled on, and graded as it stands, never
    blamed on the reply (a reply that kills its worker both times is 0: the `EXIT` test)."""
    CONTROLS.clear()
    game = await legacy_instances("agentroll-vf-legacy-guess", [PACKAGE], score_timeout_s=120)
    instance = slow_game(game[0], "5", 300, 1, 30, max_turns=3)
    job = {"job_id": "killed", "handler": "verifiers_legacy", "instance": instance}

    t, killed, _ = await run_killing_workers(agentroll_server, tmp_path, job, "guess,echo")
    assert killed
    assert (t.outcome, t.reward) == (Outcome.ok, pytest.approx(0.5 / 3)), (t.error, t.reward_info)
    assert t.reward_info["rollout_attempts"] == 2
    assert [m["content"] for m in t.messages if m["role"] == "assistant"] == ["5", "5", "5"]
