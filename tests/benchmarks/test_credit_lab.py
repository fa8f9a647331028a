"""The credit lab (benchmarks/credit/lab.py with lab.yaml): its rewards do what the
lab claims, the spread enters GRPO and SLCA as DESIGN §2 defines weights, and the
report counts censored runs as beyond the budget."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.credit import lab
from slca.advantages import compute_advantages, group_zscore
from slca.config import load_section, parse_override
from slca.config.steps import BaseModelParams, SFTParams
from slca.config.train import TrainConfig
from slca.data.lab import CUE_TOOLS, cued_tool, lab_tasks
from slca.grammar import ToolCall, render_tool_call
from slca.rewards.score import score_batch
from slca.rollout.gold import poor_summary, reference_summary
from slca.rollout.types import ExecutedCall, Rollout, Turn

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "benchmarks/credit/lab.yaml"


def _args(tmp_path, **over) -> argparse.Namespace:
    settings = dict(
        params=PARAMS, methods=["grpo", "slca"], spreads=[0.5, 1.0, 2.0], seeds=[0, 1, 2, 3, 4],
        steps=None, set=[], work=tmp_path, tracking_dir=tmp_path / "mlflow",
        experiment="credit-lab",
    )  # fmt: skip
    settings.update(over)
    return argparse.Namespace(**settings)


def _config_of(command: list[str]) -> TrainConfig:
    """The TrainConfig a train command's stage would load."""
    overrides = dict(parse_override(command[i + 1]) for i, a in enumerate(command) if a == "-S")
    return load_section(command[command.index("--params") + 1], "train", TrainConfig, overrides)


def _rollout(task, names: list[str], summary: str) -> Rollout:
    from slca.grammar import parse_turn

    call_text = "\n".join(render_tool_call(ToolCall(name, {})) for name in names)
    texts = [call_text, summary] if names else [summary]
    turns, calls = [], []
    for t, text in enumerate(texts):
        parsed = parse_turn(text)
        turns.append(Turn(text, parsed, final=t == len(texts) - 1, token_start=0, token_end=0))
        for c in parsed.calls:
            calls.append(ExecutedCall(len(calls), t, 0, c.name, c.arguments, {"temperature": 1}))
    return Rollout(task.id, 0, 0, 0, turns=turns, calls=calls)


def test_the_lab_params_load_into_the_stages_own_configs():
    document = yaml.safe_load(PARAMS.read_text())
    base = BaseModelParams.model_validate(document["base_model"])
    sft = SFTParams.model_validate(document["sft"])
    train = TrainConfig.model_validate(document["train"])
    assert base.kind == "tiny" and sft.poor_summary_frac == 0.5
    assert train.algorithm.loss.kl_coef == 0 and train.rollout.max_turns == 2
    assert train.rewards.summary.name == "marker"


def test_r_tool_is_the_cued_tool_and_r_sum_the_marker_independently():
    config = TrainConfig.model_validate(yaml.safe_load(PARAMS.read_text())["train"]).rewards
    task = lab_tasks(1, 1)[0]
    right = cued_tool(task)
    (wrong,) = set(CUE_TOOLS.values()) - {right}
    good, poor = reference_summary(task), poor_summary(task)
    cases = {
        (right, good): (1.0, 1.0),
        (right, poor): (1.0, 0.0),
        (wrong, good): (0.0, 1.0),  # a wrong tool trips no guard: R_sum stays the marker
        (wrong, poor): (0.0, 0.0),
    }
    rollouts = [_rollout(task, [name], summary) for name, summary in cases]
    scores = score_batch(rollouts, [task] * len(rollouts), config)
    assert [(s.tool, s.summary) for s in scores] == list(cases.values())
    assert not any(s.guard_applied for s in scores)
    both = score_batch([_rollout(task, [right, wrong], good)], [task], config)[0]
    assert both.tool == pytest.approx(2 / 3)  # name F1: both tools in one turn
    none = score_batch([_rollout(task, [], good)], [task], config)[0]
    assert (none.tool, none.summary, none.guard_applied) == (0.0, -0.5, True)


@pytest.mark.parametrize("spread", [0.5, 1.0, 2.0])
def test_the_spread_weighs_grpo_reward_and_slca_summary_advantage(tmp_path, spread):
    """GRPO: z(R_tool + spread·R_sum) on every policy token; SLCA: z(R_tool) on tool
    tokens and spread·z(R_sum) on summary tokens (weights after normalising)."""
    args = _args(tmp_path, spreads=[spread])
    tool_r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    sum_r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    masks = {
        "tool": torch.tensor([[True, True, False, False]] * 4),
        "summary": torch.tensor([[False, False, True, True]] * 4),
    }
    group = torch.zeros(4, dtype=torch.long)
    for job in lab.jobs(args):
        config = _config_of(lab.train_command(job, args))
        assert config.algorithm.advantage.weights == {"tool": 1.0, "summary": spread}
        assert config.estimator == job["method"] and config.seed == job["seed"]
        advantage = config.algorithm.advantage
        a, _ = compute_advantages(
            config.algorithm.advantage.estimator,
            rewards={"tool": tool_r, "summary": sum_r},
            head_masks=masks,
            group_index=group,
            weights=advantage.weights,
            norm_by_std=advantage.norm_by_std,
            eps=advantage.eps,
        )
        eps = advantage.eps
        if job["method"] == "grpo":
            expected = group_zscore(tool_r + spread * sum_r, group, eps=eps)
            assert torch.allclose(a[:, 0], expected) and torch.allclose(a[:, 3], expected)
        else:
            assert torch.allclose(a[:, 0], group_zscore(tool_r, group, eps=eps))
            assert torch.allclose(a[:, 3], spread * group_zscore(sum_r, group, eps=eps))


def _runs(steps_by_name: dict[str, list[float]]) -> dict[str, dict]:
    runs = {}
    for name, values in steps_by_name.items():
        method, spread, seed = name.split("-")
        runs[name] = {
            "method": method,
            "spread": float(spread[2:]),
            "seed": int(seed[1:]),
            "curves": {"reward/name": list(enumerate(values, start=1))},
        }
    return runs


def test_analyse_counts_censored_runs_and_judges_the_target_at_the_largest_spread():
    fast, slow, never = [0.5] * 2 + [1.0] * 8, [0.5] * 4 + [1.0] * 6, [0.5] * 10
    runs = _runs(
        {
            "slca-sp2-s0": fast, "slca-sp2-s1": fast, "slca-sp2-s2": never,
            "grpo-sp2-s0": slow, "grpo-sp2-s1": never, "grpo-sp2-s2": never,
            "grpo-sp1-s0": fast,
        }
    )  # fmt: skip
    result = lab.analyse(runs, cap=10)
    arms = {(a["method"], a["spread"]): a for a in result["arms"]}
    # fast: steps 3.. are 1.0, so the trailing 5-step mean first reaches 0.9 at step 6
    assert arms[("slca", 2.0)]["seeds"] == {"0": 6, "1": 6, "2": None}
    assert arms[("slca", 2.0)]["median"] == 6 and arms[("slca", 2.0)]["censored"] == 1
    assert arms[("grpo", 2.0)]["seeds"]["0"] == 8 and math.isinf(arms[("grpo", 2.0)]["median"])
    text, ratio = lab.verdict(result)
    assert text.startswith("met") and ratio == pytest.approx(0.6)  # 6 / cap: GRPO's > cap
    table = lab.markdown(result, cap=10)
    assert "| 2 | grpo | >10 | 8 | >10 | >10 | 2/3 |" in table
    slower_slca = lab.analyse(_runs({"slca-sp1-s0": slow, "grpo-sp1-s0": fast}), cap=10)
    assert lab.verdict(slower_slca)[0].startswith("not met")


def test_the_store_and_experiment_exist_before_runs_start_in_parallel(tmp_path):
    from mlflow.tracking import MlflowClient

    from slca.tracking import sqlite_uri

    args = _args(tmp_path)
    lab.prepare_store(args)
    lab.prepare_store(args)  # idempotent: a rerun finds them
    client = MlflowClient(sqlite_uri(args.tracking_dir))
    found = client.get_experiment_by_name("credit-lab")
    assert found is not None and found.artifact_location.endswith("mlflow/artifacts")


def test_a_quick_setting_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        lab.main(["--steps", "0", "--work", str(tmp_path)])
    assert "--steps must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.long
def test_the_lab_end_to_end_on_a_tiny_policy(tmp_path):
    """Tasks → base model → SFT → two training steps of each method → report."""
    document = yaml.safe_load(PARAMS.read_text())
    document["base_model"].update(hidden_size=32, intermediate_size=64)
    document["sft"].update(epochs=1)
    document["train"]["rollout"].update(tasks_per_step=2)
    params = tmp_path / "lab.yaml"
    params.write_text(yaml.safe_dump(document))
    out = tmp_path / "report"
    argv = ["--params", str(params), "--spreads", "2", "--seeds", "0", "--steps", "2"]
    argv += ["--rl-tasks", "8", "--demonstrations", "16", "--work", str(tmp_path / "work")]
    assert lab.main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {(a["method"], a["spread"]) for a in summary["arms"]} == {("grpo", 2), ("slca", 2)}
    assert (out / "lab_tool_accuracy.png").stat().st_size > 0
    assert "| 2 | slca |" in (out / "lab.md").read_text()


def test_a_report_with_no_finished_run_names_the_store_and_the_logs(tmp_path):
    """Every run failed (or none ran): one line that says where to look, not a plot error."""
    argv = ["--report-only", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match=r"no finished run of experiment 'credit-lab'.*runs"):
        lab.main(argv)
    assert not (tmp_path / "out" / "lab.md").exists()
