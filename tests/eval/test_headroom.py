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
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        measure(tasks, engine=ScriptedEngine(tokenizer, script), tokenizer=tokenizer, group_size=1)
