"""Result databases for the viewer's tests and benchmark, written through the store's own path.

`known_trajectory` is a rollout whose every token's loss mask and logprob are known in advance
(the token view must colour exactly these); `fill_store` writes many of them to a `JobStore`.
"""

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from agentroll.server.schema import Trajectory
from agentroll.server.store import JobStore, NewJob

HANDLERS = ("math", "code", "swe", "stem")
OUTCOMES = ("ok", "ok", "ok", "agent_error", "timed_out", "infra_error")
_ERRORS = {
    "infra_error": {"type": "sandbox_start", "message": "the sandbox did not start"},
    "timed_out": {"type": "rollout_timeout", "message": "past its time limit"},
}


def known_trajectory(
    job_id: str,
    *,
    handler: str = "math",
    group_id: str | None = "g0",
    turns: int = 3,
    reward: float | None = 1.0,
    outcome: str = "ok",
    reply: str = "the answer is 4",
    policy_version: int = 0,
    task_id: str | None = None,
    sampled: int = 8,
    observed: int = 4,
) -> Trajectory:
    """A `turns`-turn rollout: each turn `sampled` tokens (mask 1, logprob -0.1 * (k % 8) for
    the k-th) then `observed` tokens of tool output (mask 0), its own segment at
    `policy_version + turn`."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    segments: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 2?"}]
    for turn in range(turns):
        start = len(ids)
        ids += [100 + turn * (sampled + observed) + k for k in range(sampled)]
        mask += [1] * sampled
        logprobs += [-0.1 * (k % 8) for k in range(sampled)]
        segments.append(
            {
                "start": start,
                "end": start + sampled,
                "backend_id": "scripted-0",
                "policy_version": policy_version + turn,
                "finish_reason": "tool_calls" if turn < turns - 1 else "stop",
            }
        )
        ids += [900 + k for k in range(observed)]
        mask += [0] * observed
        logprobs += [0.0] * observed
        function = {"name": "python", "arguments": '{"code": "print(2 + 2)"}'}
        call = {"id": f"c{turn}", "type": "function", "function": function}
        messages += [
            {"role": "assistant", "content": f"{reply} (turn {turn})", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": "4"},
        ]
    failed = outcome in ("timed_out", "infra_error")
    return Trajectory.model_validate(
        {
            "job_id": job_id,
            "group_id": group_id,
            "handler": handler,
            "prompt_ids": [1, 2, 3, 4],
            "response_ids": ids,
            "response_mask": mask,
            "response_logprobs": logprobs,
            "segments": segments,
            "policy_versions": sorted({s["policy_version"] for s in segments}),
            "reward": None if outcome == "infra_error" else reward,
            "reward_info": {"expected": "4", "got": reply},
            "outcome": outcome,
            "status": "failed" if failed else "completed",
            "num_turns": turns,
            "messages": messages,
            "timing": {"total_s": 1.5, "run": {"queue_s": 0.1, "work_s": 1.2}},
            "error": _ERRORS.get(outcome),
            "metadata": {"task_id": task_id} if task_id else {},
        }
    )


async def store_trajectories(store: JobStore, trajectories: list[Trajectory]) -> None:
    """Admit each as a job and commit its result, as the server does."""
    now = time.time()
    await store.insert_jobs(
        [NewJob(t.job_id, "{}", t.job_id, t.handler, t.group_id, now) for t in trajectories]
    )
    # Concurrently, as rollouts finish on a server: the store commits them in groups.
    await asyncio.gather(
        *(store.finish(t.job_id, t.status, t.model_dump(mode="json")) for t in trajectories)
    )


async def fill_store(path: Path, n: int, *, group_size: int = 4, seed: int = 0) -> None:
    """`n` varied results (handlers, outcomes, rewards, versions) in a store at `path`."""
    rng = random.Random(seed)
    store = JobStore(path, synchronous="OFF")
    await store.open()
    try:
        batch: list[Trajectory] = []
        for i in range(n):
            outcome = rng.choice(OUTCOMES)
            batch.append(
                known_trajectory(
                    f"job-{i:06d}",
                    handler=HANDLERS[(i // group_size) % len(HANDLERS)],
                    group_id=f"group-{i // group_size:05d}",
                    turns=rng.randint(1, 4),
                    reward=rng.choice((0.0, 1.0, 0.5)),
                    outcome=outcome,
                    policy_version=i // 10_000,
                )
            )
            if len(batch) == 1000:
                await store_trajectories(store, batch)
                batch = []
        if batch:
            await store_trajectories(store, batch)
    finally:
        await store.close()
