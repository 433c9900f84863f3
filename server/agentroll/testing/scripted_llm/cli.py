"""Command-line flags of `agentroll scripted-llm` (every flag maps to a config field)."""

import argparse
from typing import Any

from agentroll.testing.scripted_llm.config import MoERouting, ScriptedLLMConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--host --port --flavor --version --model ...` (every flag maps to a config field)."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--flavor", default="vllm", choices=["vllm", "sglang"], help="server API to imitate"
    )
    parser.add_argument(
        "--version",
        default=None,
        choices=["0.11", "0.2x", "0.33"],
        help="vLLM protocol family to imitate (default 0.33; vllm flavor only)",
    )
    parser.add_argument(
        "--release", default=None, help="what vLLM's /version reports, e.g. 0.14.0 (vllm only)"
    )
    parser.add_argument(
        "--sglang-version",
        default=None,
        choices=["0.5.2", "0.5.23"],
        help="SGLang release to imitate (default 0.5.23; sglang flavor only)",
    )
    parser.add_argument(
        "--tokenizer-path",
        default=None,
        help="SGLang's reported tokenizer_path (see scripted_llm.export.export_tokenizer)",
    )
    parser.add_argument("--model", default="policy", help="served model name")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument(
        "--policy",
        default="echo,swe,code,stem,verify,math",
        help="comma-separated rule chain ('math' answers anything unknown, so it goes last)",
    )
    parser.add_argument("--wrong-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--latency-s", type=float, default=0.0, help="simulated generation time per request"
    )
    parser.add_argument(
        "--logprobs-mode",
        choices=["raw_logprobs", "processed_logprobs"],
        default="raw_logprobs",
        help="what the logprobs are, as vLLM's flag of that name says",
    )
    parser.add_argument(
        "--moe",
        metavar="LAYERS,EXPERTS,TOP_K",
        help="serve an MoE model that returns routed experts (as --enable-return-routed-experts)",
    )
    parser.add_argument("--log-level", default="warning")


def config_from_args(args: argparse.Namespace) -> ScriptedLLMConfig:
    # Only flags actually given are passed, so the config can refuse ones foreign to the flavor.
    optional = ("version", "release", "sglang_version", "tokenizer_path")
    given: dict[str, Any] = {k: getattr(args, k) for k in optional if getattr(args, k, None)}
    if args.moe:
        layers, experts, top_k = (int(n) for n in args.moe.split(","))
        given["moe"] = MoERouting(num_layers=layers, num_experts=experts, top_k=top_k)
    return ScriptedLLMConfig(
        flavor=args.flavor,
        model=args.model,
        max_model_len=args.max_model_len,
        policy=args.policy,
        wrong_rate=args.wrong_rate,
        seed=args.seed,
        latency_s=args.latency_s,
        logprobs_mode=args.logprobs_mode,
        **given,
    )
