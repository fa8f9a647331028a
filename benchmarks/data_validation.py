"""Task-data validation cost: Great Expectations vs a plain compiled JSON-schema validator.

    make data && .venv/bin/python benchmarks/data_validation.py

Same rows, one process, side by side: the gold-call check (every gold call of a row
matches its tool's ``parameters``) as a GE custom expectation inside an ephemeral
context, as the same Python function without GE, and as a loop over jsonschema-rs
validators compiled once per distinct schema. The full 7-expectation suite is timed
too, as the ``validate`` stage runs it.
"""

from __future__ import annotations

import argparse
import json
import time

import jsonschema_rs

from slca.data.checks import _mask_references, gold_problems
from slca.data.validate import build_suite, load_frame, run_suite


def python_gold_check(df) -> int:
    """The same check without GE: slca.data.checks (pure-Python jsonschema, cached)."""
    return sum(
        not gold_problems(json.loads(t), json.loads(g))
        for t, g in zip(df["tools"], df["gold"], strict=True)
    )


def compiled_gold_check(df) -> int:
    """The same check with jsonschema-rs validators compiled once per distinct schema."""
    cache: dict[str, object] = {}
    ok = 0
    for tools_json, gold_json in zip(df["tools"], df["gold"], strict=True):
        tools = {t["name"]: t["parameters"] for t in json.loads(tools_json)}
        good = True
        for step in json.loads(gold_json):
            for call in step:
                if call["name"] not in tools:
                    good = False
                    continue
                schema, instance = _mask_references(tools[call["name"]], call["arguments"])
                key = json.dumps(schema, sort_keys=True)
                if key not in cache:
                    cache[key] = jsonschema_rs.validator_for(schema)
                good = good and cache[key].is_valid(instance)
        ok += good
    return ok


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-dir", default="data/tasks")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    df = load_frame(args.in_dir)
    gold_only = [
        e for e in build_suite() if e.expectation_type.endswith("gold_calls_to_match_tool_schemas")
    ]
    rows = len(df)
    results = {
        "GE, gold expectation only": timed(lambda: run_suite(df, suite=gold_only), args.repeats),
        "GE, full suite (7 expectations)": timed(
            lambda: run_suite(df, suite=build_suite()), args.repeats
        ),
        "jsonschema (Python), cached validators": timed(
            lambda: python_gold_check(df), args.repeats
        ),
        "jsonschema-rs, compiled per schema": timed(lambda: compiled_gold_check(df), args.repeats),
    }
    assert python_gold_check(df) == compiled_gold_check(df) == rows  # same verdicts
    base = results["jsonschema-rs, compiled per schema"]
    print(f"{rows} rows, best of {args.repeats}\n")
    print("| check | s | rows/s | vs compiled |")
    print("|---|---:|---:|---:|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.2f} | {rows / seconds:,.0f} | {seconds / base:.1f}x |")


if __name__ == "__main__":
    main()
