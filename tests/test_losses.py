import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from slca.losses import AGGREGATIONS, aggregate, aggregation_units, k3_kl, policy_loss


def test_on_policy_loss_is_minus_the_mean_advantage_and_nothing_is_clipped():
    logp = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    adv = torch.tensor([[1.0, -2.0, 0.5]])
    mask = torch.tensor([[True, True, False]])
    loss, m = policy_loss(logp, logp, adv, mask, kl_coef=0.0)
    assert loss.item() == pytest.approx(-(1.0 - 2.0) / 2)
    assert m["actor/clipfrac"].item() == 0.0
    assert m["actor/ratio_mean"].item() == pytest.approx(1.0)


def test_clipping_known_answer_with_separate_bounds():
    old = torch.zeros(1, 4)
    # Ratios 1.5, 0.5, 1.5, 0.5 with A = +1, -1, -1, +1: the first two move the
    # ratio past a bound in the advantage's direction, so the clipped branch wins
    # (1 + 0.28 and 1 - 0.2); the last two move against it, so the unclipped one does.
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.5, 0.5]]))
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, m = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    per_token = [-1.28, 0.8, 1.5, -0.5]
    assert loss.item() == pytest.approx(sum(per_token) / 4, rel=1e-6)
    assert m["actor/clipfrac"].item() == pytest.approx(0.5)


def test_k3_kl_is_zero_at_equality_and_positive_elsewhere():
    logp = torch.tensor([[-1.0, -2.0]])
    assert k3_kl(logp, logp).abs().max().item() == 0.0
    ref = torch.tensor([[-1.5, -0.5]])
    expected = [math.exp(r - p) - (r - p) - 1 for p, r in zip([-1.0, -2.0], [-1.5, -0.5])]
    assert k3_kl(logp, ref)[0].tolist() == pytest.approx(expected)


def test_kl_term_adds_to_the_loss_and_is_reported():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -0.5]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    zero_adv = torch.zeros(1, 2)
    loss, m = policy_loss(logp, logp, zero_adv, mask, ref_logp=ref, kl_coef=0.1)
    kl = k3_kl(logp, ref).mean()
    assert m["actor/kl"].item() == pytest.approx(kl.item())
    assert loss.item() == pytest.approx(0.1 * kl.item())


def test_aggregations_known_answers():
    values = torch.tensor([[1.0, 3.0, 0.0], [10.0, 0.0, 0.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(14 / 3)
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 10) / 2)
    # Dr. GRPO: token sums over a constant, then the mean over the two rollouts with tokens
    sum_norm = aggregate(values, mask, "seq-mean-token-sum-norm", norm_length=4.0)
    assert sum_norm.item() == pytest.approx((4 / 4 + 10 / 4) / 2)
    with pytest.raises(ValueError, match="norm_length must be > 0"):
        aggregate(values, mask, "seq-mean-token-sum-norm", norm_length=0.0)
    with pytest.raises(ValueError, match="unknown loss aggregation 'sum'"):
        aggregate(values, mask, "sum")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_empty_mask_gives_zero_loss_that_still_backpropagates(aggregation):
    logp = torch.randn(2, 3, requires_grad=True)
    loss, _ = policy_loss(
        logp,
        logp.detach(),
        torch.ones(2, 3),
        torch.zeros(2, 3, dtype=bool),
        aggregation=aggregation,
    )
    loss.backward()
    assert loss.item() == 0.0 and (logp.grad == 0).all()


@given(
    B=st.integers(1, 4),
    T=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    aggregation=st.sampled_from(AGGREGATIONS),
)
def test_tokens_with_zero_advantage_and_no_kl_get_zero_policy_gradient(B, T, seed, aggregation):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=gen) * 3).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(B, T, generator=gen)  # off-policy: ratios != 1
    adv = torch.randn(B, T, generator=gen)
    zero = torch.rand(B, T, generator=gen) < 0.5
    adv[zero] = 0.0
    mask = torch.rand(B, T, generator=gen) < 0.8
    loss, _ = policy_loss(logp, old, adv, mask, aggregation=aggregation, kl_coef=0.0)
    loss.backward()
    assert (logp.grad[zero | ~mask] == 0).all()
    assert torch.isfinite(logp.grad).all()


def test_padding_with_minus_inf_does_not_poison_gradients():
    logp = torch.tensor([[-1.0, -float("inf")]], requires_grad=True)
    old = torch.tensor([[-1.2, -float("inf")]])
    ref = torch.tensor([[-0.9, -float("inf")]])
    mask = torch.tensor([[True, False]])
    loss, m = policy_loss(logp, old, torch.tensor([[1.0, 5.0]]), mask, ref_logp=ref, kl_coef=0.5)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[0, 1].item() == 0.0
    assert all(torch.isfinite(v) for v in m.values())


def test_positive_advantage_raises_the_token_logprob():
    logits = torch.zeros(1, 1, 4, requires_grad=True)
    opt = torch.optim.SGD([logits], lr=1.0)
    for _ in range(3):
        logp = torch.log_softmax(logits, -1)[..., 2]
        loss, _ = policy_loss(
            logp, logp.detach(), torch.ones(1, 1), torch.ones(1, 1, dtype=bool), clip_high=10.0
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.softmax(logits, -1)[0, 0, 2].item() > 0.25


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(kl_coef=0.1), "needs ref_logp"),
        (dict(clip_low=1.0), "clip_low < 1"),
        (dict(kl_coef=-1.0), "kl_coef must be >= 0"),
        (dict(clip_ratio_c=1.0), r"clip_ratio_c must be > 1 \(or None: off\), got 1.0"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=message):
        policy_loss(x, x, x, torch.ones(1, 2, dtype=bool), **kwargs)


def test_shape_mismatch_is_named():
    with pytest.raises(ValueError, match=r"share one shape.*\(1, 2\), \(1, 3\)"):
        policy_loss(
            torch.zeros(1, 2), torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 2, dtype=bool)
        )


# ---------------------------------------------------------------- dual clip (verl)


def test_dual_clip_bounds_negative_advantages_only_known_answer():
    old = torch.zeros(1, 4)
    # Ratios 5, 5, 2, 0.5 with A = -1, +1, -1, -1. Token 0: the clipped surrogate is
    # 5 (unclipped wins against A < 0), the dual clip caps it at 3. Token 1: A > 0, the
    # upper clip gives -1.2, untouched. Tokens 2 and 3 stay under the cap (2 and 0.8).
    logp = torch.log(torch.tensor([[5.0, 5.0, 2.0, 0.5]]))
    adv = torch.tensor([[-1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, m = policy_loss(logp, old, adv, mask, clip_ratio_c=3.0)
    assert loss.item() == pytest.approx((3.0 - 1.2 + 2.0 + 0.8) / 4, rel=1e-6)
    assert m["actor/clipfrac_lower"].item() == pytest.approx(0.25)
    off, m_off = policy_loss(logp, old, adv, mask)
    assert off.item() == pytest.approx((5.0 - 1.2 + 2.0 + 0.8) / 4, rel=1e-6)
    assert "actor/clipfrac_lower" not in m_off


def test_dual_clipped_tokens_get_no_gradient_and_the_others_are_unchanged():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[5.0, 1.1, 0.9]])).requires_grad_()
    adv = torch.tensor([[-1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    policy_loss(logp, old, adv, mask, clip_ratio_c=3.0)[0].backward()
    dual = logp.grad.clone()
    logp.grad = None
    policy_loss(logp, old, adv, mask)[0].backward()
    assert dual[0, 0].item() == 0.0 and logp.grad[0, 0].item() != 0.0
    torch.testing.assert_close(dual[0, 1:], logp.grad[0, 1:])


@given(ratio=st.floats(0.05, 20.0), adv=st.floats(-5.0, 5.0), c=st.floats(1.01, 10.0))
def test_dual_clip_is_verls_rule(ratio, adv, c):
    old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[ratio]]))
    a = torch.tensor([[adv]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    got, _ = policy_loss(logp, old, a, mask, clip_ratio_c=c)
    clipped = max(-adv * ratio, -adv * min(max(ratio, 0.8), 1.2))
    want = min(clipped, -adv * c) if adv < 0 else clipped
    assert got.item() == pytest.approx(want, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_weighted_by_their_units_give_the_whole_batch_loss(aggregation):
    """The trainer splits a minibatch into micro-batches and weighs each one's loss by
    its aggregation units; that must equal the loss of the whole minibatch."""
    gen = torch.Generator().manual_seed(3)
    values = torch.randn(6, 5, generator=gen)
    mask = torch.rand(6, 5, generator=gen) < 0.6
    mask[2] = False  # a rollout with no loss token
    whole = aggregate(values, mask, aggregation, norm_length=5.0)
    units = aggregation_units(mask, aggregation)
    split = sum(
        aggregate(values[rows], mask[rows], aggregation, norm_length=5.0)
        * aggregation_units(mask[rows], aggregation)
        / units
        for rows in (slice(0, 2), slice(2, 3), slice(3, 6))
    )
    assert split.item() == pytest.approx(whole.item(), rel=1e-6)
