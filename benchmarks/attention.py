"""Batched CPU generation with transformers' ``sdpa`` attention and with slca's
``sdpa_cpu_gqa`` (slca/attention.py), side by side in one run.

    .venv/bin/python benchmarks/attention.py

The shipped demo base (3 layers, 4 query heads over 2 key/value heads) generates for 32
prompts of 300-1,100 random token ids (the demo's synth trajectories run 455-1,217
tokens) with the HF engine, left-padded in one batch: 96 new tokens, once sampled at
temperature 1 (seeded) and once greedy. The two attentions take turns ``--repeats``
times; the table gives each one's median seconds, the ratio, and whether every token id
and log-probability came out the same.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from slca.attention import ATTENTION
from slca.generation.engines import HFEngine, SamplingParams
from slca.modeling import load_causal_lm


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/demo-base")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    model, tokenizer = load_causal_lm(args.model, dtype="float32", device="cpu")
    engine = HFEngine(model, tokenizer, batch_size=32)
    rng = random.Random(0)
    vocab = model.config.vocab_size
    prompts = [
        [rng.randrange(10, vocab) for _ in range(rng.randrange(300, 1100))] for _ in range(32)
    ]
    print("| sampling | sdpa (s) | sdpa_cpu_gqa (s) | ratio | same tokens and logprobs |")
    print("|---|---|---|---|---|")
    for label, sampling in (
        ("temperature 1", SamplingParams(max_new_tokens=96, temperature=1.0, seed=3)),
        ("greedy", SamplingParams(max_new_tokens=96, temperature=0.0)),
    ):
        seconds = {"sdpa": [], ATTENTION: []}
        outputs = {}
        for _ in range(args.repeats):
            for attention in seconds:
                model.set_attn_implementation(attention)
                started = time.perf_counter()
                outputs[attention] = engine.generate(prompts, sampling)
                seconds[attention].append(time.perf_counter() - started)
        same = all(
            a.token_ids == b.token_ids and a.logprobs == b.logprobs
            for a, b in zip(outputs["sdpa"], outputs[ATTENTION], strict=True)
        )
        stock, ours = (statistics.median(seconds[k]) for k in ("sdpa", ATTENTION))
        print(f"| {label} | {stock:.2f} | {ours:.2f} | {ours / stock:.2f} | {same} |")


if __name__ == "__main__":
    main()
