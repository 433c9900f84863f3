"""Prometheus text exposition with vLLM's metric names (`vllm:` prefix, `_total` counters).

Hand-rendered from the engine's counters so that every app instance has its own numbers
(prometheus_client's default registry is process-global).
"""

from agentroll.testing.scripted_llm.engine import Engine

_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)
_COUNTERS = (
    ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens_total", "Number of generation tokens processed.", "generation_tokens"),
)
FINISH_REASONS = ("stop", "length", "abort")


def render_metrics(engine: Engine) -> str:
    labels = f'engine="0",model_name="{engine.config.model}"'
    values = {
        "vllm:num_requests_running": float(len(engine.running)),
        "vllm:num_requests_waiting": float(engine.waiting),
        "vllm:kv_cache_usage_perc": engine.kv_usage(),
    }
    lines = []
    for name, help_text in _GAUGES:
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} gauge",
            f"{name}{{{labels}}} {values[name]}",
        ]
    for name, help_text, key in _COUNTERS:
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} counter",
            f"{name}{{{labels}}} {float(engine.stats[key])}",
        ]
    name = "vllm:request_success_total"
    lines += [f"# HELP {name} Count of successfully processed requests.", f"# TYPE {name} counter"]
    for reason in FINISH_REASONS:
        count = float(engine.stats[f"finished:{reason}"])
        lines.append(f'{name}{{{labels},finished_reason="{reason}"}} {count}')
    return "\n".join(lines) + "\n"
