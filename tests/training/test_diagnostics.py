import pytest
import torch

from slca.rewards.score import RewardBreakdown
from slca.rollout.types import Rollout, is_truncated
from slca.training.diagnostics import PARTS, step_diagnostics


def rollout(policy_tokens: int, finish: str) -> Rollout:
    r = Rollout(task_id="t", group=0, sample=0, prompt_length=2)
    r.token_ids = [0] * (2 + policy_tokens)
    r.policy_mask = [False, False] + [True] * policy_tokens
    r.finish_reason = finish
    return r


def breakdown(**parts: float) -> RewardBreakdown:
    fields = dict.fromkeys(RewardBreakdown.__dataclass_fields__, 0)
    fields.update(mode="process", summary_raw=None, per_call=(), **parts)
    return RewardBreakdown(**fields)


def test_diagnostics_split_rewards_and_advantage_mass_by_truncation():
    rollouts = [rollout(2, "stop"), rollout(4, "max_tokens"), rollout(1, "max_turns")]
    scores = [breakdown(name=1.0, format=1.0), breakdown(name=0.5), breakdown(value=0.3)]
    totals = [1.0, -0.5, 0.2]
    # per-token advantages: +1 on the short finished rollout, -1 on the long cut-off one
    advantages = torch.tensor(
        [[0, 0, 1.0, 1.0, 0, 0], [0, 0, -1.0, -1.0, -1.0, -1.0], [0, 0, 0.5, 0, 0, 0]]
    )
    mask = advantages != 0
    out = step_diagnostics(rollouts, scores, totals, advantages, mask)
    assert out["rollout/response_tokens_mean"] == pytest.approx(7 / 3)
    assert out["rollout/response_tokens_max"] == 4
    assert out["rollout/truncated_frac"] == pytest.approx(1 / 3)
    assert out["reward/name"] == pytest.approx(0.5) and out["reward/value"] == pytest.approx(0.1)
    assert {f"reward/{p}" for p in PARTS} <= set(out)
    # max_turns ran out of turns, but was not cut off by a length limit
    assert out["reward/total_finished"] == pytest.approx(0.6)
    assert out["reward/total_truncated"] == pytest.approx(-0.5)
    assert out["rollout/response_tokens_truncated"] == 4
    # 7 loss tokens: the long negative rollout outweighs the short positive one
    assert out["adv/token_mean"] == pytest.approx((2 - 4 + 0.5) / 7)
    assert out["adv/truncated_token_share"] == pytest.approx(4 / 7)
    assert out["adv/truncated_mean"] == pytest.approx(-1.0)


def test_a_step_without_truncated_rollouts_reports_no_truncated_figures():
    out = step_diagnostics(
        [rollout(3, "stop")], [breakdown()], [0.0], torch.zeros(1, 5), torch.zeros(1, 5, dtype=bool)
    )
    assert out["rollout/truncated_frac"] == 0.0
    assert "reward/total_truncated" not in out and "adv/token_mean" not in out


def test_truncation_means_a_length_limit():
    reasons = ("stop", "max_turns", "max_tokens", "max_bytes")
    assert [is_truncated(rollout(1, f)) for f in reasons] == [False, False, True, True]


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError, match="must agree"):
        step_diagnostics([rollout(1, "stop")], [], [], torch.zeros(1, 3), torch.zeros(1, 3))


def test_segment_figures_count_the_rollouts_each_head_reaches():
    rollouts = [rollout(2, "stop"), rollout(2, "max_turns"), rollout(2, "max_tokens")]
    scores = [breakdown(), breakdown(), breakdown()]
    # rollout 0 calls and answers; 1 calls in both turns (no answer); 2 answers directly
    masks = {
        "tool": torch.tensor([[0, 0, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]], dtype=torch.bool),
        "summary": torch.tensor([[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 1]], dtype=torch.bool),
    }
    rewards = {"tool": torch.tensor([1.0, 0.5, 0.0]), "summary": torch.tensor([1.0, 0.2, -0.5])}
    advantages = torch.zeros(3, 4)
    out = step_diagnostics(
        rollouts, scores, [0.0] * 3, advantages, masks["tool"] | masks["summary"], masks, rewards
    )
    assert out["segment/tool_present_frac"] == pytest.approx(2 / 3)
    assert out["segment/sum_present_frac"] == pytest.approx(2 / 3)
    # the rewards the present-only estimator drops: the direct answer's R_tool, the
    # answerless rollout's R_summary
    assert out["segment/tool_absent_reward"] == pytest.approx(0.0)
    assert out["segment/sum_absent_reward"] == pytest.approx(0.2)


def test_segment_figures_leave_out_an_absent_reward_when_every_rollout_has_the_head():
    masks = {"tool": torch.ones(2, 3, dtype=torch.bool)}
    out = step_diagnostics(
        [rollout(1, "stop")] * 2,
        [breakdown()] * 2,
        [0.0, 0.0],
        torch.zeros(2, 3),
        masks["tool"],
        masks,
        {"tool": torch.tensor([1.0, 0.0])},
    )
    assert out["segment/tool_present_frac"] == 1.0
    assert "segment/tool_absent_reward" not in out
