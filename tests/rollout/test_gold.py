"""Gold trajectories (:mod:`slca.rollout.gold`): the gold calls answered by the
simulator, closed by a reference or a poor summary."""

import json

import pytest

from slca.config.data import SynthParams
from slca.config.rewards import GroundedConfig
from slca.data.synth import generate
from slca.grammar import parse_turn
from slca.rewards.preference import SummaryInput, grounded_details
from slca.rollout.gold import gold_conversation, poor_summary, reference_summary, summary_for
from slca.simulator import Simulator
from slca.training.tiny import train_tokenizer


def data():
    tasks = generate(SynthParams(n_tasks=12, domains=["currency"]), seed=3)
    tokenizer = train_tokenizer([m.content for t in tasks for m in t.messages] * 3, 500)
    return tasks, tokenizer


def test_gold_conversations_call_the_gold_and_answer_with_the_facts():
    tasks, _ = data()
    task = next(t for t in tasks if len(t.gold) == 2)
    turns = gold_conversation(task, Simulator())
    assert len(turns) == 3 and turns[-1] == (reference_summary(task), [])
    for (text, messages), step in zip(turns, task.gold):
        assert [c.name for c in parse_turn(text).calls] == [c.name for c in step]
        assert len(messages) == len(step)
    rate = json.loads(turns[1][1][0]["content"])["rate"]
    assert rate in task.facts.values() and str(rate) in reference_summary(task)


def test_an_imported_tasks_own_answer_is_its_reference_summary():
    tasks, _ = data()
    task = tasks[0].model_copy(update={"answer": "It is 4 degrees in Oslo."})
    assert reference_summary(task) == "It is 4 degrees in Oslo."
    assert gold_conversation(task, Simulator())[-1] == ("It is 4 degrees in Oslo.", [])
    assert reference_summary(tasks[0]) != task.answer  # generated tasks: from their facts


def grounded(task, summary):
    turns = gold_conversation(task, Simulator(), lambda _: summary)
    responses = [json.loads(m["content"]) for _, messages in turns for m in messages]
    item = SummaryInput(summary, task, tuple(responses))
    return grounded_details(item, GroundedConfig()).score


def test_the_grounded_scorer_prefers_the_reference_summary_to_the_poor_one():
    tasks, _ = data()
    with_facts = [t for t in tasks if t.facts]
    assert with_facts
    for task in with_facts:
        assert grounded(task, reference_summary(task)) == 1.0
        assert grounded(task, poor_summary(task)) == 0.0
    no_facts = next(t for t in tasks if not t.facts)
    assert poor_summary(no_facts) == reference_summary(no_facts)


def test_poor_summaries_are_drawn_per_task_from_the_seed_alone():
    tasks = generate(SynthParams(n_tasks=200, domains=["currency"]), seed=3)
    chosen = [summary_for(t, 0.3, seed=0) is poor_summary for t in tasks]
    assert 0.2 < sum(chosen) / len(chosen) < 0.4
    assert chosen == [summary_for(t, 0.3, seed=0) is poor_summary for t in tasks]
    assert chosen != [summary_for(t, 0.3, seed=1) is poor_summary for t in tasks]
    assert not any(summary_for(t, 0.0, seed=0) is poor_summary for t in tasks)
    assert all(summary_for(t, 1.0, seed=0) is poor_summary for t in tasks)
    with pytest.raises(ValueError, match="poor_frac"):
        summary_for(tasks[0], 1.5, seed=0)
