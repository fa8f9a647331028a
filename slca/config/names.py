"""The names the settings accept, declared once: registry names and fixed choices.

The configuration is a leaf (no module of :mod:`slca.config` imports an implementation),
so a section checks a name against this module, never by importing the code that
registers it. The implementations import their vocabulary from here (segment kinds and
routing, estimator numerics, loss aggregations, the reward heads), and each registry adds
the names it registers to its set below (:class:`slca.registry.Registry`'s ``names``),
so a plug-in estimator or scorer registered before the settings are read is accepted
too. ``tests/test_names.py`` keeps the built-in names equal to what the registries hold.
Imports nothing (torch-free).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

TOOL, SUMMARY = "tool", "summary"
"""The two HierR heads; estimators that treat the tool head specially use this name."""

# ---------------------------------------------------------------- registries

ESTIMATOR_NAMES: set[str] = {"grpo", "dr_grpo", "slca", "toolpo", "rltr"}
"""The advantage estimators ``train.algorithm.advantage.estimator`` accepts: the
built-in ones (:mod:`slca.advantages`) and any registered since."""

SUMMARY_SCORER_NAMES: set[str] = {"grounded", "judge", "reward_model", "marker"}
"""The summary scorers ``rewards.summary.name`` accepts: the built-in ones
(:mod:`slca.rewards`) and any registered since."""

# ---------------------------------------------------------------- segments

SEGMENT_KINDS: tuple[str, ...] = ("reasoning", "tool_call", "preamble", "summary")
"""Every label a policy token can carry, in code order (code = index)."""

DEFAULT_ROUTING: dict[str, str | None] = {
    "reasoning": TOOL,
    "tool_call": TOOL,
    "preamble": TOOL,
    "summary": SUMMARY,
}
"""Segment kind → reward head. ``None`` drops the kind from training (mask 0)."""

SegmentMode = Literal["grammar", "mask_runs"]
SEGMENT_MODES: tuple[str, ...] = ("grammar", "mask_runs")
"""How tokens reach heads: by their grammar label through the routing (slca), or by
the position of their run of policy tokens (the reference)."""


def validate_routing(routing: Mapping[str, str | None]) -> dict[str, str | None]:
    """Check that ``routing`` maps exactly the segment kinds to head names (or None)."""
    unknown = sorted(set(routing) - set(SEGMENT_KINDS))
    missing = [kind for kind in SEGMENT_KINDS if kind not in routing]
    if unknown or missing:
        raise ValueError(
            f"segment routing must map exactly {list(SEGMENT_KINDS)}; "
            f"unknown: {unknown}, missing: {missing}"
        )
    for kind, head in routing.items():
        if head is not None and (not isinstance(head, str) or not head):
            raise ValueError(f"segment routing[{kind!r}] must be a head name or null, got {head!r}")
    return dict(routing)


# ---------------------------------------------------------------- estimator numerics

Numerics = Literal["float64", "float32"]
Singleton = Literal["zero", "raw"]
NUMERICS: tuple[str, ...] = ("float64", "float32")
SINGLETONS: tuple[str, ...] = ("zero", "raw")

# ---------------------------------------------------------------- loss

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
