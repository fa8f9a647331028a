"""Steps to a threshold, and their median over seeds with censored runs: the credit
lab's figures (``python -m benchmarks.credit.run --lab``).

A training curve is ``[(step, value), …]`` (steps from 1). One step's value is a noisy
estimate (the lab's tool accuracy comes from 32 sampled rollouts), so a curve reaches
a threshold at the first step whose trailing mean over ``window`` steps (fewer at the
start) is at or above it. A run that never does within its steps is *censored*: all
we know is that it needs more than ``cap`` steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Curve = Sequence[tuple[int, float]]


def trailing_mean(curve: Curve, window: int) -> list[tuple[int, float]]:
    """``[(step, mean of the values at this step and the window-1 before it)]``; the
    first steps average what there is. ``curve`` must be ordered by step."""
    if window < 1:
        raise ValueError(f"window must be >= 1; got {window}")
    steps = [s for s, _ in curve]
    if steps != sorted(set(steps)):
        raise ValueError("curve steps must be strictly increasing")
    values = [v for _, v in curve]
    out = []
    for i, step in enumerate(steps):
        kept = values[max(0, i - window + 1) : i + 1]
        out.append((step, sum(kept) / len(kept)))
    return out


def steps_to_threshold(curve: Curve, threshold: float, window: int) -> int | None:
    """The first step whose trailing mean (see :func:`trailing_mean`) is ≥ ``threshold``;
    None when no step's is (a censored run)."""
    for step, value in trailing_mean(curve, window):
        if value >= threshold:
            return step
    return None


def censored_median(values: Sequence[int | None], cap: int) -> float:
    """Median of steps-to-threshold over runs, a censored run (None) counted as more
    than ``cap`` steps: ``inf`` when the median falls on a censored run (then it is only
    known to exceed ``cap``). Reached values must lie in [1, cap]."""
    if not values:
        raise ValueError("no runs")
    bad = [v for v in values if v is not None and not 1 <= v <= cap]
    if bad:
        raise ValueError(f"steps {bad} lie outside [1, {cap}]")
    ranked = sorted(math.inf if v is None else float(v) for v in values)
    middle = len(ranked) // 2
    if len(ranked) % 2:
        return ranked[middle]
    return (ranked[middle - 1] + ranked[middle]) / 2


def format_steps(value: float, cap: int) -> str:
    """``37`` or ``37.5``; ``>cap`` for a censored median or run."""
    if math.isinf(value):
        return f">{cap}"
    return f"{value:g}"
