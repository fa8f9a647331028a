"""tools/gpu_plan.py: a GPU call's plan from measured figures, pure arithmetic: what fits
the GPU's memory, what fits the time budget, and the limits derived from one deadline."""

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "gpu_plan.py"


@pytest.fixture(scope="module")
def plan_tool():
    spec = importlib.util.spec_from_file_location("gpu_plan", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_plan", module)  # its dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


SAMPLED = {"k": 8, "batch": 128, "tasks": 200}  # as tools/gpu_credit.py SETTINGS


def plan(tool, *, gib=139.0, steps=9, seeds=3, parallel=None, budget=540.0):
    return tool.plan_credit(
        budget_s=budget,
        free_gib=gib,
        arms=["grpo", "slca"],
        seeds=seeds,
        steps=steps,
        sampled=SAMPLED,
        greedy_tasks=100,
        greedy_batch=128,
        synth_tasks=1200,
        parallel=parallel,
    )


def test_runs_that_fit_follow_the_free_memory_and_each_runs_share(plan_tool):
    fit = plan_tool.rl_runs_that_fit
    # an RL run: the measured 22.5 GiB peak + 10 %; beside one 15.4 GiB evaluation
    share = plan_tool.share_gib(22.5)
    assert share == pytest.approx(24.75)
    assert fit(139.0, share, 15.4) == 4  # an H200: 123.6 / 24.75 = 4.99
    assert fit(78.0, share, 15.4) == 2  # an H100
    assert fit(40.0, share, 15.4) == 0
    assert fit(10.0, share, 15.4) == 0  # never negative
    assert fit(15.4 + 3 * share, share, 15.4) == 3  # exactly full fits
    with pytest.raises(ValueError):
        fit(80.0, 0.0, 1.0)


def test_the_plan_takes_what_fits_and_says_so(plan_tool):
    h200 = plan(plan_tool, gib=139.0)
    # RL runs of 24.75 GiB beside the SFT evaluation's 7.0 GiB x 128/74 sequences + 10 %
    assert h200.eval_gib == pytest.approx(7.0 * 128 / 74 * 1.1)
    assert h200.refusal is None and h200.rl_fit == 5
    assert h200.seeds == 2 and h200.rl_runs == 4 and h200.processes == 5
    assert any("2 seeds per arm, not 3" in note for note in h200.notes)
    h100 = plan(plan_tool, gib=78.0)
    assert h100.refusal is None and h100.seeds == 1 and h100.processes == 3
    # fewer processes share the GPU: each step is faster
    assert plan_tool.rl_step_s(3) < plan_tool.rl_step_s(5) < plan_tool.rl_step_s(10)
    assert plan_tool.rl_step_s(10) == pytest.approx(33.0)  # the measured ten side by side
    assert plan_tool.rl_step_s(1) == pytest.approx(14.3)  # the measured one alone


def test_a_parallel_larger_than_fits_and_a_gpu_too_small_are_refused_in_one_line(plan_tool):
    refused = plan(plan_tool, gib=78.0, parallel=4)
    assert refused.refusal.startswith("--parallel 4 does not fit: 78.0 GiB free")
    assert "\n" not in refused.refusal and refused.parts == []
    small = plan(plan_tool, gib=40.0)
    assert "too small for one run per arm" in small.refusal and "\n" not in small.refusal
    asked = plan(plan_tool, gib=139.0, parallel=2)  # fewer than fit: as asked
    assert asked.refusal is None and asked.seeds == 1


def test_a_plan_that_outruns_the_budget_is_refused_and_one_that_fits_is_not(plan_tool):
    fits = plan(plan_tool, steps=9)
    assert fits.refusal is None and fits.end_s <= 540
    over = plan(plan_tool, steps=10)
    assert over.end_s > 540
    assert over.refusal.startswith("the plan does not fit: it ends at")
    assert "\n" not in over.refusal
    text = plan_tool.format_plan(over)
    assert "does NOT fit" in text and "train (10 steps)" in text
    assert plan(plan_tool, steps=9, budget=400).refusal is not None


def test_limits_are_derived_backwards_from_the_deadline(plan_tool):
    p = plan(plan_tool)
    parts = {part.name.split(" (")[0]: part for part in p.parts}
    greedy, sampled = parts["greedy test"], parts["sampled val+test"]
    train = parts["train"]
    margin = plan_tool.MARGIN_S
    # the last evaluation ends a margin before the deadline; each earlier part ends in
    # time for the ones after it to take their estimates
    assert greedy.end_by_s == pytest.approx(540 - margin)
    assert sampled.end_by_s == pytest.approx(greedy.end_by_s - greedy.estimate_s)
    assert train.end_by_s == pytest.approx(sampled.end_by_s - sampled.estimate_s)
    start = parts["worker start"]
    assert parts["sft"].end_by_s == pytest.approx(
        train.end_by_s - train.estimate_s - start.estimate_s
    )
    # the SFT policy's evaluations run beside training, not before it
    sft_sampled = next(x for x in p.parts if x.name.startswith("SFT: sampled"))
    assert sft_sampled.start_s == train.start_s
    # every part, planned, ends by its limit
    assert all(part.end_s <= part.end_by_s + 1e-9 for part in p.parts)
    assert set(p.to_json()["limits_s"]) == {part.name for part in p.parts}


def test_generation_is_timed_in_passes_of_the_batch(plan_tool):
    one = plan_tool.figure("pass_s")
    assert plan_tool.pass_s(74) == one and plan_tool.pass_s(256) == 2 * one
    # 200 tasks x 8 in chunks of 32 tasks: six passes of 256 and one of 64, alone
    assert plan_tool.sampled_s(200, 8, 256, 1) == pytest.approx(6 * 2 * one + one)
    assert plan_tool.sampled_s(200, 8, 128, 1) == pytest.approx(13 * one)  # 12 x 16 + 8
    # memory grows with the sequences of one call above the 74 measured
    assert plan_tool.eval_peak_gib(50) == plan_tool.eval_peak_gib(74) == 7.0
    assert plan_tool.eval_peak_gib(148) == pytest.approx(14.0)
    assert plan_tool.sampled_s(200, 8, 256, 5) == pytest.approx(
        (6 * 2 * one + one) * plan_tool.slowdown(5)
    )


def test_vllm_engines_must_fit_their_memory_shares_together(plan_tool):
    assert plan_tool.vllm_shares_fit([0.4]) is None
    assert plan_tool.vllm_shares_fit([0.4, 0.4]) is None  # 0.8 <= 0.9
    crowded = plan_tool.vllm_shares_fit([0.4] * 10)
    assert crowded.startswith("10 vLLM engines take 4.00 of the GPU's memory")


def test_every_estimate_names_its_source(plan_tool):
    for key, figure in {**plan_tool.MEASURED, **plan_tool.ASSUMED}.items():
        assert figure.source, key
    assert "docs/results" in plan_tool.MEASURED["rl_step_ten_s"].source
