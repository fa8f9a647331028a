"""BFCL multi_turn_base through the official multi_turn_checker, with a safe executor.

Known answers: the ground truth replays valid on every entry of the installed package;
perturbed answers fail with the checker's own error types; code in a call string is
never run.
"""

import builtins
import importlib.util
import json
import sys

import pytest
from helpers import ScriptedEngine, bfcl_json_step

from slca.data.sources import SourceError
from slca.data.sources.bfcl_backends import bfcl_tool_specs, load_bfcl_class, parse_call
from slca.eval import bfcl
from slca.eval import bfcl_multi_turn as mt
from slca.generation.engines import SamplingParams
from slca.rollout.loop import RolloutLimits, run_rollouts
from slca.simulator.core import is_error
from slca.training.tiny import train_tokenizer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason="bfcl-eval not installed (make data-sources)",
)

FIRST = "bfcl-multi_turn_base_0"  # TwitterAPI + GorillaFileSystem; 4 user turns


def gold(task_id):
    return mt.ground_truth()[task_id.removeprefix("bfcl-")]


def as_steps(turns):
    """Each user turn's calls as one step (an empty turn: no step)."""
    return [[list(t)] if t else [] for t in turns]


def test_gold_replays_valid_on_every_entry():
    entries = mt.entries()
    assert len(entries) == 200
    verdicts = [mt.replay_gold(f"bfcl-{rid}") for rid in sorted(entries)]
    failed = [(v.task_id, v.error_type) for v in verdicts if not v.valid]
    assert failed == []
    assert bfcl.accuracy(verdicts)["bfcl/multi_turn_base"] == 1.0


def test_gold_split_into_one_step_per_call_is_still_valid():
    turns = [[[c] for c in t] for t in gold(FIRST)]
    assert mt.check(FIRST, turns).valid


@pytest.mark.parametrize(
    "edit, error_type",
    [
        # mkdir of another name: the file system ends in another state
        (
            lambda g: [[g[0][:1] + ["mkdir(dir_name='tmp')"] + g[0][2:]], *as_steps(g[1:])],
            "multi_turn:instance_state_mismatch",
        ),
        # the grep of turn 1 left out: same state, its result missing
        (
            lambda g: [*as_steps(g[:1]), [g[1][:1]], *as_steps(g[2:])],
            "multi_turn:execution_response_mismatch",
        ),
        # nothing done in turn 0
        (lambda g: [[], *as_steps(g[1:])], "multi_turn:empty_turn_model_response"),
        # the last user turn never answered
        (lambda g: as_steps(g[:-1]), "multi_turn:force_terminated"),
    ],
)
def test_perturbed_answers_fail_with_the_checker_error_type(edit, error_type):
    verdict = mt.check(FIRST, edit(gold(FIRST)))
    assert not verdict.valid and verdict.error_type == error_type
    assert verdict.category == "multi_turn_base" and verdict.errors


def test_every_entry_fails_when_a_gold_call_is_dropped():
    for rid in sorted(mt.entries()):
        g = gold(f"bfcl-{rid}")
        i = next(i for i, t in enumerate(g) if t)
        turns = as_steps(g)
        turns[i] = [g[i][:-1]] if len(g[i]) > 1 else []
        assert not mt.check(f"bfcl-{rid}", turns).valid, rid


def test_call_strings_are_parsed_never_evaluated(monkeypatch):
    MathAPI = load_bfcl_class("MathAPI")
    evaluated = []
    monkeypatch.setattr(builtins, "eval", lambda *args, **kwargs: evaluated.append(args))
    assert mt.replay_gold(FIRST).valid
    assert evaluated == []
    assert mt.execute_calls(["mean(numbers=[1, 2, 6])"], {"MathAPI": MathAPI()}) == [
        '{"result": 3.0}'
    ]
    assert parse_call("f(x=[1, {'a': None}], y=-2.5)", "t") == (
        "f",
        [],
        {"x": [1, {"a": None}], "y": -2.5},
    )
    for bad in (
        "__import__('os').system('true')",
        "os.system('true')",
        "cd(folder=open('/etc/passwd').read())",
        "cd(**{'folder': 'x'})",
        "cd",
        "cd(folder='a'); rm(file_name='b')",
    ):
        with pytest.raises(SourceError):
            parse_call(bad, "t")


def test_private_blocked_and_unknown_names_are_errors_and_change_nothing():
    entry = mt.entries()[FIRST.removeprefix("bfcl-")]
    instances = mt.new_instances(entry)
    before = {k: json.dumps(vars(v), default=repr, sort_keys=True) for k, v in instances.items()}
    results = mt.execute_calls(
        [
            "_load_scenario({})",
            "__init__()",
            "run()",
            "print('x')",
            "cd(folder=__import__('os'))",
            "cd(nope='x')",
        ],
        instances,
    )
    assert all(r.startswith("Error during execution: ") for r in results), results
    after = {k: json.dumps(vars(v), default=repr, sort_keys=True) for k, v in instances.items()}
    assert after == before


def test_the_real_checker_modules_are_left_alone():
    mt._checker()
    utils = sys.modules["bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"]
    assert utils.execute_multi_turn_func_call is not mt._replay_execute
    assert mt._checker().execute_multi_turn_func_call is mt._replay_execute
    assert "bfcl_eval.constants.model_config" not in sys.modules


def test_executor_runs_calls_on_live_instances_per_scope():
    with mt.MultiTurnExecutor() as executor:
        a, b = (FIRST, 0), (FIRST, 1)
        assert executor.execute([], "cd", {"folder": "document"}, scope=a) == {
            "current_working_directory": "document"
        }
        assert "final_report.pdf" in json.dumps(executor.execute([], "ls", {}, scope=a))
        assert "document" in json.dumps(executor.execute([], "ls", {}, scope=b))
        assert executor.execute([], "__init__", {}, scope=a)["error"]["code"] == "unknown_tool"
        assert executor.execute([], "cd", {"dir": 1}, scope=a)["error"]["code"] == (
            "invalid_arguments"
        )
        assert executor.execute([], "cd", ["document"], scope=a)["error"]["code"] == (
            "invalid_arguments"
        )


def test_task_records_carry_the_first_turn_and_every_class_function():
    task = mt.task_record("multi_turn_base_0")
    entry = mt.entries()["multi_turn_base_0"]
    assert task.id == FIRST and task.domain == "multi_turn_base" and task.eval_only
    assert [m.content for m in task.messages] == [entry["question"][0][0]["content"]]
    names = [s["name"] for c in entry["involved_classes"] for s in bfcl_tool_specs(c)]
    assert [t.name for t in task.tools] == names and "cd" in names
    assert len(mt.follow_ups(FIRST)) == len(entry["question"]) - 1
    with pytest.raises(KeyError, match="not a BFCL multi_turn_base id"):
        mt.follow_ups("bfcl-simple_python_0")


@pytest.fixture(scope="module")
def tokenizer():
    texts = [m["content"] for t in mt.entries().values() for turn in t["question"] for m in turn]
    return train_tokenizer(texts[:400], vocab_size=400)


def roll(tokenizer, task_id, script, max_turns=8):
    task = mt.task_record(task_id.removeprefix("bfcl-"))
    with mt.MultiTurnExecutor() as executor:
        (rollout,) = run_rollouts(
            [task],
            engine=ScriptedEngine(tokenizer, script),
            tokenizer=tokenizer,
            simulator=executor,
            group_size=1,
            sampling=SamplingParams(max_new_tokens=100_000),
            limits=RolloutLimits(max_turns=max_turns, max_total_tokens=10**7),
            follow_ups={task.id: mt.follow_ups(task.id)},
        )
    return task, rollout


@pytest.mark.parametrize("task_id", [FIRST, "bfcl-multi_turn_base_50", "bfcl-multi_turn_base_150"])
def test_a_gold_policy_through_the_rollout_loop_is_valid(tokenizer, task_id):
    script = []
    for turn in gold(task_id):
        script += [bfcl_json_step(task_id, turn), "Done."] if turn else ["Nothing to do."]
    task, rollout = roll(tokenizer, task_id, script)
    assert rollout.finish_reason == "stop"
    assert [t.user_turn for t in rollout.turns if t.final] == list(range(len(gold(task_id))))
    assert rollout.calls and not any(is_error(c.response) for c in rollout.calls)
    assert mt.check_rollout(task, rollout).valid


def test_silent_and_cut_off_policies_fail(tokenizer):
    task, rollout = roll(tokenizer, FIRST, ["I cannot do that."])
    assert mt.check_rollout(task, rollout).error_type == "multi_turn:empty_turn_model_response"
    looping = [bfcl_json_step(FIRST, ["ls(a=True)"])]
    task, rollout = roll(tokenizer, FIRST, looping, max_turns=3)
    assert rollout.finish_reason == "max_turns" and len(rollout.turns) == 3
    assert mt.check_rollout(task, rollout).error_type == "multi_turn:force_terminated"
