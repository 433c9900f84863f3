"""The tiny policy's training data: scripted-policy rollouts through agentroll itself.

The scripted backend answers with the same tokenizer the tiny model uses, so each
trajectory is directly a training sequence: `prompt_ids + response_ids`, trained on the
tokens the policy sampled (`response_mask`), never on the prompt or the tool outputs.
Only rollouts that earned reward 1 are kept (rejection sampling: the scripted policy is
right by construction here, this guards the recipe against a grader change).
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.handlers.builtin.math.arithmetic import arithmetic_tasks
from agentroll.server.schema import JobRequest, Trajectory
from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.tinypolicy.rollouts import job, rollout_client, run_jobs


@dataclass(frozen=True)
class DataRecipe:
    """How many rollouts of each kind; part of the model's cache key."""

    arithmetic: int = 256
    """Fresh generated arithmetic questions (math handler, python tool)."""
    bundled_math_repeats: int = 2
    """Rollouts per bundled math task (math handler, python tool)."""
    code_repeats: int = 1
    """Rollouts per bundled code task (code handler)."""
    synthetic_arithmetic: int = 40_000
    """Further arithmetic questions written from a verified template (`synth`): copying new
    numbers into the tool takes thousands of distinct questions, not more steps."""
    seed: int = 0


@dataclass(frozen=True)
class Sequence:
    """One trainable sequence: token ids and which of them carry the loss."""

    input_ids: list[int]
    loss_mask: list[int]
    handler: str


def tool_math_instance(instance: dict[str, Any]) -> dict[str, Any]:
    """A math instance served with the python tool and a short turn budget."""
    return {**instance, "agent": {"max_turns": 4}}


def recipe_jobs(recipe: DataRecipe) -> list[JobRequest]:
    jobs = []
    for i, task in enumerate(arithmetic_tasks(recipe.arithmetic, seed=recipe.seed)):
        jobs.append(job(f"arith-{i}", "math", tool_math_instance(task.instance()), seed=i))
    for r in range(recipe.bundled_math_repeats):
        for task in load_math_tasks():
            instance = tool_math_instance(task.instance())
            jobs.append(job(f"{task.id}-r{r}", "math", instance, seed=r))
    for r in range(recipe.code_repeats):
        for code in load_code_tasks():
            jobs.append(job(f"{code.id}-r{r}", "code", code.instance(), seed=r, max_tokens=1024))
    return jobs


def to_sequence(t: Trajectory) -> Sequence:
    return Sequence(
        input_ids=[*t.prompt_ids, *t.response_ids],
        loss_mask=[0] * len(t.prompt_ids) + list(t.response_mask),
        handler=t.handler,
    )


async def _collect(recipe: DataRecipe, workdir: Path) -> list[Trajectory]:
    # Right every time and in canonical tokens: what the tiny model should learn to write.
    config = ScriptedLLMConfig(policy="code,math", wrong_rate=0.0, split_rate=0.0, seed=recipe.seed)
    backend = await start_in_loop(create_scripted_app(config))
    try:
        async with rollout_client(workdir, backend.url) as client:
            return await run_jobs(client, recipe_jobs(recipe))
    finally:
        await backend.stop()


async def collect_transcripts(recipe: DataRecipe) -> list[Trajectory]:
    """Run the recipe's rollouts (scripted policies, real handlers, bubblewrap sandboxes)."""
    with tempfile.TemporaryDirectory(prefix="agentroll-tinypolicy-data-") as tmp:
        return await _collect(recipe, Path(tmp))


def training_sequences(trajectories: list[Trajectory]) -> list[Sequence]:
    """The rewarded trajectories as training sequences; raises if too few earned reward."""
    kept = [to_sequence(t) for t in trajectories if t.reward == 1.0]
    if len(kept) < len(trajectories) // 2:
        outcomes = {t.job_id: (t.outcome.value, t.reward) for t in trajectories if t.reward != 1}
        raise RuntimeError(f"scripted rollouts failed: {list(outcomes.items())[:5]}")
    return kept
