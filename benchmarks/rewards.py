"""Reward scoring cost per rollout: HierR process reward + grounded summary, on CPU.

    .venv/bin/python benchmarks/rewards.py            # the table in docs/benchmarks.md
    .venv/bin/python benchmarks/rewards.py --quick    # fewer tasks, a few seconds

Rollouts are built from synthetic tasks (``slca.data.synth``) the way a policy writes
them: one turn per gold step (a parallel step's calls in one block), responses from
the schema simulator (references resolved from earlier responses), and a final answer
stating the task's facts. Three variants per task:

- ``gold``: the gold calls and a summary of the facts;
- ``flawed``: one argument value changed, the first call repeated in an extra turn,
  and a summary with one made-up number;
- ``malformed``: the first call block cut in half (invalid JSON), then the gold calls.

Each figure is the median over interleaved repeats of scoring the whole set, divided
by the number of rollouts. The mean rewards per variant are printed as a sanity check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from slca.config.data import SynthParams
from slca.config.rewards import RewardConfig
from slca.data.record import TaskRecord
from slca.data.synth import generate
from slca.grammar import parse_turn
from slca.rewards.preference import GroundedScorer, SummaryInput
from slca.rewards.score import score_batch, tool_side
from slca.rollout.types import ExecutedCall, Rollout, Turn
from slca.simulator import Simulator
from slca.simulator.check import resolve_references


def _block(calls: list[tuple[str, dict[str, Any]]]) -> str:
    body = [{"name": n, "arguments": a} for n, a in calls]
    payload = json.dumps(body[0] if len(body) == 1 else body)
    return f"<tool_call>\n{payload}\n</tool_call>"


def build_rollout(
    task: TaskRecord, sim: Simulator, variant: str, sample: int = 0
) -> tuple[Rollout, float]:
    """A rollout of ``task`` in the given variant, and the seconds the simulator took."""
    tools = [t.model_dump() for t in task.tools]
    context = {"world": task.world} if task.world else {}
    results: dict[str, Any] = {}
    turns: list[str] = []
    calls: list[ExecutedCall] = []
    sim_s = 0.0

    def run_turn(text: str) -> None:
        nonlocal sim_s
        parsed = parse_turn(text)
        t, step = len(turns), len({c.turn for c in calls})
        for c in parsed.calls:
            start = time.perf_counter()
            response = sim.execute(tools, c.name, c.arguments, context=context, scope=task.id)
            sim_s += time.perf_counter() - start
            calls.append(ExecutedCall(len(calls), t, step, c.name, c.arguments, response))
        turns.append(text)

    for s, step in enumerate(task.gold):
        resolved = [(c, resolve_references(c.arguments, results) or {}) for c in step]
        pairs = [(c.name, dict(a)) for c, a in resolved]
        if variant == "flawed" and s == 0:
            name, args = pairs[0]
            key = next(iter(args), "x")
            pairs[0] = (name, {**args, key: "Nowhere"})
        if variant == "malformed" and s == 0:
            run_turn(_block(pairs)[:-20])
        run_turn(_block(pairs))
        for c, _ in resolved:
            if c.label:
                results[c.label] = next(
                    (x.response for x in reversed(calls) if x.name == c.name), None
                )
    if variant == "flawed" and calls:
        run_turn(_block([(calls[0].name, calls[0].arguments)]))
    facts = "; ".join(f"{k.split('.')[-1]} is {v}" for k, v in task.facts.items())
    summary = f"Here is what I found: {facts or 'no tool was needed'}."
    if variant == "flawed":
        summary += " It will cost 987 in total."
    turns.append(summary)
    parsed_turns = [
        Turn(text=t, parsed=parse_turn(t), final=i == len(turns) - 1, token_start=0, token_end=0)
        for i, t in enumerate(turns)
    ]
    rollout = Rollout(
        task_id=task.id, group=0, sample=sample, prompt_length=0, turns=parsed_turns, calls=calls
    )
    return rollout, sim_s


def _median_us(fn, n_items: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) / n_items * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n_tasks, repeats = (60, 3) if args.quick else (args.tasks, args.repeats)

    tasks = generate(SynthParams(n_tasks=n_tasks), seed=13)
    sim = Simulator(seed=0)
    config = RewardConfig()
    grounded = GroundedScorer(config.summary.grounded)
    print(f"{len(tasks)} synthetic tasks, {repeats} repeats; µs per rollout (median)\n")
    print(
        "| variant | rollouts | calls/rollout | R_tool | R_sum | process µs | grounded µs "
        "| score() µs | simulator µs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant in ("gold", "flawed", "malformed"):
        built = [build_rollout(t, sim, variant) for t in tasks]
        rollouts = [r for r, _ in built]
        sim_us = sum(s for _, s in built) / len(built) * 1e6
        items = [SummaryInput.from_rollout(r, t) for r, t in zip(rollouts, tasks)]

        def process(rollouts=rollouts):
            for r, t in zip(rollouts, tasks):
                tool_side(r, t, config)

        def summaries(items=items):
            grounded.score_batch(items)

        def whole(rollouts=rollouts):
            score_batch(rollouts, tasks, config, summary_scorer=grounded)

        timings = {"process": [], "grounded": [], "whole": []}
        for _ in range(repeats):  # interleaved, so drift hits all alike
            timings["process"].append(_median_us(process, len(rollouts), 1))
            timings["grounded"].append(_median_us(summaries, len(rollouts), 1))
            timings["whole"].append(_median_us(whole, len(rollouts), 1))
        out = score_batch(rollouts, tasks, config, summary_scorer=grounded)
        n_calls = sum(len(r.calls) for r in rollouts) / len(rollouts)
        tool = statistics.mean(b.tool for b in out)
        summary = statistics.mean(b.summary for b in out)
        p, g, w = (statistics.median(timings[k]) for k in ("process", "grounded", "whole"))
        print(
            f"| {variant} | {len(rollouts)} | {n_calls:.2f} | {tool:.3f} | {summary:.3f} "
            f"| {p:.0f} | {g:.0f} | {w:.0f} | {sim_us:.0f} |"
        )


if __name__ == "__main__":
    main()
