"""Rollout throughput on CPU: generated policy tokens/s of the whole tool loop.

    .venv/bin/python benchmarks/rollout.py [--model tiny|smollm2] [--tasks 16] [--group 4]

The full loop on synth tasks: chat-template prompts, batched generation, labelling,
simulator calls, environment tokens. Throughput counts policy (sampled) tokens per
second of wall time, and the share of that time spent outside the engine.
"""

from __future__ import annotations

import argparse
import time

import torch

from slca.data.params import SynthParams
from slca.data.synth import generate
from slca.rollout.engines import HFEngine, SamplingParams
from slca.rollout.loop import RolloutLimits, run_rollouts
from slca.simulator import Simulator


class TimedEngine:
    """Wraps an engine to time its share of the loop."""

    def __init__(self, engine):
        self.engine, self.name, self.seconds = engine, engine.name, 0.0

    def generate(self, prompts, params):
        start = time.perf_counter()
        try:
            return self.engine.generate(prompts, params)
        finally:
            self.seconds += time.perf_counter() - start

    def load_weights(self, state_dict):
        self.engine.load_weights(state_dict)


def load(name: str, tasks):
    if name == "tiny":
        from slca.training.tiny import tiny_model, train_tokenizer

        texts = [m.content for t in tasks for m in t.messages]
        tokenizer = train_tokenizer(texts * 4, vocab_size=2048)
        return tiny_model(tokenizer), tokenizer
    from slca.modeling import load_causal_lm
    from slca.rollout.chat import ensure_tool_template

    model, tokenizer = load_causal_lm("smollm2")
    ensure_tool_template(tokenizer)
    return model, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = generate(SynthParams(n_tasks=args.tasks), seed=0)
    model, tokenizer = load(args.model, tasks)
    engine = TimedEngine(HFEngine(model, tokenizer, batch_size=args.batch_size))
    start = time.perf_counter()
    rollouts = run_rollouts(
        tasks,
        engine=engine,
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=args.group,
        sampling=SamplingParams(max_new_tokens=args.max_new_tokens),
        limits=RolloutLimits(max_turns=2, max_total_tokens=4096),
    )
    seconds = time.perf_counter() - start
    policy = sum(r.n_policy_tokens for r in rollouts)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(
        f"| {args.model} ({params:.1f} M) | {len(rollouts)} | {policy} | {seconds:.1f} | "
        f"{policy / seconds:,.0f} | {100 * (1 - engine.seconds / seconds):.1f}% |"
    )


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
