"""HTML pieces built in Python: reward histograms as inline SVG, and group advantages.

Everything that comes from a rollout passes through `escape` (markupsafe) before it joins
markup: its text is policy-written and adversarial.
"""

import math
import statistics
from collections.abc import Sequence

from markupsafe import Markup, escape

HISTOGRAM_BINS = 10
_W, _H, _PAD = 320, 110, 18


def _bins(counts: Sequence[tuple[float, int]]) -> list[tuple[float, float, int]]:
    """(low, high, count) per bin: one per distinct reward when there are few, else
    `HISTOGRAM_BINS` equal bins over the range seen."""
    values = sorted(counts)
    if len(values) <= HISTOGRAM_BINS:
        return [(r, r, n) for r, n in values]
    low, high = values[0][0], values[-1][0]
    width = (high - low) / HISTOGRAM_BINS
    bins = [[low + i * width, low + (i + 1) * width, 0] for i in range(HISTOGRAM_BINS)]
    for reward, n in values:
        index = min(int((reward - low) / width), HISTOGRAM_BINS - 1)
        bins[index][2] += n
    return [(lo, hi, int(n)) for lo, hi, n in bins]


def _label(low: float, high: float) -> str:
    return f"{low:g}" if low == high else f"{low:.2g} to {high:.2g}"


def histogram_svg(name: str, counts: Sequence[tuple[float, int]]) -> Markup:
    """A bar chart of how many results earned each reward (bars carry their count)."""
    bins = _bins(counts)
    top = max((n for *_, n in bins), default=0) or 1
    step = (_W - 2 * _PAD) / max(len(bins), 1)
    bars = []
    for i, (low, high, n) in enumerate(bins):
        height = (_H - 2 * _PAD) * n / top
        x, y = _PAD + i * step, _H - _PAD - height
        label = _label(low, high)
        bars.append(
            f'<g class="bar" data-reward="{escape(label)}" data-count="{n}">'
            f"<title>reward {escape(label)}: {n}</title>"
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(step - 2, 1):.1f}" '
            f'height="{height:.1f}"></rect>'
            f'<text x="{x + step / 2:.1f}" y="{_H - 4}" text-anchor="middle">'
            f"{escape(label)}</text>"
            f'<text x="{x + step / 2:.1f}" y="{max(y - 3, 10):.1f}" text-anchor="middle">'
            f"{n}</text></g>"
        )
    return Markup(
        f'<svg class="histogram" role="img" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" aria-label="reward histogram of {escape(name)}">{"".join(bars)}</svg>'
    )


def grpo_advantages(rewards: Sequence[float | None]) -> list[float | None]:
    """GRPO's group-normalised advantage of each reward: (r - mean) / (sample std + 1e-6)
    over the rewarded samples, 0 for a group of one or of equal rewards; None where a sample
    has no reward. The same normalisation as the trainer adapters' `grpo_advantages`,
    computed here so the server needs no numpy."""
    scored = [r for r in rewards if r is not None]
    if not scored:
        return [None for _ in rewards]
    mean = statistics.fmean(scored)
    spread = statistics.stdev(scored) if len(scored) > 1 else 0.0
    out: list[float | None] = []
    for r in rewards:
        if r is None:
            out.append(None)
        elif len(scored) == 1 or math.isclose(spread, 0.0):
            out.append(0.0)
        else:
            out.append((r - mean) / (spread + 1e-6))
    return out
