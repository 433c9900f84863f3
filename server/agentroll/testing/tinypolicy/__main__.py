"""`python -m agentroll.testing.tinypolicy build|evaluate`.

build [--steps N]                 # prints the cached model folder (built if missing)
evaluate [--arithmetic N]         # serves that model on vLLM's CPU engine, then scores it
evaluate --backend URL            # scores a model already served at URL
"""

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from agentroll.server.engine import VLLMServer, ensure_environment
from agentroll.testing.tinypolicy.build import POLICY_RECIPE, build_tiny_policy
from agentroll.testing.tinypolicy.evaluate import evaluation_jobs, score
from agentroll.testing.tinypolicy.rollouts import rollout_client, run_jobs
from agentroll.testing.tinypolicy.train import TrainRecipe


async def _score(backend: str, arithmetic: int, seed: int, work: Path) -> dict[str, object]:
    async with rollout_client(work, backend) as client:
        trajectories = await run_jobs(client, evaluation_jobs(arithmetic, seed=seed))
    return {name: asdict(s) for name, s in score(trajectories).items()}


async def _evaluate(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="agentroll-tinypolicy-eval-") as tmp:
        if args.backend:
            return await _score(args.backend, args.arithmetic, args.seed, Path(tmp))
        environment = await ensure_environment()
        model = await build_tiny_policy(environment.python, recipe=TrainRecipe(args.steps))
        async with VLLMServer(environment.python, model, Path(tmp) / "vllm.log") as engine:
            return {"model": str(model)} | await _score(
                engine.url, args.arithmetic, args.seed, Path(tmp)
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentroll.testing.tinypolicy")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or find cached) the tiny policy")
    evaluate = commands.add_parser("evaluate", help="score a policy through agentroll")
    for command in (build, evaluate):
        command.add_argument("--steps", type=int, default=POLICY_RECIPE.steps, help="SFT steps")
    evaluate.add_argument("--backend", help="vLLM base URL serving `policy` (default: serve it)")
    evaluate.add_argument("--arithmetic", type=int, default=50, help="unseen questions")
    evaluate.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.command == "build":
        environment = asyncio.run(ensure_environment())
        path = asyncio.run(build_tiny_policy(environment.python, recipe=TrainRecipe(args.steps)))
        print(path)
    else:
        print(json.dumps(asyncio.run(_evaluate(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
