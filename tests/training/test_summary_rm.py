"""The summary preference model: pairs, Bradley-Terry training, the stage, and serving
through the ``reward_model`` scorer exactly as it was trained."""

import pytest
from helpers import tiny_params
from transformers import AutoTokenizer

from slca.config.data import PrepareParams
from slca.config.rewards import RewardModelConfig
from slca.config.steps import BaseModelParams, SFTParams, SummaryRMParams
from slca.config.train import TrainConfig
from slca.data import io
from slca.data.prepare import prepare
from slca.rewards.preference import RewardModelScorer, SummaryInput
from slca.rollout.gold import NO_CALL_REPLY, poor_summary, reference_summary
from slca.training.session import run_train
from slca.training.stages import build_base_model, build_summary_rm, run_sft
from slca.training.summary_rm import preference_pairs


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("summary_rm")
    params = tiny_params(root)
    # Every domain: the off-topic answers then differ in kind, not only in values.
    params["prepare"]["synth"] = {"n_tasks": 60}
    prepare(PrepareParams(**params["prepare"]))
    build_base_model(BaseModelParams(**params["base_model"]))
    tokenizer = AutoTokenizer.from_pretrained(root / "models/base")
    return root, params, tokenizer


def test_pairs_contrast_the_reference_with_each_kind_of_bad_answer(workspace):
    root, _, tokenizer = workspace
    tasks = io.read_dataset(root / "data/tasks", ["train"])
    pairs = preference_pairs(tasks, tokenizer, seed=0)
    with_facts = [t for t in tasks if t.facts]
    assert len(pairs) == 3 * len(with_facts) + (len(tasks) - len(with_facts))
    by_task = {}
    for p in pairs:
        by_task.setdefault(p.task_id, {})[p.kind] = p
    for task in with_facts:
        kinds = by_task[task.id]
        assert set(kinds) == {"poor", "ignores_tools", "off_topic"}
        assert all(reference_summary(task) in p.chosen for p in kinds.values())
        assert poor_summary(task) in kinds["poor"].rejected
        assert NO_CALL_REPLY in kinds["ignores_tools"].rejected
        assert reference_summary(task) not in kinds["off_topic"].rejected
        assert task.messages[-1].content in kinds["off_topic"].rejected  # same prompt
    for task in tasks:
        if not task.facts:
            assert set(by_task[task.id]) == {"claims_findings"}
    assert preference_pairs(tasks, tokenizer, seed=0) == pairs
    assert preference_pairs(tasks, tokenizer, seed=1) != pairs


def test_pairs_need_another_task_with_facts(workspace):
    root, _, tokenizer = workspace
    task = next(t for t in io.read_dataset(root / "data/tasks", ["train"]) if t.facts)
    with pytest.raises(ValueError, match=f"task {task.id}: no other task with facts"):
        preference_pairs([task], tokenizer, seed=0)


@pytest.fixture(scope="module")
def summary_rm(workspace):
    root, _, _ = workspace
    params = SummaryRMParams(
        tokenizer_dir=str(root / "models/base"),
        in_dir=str(root / "data/tasks"),
        out_dir=str(root / "models/summary_rm"),
        hidden_size=32,
        epochs=8,
        batch_size=8,
        lr=3e-3,
    )
    return params, build_summary_rm(params)


def test_trained_model_ranks_the_fixed_bad_answers_below_the_reference(summary_rm):
    _, figures = summary_rm
    assert figures["summary_rm/last_loss"] < figures["summary_rm/first_loss"]
    # Held-out tasks: an answer that states nothing, or ignores the tools, always loses.
    assert figures["summary_rm/val_accuracy/poor"] == 1.0
    assert figures["summary_rm/val_accuracy/ignores_tools"] == 1.0
    assert figures["summary_rm/val_accuracy"] > figures["summary_rm/val_accuracy_untrained"]


def test_reward_model_scorer_serves_it_as_trained(workspace, summary_rm):
    root, _, tokenizer = workspace
    params, _ = summary_rm
    scorer = RewardModelScorer(RewardModelConfig(path=params.out_dir))
    tasks = [t for t in io.read_dataset(root / "data/tasks", ["val", "test"]) if t.facts]
    good = scorer.score_batch([SummaryInput(reference_summary(t), t) for t in tasks])
    poor = scorer.score_batch([SummaryInput(poor_summary(t), t) for t in tasks])
    assert all(0.0 < g < 1.0 for g in good)
    assert all(g > p for g, p in zip(good, poor, strict=True))
    # Training and serving render the same text, so the scores are the trained ones.
    pair = next(p for p in preference_pairs(tasks, tokenizer, 0) if p.kind == "poor")
    task = next(t for t in tasks if t.id == pair.task_id)
    assert scorer.render(SummaryInput(poor_summary(task), task)) == pair.rejected


def test_rl_step_takes_r_summary_from_the_reward_model(workspace, summary_rm):
    root, params, _ = workspace
    rm_params, _ = summary_rm
    run_sft(SFTParams(**params["sft"]))
    settings = {
        **params["train"],
        "steps": 1,
        "rewards": {
            "summary": {"name": "reward_model", "reward_model": {"path": rm_params.out_dir}}
        },
    }
    run_id = run_train(TrainConfig.model_validate(settings))
    mlflow = pytest.importorskip("mlflow")
    client = mlflow.tracking.MlflowClient(f"sqlite:///{root / 'mlflow/mlflow.db'}")
    run = client.get_run(run_id)
    assert run.data.params["rewards.summary.name"] == "reward_model"
    assert "reward/sum" in run.data.metrics
