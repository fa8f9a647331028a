"""Paired differences between two arms on the same evaluation tasks, with bootstrap
intervals: what the credit benchmark reports against GRPO and against SFT.

Every model of a comparison meets the same test tasks (evaluation draws them from its
own seed), so arm A's seed s and arm B's seed s are compared task by task; an arm with
one run (the SFT model, evaluated greedily) is its own pair for every seed. The
difference per task is averaged over the seeds and the 95 % interval of its mean comes
from a bootstrap over the tasks (``scipy.stats.bootstrap``, BCa), the population the
test split samples. Seed-to-seed spread shows in the report's ± std columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from slca.eval.in_domain import SUCCESS_THRESHOLD, TOLERANCE

Outcomes = Mapping[str, float]
"""One evaluation run's value per task id."""


def success_by_task(lines: Iterable[Mapping]) -> dict[str, float]:
    """1.0 per in-domain task whose process score reaches Success@0.9's bar, else 0.0;
    a task whose prompt did not fit the context (no process score) counts 0.0, as in
    the overall."""
    out = {}
    for line in lines:
        if line.get("set", "in_domain") != "in_domain":
            continue
        process = line.get("process")
        out[line["task_id"]] = float(
            process is not None and process >= SUCCESS_THRESHOLD - TOLERANCE
        )
    return out


def redundant_by_task(lines: Iterable[Mapping]) -> dict[str, float]:
    """Redundant calls per in-domain task that ran (tasks too long to run are absent)."""
    return {
        line["task_id"]: float(line["redundant"])
        for line in lines
        if line.get("set", "in_domain") == "in_domain" and line.get("redundant") is not None
    }


def paired_runs(
    arm: Mapping[str, Outcomes], baseline: Mapping[str, Outcomes]
) -> tuple[list[tuple[Outcomes, Outcomes]], list[str]]:
    """The (arm run, baseline run) pairs and the tasks every pair scored: seeds pair by
    name; a baseline with a single run pairs with every seed of ``arm``. Raises
    ValueError when nothing pairs. No scipy: the GPU tools pair where it is absent."""
    if len(baseline) == 1:
        (only,) = baseline.values()
        pairs = [(arm[s], only) for s in sorted(arm)]
    else:
        pairs = [(arm[s], baseline[s]) for s in sorted(arm) if s in baseline]
    if not pairs:
        raise ValueError(
            f"paired_difference: no seed pairs (arm seeds {sorted(arm)}, "
            f"baseline seeds {sorted(baseline)})"
        )
    tasks = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs)))
    if not tasks:
        raise ValueError("paired_difference: the paired runs share no task")
    return pairs, tasks


@dataclass(frozen=True)
class PairedDifference:
    """Mean of arm − baseline over the paired tasks, and its bootstrap interval.

    ``no_difference``: no paired task differs, so there is nothing to resample and the
    interval [0, 0] would look decisive when it only says that nothing changed; reports
    print "no difference observed" instead."""

    mean: float
    low: float
    high: float
    tasks: int
    seeds: int
    no_difference: bool = False


def paired_difference(
    arm: Mapping[str, Outcomes],
    baseline: Mapping[str, Outcomes],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedDifference:
    """``arm`` and ``baseline`` map a training seed to that run's outcome per task.

    Seeds pair by name; a baseline with a single run pairs with every seed of ``arm``.
    Only tasks every paired run scored enter. Shapes: the per-task differences are a
    ``[tasks]`` vector (mean over the ``[seeds, tasks]`` matrix's seed axis), which the
    bootstrap resamples. Raises ValueError when nothing pairs.
    """
    from scipy import stats

    if not 0 < confidence < 1:
        raise ValueError(f"paired_difference: confidence must be in (0, 1); got {confidence}")
    pairs, tasks = paired_runs(arm, baseline)
    diffs = np.array([[a[t] - b[t] for t in tasks] for a, b in pairs]).mean(axis=0)
    mean = float(diffs.mean())
    if np.ptp(diffs) == 0:  # every task differs alike: the bootstrap has nothing to vary
        return PairedDifference(
            mean, mean, mean, len(tasks), len(pairs), no_difference=not diffs.any()
        )
    result = stats.bootstrap(
        (diffs,),
        np.mean,
        confidence_level=confidence,
        n_resamples=resamples,
        method="BCa",
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return PairedDifference(mean, float(low), float(high), len(tasks), len(pairs))
