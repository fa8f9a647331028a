import json

import pytest
from helpers import ScriptedEngine

from slca.eval.headroom import PARTS, headroom_of, measure, table
from slca.rewards.score import RewardBreakdown
from slca.training.tiny import train_tokenizer


def breakdown(tool: float, **parts: float) -> RewardBreakdown:
    fields = dict.fromkeys(RewardBreakdown.__dataclass_fields__, 0)
    fields.update(mode="process", summary_raw=None, per_call=(), tool=tool, **parts)
    return RewardBreakdown(**fields)


def test_pass1_is_the_mean_sample_and_passG_the_best_one():
    groups = [
        [breakdown(1.0, name=1.0), breakdown(0.2, name=0.0)],  # one success in two
        [breakdown(0.5, name=1.0), breakdown(0.5, name=1.0)],  # no spread: no signal
    ]
    out = headroom_of(groups)
    assert set(out) == set(PARTS)
    assert out["success"] == {"pass1": 0.25, "passG": 0.5, "signal": 0.5}
    assert out["name"] == {"pass1": 0.75, "passG": 1.0, "signal": 0.5}
    assert out["tool"]["pass1"] == pytest.approx((0.6 + 0.5) / 2)
    assert out["value"] == {"pass1": 0.0, "passG": 0.0, "signal": 0.0}
    with pytest.raises(ValueError, match="at least one task"):
        headroom_of([[]])


def test_measure_samples_groups_and_scores_them_against_gold():
    from slca.config.data import SynthParams
    from slca.data.synth import generate

    tasks = [
        t
        for t in generate(SynthParams(n_tasks=40, domains=["weather"]), seed=2)
        if len(t.gold) == 1 and len(t.gold[0]) == 1
    ][:2]
    tokenizer = train_tokenizer([m.content for t in tasks for m in t.messages] * 3, vocab_size=400)

    def call(city):
        payload = json.dumps({"name": "get_weather", "arguments": {"city": city}})
        return f"<tool_call>\n{payload}\n</tool_call>"

    # within each group of 4: the right call once, a wrong city once, no call twice
    city = tasks[0].gold[0][0].arguments["city"]
    script = [[call(city), call("Atlantis"), "No.", "No."], "Done."]
    report = measure(
        tasks[:1], engine=ScriptedEngine(tokenizer, script), tokenizer=tokenizer, group_size=4
    )
    parts = report["parts"]
    assert report["tasks"] == 1 and report["truncated_frac"] == 0.0
    assert parts["name"] == {"pass1": 0.5, "passG": 1.0, "signal": 1.0}
    assert parts["value"]["passG"] == 1.0 and parts["value"]["pass1"] == 0.25
    assert "| train | name | 0.500 | 1.000 | +0.500 | 1.00 |" in table({"train": report})
    # per task, what a paired comparison of two models pairs: the mean over the samples
    (line,) = report["per_task"]
    assert line["task_id"] == tasks[0].id and line["samples"] == 4
    assert line["success"] == parts["success"]["pass1"] == 0.25
    assert line["best_success"] == parts["success"]["passG"] == 1.0
    assert line["tool"] == pytest.approx(parts["tool"]["pass1"])
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        measure(tasks, engine=ScriptedEngine(tokenizer, script), tokenizer=tokenizer, group_size=1)


@pytest.mark.parametrize("forced", [None, "bf16"])
def test_run_loads_fp32_weights_and_samples_in_the_measurement_precision(
    tmp_path, monkeypatch, forced
):
    """``run`` asks :func:`slca.modeling.eval_dtype`, as evaluate and validation do: fp32
    on the CPU; bf16 autocast when the rule says bf16 (forced here on the CPU)."""
    import argparse

    import torch

    from slca import modeling
    from slca.config.data import SynthParams
    from slca.data import splits
    from slca.data.synth import generate
    from slca.eval.headroom import run
    from slca.training.tiny import tiny_model

    tasks = generate(SynthParams(n_tasks=4, domains=["weather"]), seed=2)[:1]
    tokenizer = train_tokenizer([m.content for t in tasks for m in t.messages] * 3, 400)
    model, loaded, logits = tiny_model(tokenizer), [], []
    model.lm_head.register_forward_hook(lambda _m, _i, out: logits.append(out.dtype))

    def load(source, *, device="cpu", dtype=None):
        loaded.append(dtype)
        return model, tokenizer

    monkeypatch.setattr(modeling, "load_causal_lm", load)
    monkeypatch.setattr(splits, "draw_split", lambda *a, **k: tasks)
    if forced:
        monkeypatch.setattr(modeling, "eval_dtype", lambda device: torch.bfloat16)
    args = argparse.Namespace(
        model="unused", in_dir=str(tmp_path), splits=["val"], sources=None, tasks=1,
        group_size=2, temperature=1.0, max_new_tokens=4, max_turns=1, max_total_tokens=2048,
        seed=0, device="cpu", batch_size=2, out=None,
    )  # fmt: skip
    assert run(args)["val"]["tasks"] == 1
    assert loaded == [torch.float32]
    assert logits and set(logits) == {torch.bfloat16 if forced else torch.float32}
