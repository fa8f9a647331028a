import importlib.util
import json

import pytest

from slca.data.prepare import PrepareError, _build
from slca.data.sources import bfcl
from slca.data.sources.schema_dialect import to_json_schema


def _write(root, cat, questions, answers=None):
    (root / "possible_answer").mkdir(parents=True, exist_ok=True)
    (root / f"BFCL_v4_{cat}.json").write_text("".join(json.dumps(q) + "\n" for q in questions))
    if answers is not None:
        (root / "possible_answer" / f"BFCL_v4_{cat}.json").write_text(
            "".join(json.dumps(a) + "\n" for a in answers)
        )


FN = {
    "name": "spotify.play",
    "description": "Play.",
    "parameters": {
        "type": "dict",
        "properties": {
            "artist": {"type": "string"},
            "duration": {"type": "float"},
            "opts": {"type": "tuple", "items": {"type": "any"}},
        },
        "required": ["artist"],
    },
}


def test_dialect_to_json_schema():
    s = to_json_schema(FN["parameters"], "p")
    assert s["type"] == "object"
    assert s["properties"]["duration"] == {"type": "number"}
    assert s["properties"]["opts"] == {"type": "array", "items": {}}
    assert s["required"] == ["artist"]


def test_parallel_task_with_accepted_values(tmp_path):
    q = {
        "id": "parallel_0",
        "question": [[{"role": "user", "content": "Play A and B"}]],
        "function": [FN],
    }
    a = {
        "id": "parallel_0",
        "ground_truth": [
            {"spotify.play": {"artist": ["A"], "duration": [20, 20.0], "opts": [""]}},
            {"spotify.play": {"artist": ["B"], "duration": ["N/A", 15]}},
        ],
    }
    _write(tmp_path, "parallel", [q], [a])
    (item,) = list(bfcl.items(["parallel"], tmp_path))
    r = _build("bfcl", item)
    assert r.id == "bfcl-parallel_0" and r.split == "eval" and r.eval_only
    assert len(r.gold) == 1 and len(r.gold[0]) == 2  # one step, two parallel calls
    first, second = r.gold[0]
    assert first.arguments == {"artist": "A", "duration": 20}  # "" = may be omitted
    assert first.accepted["opts"] == [""]
    assert second.arguments["duration"] == 15  # the schema-valid accepted value


def test_nested_accepted_values_are_resolved(tmp_path):
    fn = {
        "name": "db",
        "parameters": {
            "type": "dict",
            "properties": {"cond": {"type": "dict", "properties": {"dept": {"type": "string"}}}},
        },
    }
    q = {
        "id": "simple_python_1",
        "question": [[{"role": "user", "content": "x"}]],
        "function": [fn],
    }
    a = {"id": "simple_python_1", "ground_truth": [{"db": {"cond": [{"dept": ["Sci", ""]}]}}]}
    _write(tmp_path, "simple_python", [q], [a])
    (item,) = list(bfcl.items(["simple_python"], tmp_path))
    assert _build("bfcl", item).gold[0][0].arguments == {"cond": {"dept": "Sci"}}


def test_irrelevance_has_no_gold(tmp_path):
    q = {"id": "irrelevance_0", "question": [[{"role": "user", "content": "Hi"}]], "function": [FN]}
    _write(tmp_path, "irrelevance", [q])
    (item,) = list(bfcl.items(["irrelevance"], tmp_path))
    assert _build("bfcl", item).gold == []


def test_bad_line_names_file_line_and_field(tmp_path):
    q = {
        "id": "simple_python_0",
        "question": [[{"role": "user", "content": "x"}]],
        "function": [
            {"name": "f", "parameters": {"type": "dict", "properties": {"a": {"type": "complex"}}}}
        ],
    }
    _write(
        tmp_path,
        "simple_python",
        [q],
        [{"id": "simple_python_0", "ground_truth": [{"f": {"a": [1]}}]}],
    )
    (tmp_path / "BFCL_v4_simple_python.json").write_text(json.dumps(q) + "\n{not json\n")
    items = list(bfcl.items(["simple_python"], tmp_path))
    with pytest.raises(PrepareError) as e:
        _build("bfcl", items[0])
    assert e.value.field == "function[0].parameters.properties.a.type"
    assert "BFCL_v4_simple_python.json line 1" in str(e.value)
    with pytest.raises(PrepareError, match="line 2: field line: invalid JSON"):
        _build("bfcl", items[1])


def test_missing_answer_is_an_error(tmp_path):
    q = {"id": "multiple_3", "question": [[{"role": "user", "content": "x"}]], "function": [FN]}
    _write(tmp_path, "multiple", [q], [])
    (item,) = list(bfcl.items(["multiple"], tmp_path))
    with pytest.raises(PrepareError, match="possible_answer"):
        _build("bfcl", item)


@pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason="bfcl-eval not installed (make data-sources)",
)
def test_real_package_categories_import():
    root = bfcl.data_dir()
    counts = {}
    for cat in ("simple_python", "parallel", "irrelevance"):
        ok = 0
        for item in bfcl.items([cat], root):
            try:
                _build("bfcl", item)
                ok += 1
            except PrepareError:
                pass
        counts[cat] = ok
    assert counts["simple_python"] >= 395 and counts["parallel"] >= 195
    assert counts["irrelevance"] >= 200


def test_undeclared_argument_is_omitted_when_optional_else_rejected(tmp_path):
    q = {"id": "multiple_0", "question": [[{"role": "user", "content": "x"}]], "function": [FN]}
    answers = [
        {"id": "multiple_0", "ground_truth": [{"spotify.play": {"artist": ["A"], "vol": ["", 3]}}]}
    ]
    _write(tmp_path, "multiple", [q], answers)
    (item,) = list(bfcl.items(["multiple"], tmp_path))
    assert _build("bfcl", item).gold[0][0].arguments == {"artist": "A"}
    answers[0]["ground_truth"][0]["spotify.play"]["vol"] = [3]
    _write(tmp_path, "multiple", [q], answers)
    (item,) = list(bfcl.items(["multiple"], tmp_path))
    with pytest.raises(PrepareError) as e:
        _build("bfcl", item)
    assert e.value.field == "ground_truth[0].spotify.play.vol"
    assert "not a parameter of spotify.play" in str(e.value)
