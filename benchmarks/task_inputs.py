"""Prefect's cost of a task's inputs: one RL step's rollouts passed to a task as they
are, against passed in ``opaque()`` (what ``slca_pipeline.tasks.training`` does), on
Prefect's temporary server as ``slca run`` starts it.

    .venv/bin/python benchmarks/task_inputs.py   # docs/benchmarks/make-demo.md
    .venv/bin/python benchmarks/task_inputs.py --repeats 3

Prefect walks every argument of a task call twice (finding upstream futures, then
resolving them), down to each token id of each rollout; ``opaque()`` stops it at the
argument itself, which still links the call to the task that returned it. ``quote()``
stops it too but drops that link, and ``wait_for`` (which would restore it) walks the
upstream state's result all the same. The payload is the demo's step:
8 tasks × 4 rollouts, each of ``--tokens`` tokens with their mask, log-probs, kinds and
call indices. Both arms call the same no-op task in one flow, interleaved, and the table
gives the median seconds per call and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from slca.rollout.types import Rollout


def payload(rollouts: int, tokens: int) -> list[Rollout]:
    return [
        Rollout(
            task_id=f"t{i // 4}",
            group=i // 4,
            sample=i % 4,
            prompt_length=tokens // 2,
            token_ids=list(range(tokens)),
            policy_mask=[t >= tokens // 2 for t in range(tokens)],
            logprobs=[-0.5] * tokens,
            kind_codes=[-1] * tokens,
            call_index=[-1] * tokens,
        )
        for i in range(rollouts)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=800)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    # a server of its own, as `slca run` starts one (the user's Prefect home untouched)
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="slca-bench-prefect-")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.utilities.annotations import opaque

    @task(name="rollout", cache_policy=NO_CACHE)
    def rollout(rollouts: int, tokens: int) -> list[Rollout]:
        return payload(rollouts, tokens)

    @task(name="score", cache_policy=NO_CACHE)
    def score(sampled: list[Rollout]) -> int:
        return len(sampled)

    @flow(name="task-inputs")
    def bench() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"as is": [], "opaque()": []}
        for _ in range(args.repeats):
            sampled = rollout(args.rollouts, args.tokens)
            for name, argument in (("as is", sampled), ("opaque()", opaque(sampled))):
                started = time.perf_counter()
                score(argument)
                times[name].append(time.perf_counter() - started)
        return times

    times = bench()
    plain = statistics.median(times["as is"])
    print(f"{args.rollouts} rollouts × {args.tokens} tokens, median of {args.repeats}\n")
    print("| inputs | s per task call | ratio to as is |\n|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} | {median / plain:.2f} |")


if __name__ == "__main__":
    main()
