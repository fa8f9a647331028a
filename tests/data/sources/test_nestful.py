import importlib.util
import json

import pytest

from slca.data.prepare import PrepareError, _build
from slca.data.sources import nestful

SPEC = [
    {
        "name": "SearchAirport",
        "description": "Find airport ids.",
        "query_parameters": {"query": {"type": "string", "required": True}},
        "output_parameters": {"skyId": {"type": "string"}, "entityId": {"type": "string"}},
    },
    {
        "name": "SearchFlights",
        "query_parameters": {
            "origin": {"type": "string", "required": True},
            "dest": {"type": "string", "required": True},
            "adults": {"type": "number", "required": False},
        },
    },
]
SAMPLE = {
    "input": "Flights from NYC to London",
    "output": [
        {"name": "SearchAirport", "arguments": {"query": "NYC"}, "label": "var1"},
        {"name": "SearchAirport", "arguments": {"query": "London"}, "label": "var2"},
        {
            "name": "SearchFlights",
            "arguments": {"origin": "$var1.skyId$", "dest": "$var2.skyId$"},
            "label": "var3",
        },
        {"name": "var_result", "arguments": {"flights": "$var3$"}},
    ],
}


def _root(tmp_path, data):
    d = tmp_path / "executable"
    d.mkdir()
    (d / "executable-spec.json").write_text(json.dumps(SPEC))
    (d / "executable-data.json").write_text(json.dumps(data))
    return tmp_path


def test_references_kept_and_steps_by_dependency(tmp_path):
    (item,) = list(nestful.items(["executable"], _root(tmp_path, [SAMPLE])))
    r = _build("nestful", item)
    assert [[c.name for c in s] for s in r.gold] == [
        ["SearchAirport", "SearchAirport"],
        ["SearchFlights"],
    ]
    assert r.gold[1][0].arguments == {"origin": "$var1.skyId$", "dest": "$var2.skyId$"}
    assert [c.label for c in r.gold[0]] == ["var1", "var2"]
    assert r.facts == {"flights": "$var3$"}
    assert [t.name for t in r.tools] == ["SearchAirport", "SearchFlights"]
    assert r.tools[0].parameters["required"] == ["query"]
    assert r.tools[0].response["properties"]["skyId"] == {"type": "string"}
    assert r.split == "train" and not r.eval_only


def test_reference_to_unknown_label_is_an_error(tmp_path):
    bad = json.loads(json.dumps(SAMPLE))
    bad["output"][2]["arguments"]["origin"] = "$var9.skyId$"
    (item,) = list(nestful.items(["executable"], _root(tmp_path, [bad])))
    with pytest.raises(PrepareError) as e:
        _build("nestful", item)
    assert e.value.field == "output[2].arguments.origin"
    assert "executable-data.json [0]" in e.value.ref


def test_argument_type_mismatch_is_reported(tmp_path):
    bad = json.loads(json.dumps(SAMPLE))
    bad["output"][2]["arguments"]["adults"] = "two"
    (item,) = list(nestful.items(["executable"], _root(tmp_path, [bad])))
    with pytest.raises(PrepareError) as e:
        _build("nestful", item)
    assert e.value.field == "gold[1][0].arguments.adults"


def test_unknown_api_is_an_error(tmp_path):
    bad = {"input": "x", "output": [{"name": "Nope", "arguments": {}, "label": "var1"}]}
    (item,) = list(nestful.items(["executable"], _root(tmp_path, [bad])))
    with pytest.raises(PrepareError, match="field output\\[0\\].name"):
        _build("nestful", item)


@pytest.mark.skipif(
    importlib.util.find_spec("data_v1") is None,
    reason="nestful-wrapper not installed (make data-sources)",
)
def test_real_package_keeps_reference_samples():
    ok = refs = 0
    for item in nestful.items(["executable", "glaive", "sgd"]):
        try:
            r = _build("nestful", item)
        except PrepareError:
            continue
        ok += 1
        refs += any(
            isinstance(v, str) and v.startswith("$var")
            for s in r.gold
            for c in s
            for v in c.arguments.values()
        )
    assert ok >= 250 and refs >= 200
