import dataclasses
import math
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from slca import advantages as adv_mod
from slca.advantages import (
    AdvantageBatch,
    available_estimators,
    compute_advantages,
    estimate_advantages,
    register_advantage,
)

ESTIMATORS = ["grpo", "dr_grpo", "slca", "toolpo", "rltr"]
EPS = 1e-6

# ---------------------------------------------------------------- reference


def ref_zscore(values, norm_by_std=True, eps=EPS):
    """Plain-Python z-score of one group's present members (the semantics, spelled out)."""
    if len(values) < 2 or max(values) == min(values):
        return [0.0] * len(values)
    mean = sum(values) / len(values)
    if not norm_by_std:
        return [v - mean for v in values]
    std = statistics.stdev(values)
    return [(v - mean) / (std + eps) for v in values]


def ref_group_scores(scores, groups, present, norm_by_std=True):
    out = [0.0] * len(scores)
    for g in set(groups):
        members = [i for i in range(len(scores)) if groups[i] == g and present[i]]
        for i, z in zip(members, ref_zscore([scores[i] for i in members], norm_by_std)):
            out[i] = z
    return out


def reference(name, batch, weights=None, norm_by_std=True, per_call=None):
    """Loop implementation of every estimator, from DESIGN §2, for cross-checking."""
    kinds, groups, r_tool, r_sum = batch["kinds"], batch["groups"], batch["tool"], batch["summary"]
    w = {"tool": 1.0, "summary": 1.0, **(weights or {})}
    B, T = len(kinds), len(kinds[0])
    has = {h: [any(k == h for k in row) for row in kinds] for h in ("tool", "summary")}
    everyone = [True] * B
    total = [w["tool"] * a + w["summary"] * b for a, b in zip(r_tool, r_sum)]
    out = [[0.0] * T for _ in range(B)]
    if name in ("grpo", "dr_grpo", "toolpo"):
        a = ref_group_scores(total, groups, everyone, norm_by_std and name != "dr_grpo")
        for i in range(B):
            for t in range(T):
                if kinds[i][t] is not None:
                    out[i][t] += a[i]
    if name == "toolpo":
        a = ref_group_scores(r_tool, groups, has["tool"], norm_by_std)
        for i in range(B):
            for t in range(T):
                if kinds[i][t] == "tool":
                    out[i][t] += a[i]
    if name in ("slca", "rltr"):
        heads = {"tool": r_tool} if name == "rltr" else {"tool": r_tool, "summary": r_sum}
        for head, scores in heads.items():
            a = ref_group_scores(scores, groups, has[head], norm_by_std)
            for i in range(B):
                for t in range(T):
                    if kinds[i][t] == head:
                        out[i][t] = w[head] * a[i]
    if per_call is not None:
        call_rewards, call_index = per_call
        K = len(call_rewards[0])
        for k in range(K):
            present = [
                any(kinds[i][t] == "tool" and call_index[i][t] == k for t in range(T))
                for i in range(B)
            ]
            a = ref_group_scores(
                [call_rewards[i][k] for i in range(B)], groups, present, norm_by_std
            )
            for i in range(B):
                for t in range(T):
                    if kinds[i][t] == "tool" and call_index[i][t] == k:
                        out[i][t] = w["tool"] * a[i]
    return torch.tensor(out, dtype=torch.float64)


# ---------------------------------------------------------------- strategies

REWARD = st.one_of(
    st.floats(-10, 10, allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from([0.0, 0.25, 0.5, 1.0]),  # ties and constant groups are common in RL
)


@st.composite
def batches(draw, max_b=10, max_t=8, discrete=False):
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(1, max_t))
    n_groups = draw(st.integers(1, 4))
    groups = draw(st.lists(st.integers(0, n_groups - 1), min_size=B, max_size=B))
    kinds = draw(
        st.lists(
            st.lists(st.sampled_from([None, "tool", "summary"]), min_size=T, max_size=T),
            min_size=B,
            max_size=B,
        )
    )
    value = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) if discrete else REWARD
    r_tool = draw(st.lists(value, min_size=B, max_size=B))
    r_sum = draw(st.lists(value, min_size=B, max_size=B))
    return {"kinds": kinds, "groups": groups, "tool": r_tool, "summary": r_sum}


def tensors(batch):
    kinds = batch["kinds"]
    masks = {
        h: torch.tensor([[k == h for k in row] for row in kinds], dtype=torch.bool)
        for h in ("tool", "summary")
    }
    rewards = {h: torch.tensor(batch[h], dtype=torch.float32) for h in ("tool", "summary")}
    return rewards, masks, torch.tensor(batch["groups"])


def run(name, batch, **kwargs):
    rewards, masks, groups = tensors(batch)
    return compute_advantages(name, rewards=rewards, head_masks=masks, group_index=groups, **kwargs)


def policy_mask(batch):
    return torch.tensor([[k is not None for k in row] for row in batch["kinds"]])


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("name", ESTIMATORS)
@given(batch=batches(), norm=st.booleans())
def test_vectorised_matches_loop_reference(name, batch, norm):
    a, _ = run(name, batch, norm_by_std=norm)
    expected = reference(name, batch, norm_by_std=norm)
    torch.testing.assert_close(a.double(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ESTIMATORS)
@given(batch=batches())
def test_zero_outside_masks_and_always_finite(name, batch):
    a, metrics = run(name, batch)
    assert a.dtype == torch.float32
    assert torch.isfinite(a).all()
    assert (a[~policy_mask(batch)] == 0).all()
    assert all(torch.isfinite(v) for v in metrics.values())


@given(batch=batches(), other=st.lists(REWARD, min_size=10, max_size=10))
def test_summary_rewards_never_change_tool_advantages_under_slca(batch, other):
    a, _ = run("slca", batch)
    changed = dict(batch, summary=other[: len(batch["summary"])])
    b, _ = run("slca", changed)
    tool = tensors(batch)[1]["tool"]
    assert torch.equal(a[tool], b[tool])


@given(batch=batches(), w_tool=st.floats(0, 5), w_sum=st.floats(0, 5))
def test_weights_scale_slca_advantages_linearly_after_normalisation(batch, w_tool, w_sum):
    base, _ = run("slca", batch)
    scaled, _ = run("slca", batch, weights={"tool": w_tool, "summary": w_sum})
    _, masks, _ = tensors(batch)
    torch.testing.assert_close(scaled[masks["tool"]], w_tool * base[masks["tool"]])
    torch.testing.assert_close(scaled[masks["summary"]], w_sum * base[masks["summary"]])


@pytest.mark.parametrize("name", ESTIMATORS)
@given(batch=batches())
def test_groups_with_fewer_than_two_members_get_zero(name, batch):
    batch = dict(batch, groups=list(range(len(batch["groups"]))))  # every rollout alone
    a, metrics = run(name, batch)
    assert (a == 0).all()
    assert metrics["adv/zero_group_frac"].item() == 1.0


@given(batch=batches(discrete=True))
def test_slca_equals_grpo_when_heads_agree_and_every_member_has_both(batch):
    B, T = len(batch["kinds"]), len(batch["kinds"][0])
    if T < 2:
        return
    # Give every rollout at least one token of each segment.
    kinds = [["tool"] + row[1:-1] + ["summary"] for row in batch["kinds"]]
    same = dict(batch, kinds=kinds, summary=list(batch["tool"]))
    a_slca, _ = run("slca", same)
    a_grpo, _ = run("grpo", same)
    # grpo z-scores 2R with eps, slca R with eps: equal up to eps/std (std >= 0.25 here).
    torch.testing.assert_close(a_slca, a_grpo, rtol=1e-5, atol=1e-5)
    assert B == a_slca.shape[0]


@st.composite
def per_call_batches(draw):
    batch = draw(batches())
    B, T = len(batch["kinds"]), len(batch["kinds"][0])
    K = draw(st.integers(1, 3))
    call_index = draw(
        st.lists(st.lists(st.integers(-1, K - 1), min_size=T, max_size=T), min_size=B, max_size=B)
    )
    call_rewards = draw(st.lists(st.lists(REWARD, min_size=K, max_size=K), min_size=B, max_size=B))
    return batch, call_rewards, call_index


@given(data=per_call_batches())
def test_per_call_matches_loop_reference(data):
    batch, call_rewards, call_index = data
    a, _ = run(
        "slca",
        batch,
        granularity="per_call",
        call_rewards=torch.tensor(call_rewards),
        call_index=torch.tensor(call_index),
    )
    expected = reference("slca", batch, per_call=(call_rewards, call_index))
    torch.testing.assert_close(a.double(), expected, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- known answers


def test_known_answer_slca_locks_each_reward_to_its_segment():
    # One group of 3: rollout 0 has the right call but a poor summary.
    batch = {
        "kinds": [["tool", "tool", "summary"]] * 3,
        "groups": [0, 0, 0],
        "tool": [1.0, 0.0, 0.0],
        "summary": [0.0, 1.0, 1.0],
    }
    a, _ = run("slca", batch)
    # R_tool = (1, 0, 0): mean 1/3, stdev 1/sqrt(3).
    z_hi = (2 / 3) / (1 / math.sqrt(3) + EPS)
    z_lo = (-1 / 3) / (1 / math.sqrt(3) + EPS)
    assert a[0, 0].item() == pytest.approx(z_hi, rel=1e-5)  # good call: rewarded
    assert a[0, 2].item() == pytest.approx(-z_hi, rel=1e-5)  # poor summary: punished
    assert a[1, 0].item() == pytest.approx(z_lo, rel=1e-5)
    # GRPO on the same rollouts: R = 1 for all three, so the good call gets nothing.
    g, metrics = run("grpo", batch)
    assert (g == 0).all() and metrics["adv/zero_group_frac"].item() == 1.0


def test_a_segment_present_in_one_member_gets_zero_not_a_unit_std_fallback():
    batch = {
        "kinds": [["tool", "summary"], ["tool", None], ["tool", None]],
        "groups": [0, 0, 0],
        "tool": [1.0, 0.0, 0.5],
        "summary": [0.9, 0.0, 0.0],
    }
    a, metrics = run("slca", batch)
    assert a[0, 1].item() == 0.0  # only member with a summary: no baseline, no credit
    assert a[0, 0].item() != 0.0
    assert metrics["adv/sum_mean"].item() == 0.0


def test_toolpo_and_rltr_known_answers():
    batch = {
        "kinds": [["tool", "summary"], ["tool", "summary"]],
        "groups": [0, 0],
        "tool": [1.0, 0.0],
        "summary": [0.0, 0.0],
    }
    z = 0.5 / (math.sqrt(0.5) + EPS)  # two members 1, 0: mean 0.5, stdev sqrt(0.5)
    t, _ = run("toolpo", batch)
    assert t[0].tolist() == pytest.approx([2 * z, z], rel=1e-5)
    r, _ = run("rltr", batch, weights={"tool": 2.0})
    assert r[0].tolist() == pytest.approx([2 * z, 0.0], rel=1e-5)


def test_dr_grpo_subtracts_the_mean_only():
    batch = {
        "kinds": [["tool"], ["tool"], ["summary"]],
        "groups": [0, 0, 0],
        "tool": [1.0, 0.0, 0.0],
        "summary": [0.0, 0.0, 2.0],
    }
    a, _ = run("dr_grpo", batch)
    assert a[:, 0].tolist() == pytest.approx([0.0, -1.0, 1.0])


def test_metrics_report_token_statistics_per_head():
    batch = {
        "kinds": [["tool", "tool", "summary"], ["tool", None, "summary"]],
        "groups": [0, 0],
        "tool": [1.0, 0.0],
        "summary": [1.0, 1.0],
    }
    a, m = run("slca", batch)
    tool_values = torch.tensor([a[0, 0], a[0, 1], a[1, 0]])
    assert m["adv/tool_mean"].item() == pytest.approx(tool_values.mean().item())
    assert m["adv/tool_std"].item() == pytest.approx(tool_values.std(correction=0).item())
    assert m["adv/sum_mean"].item() == 0.0 and m["adv/sum_std"].item() == 0.0
    assert m["adv/zero_group_frac"].item() == 0.0


def test_empty_masks_and_single_rollouts_give_zeros():
    rewards = {"tool": torch.tensor([1.0]), "summary": torch.tensor([0.0])}
    masks = {
        "tool": torch.zeros(1, 0, dtype=torch.bool),
        "summary": torch.zeros(1, 0, dtype=torch.bool),
    }
    for name in ESTIMATORS:
        a, _ = compute_advantages(
            name, rewards=rewards, head_masks=masks, group_index=torch.tensor([0])
        )
        assert a.shape == (1, 0)


# ---------------------------------------------------------------- registry and errors


def test_registry_lists_every_estimator_and_refuses_duplicates():
    assert set(ESTIMATORS) <= set(available_estimators())
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("slca")(lambda **_: None)


def test_unknown_estimator_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*grpo.*slca"):
        run("ppo", {"kinds": [["tool"]], "groups": [0], "tool": [1.0], "summary": [0.0]})


def test_a_registered_estimator_is_reachable_by_name_only_through_the_registry():
    name = "test_constant_one"
    try:

        @register_advantage(name)
        def constant(batch: AdvantageBatch):
            return next(iter(batch.head_masks.values())).float()

        a, _ = run(
            name, {"kinds": [["tool", None]], "groups": [0], "tool": [1.0], "summary": [0.0]}
        )
        assert a.tolist() == [[1.0, 0.0]]
    finally:
        adv_mod._REGISTRY.unregister(name)


def test_an_estimator_reads_one_checked_read_only_batch():
    """The contract (ADR 0080): an estimator gets one :class:`AdvantageBatch`, checked
    when built, with every reward head weighted; the batch form and the keyword form
    dispatch the same way."""
    rewards, masks, groups = _inputs()
    batch = AdvantageBatch(
        rewards=rewards, head_masks=masks, group_index=groups, weights={"tool": 2.0}
    )
    assert dict(batch.weights) == {"tool": 2.0, "summary": 1.0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.eps = 0.1
    with pytest.raises(TypeError):
        batch.weights["tool"] = 3.0
    for name in ESTIMATORS:
        a, m = estimate_advantages(name, batch)
        b, n = compute_advantages(
            name, rewards=rewards, head_masks=masks, group_index=groups, weights={"tool": 2.0}
        )
        assert torch.equal(a, b) and m.keys() == n.keys()
    with pytest.raises(ValueError, match="overlap"):
        AdvantageBatch(
            rewards=rewards, head_masks={**masks, "summary": masks["tool"]}, group_index=groups
        )
    with pytest.raises(ValueError, match="numerics must be"):
        AdvantageBatch(rewards=rewards, head_masks=masks, group_index=groups, numerics="float16")
    per_call = AdvantageBatch(
        rewards=rewards, head_masks=masks, group_index=groups, granularity="per_call"
    )
    with pytest.raises(ValueError, match="for 'slca' only"):
        estimate_advantages("grpo", per_call)


def _inputs():
    masks = {
        "tool": torch.tensor([[True, False], [True, False]]),
        "summary": torch.tensor([[False, True], [False, True]]),
    }
    rewards = {"tool": torch.tensor([1.0, 0.0]), "summary": torch.tensor([0.0, 1.0])}
    return rewards, masks, torch.tensor([0, 0])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r, m, g: m.__setitem__("summary", m["tool"].clone()), "overlap"),
        (
            lambda r, m, g: r.__setitem__("tool", torch.tensor([1.0, float("nan")])),
            r"rewards\['tool'\]\[1\] is nan",
        ),
        (lambda r, m, g: r.pop("summary"), r"no reward for head\(s\) \['summary'\]"),
        (lambda r, m, g: m.__setitem__("tool", m["tool"].float()), "2-D bool"),
        (lambda r, m, g: r.__setitem__("tool", torch.tensor([1.0])), r"\(B,\) = \(2,\)"),
    ],
)
def test_bad_inputs_raise_clear_errors(mutate, message):
    rewards, masks, groups = _inputs()
    mutate(rewards, masks, groups)
    with pytest.raises(ValueError, match=message):
        compute_advantages("slca", rewards=rewards, head_masks=masks, group_index=groups)


def test_group_index_must_be_integer_and_match_batch():
    rewards, masks, _ = _inputs()
    with pytest.raises(ValueError, match="integer"):
        compute_advantages(
            "grpo", rewards=rewards, head_masks=masks, group_index=torch.tensor([0.0, 0.0])
        )
    with pytest.raises(ValueError, match="group_index must be"):
        compute_advantages(
            "grpo", rewards=rewards, head_masks=masks, group_index=torch.tensor([0, 0, 0])
        )


def test_per_call_errors():
    rewards, masks, groups = _inputs()
    common = dict(rewards=rewards, head_masks=masks, group_index=groups)
    with pytest.raises(ValueError, match="for 'slca' only"):
        compute_advantages("grpo", granularity="per_call", **common)
    with pytest.raises(ValueError, match="needs call_rewards"):
        compute_advantages("slca", granularity="per_call", **common)
    index = torch.tensor([[0, -1], [1, -1]])
    with pytest.raises(ValueError, match=r"must lie in \[-1, 1\)"):
        compute_advantages(
            "slca",
            granularity="per_call",
            call_rewards=torch.ones(2, 1),
            call_index=index,
            **common,
        )
    with pytest.raises(ValueError, match=r"call_rewards\[1, 0\] is not finite"):
        compute_advantages(
            "slca",
            granularity="per_call",
            call_rewards=torch.tensor([[1.0], [float("nan")]]),
            call_index=torch.tensor([[0, -1], [0, -1]]),
            **common,
        )
    with pytest.raises(ValueError, match="granularity must be"):
        compute_advantages("slca", granularity="per_token", **common)


# ---------------------------------------------------------------- reference switches


def torch_group_loop(scores, groups, present, norm_by_std=True, eps=EPS, singleton="zero"):
    """The authors' code's arithmetic, group by group: float32 values stacked in row
    order, torch's ``mean()`` and unbiased ``std()``, no zero-std branch."""
    x = torch.tensor(scores, dtype=torch.float32)
    out = torch.zeros(len(scores), dtype=torch.float32)
    for g in set(groups):
        members = [i for i in range(len(scores)) if groups[i] == g and present[i]]
        if len(members) == 1 and singleton == "raw":
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        elif len(members) < 2:
            continue
        else:
            stacked = torch.stack([x[i] for i in members])
            mean, std = stacked.mean(), stacked.std()
        for i in members:
            out[i] = (x[i] - mean) / (std + eps) if norm_by_std else x[i] - mean
    return out


GROUP_SIZES = st.sampled_from([1, 2, 3, 4, 5, 8, 16, 17, 33])


@st.composite
def grouped_scores(draw):
    sizes = draw(
        st.one_of(st.lists(GROUP_SIZES, min_size=1, max_size=5), GROUP_SIZES.map(lambda n: [n] * 3))
    )
    groups = [g for g, n in enumerate(sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(groups))))
    groups = [groups[i] for i in order]  # members interleaved across the batch
    tied = draw(st.sampled_from([0.85, 0.1, 1 / 3, 0.7]))
    scores = draw(
        st.lists(
            st.one_of(REWARD, st.just(tied), st.floats(0.0, 1.0, width=32)),
            min_size=len(groups),
            max_size=len(groups),
        )
    )
    everyone = st.just([True] * len(groups))  # equal sizes then take the one-size path
    some = st.lists(st.booleans(), min_size=len(groups), max_size=len(groups))
    present = draw(st.one_of(everyone, some))
    return scores, groups, present


@given(data=grouped_scores(), norm=st.booleans(), singleton=st.sampled_from(["zero", "raw"]))
def test_float32_numerics_equal_the_per_group_torch_loop_bit_for_bit(data, norm, singleton):
    scores, groups, present = data
    got = adv_mod.group_zscore(
        torch.tensor(scores),
        torch.tensor(groups),
        torch.tensor(present),
        norm_by_std=norm,
        numerics="float32",
        singleton=singleton,
    )
    want = torch_group_loop(scores, groups, present, norm, singleton=singleton)
    assert torch.equal(got + 0.0, want + 0.0)


@given(data=grouped_scores())
def test_float32_numerics_agree_with_float64_off_ties(data):
    scores, groups, present = data
    args = (torch.tensor(scores), torch.tensor(groups), torch.tensor(present))
    f32 = adv_mod.group_zscore(*args, numerics="float32")
    f64 = adv_mod.group_zscore(*args)
    # They differ only where float64 zeroes a (nearly) tied group that float32 scores
    # as noise; a tied group's float32 values are bounded by its noise over eps.
    groups_t = args[1]
    for g in set(groups):
        rows = (groups_t == g) & args[2]
        if rows.sum() < 2:
            continue
        values = args[0][rows].double()
        if values.std() > 1e-3:
            torch.testing.assert_close(f32[rows], f64[rows], rtol=1e-4, atol=1e-4)


def test_constant_group_float64_gives_zero_and_float32_gives_the_references_noise():
    scores, groups = torch.full((16,), 0.85), torch.zeros(16, dtype=torch.long)
    assert torch.equal(adv_mod.group_zscore(scores, groups), torch.zeros(16))
    noise = adv_mod.group_zscore(scores, groups, numerics="float32")
    assert noise[0].item() == pytest.approx(0.0561, abs=1e-4)
    assert torch.equal(noise, noise[:1].expand(16))


def test_singleton_raw_is_verls_mean_zero_std_one_in_the_grpo_family_only():
    batch = {
        "kinds": [["tool", "summary"]] * 3,
        "groups": [0, 0, 1],  # rollout 2 is alone in its group
        "tool": [1.0, 0.0, 0.5],
        "summary": [0.0, 1.0, 0.25],
    }
    for numerics in ("float64", "float32"):
        zero, _ = run("grpo", batch, numerics=numerics)
        raw, _ = run("grpo", batch, numerics=numerics, singleton="raw")
        assert (zero[2] == 0).all()
        assert raw[2].tolist() == pytest.approx([0.75 / (1 + EPS)] * 2, rel=1e-6)
        assert torch.equal(raw[:2], zero[:2])  # groups of two are untouched
        unnormalised, _ = run("grpo", batch, numerics=numerics, singleton="raw", norm_by_std=False)
        assert unnormalised[2].tolist() == pytest.approx([0.75, 0.75])
        # Segment heads keep the authors' present-only rule: a lone member gets 0.
        slca_raw, _ = run("slca", batch, numerics=numerics, singleton="raw")
        assert (slca_raw[2] == 0).all()


def test_weight_penalty_false_takes_the_penalty_as_is_whatever_the_weights():
    batch = {
        "kinds": [["tool", "summary"]] * 3,
        "groups": [0, 0, 0],
        "tool": [1.0, 0.5, 0.0],
        "summary": [1.0, 0.5, -0.5],  # rollout 2: guarded, R_tool 0, R_summary = penalty
    }
    rewards, masks, groups = tensors(batch)
    guarded = torch.tensor([False, False, True])
    weights = {"tool": 1.0, "summary": 0.2}
    common = dict(rewards=rewards, head_masks=masks, group_index=groups, weights=weights)
    for name in ("grpo", "dr_grpo", "toolpo"):
        weighted, _ = compute_advantages(name, guarded=guarded, **common)
        as_is, _ = compute_advantages(name, guarded=guarded, weight_penalty=False, **common)
        unguarded, _ = compute_advantages(name, weight_penalty=False, **common)
        assert torch.equal(weighted, unguarded)  # nothing guarded: nothing changes
        assert not torch.equal(weighted, as_is)
    # grpo: the combined rewards are (1.2, 0.6, -0.5) instead of (1.2, 0.6, -0.1).
    as_is, _ = compute_advantages("dr_grpo", guarded=guarded, weight_penalty=False, **common)
    mean = (1.2 + 0.6 - 0.5) / 3
    assert as_is[:, 0].tolist() == pytest.approx([1.2 - mean, 0.6 - mean, -0.5 - mean], rel=1e-5)
    # slca routes heads separately: the penalty switch does not touch it.
    a, _ = compute_advantages("slca", guarded=guarded, **common)
    b, _ = compute_advantages("slca", guarded=guarded, weight_penalty=False, **common)
    assert torch.equal(a, b)


def test_switch_errors_name_the_argument_and_the_allowed_values():
    rewards, masks, groups = _inputs()
    common = dict(rewards=rewards, head_masks=masks, group_index=groups)
    with pytest.raises(ValueError, match=r"numerics must be one of \['float64', 'float32'\]"):
        compute_advantages("slca", numerics="float16", **common)
    with pytest.raises(ValueError, match=r"singleton must be one of \['zero', 'raw'\]"):
        compute_advantages("grpo", singleton="one", **common)
    with pytest.raises(ValueError, match=r"guarded must be a bool tensor \(B,\) = \(2,\)"):
        compute_advantages("grpo", guarded=torch.tensor([1, 0]), **common)
    with pytest.raises(ValueError, match="reads the penalty from rewards"):
        compute_advantages(
            "grpo",
            rewards={"tool": rewards["tool"]},
            head_masks={"tool": masks["tool"]},
            group_index=groups,
            guarded=torch.tensor([True, False]),
            weight_penalty=False,
        )
