import importlib.util
import json
import sys
from collections import defaultdict

import pytest

from slca.config.data import PrepareParams
from slca.data.prepare import collect
from slca.data.record import Call, Message, TaskRecord, ToolSpec
from slca.eval import bfcl
from slca.grammar import parse_turn
from slca.rollout.types import Rollout, Turn

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason="bfcl-eval not installed (make data-sources)",
)

SIMPLE = "simple_function_checker"
MULTIPLE = "multiple_function_checker"
PARALLEL = "parallel_function_checker_no_order"


@pytest.fixture(scope="module")
def records():
    """Every BFCL task of the scored categories, built by the importer from the installed
    package (as ``prepare`` does; data/tasks is not needed)."""
    params = PrepareParams(
        sources=["bfcl"], bfcl={"categories": list(bfcl.CATEGORIES)}, skip_invalid=True
    )
    recs, _ = collect(params)
    by_category = defaultdict(list)
    for r in recs:
        by_category[r.domain].append(r)
    assert set(by_category) == set(bfcl.CATEGORIES)
    return by_category


def gold_calls(r):
    return [(c.name, dict(c.arguments)) for step in r.gold for c in step]


def test_gold_answers_score_100_percent_on_every_category(records):
    verdicts = [bfcl.check(r, gold_calls(r)) for rs in records.values() for r in rs]
    wrong = [(v.task_id, v.error_type, v.errors[:1]) for v in verdicts if not v.valid]
    assert wrong == []
    scores = bfcl.accuracy(verdicts)
    assert scores == {
        **{f"bfcl/{c}": 1.0 for c in bfcl.CATEGORIES},
        "bfcl/non_live": 1.0,
        "bfcl/live": 1.0,
        "bfcl/overall": 1.0,
    }
    assert sum(len(rs) for rs in records.values()) > 2500


def _kind(category):
    if "parallel" in category:
        return PARALLEL
    return MULTIPLE if "multiple" in category else SIMPLE


def _sub_error_types(verdict):
    """The error types of a parallel mismatch's sub-verdicts (the checker nests them)."""
    types = set()
    for e in verdict.errors:
        if e.startswith("{"):
            for sub in json.loads(e).values():
                types.add(sub["sub_error_type"])
    return types


def _expect(verdict, category, error_type):
    assert not verdict.valid
    if _kind(category) == PARALLEL:
        assert verdict.error_type == f"{PARALLEL}:cannot_find_match"
        assert error_type in _sub_error_types(verdict)
    else:
        assert verdict.error_type == error_type


AST_CATEGORIES = [c for c in bfcl.CATEGORIES if c != "irrelevance"]


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_extra_or_missing_call_fails_with_wrong_count(records, category):
    for r in records[category]:
        calls = gold_calls(r)
        expected = f"{_kind(category)}:wrong_count"
        assert bfcl.check(r, [*calls, calls[0]]).error_type == expected, r.id
        assert bfcl.check(r, []).error_type == expected, r.id


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_wrong_function_name_fails(records, category):
    for r in records[category]:
        (name, args), *rest = gold_calls(r)
        verdict = bfcl.check(r, [("not_a_tool", args), *rest])
        _expect(verdict, category, f"{SIMPLE}:wrong_func_name")


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_missing_required_argument_fails(records, category):
    tested = 0
    for r in records[category]:
        (name, args), *rest = gold_calls(r)
        required = next(t for t in r.tools if t.name == name).parameters.get("required", [])
        if not required:
            continue
        args = {k: v for k, v in args.items() if k != required[0]}
        _expect(bfcl.check(r, [(name, args), *rest]), category, f"{SIMPLE}:missing_required")
        tested += 1
    assert tested > len(records[category]) // 2


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_wrong_value_type_fails(records, category):
    """A string argument given as a number (the checker's Python type check)."""
    tested = 0
    for r in records[category]:
        (name, args), *rest = gold_calls(r)
        key = next((k for k, v in args.items() if isinstance(v, str)), None)
        if key is None:
            continue
        verdict = bfcl.check(r, [(name, {**args, key: 12345}), *rest])
        _expect(verdict, category, "type_error:simple")
        tested += 1
    assert tested > 0.3 * len(records[category])


def test_irrelevance_is_right_iff_no_call(records):
    for r in records["irrelevance"]:
        assert bfcl.check(r, []).valid
        tool = r.tools[0]
        verdict = bfcl.check(r, [(tool.name, {})])
        assert not verdict.valid
        assert verdict.error_type == "irrelevance_error:decoder_success"


def test_parallel_order_does_not_matter(records):
    r = next(r for r in records["parallel"] if len(r.gold[0]) > 1)
    assert bfcl.check(r, gold_calls(r)[::-1]).valid


def test_decode_calls_format():
    calls = [("math.gcd", {"a": 1}), ("f", {})]
    assert bfcl.decode_calls(calls) == [{"math.gcd": {"a": 1}}, {"f": {}}]
    with pytest.raises(TypeError, match="call 0"):
        bfcl.decode_calls([("f", "a=1")])


def _task(**kw):
    base = dict(
        id="bfcl-simple_python_0",
        source="bfcl",
        domain="simple_python",
        split="eval",
        messages=[Message(role="user", content="x")],
        tools=[ToolSpec(name="f", parameters={"type": "object"})],
        gold=[[Call(name="f")]],
        eval_only=True,
    )
    return TaskRecord(**(base | kw))


def test_non_bfcl_task_is_a_value_error():
    with pytest.raises(ValueError, match="'synth-1' is not a BFCL task"):
        bfcl.check(_task(id="synth-1", source="synth", eval_only=False, split="test"), [])


def test_unknown_id_and_unscored_category_are_named():
    with pytest.raises(KeyError, match="'simple_python_99999' is not in the installed BFCL"):
        bfcl.check(_task(id="bfcl-simple_python_99999"), [])
    with pytest.raises(ValueError, match="category 'live_parallel' is not scored"):
        bfcl.check(_task(domain="live_parallel"), [])


def _rollout(task_id, *turns):
    return Rollout(
        task_id=task_id,
        group=0,
        sample=0,
        prompt_length=0,
        turns=[Turn(t, parse_turn(t), False, 0, 0) for t in turns],
    )


def _block(*calls):
    payload = [{"name": n, "arguments": a} for n, a in calls]
    return "<tool_call>" + json.dumps(payload[0] if len(payload) == 1 else payload) + "</tool_call>"


def test_rollout_calls_over_turns_and_blocks(records):
    r = next(r for r in records["parallel"] if len(r.gold[0]) > 2)
    first, *rest = gold_calls(r)
    rollout = _rollout(r.id, "<think>one first</think>" + _block(first), _block(*rest), "Done.")
    assert bfcl.rollout_calls(rollout) == [first, *rest]
    assert bfcl.check_rollout(r, rollout).valid


def test_malformed_block_fails_ast_but_counts_as_no_call_on_irrelevance(records):
    r = records["simple_python"][0]
    rollout = _rollout(r.id, _block(*gold_calls(r)) + '<tool_call>{"name": </tool_call>')
    with pytest.raises(bfcl.MalformedCall, match="turn 0, call block 1: invalid_json"):
        bfcl.rollout_calls(rollout)
    verdict = bfcl.check_rollout(r, rollout)
    assert (verdict.valid, verdict.error_type) == (False, "ast_decoder:decoder_failed")
    irr = records["irrelevance"][0]
    assert bfcl.check_rollout(irr, _rollout(irr.id, '<tool_call>{"name"</tool_call>')).valid
    with pytest.raises(ValueError, match="not 'bfcl-simple_python_0'"):
        bfcl.check_rollout(_task(), _rollout(irr.id, "Hi"))


def test_accuracy_mirrors_bfcl_summaries():
    def v(category, n_right, n):
        return [bfcl.Verdict(category, i < n_right) for i in range(n)]

    verdicts = [
        *v("simple_python", 1, 2),
        *v("multiple", 1, 1),
        *v("live_simple", 1, 1),
        *v("live_multiple", 0, 3),
        *v("irrelevance", 3, 4),
    ]
    assert bfcl.accuracy(verdicts) == {
        "bfcl/simple_python": 0.5,
        "bfcl/multiple": 1.0,
        "bfcl/live_simple": 1.0,
        "bfcl/live_multiple": 0.0,
        "bfcl/irrelevance": 0.75,
        "bfcl/non_live": 0.75,  # unweighted over categories
        "bfcl/live": 0.25,  # weighted by task count
        "bfcl/overall": (0.75 + 0.25 + 0.75) / 3,
    }
    assert bfcl.accuracy([]) == {}


def test_checker_loads_without_model_handlers():
    checker = bfcl._ast_checker()
    assert "bfcl_eval.constants.model_config" not in sys.modules
    assert not any(m.startswith("bfcl_eval.model_handler") for m in sys.modules)
    # The stub answers where the checker reads the model's config: a dotted function name
    # is kept as the policy wrote it (underscore_to_dot off) and judged on its arguments.
    docs = [
        {
            "name": "math.factorial",
            "description": "n!",
            "parameters": {
                "type": "dict",
                "properties": {"number": {"type": "integer", "description": "n"}},
                "required": ["number"],
            },
        }
    ]
    answer = [{"math.factorial": {"number": [5]}}]
    python = checker.Language.PYTHON

    def verdict(output):
        return checker.ast_checker(docs, output, answer, python, "simple_python", bfcl._MODEL)

    assert verdict([{"math.factorial": {"number": 5}}])["valid"]
    assert not verdict([{"math.factorial": {"number": 6}}])["valid"]
    assert not verdict([{"math_factorial": {"number": 5}}])["valid"]
    assert not any(m.startswith("bfcl_eval.model_handler") for m in sys.modules)
