"""How small a difference in sampled pass@1 a paired comparison can detect.

The GPU credit experiment compares two arms on the same tasks: per task, each arm's
success rate is the mean of ``seeds × k`` samples at temperature 1, and the arms'
difference per task is averaged over tasks (``slca.eval.paired``). Under "no effect"
each per-task difference is the difference of two binomial means, so its variance is
``2 · E[p(1 − p)] / (seeds · k)`` where ``p`` is a task's success probability. The
headroom tool measures ``E[p]`` (pass@1) and ``1 − E[(1 − p)^G]`` (best of G), not
``E[p(1 − p)]``; a Beta distribution of ``p`` fitted to those two moments gives it, and
``E[p](1 − E[p])`` bounds it from above whatever the distribution.

Seed-to-seed variation of a task's ``p`` between training runs adds to this variance
and is not in the headroom figures; the experiment's bootstrap over tasks includes it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SampledVariance:
    """Per-task Bernoulli variance of one sample, ``E[p(1 − p)]``, two ways."""

    fitted: float
    """From a Beta(a, b) fitted to pass@1 and best of G."""
    bound: float
    """``E[p](1 − E[p])``: no distribution of ``p`` with that mean has more."""
    beta: tuple[float, float]


def sampled_variance(pass1: float, best_of_g: float, group_size: int) -> SampledVariance:
    """``E[p(1 − p)]`` from the headroom tool's pass@1 and best-of-``group_size``.

    Fits Beta(a, b) with mean ``pass1`` and ``E[(1 − p)^G] = 1 − best_of_g`` (the
    chance that all G samples fail). Raises ValueError for figures no Beta has."""
    from scipy import optimize, special

    if not 0 < pass1 < best_of_g < 1 or group_size < 2:
        raise ValueError(
            "sampled_variance: needs 0 < pass1 < best_of_g < 1 and group_size >= 2; "
            f"got pass1={pass1}, best_of_g={best_of_g}, group_size={group_size}"
        )
    all_fail = 1 - best_of_g

    def gap(log_concentration: float) -> float:
        total = math.exp(log_concentration)
        a, b = pass1 * total, (1 - pass1) * total
        return math.exp(special.betaln(b + group_size, a) - special.betaln(b, a)) - all_fail

    # concentration → 0: p is 0 or 1, all fail = 1 − pass1; → ∞: p ≡ pass1
    low, high = -12.0, 12.0
    if gap(low) * gap(high) > 0:
        raise ValueError(
            f"sampled_variance: no Beta has pass@1 {pass1} and best of {group_size} "
            f"{best_of_g} (best of G must lie between pass@1 and 1 − (1 − pass@1)^G)"
        )
    total = math.exp(optimize.brentq(gap, low, high))
    a, b = pass1 * total, (1 - pass1) * total
    return SampledVariance(a * b / (total * (total + 1)), pass1 * (1 - pass1), (a, b))


def minimum_detectable_effect(
    variance_per_sample: float,
    *,
    tasks: int,
    seeds: int,
    samples: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """The smallest true difference of mean success a two-sided paired test at level
    ``alpha`` detects with probability ``power`` (normal approximation): ``(z₁₋α/₂ +
    z_power) · sqrt(2 · variance_per_sample / (seeds · samples) / tasks)``."""
    from statistics import NormalDist

    if min(tasks, seeds, samples) < 1 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(
            "minimum_detectable_effect: tasks, seeds and samples must be >= 1 and alpha, "
            f"power in (0, 1); got {tasks}, {seeds}, {samples}, {alpha}, {power}"
        )
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * math.sqrt(2 * variance_per_sample / (seeds * samples) / tasks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pass1", type=float, required=True, help="headroom: pass@1")
    parser.add_argument("--best-of-g", type=float, required=True, help="headroom: best of G")
    parser.add_argument("--group-size", type=int, required=True, help="headroom's G")
    parser.add_argument("--tasks", type=int, required=True, help="paired tasks")
    parser.add_argument("--seeds", type=int, required=True, help="training runs per arm")
    parser.add_argument("--samples", type=int, required=True, help="k samples per task")
    args = parser.parse_args(argv)
    variance = sampled_variance(args.pass1, args.best_of_g, args.group_size)
    design = {"tasks": args.tasks, "seeds": args.seeds, "samples": args.samples}
    for name, value in (("Beta fit", variance.fitted), ("upper bound", variance.bound)):
        mde = minimum_detectable_effect(value, **design)
        print(f"{name}: E[p(1-p)] = {value:.4f}; 80 % power at 5 %: {100 * mde:.2f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
