"""Command-line flags of `agentroll scripted-llm` (every flag maps to a config field)."""

import argparse

from agentroll.server.scripted_llm.config import ScriptedLLMConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--host --port --version --model ...` (every flag maps to a config field)."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--version",
        default="0.33",
        choices=["0.11", "0.2x", "0.33"],
        help="vLLM protocol family to imitate",
    )
    parser.add_argument("--model", default="policy", help="served model name")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument(
        "--policy", default="echo,math", help="comma-separated rule chain; 'default' always ends it"
    )
    parser.add_argument("--wrong-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--latency-s", type=float, default=0.0, help="simulated generation time per request"
    )
    parser.add_argument("--log-level", default="warning")


def config_from_args(args: argparse.Namespace) -> ScriptedLLMConfig:
    return ScriptedLLMConfig(
        version=args.version,
        model=args.model,
        max_model_len=args.max_model_len,
        policy=args.policy,
        wrong_rate=args.wrong_rate,
        seed=args.seed,
        latency_s=args.latency_s,
    )
