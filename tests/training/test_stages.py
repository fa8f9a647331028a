"""The training stages on the tiny model: base model and SFT (the RL stage is
test_session.py's)."""

import pytest
import torch
from helpers import tiny_params

from slca.config.steps import BaseModelParams, SFTParams
from slca.config.train import TrainConfig
from slca.modeling import load_causal_lm
from slca.training.session import run_train
from slca.training.stages import build_base_model, run_sft


def train_config(root, **over):
    settings = {**tiny_params(root)["train"], "histogram_every": 1, **over}
    return TrainConfig.model_validate(settings)


def test_base_model_and_sft_write_loadable_checkpoints(workspace):
    root, figures = workspace
    for name in ("base", "sft"):
        model, tokenizer = load_causal_lm(root / "models" / name)
        assert tokenizer.eos_token == "<|im_end|>" and model.config.hidden_size == 32
    assert figures["sft/last_loss"] < figures["sft/first_loss"]


def test_copy_pretraining_runs_in_the_base_stage_and_is_seeded(workspace, tmp_path):
    root, _ = workspace
    params = tiny_params(root)["base_model"]

    def embeddings(name, steps):
        settings = {**params, "out_dir": str(tmp_path / name), "copy_pretrain_steps": steps}
        model, _ = load_causal_lm(build_base_model(BaseModelParams(**settings)))
        return model.get_input_embeddings().weight

    random_init, pretrained, again = embeddings("a", 0), embeddings("b", 2), embeddings("c", 2)
    assert not torch.equal(random_init, pretrained) and torch.equal(pretrained, again)
    with pytest.raises(ValueError, match="copy_pretrain_steps"):
        BaseModelParams(**params, copy_pretrain_steps=-1)


def test_a_source_filter_that_keeps_no_task_is_an_error_naming_the_param(workspace, tmp_path):
    root, _ = workspace
    params = {**tiny_params(root)["sft"], "out_dir": str(tmp_path / "sft")}
    with pytest.raises(ValueError, match=r"sft.sources=\['nestful'\]"):
        run_sft(SFTParams(**params, sources=["nestful"]))
    with pytest.raises(ValueError, match=r"train.sources=\['bfcl'\]"):
        run_train(train_config(root, sources=["bfcl"]))


def test_sft_counts_the_poor_summaries_it_trains_on(workspace, tmp_path):
    root, _ = workspace
    params = {**tiny_params(root)["sft"], "out_dir": str(tmp_path / "sft"), "epochs": 1}
    figures = run_sft(SFTParams(**{**params, "sources": ["synth"], "poor_summary_frac": 1.0}))
    assert 0 < figures["sft/poor_summaries"] <= figures["sft/examples"]
    assert run_sft(SFTParams(**{**params, "poor_summary_frac": 0.0}))["sft/poor_summaries"] == 0
    with pytest.raises(ValueError, match="poor_summary_frac"):
        SFTParams(**{**params, "poor_summary_frac": 1.5})


def test_tasks_whose_prompt_cannot_fit_a_turn_are_left_out(workspace):
    from slca.data import io
    from slca.rollout.chat import fitting_tasks

    root, _ = workspace
    _, tokenizer = load_causal_lm(root / "models/base")
    tasks = io.load_train_set(root / "data/tasks")
    assert fitting_tasks(tasks, tokenizer, 100_000) == tasks
    with pytest.raises(ValueError, match="no task's prompt fits"):
        fitting_tasks(tasks, tokenizer, 10)


@pytest.mark.slow
def test_the_smollm2_base_model_renders_tools_in_its_prompts(tmp_path):
    """SmolLM2's own chat template ignores ``tools=``; the base model gets the Hermes one,
    or the policy would never see a tool schema."""
    from slca.config.steps import BaseModelParams
    from slca.modeling import load_tokenizer
    from slca.rollout.chat import ChatRenderer
    from slca.training.stages import build_base_model

    out = build_base_model(BaseModelParams(kind="smollm2", out_dir=str(tmp_path / "base")))
    tool = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}
    prompt = ChatRenderer(load_tokenizer(out), [tool]).render(
        [{"role": "user", "content": "Weather in Paris?"}], add_generation_prompt=True
    )
    assert "get_weather" in prompt and "<tools>" in prompt
    model, _ = load_causal_lm(out)
    assert model.config.model_type == "llama" and model.dtype == torch.float32


def test_sft_groups_by_length_when_asked_same_examples_other_batches(workspace, tmp_path):
    root, _ = workspace
    params = {**tiny_params(root)["sft"], "out_dir": str(tmp_path / "sft"), "epochs": 1}
    plain = run_sft(SFTParams(**params))
    grouped = run_sft(SFTParams(**params, group_by_length=True))
    for key in ("sft/steps", "sft/examples", "sft/tokens"):
        assert grouped[key] == plain[key]
    assert grouped["sft/first_loss"] != plain["sft/first_loss"]
