"""`python -m agentroll.testing.tinypolicy build|evaluate`.

build [--steps N]                       # prints the cached model directory
evaluate --backend URL [--arithmetic N] # rollouts through agentroll against a served model
"""

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from agentroll.server.engine import ensure_environment
from agentroll.testing.tinypolicy.build import build_tiny_policy
from agentroll.testing.tinypolicy.evaluate import evaluation_jobs, score
from agentroll.testing.tinypolicy.rollouts import rollout_client, run_jobs
from agentroll.testing.tinypolicy.train import TrainRecipe


async def _evaluate(backend: str, arithmetic: int, seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="agentroll-tinypolicy-eval-") as tmp:
        async with rollout_client(Path(tmp), backend) as client:
            trajectories = await run_jobs(client, evaluation_jobs(arithmetic, seed=seed))
    return {name: asdict(s) for name, s in score(trajectories).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentroll.testing.tinypolicy")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or find cached) the tiny policy")
    build.add_argument("--steps", type=int, default=TrainRecipe().steps, help="SFT steps")
    evaluate = commands.add_parser("evaluate", help="score a served policy through agentroll")
    evaluate.add_argument("--backend", required=True, help="vLLM base URL serving `policy`")
    evaluate.add_argument("--arithmetic", type=int, default=50)
    evaluate.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.command == "build":
        environment = asyncio.run(ensure_environment())
        path = asyncio.run(build_tiny_policy(environment.python, recipe=TrainRecipe(args.steps)))
        print(path)
    else:
        print(
            json.dumps(asyncio.run(_evaluate(args.backend, args.arithmetic, args.seed)), indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
