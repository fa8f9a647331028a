"""Differential tests: every case of the authors' code reproduces under the reference profile.

The fixtures (``tests/fixtures/reference``, see PROVENANCE.md there) hold generated inputs
and the outputs of SLCA-GRPO @ 68539c5. Tolerances are the fixture README's: HierR ints
exact and floats to 1e-9; advantages to 1e-5 absolute (-0.0 equals 0); cases marked
``float32_sensitive`` (tied groups: the output is float32 rounding noise) bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch

from slca.advantages import SUMMARY, TOOL, compute_advantages
from slca.config.train import TrainConfig
from slca.reference import reference_algorithm, reference_config, replay
from slca.rewards.reference import route_penalty

FIXTURES = Path(__file__).parent / "fixtures" / "reference"
CHECKSUMS = {
    "hierr.jsonl": "004cbd1dba9da4e3a8794b057daf2e16391de99432fe404e822a9e3b474ff9b5",
    "advantages.jsonl": "c95439ff8df6ead8d6e014f238b954a11003542aa6e34df4c15b6ead2b153036",
}


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


HIERR = load("hierr.jsonl")
ADVANTAGES = load("advantages.jsonl")


def test_fixtures_are_the_recorded_files_and_complete():
    for name, digest in CHECKSUMS.items():
        assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == digest, name
    assert len(HIERR) == 400 and len(ADVANTAGES) == 400
    assert sum(c["float32_sensitive"] for c in ADVANTAGES) > 0
    assert {c["estimator"] for c in ADVANTAGES} == {"slca", "grpo"}


@pytest.mark.parametrize("case", HIERR, ids=[c["id"] for c in HIERR])
def test_hierr_case_reproduces(case):
    out = replay(case)
    expected, got = case["expected"], out["expected"]
    assert set(got) == set(expected)
    for key, want in expected.items():
        if isinstance(want, int):  # counts and flags: exact, and still ints
            assert type(got[key]) is int and got[key] == want, key
        else:
            assert isinstance(got[key], float) and abs(got[key] - want) <= 1e-9, key
    assert out["expected_labels"] == case["expected_labels"]


def _compare(got, want, exact: bool) -> None:
    got = torch.tensor(got, dtype=torch.float32)
    want = torch.tensor(want, dtype=torch.float32)
    assert got.shape == want.shape
    if exact:  # + 0.0 turns -0.0 into 0.0
        assert torch.equal(got + 0.0, want + 0.0), (got - want).abs().max()
    elif want.numel():
        assert (got - want).abs().max() <= 1e-5


@pytest.mark.parametrize("case", ADVANTAGES, ids=[c["id"] for c in ADVANTAGES])
def test_advantage_case_reproduces(case):
    out = replay(case)
    keys = ["expected_advantages"]
    if case["estimator"] == "slca":
        keys += ["expected_adv_process", "expected_adv_summary"]
    assert sorted(out) == sorted(keys)
    for key in keys:
        _compare(out[key], case[key], exact=case["float32_sensitive"])


def test_float32_sensitive_cases_need_the_reference_numerics():
    """The tied groups are what float32 numerics are for: the reference profile with
    only ``numerics`` switched back to slca's float64 gives them exactly 0 where the
    authors' code gives rounding noise; on the other cases it still agrees."""
    float64 = TrainConfig(
        algorithm={
            "segments": {"mode": "mask_runs"},
            "advantage": {"singleton": "raw", "weight_penalty": False},
        }
    )
    sensitive_differ = other_differ = 0
    for case in ADVANTAGES:
        got = torch.tensor(replay(case, config=float64)["expected_advantages"])
        agree = torch.allclose(got, torch.tensor(case["expected_advantages"]), atol=1e-5)
        if case["float32_sensitive"]:
            sensitive_differ += not agree
        else:
            other_differ += not agree
    assert sensitive_differ > 0 and other_differ == 0


def test_grpo_scores_follow_from_the_rewards_through_the_unweighted_penalty():
    """The fixture's GRPO ``scores`` are float32(λ_tool·process + λ_sum·summary), or -0.5
    on a flagged row: exactly what the profile's reward routing and ``weight_penalty=False``
    feed verl's GRPO (its combined reward is what the estimator z-scores)."""
    from slca.advantages import _combined_reward

    penalty = reference_config().rewards.guard.penalty
    for case in (c for c in ADVANTAGES if c["estimator"] == "grpo"):
        routed = [
            route_penalty(p, s, penalty if flag > 0.5 else 0.0, flag > 0.5)
            for p, s, flag in zip(
                case["process_score"], case["summary_score"], case["should_no_call"], strict=True
            )
        ]
        rewards = {
            TOOL: torch.tensor([r[0] for r in routed], dtype=torch.float32),
            SUMMARY: torch.tensor([r[1] for r in routed], dtype=torch.float32),
        }
        weights = {TOOL: case["lambda_tool"], SUMMARY: case["lambda_sum"]}
        guarded = torch.tensor([r[2] for r in routed])
        total = _combined_reward(rewards, weights, weight_penalty=False, guarded=guarded)
        assert torch.equal(total.float(), torch.tensor(case["scores"], dtype=torch.float32))


def test_constant_group_of_sixteen_gets_the_references_rounding_noise():
    """The issue's measurement: 16 rewards of 0.85 in one group."""
    mask = torch.ones(16, 3, dtype=torch.bool)
    common = dict(
        rewards={TOOL: torch.zeros(16), SUMMARY: torch.full((16,), 0.85)},
        head_masks={TOOL: torch.zeros_like(mask), SUMMARY: mask},
        group_index=torch.zeros(16, dtype=torch.long),
    )
    reference, _ = compute_advantages(
        "grpo", **common, **reference_algorithm().advantage.switches()
    )
    default, _ = compute_advantages("grpo", **common)
    assert torch.equal(default, torch.zeros_like(default))
    assert math.isclose(float(reference[0, 0]), 0.056, abs_tol=5e-4)
    assert torch.equal(reference, torch.full_like(reference, float(reference[0, 0])))


def test_replay_refuses_what_it_cannot_replay():
    with pytest.raises(ValueError, match="neither a HierR case"):
        replay({"id": "x"})
    case = dict(ADVANTAGES[0], estimator="toolpo")
    with pytest.raises(ValueError, match="'toolpo' is not replayed"):
        replay(case)
    with pytest.raises(ValueError, match="segments.mode 'mask_runs', not 'grammar'"):
        replay(ADVANTAGES[0], config=TrainConfig())
