"""The credit lab's tasks: the cue decides the tool, demonstrations choose it 50/50
whatever the cue, and SFT's summary style is drawn independently of both."""

import collections

import pytest

from slca.data import io
from slca.data.checks import record_problems
from slca.data.lab import (
    CUE_PHRASES,
    CUE_TOOLS,
    cue_of,
    cued_tool,
    lab_task,
    lab_tasks,
    write_dataset,
)
from slca.rollout.gold import poor_summary, reference_summary, summary_for


def _gold_tool(task):
    (step,) = task.gold
    (call,) = step
    return call.name


def test_same_arguments_same_tasks_and_seeds_differ():
    dump = lambda ts: [t.model_dump_json() for t in ts]  # noqa: E731
    assert dump(lab_tasks(20, 3)) == dump(lab_tasks(20, 3))
    assert dump(lab_tasks(20, 3)) != dump(lab_tasks(20, 4))
    assert dump(lab_tasks(5, 3)) == dump(lab_tasks(50, 3)[:5])
    assert lab_task(0, 3).id != lab_task(0, 3, demonstration=True).id


def test_rl_tasks_have_the_cued_tool_as_gold_and_balanced_cues():
    tasks = lab_tasks(200, 1)
    assert all(_gold_tool(t) == cued_tool(t) for t in tasks)
    assert collections.Counter(cue_of(t) for t in tasks) == {"today": 100, "tomorrow": 100}
    assert len({t.id for t in tasks}) == 200
    for t in tasks:
        assert record_problems(t.model_dump()) == [], t.id
        assert {tool.name for tool in t.tools} == set(CUE_TOOLS.values())
        assert t.facts and not any(tool.parameters["properties"] for tool in t.tools)
        # the request ends with a phrase of its own cue, the only text naming a day
        assert any(t.user_text().endswith(f"{p}?") for p in CUE_PHRASES[cue_of(t)])


def test_demonstrations_choose_each_tool_half_the_time_whatever_the_cue():
    demos = lab_tasks(512, 0, demonstrations=True)
    cells = collections.Counter((cue_of(t), _gold_tool(t)) for t in demos)
    assert cells == {
        (cue, tool): 128 for cue in CUE_TOOLS for tool in CUE_TOOLS.values()
    }  # each tool is right for half of each cue's demonstrations: P(tool | cue) = 1/2
    assert sum(_gold_tool(t) == cued_tool(t) for t in demos) == 256


def test_one_cue_fixes_the_right_tool_and_demonstrations_still_split_50_50():
    tasks = lab_tasks(40, 1, cues=("today",))
    assert {cue_of(t) for t in tasks} == {"today"}
    assert {_gold_tool(t) for t in tasks} == {CUE_TOOLS["today"]}
    demos = lab_tasks(40, 0, demonstrations=True, cues=("today",))
    assert collections.Counter(_gold_tool(t) for t in demos) == {
        "weather_today": 20,
        "weather_tomorrow": 20,
    }


def test_sft_summary_style_is_half_poor_and_independent_of_the_tool_choice():
    demos = lab_tasks(512, 0, demonstrations=True)
    poor = {t.id: summary_for(t, 0.5, seed=0)(t) == poor_summary(t) for t in demos}
    share = sum(poor.values()) / len(demos)
    assert 0.45 <= share <= 0.55
    for correct in (True, False):
        group = [poor[t.id] for t in demos if (_gold_tool(t) == cued_tool(t)) is correct]
        assert abs(sum(group) / len(group) - share) < 0.06
    # the two styles differ in their opener, which the marker scorer checks
    assert all(poor_summary(t) != reference_summary(t) for t in demos[:8])


def test_write_dataset_round_trips_through_the_train_set_loader(tmp_path):
    tasks = lab_tasks(12, 2)
    manifest = write_dataset(tasks, tmp_path / "lab")
    loaded = io.load_train_set(tmp_path / "lab")
    assert [t.model_dump() for t in loaded] == [
        t.model_dump() for t in sorted(tasks, key=lambda t: t.id)
    ]
    assert manifest["totals"] == {"train": 12}


def test_bad_input_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="n must be >= 1"):
        lab_tasks(0, 1)
    for cues in [(), ("today", "today"), ("yesterday",)]:
        with pytest.raises(ValueError, match="cues must be distinct names"):
            lab_task(0, 1, cues=cues)
    task = lab_task(0, 1)
    other = task.model_copy(update={"split": "test"})
    with pytest.raises(ValueError, match="outside the train split"):
        write_dataset([other], tmp_path / "x")
    assert not (tmp_path / "x").exists()
    no_cue = task.model_copy(
        update={
            "messages": task.messages[:1]
            + [task.messages[1].model_copy(update={"content": "Weather?"})]
        }
    )
    with pytest.raises(ValueError, match="expected one cue word"):
        cue_of(no_cue)
