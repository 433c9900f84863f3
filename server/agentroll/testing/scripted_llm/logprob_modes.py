"""What the scripted model's logprobs are under vLLM's `--logprobs-mode`.

The double samples scripted replies, so it has no logits; it models one distribution per
sampled position instead, the one `sampling.top_logprobs` reports: the sampled token has the
raw probability `p = exp(raw logprob)` and the rest `1 - p` is spread over alternatives,
the j-th getting `(1 - p) / 2**j`. From it, as vLLM v1's sampler does:

- `raw_logprobs`: log-softmax of the model's logits, before any processing (vLLM's default);
- `processed_logprobs`: logits divided by the temperature, then top-k, then top-p, then
  log-softmax over what is left. A greedy request (temperature 0) gets the raw values, as
  vLLM's all-greedy path does. A scripted reply is forced, so where top-k or top-p would have
  filtered out the sampled token the double keeps it in (a real engine never samples one).

The `*_logits` modes are not modelled (the double has no logits to report): a config that
asks for one is refused.
"""

import math
from typing import Literal

ScriptedLogprobsMode = Literal["raw_logprobs", "processed_logprobs"]
ALTERNATIVES = 64
"""Alternatives modelled; the tail beyond holds less than 2**-64 of the mass."""


def distribution(raw_logprob: float) -> list[float]:
    """The modelled probabilities at one position, the sampled token first."""
    p = math.exp(raw_logprob)
    rest = max(1.0 - p, 0.0)
    return [p] + [rest / 2.0**j for j in range(1, ALTERNATIVES + 1)]


def processed_logprob(raw_logprob: float, temperature: float, top_k: int, top_p: float) -> float:
    """The sampled token's logprob after temperature, top-k and top-p (vLLM's order)."""
    if temperature == 0:
        return raw_logprob
    probs = distribution(raw_logprob)
    # softmax(logits / T) is proportional to p ** (1 / T); computed in log space, normalised
    scaled_logs = [math.log(q) / temperature if q > 0 else -math.inf for q in probs]
    top = max(scaled_logs)
    scaled = [math.exp(v - top) for v in scaled_logs]
    order = sorted(range(len(scaled)), key=lambda i: -scaled[i])
    if top_k > 0:
        order = order[:top_k]
    if top_p < 1.0:
        mass = sum(scaled[i] for i in order)
        kept, before = [], 0.0
        for i in order:
            if before >= top_p * mass:
                break
            kept.append(i)
            before += scaled[i]
        order = kept
    if 0 not in order:
        order.append(0)  # a forced reply survives its own filter (module docstring)
    return math.log(scaled[0] / sum(scaled[i] for i in order))


def as_mode(
    raw_logprob: float,
    mode: ScriptedLogprobsMode,
    *,
    temperature: float,
    top_k: int,
    top_p: float,
) -> float:
    if mode == "raw_logprobs":
        return raw_logprob
    return processed_logprob(raw_logprob, temperature, top_k, top_p)
