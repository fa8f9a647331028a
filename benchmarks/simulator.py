"""SGLS throughput: schema backend calls/s, response-table validation rows/s, cache hits.

    .venv/bin/python benchmarks/simulator.py            # after `make data`

One process (one core). Calls use distinct arguments, so no call is a cache hit:
the figure is the full path (argument validation, seeded generation, response
validation). The cache-hit rate is measured on groups of G=8 rollouts of one task in
which each rollout repeats each gold call exactly with probability ``--p-exact``
and otherwise changes one argument, as a partly trained policy does.
"""

from __future__ import annotations

import argparse
import random
import time

from slca.config.data import SynthParams
from slca.data import io
from slca.data.synth import TOOLS, generate
from slca.jsonutil import canonical_json
from slca.simulator import Simulator
from slca.simulator.check import build_suite, simulate_gold_calls
from slca.simulator.schema_backend import Generator


def schema_calls_per_second(tools: list[dict], n: int) -> float:
    """Calls/s over ``n`` calls spread over ``tools``, each with fresh valid arguments."""
    sim = Simulator(seed=0)
    rng = random.Random(0)
    calls, seen = [], set()
    for i in range(50 * n):
        tool = tools[i % len(tools)]
        arguments = Generator(tool["parameters"], rng).value()
        key = (tool["name"], canonical_json(arguments))
        if key not in seen:  # distinct calls only: no cache hits in this figure
            seen.add(key)
            calls.append((tool, arguments))
        if len(calls) == n:
            break
    start = time.perf_counter()
    for tool, arguments in calls:
        sim.call(tool, arguments)
    seconds = time.perf_counter() - start
    assert sim.stats.invalid_arguments == 0 and sim.stats.failures == 0
    assert sim.stats.cache_hits == 0
    return len(calls) / seconds


def group_cache_hit_rate(p_exact: float, group_size: int = 8, tasks: int = 200) -> float:
    sim = Simulator(seed=0)
    rng = random.Random(1)
    for task in generate(SynthParams(n_tasks=tasks), seed=5):
        tools = [t.model_dump() for t in task.tools]
        for _ in range(group_size):
            for step in task.gold:
                for call in step:
                    arguments = dict(call.arguments)
                    if rng.random() > p_exact:
                        key = rng.choice(sorted(arguments))
                        arguments[key] = (
                            f"{arguments[key]}x"
                            if isinstance(arguments[key], str)
                            else arguments[key]
                        )
                    sim.execute(
                        tools, call.name, arguments, context={"world": task.world}, scope=task.id
                    )
    return sim.stats.cache_hits / sim.stats.calls


def validation_rows_per_second(in_dir: str) -> tuple[float, int]:
    from slca.data import ge

    records = io.read_dataset(in_dir, ["val"])
    table = simulate_gold_calls(records, Simulator(seed=0))
    start = time.perf_counter()
    ge.run_suite(table, build_suite(0.02), name="bench")
    return len(table) / (time.perf_counter() - start), len(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--p-exact", type=float, default=0.7)
    parser.add_argument("--in-dir", default="data/tasks")
    args = parser.parse_args()

    synth_tools = [t.model_dump() for domain in TOOLS.values() for t in domain]
    complex_tools = [
        t.model_dump()
        for r in io.read_dataset(args.in_dir, ["train"])
        if r.domain == "complexfuncbench"
        for t in r.tools
        if t.response
    ][:40]
    rows = [
        ("synth tools (typical: 2-5 fields)", synth_tools),
        ("complexfuncbench tools (nested responses)", complex_tools),
    ]
    print("| workload | calls/s (one core) |")
    print("|---|---:|")
    for name, tools in rows:
        rate = schema_calls_per_second(tools, args.calls)
        print(f"| schema backend, {name} | {rate:,.0f} |")
    rate, n = validation_rows_per_second(args.in_dir)
    print(f"| simulator_check GE suite, {n} val gold calls | {rate:,.0f} rows/s |")
    hit = group_cache_hit_rate(args.p_exact)
    print(f"| cache hit rate, G=8, p_exact={args.p_exact} | {hit:.1%} |")


if __name__ == "__main__":
    main()
