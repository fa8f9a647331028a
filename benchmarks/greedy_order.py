"""Greedy batched generation with prompts in the order given and by length (ADR 0092),
side by side in one run.

    .venv/bin/python benchmarks/greedy_order.py

The shipped demo base generates greedily for 96 prompts of 300-1,100 random token ids
(the demo's synth trajectories run 455-1,217 tokens) in chunks of 32, as an evaluation
does: 48 new tokens. "given order" generates each consecutive 32 prompts as one call,
which is how chunks were formed before ADR 0092; "by length" hands all 96 to the engine,
which chunks them by length. The two take turns ``--repeats`` times; the table gives
each one's median seconds, the ratio, the padded prompt tokens of each, and whether
every token id came out the same.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from slca.generation.engines import HFEngine, SamplingParams
from slca.modeling import load_causal_lm

BATCH = 32


def padded_tokens(chunks: list[list[list[int]]]) -> int:
    return sum(len(chunk) * max(len(p) for p in chunk) for chunk in chunks)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/demo-base")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    model, tokenizer = load_causal_lm(args.model, dtype="float32", device="cpu")
    engine = HFEngine(model, tokenizer, batch_size=BATCH)
    rng = random.Random(0)
    vocab = model.config.vocab_size
    prompts = [
        [rng.randrange(10, vocab) for _ in range(rng.randrange(300, 1100))] for _ in range(96)
    ]
    given = [prompts[i : i + BATCH] for i in range(0, len(prompts), BATCH)]
    ordered = sorted(prompts, key=len)
    by_length = [ordered[i : i + BATCH] for i in range(0, len(ordered), BATCH)]
    greedy = SamplingParams(max_new_tokens=48, temperature=0.0)
    runs = {
        "given order": lambda: [g for chunk in given for g in engine.generate(chunk, greedy)],
        "by length": lambda: engine.generate(prompts, greedy),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    outputs = {}
    for _ in range(args.repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            outputs[name] = run()
            seconds[name].append(time.perf_counter() - started)
    same = [g.token_ids for g in outputs["given order"]] == [
        g.token_ids for g in outputs["by length"]
    ]
    before, after = (statistics.median(seconds[k]) for k in runs)
    print("| given order (s) | by length (s) | ratio | padded prompt tokens | same tokens |")
    print("|---|---|---|---|---|")
    print(
        f"| {before:.2f} | {after:.2f} | {after / before:.2f} | "
        f"{padded_tokens(given):,} → {padded_tokens(by_length):,} | {same} |"
    )


if __name__ == "__main__":
    main()
