"""A real GRPO learning curve on CPU: the tiny policy learns arithmetic with the python tool.

    python examples/grpo_tiny.py --seeds 0 1 2 --steps 10 --plot docs/grpo_tiny.png

What runs, all on this machine: vLLM's CPU build serving the tiny policy (the SFT checkpoint
of `agentroll.testing.tinypolicy`, `--sft-steps` or `--start DIR`), an `agentroll serve`
process with bubblewrap sandboxes, and this script as the trainer. Each step:

1. submit `--groups` held-out arithmetic questions x `--group-size` samples (math handler,
   python tool, temperature 1) and wait for the trajectories;
2. group-normalised advantages (`grpo_advantages`: reward minus the group mean, over the
   group's std; groups where every sample earned the same reward carry no signal);
3. one PyTorch policy-gradient step (PPO-clipped ratio against the sampler's logprobs) on
   the tokens the policy sampled (the loss mask), never on prompts or tool outputs;
4. `update_policy`: pause agentroll, push the new weights into the running engine, resume
   with the next policy version.

Logged per step: the mean reward of the step's rollouts, and the trainer-vs-sampler logprob
gap (mean |trainer logprob - engine logprob| over sampled tokens, before the update: it
shows the trajectories are exact and the weight push landed). Seeds run one after another on
one engine, each from the same checkpoint (pushed in first); `--json` keeps the figures, `--plot`
draws them (needs matplotlib: `pip install -e ".[examples]"`).
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentroll.server.engine import VLLMServer, ensure_environment
from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Trajectory
from agentroll.testing.tinypolicy.build import POLICY_RECIPE, build_tiny_policy
from agentroll.testing.tinypolicy.data import Sequence, tool_math_instance
from agentroll.testing.tinypolicy.rollouts import job
from agentroll.testing.tinypolicy.synth import held_out_tasks
from agentroll.testing.tinypolicy.train import TrainRecipe, pad_sequences, token_logprobs
from agentroll.trainer_clients import RolloutClient
from agentroll.trainer_clients.adapters.batch import grpo_advantages
from agentroll.trainer_clients.weights import update_policy

CLIP = 0.2
ROLLOUT_TIMEOUT_S = 900.0


def policy_step(model: Any, optimizer: Any, trajectories: list[Trajectory]) -> dict[str, float]:
    """One policy-gradient step on `trajectories`; the trainer-vs-sampler gap before it."""
    import torch

    rewards = [t.reward or 0.0 for t in trajectories]
    scores = grpo_advantages(rewards, [t.group_id or t.job_id for t in trajectories])
    pairs = [
        (t, float(a)) for t, a in zip(trajectories, scores, strict=True) if any(t.response_mask)
    ]
    if not pairs:
        return {"gap": float("nan"), "trained_samples": 0.0}
    seqs = [
        Sequence([*t.prompt_ids, *t.response_ids], [0] * len(t.prompt_ids) + t.response_mask, "")
        for t, _ in pairs
    ]
    ids, attention, at = pad_sequences(seqs)
    sampled = torch.tensor(
        [
            lp
            for t, _ in pairs
            for lp, m in zip(t.response_logprobs, t.response_mask, strict=True)
            if m
        ]
    )
    weights = torch.tensor([a for t, a in pairs for m in t.response_mask if m])
    logprobs = token_logprobs(model, ids, attention, at)
    # Every sampled token, whatever its advantage: the weights the engine sampled with.
    gap = (logprobs.detach() - sampled).abs().mean().item()
    trained = sum(1 for _, a in pairs if a != 0)
    if trained:  # equal-reward groups have advantage 0 everywhere: no signal
        ratio = torch.exp(logprobs - sampled)
        clipped = torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
        loss = -torch.minimum(ratio * weights, clipped * weights).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return {"gap": gap, "trained_samples": float(trained)}


def step_jobs(args: argparse.Namespace, seed: int, step: int) -> list[Any]:
    # Held-out questions: the curve measures what GRPO taught, not what SFT showed.
    tasks = held_out_tasks(args.groups, seed=10_000 * (seed + 1) + step)
    jobs = []
    for g, task in enumerate(tasks):
        group = f"s{seed}-t{step}-g{g}"
        for k in range(args.group_size):
            instance = tool_math_instance(task.instance())
            # Unseeded: vLLM 0.32's CPU engine stops on a seeded request it prefills in parts.
            jobs.append(job(f"{group}-k{k}", "math", instance, seed=None, group_id=group))
    return jobs


def run_seed(
    args: argparse.Namespace, client: RolloutClient, engine: str, start: Path, seed: int
) -> dict[str, Any]:
    """`args.steps` GRPO steps from the `start` checkpoint (pushed into the engine first)."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM.from_pretrained(start, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rewards, gaps = [], []
    for step in range(args.steps):
        # Policy versions only go up: each seed's are its own block.
        version = seed * 1000 + step + 1
        update_policy(client, [engine], version, state_dict=model.state_dict())
        jobs = step_jobs(args, seed, step)
        client.submit(jobs)
        found = client.wait_for([j.job_id for j in jobs], ROLLOUT_TIMEOUT_S)
        trajectories = [found[j.job_id] for j in jobs]
        assert all(t.policy_versions == [version] for t in trajectories if t.response_ids)
        reward = statistics.fmean(t.reward or 0.0 for t in trajectories)
        logged = policy_step(model, optimizer, trajectories)
        rewards.append(reward)
        gaps.append(logged["gap"])
        print(
            f"seed {seed} step {step}: mean reward {reward:.3f}, logprob gap "
            f"{logged['gap']:.2e}, trained on {logged['trained_samples']:.0f} samples",
            flush=True,
        )
    return {"seed": seed, "mean_reward": rewards, "logprob_gap": gaps}


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for run in runs:
        steps = range(len(run["mean_reward"]))
        top.plot(steps, run["mean_reward"], marker="o", label=f"seed {run['seed']}")
        bottom.plot(steps, run["logprob_gap"], marker="o", label=f"seed {run['seed']}")
    top.set_ylabel("mean reward")
    top.set_title("GRPO on the tiny policy (arithmetic, python tool, vLLM CPU)")
    top.legend()
    bottom.set_ylabel("|trainer - sampler| logprob")
    bottom.set_yscale("log")
    bottom.set_xlabel("step (policy version)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--groups", type=int, default=8, help="questions per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument(
        "--sft-steps", type=int, default=POLICY_RECIPE.steps, help="the starting checkpoint"
    )
    parser.add_argument("--start", type=Path, help="start from this policy folder instead")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--plot", type=Path, help="write the PNG here")
    args = parser.parse_args(argv)
    environment = asyncio.run(ensure_environment())
    recipe = TrainRecipe(steps=args.sft_steps)
    start = args.start or asyncio.run(build_tiny_policy(environment.python, recipe=recipe))
    print(f"starting checkpoint: {start}", flush=True)
    import torch

    torch.set_num_threads(args.threads)
    runs = []
    env = {"AGENTROLL_ADMISSION__ENABLED": "false"}  # it reads the node's load: the engine's
    with tempfile.TemporaryDirectory(prefix="agentroll-grpo-tiny-") as tmp:
        work = Path(tmp)
        serve = ["serve", "--port", "0", "--db", str(work / "agentroll.db")]
        with (
            VLLMServer(environment.python, start, work / "vllm.log", nice=5) as engine,
            agentroll_process(serve, work, "server", env=env) as server,
            RolloutClient(server.url, token=server.token) as client,
        ):
            client.add_backend({"id": "vllm-cpu-0", "base_url": engine.url})
            for seed in args.seeds:
                runs.append(run_seed(args, client, engine.url, start, seed))
                if args.json:
                    args.json.write_text(json.dumps(runs, indent=1) + "\n")
    for run in runs:
        r = run["mean_reward"]
        print(f"seed {run['seed']}: reward {r[0]:.3f} -> {r[-1]:.3f} (best {max(r):.3f})")
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
