"""SFT throughput with and without ``sft.group_by_length``, side by side in one process.

    .venv/bin/python benchmarks/sft_batching.py --base models/base --rounds 3

Both modes run ``slca.training.sft.sft`` for one epoch on the same random sample of
synth train trajectories (``--examples``, one length window by default), from the same
base checkpoint, as the SFT stage builds them; the modes alternate ``--rounds`` times so
a busy machine slows them alike. The table gives padded tokens per real token, median
seconds, and the speed-up of grouping (plain seconds / grouped seconds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    from slca.config.engine import EngineConfig
    from slca.data import io
    from slca.modeling import load_causal_lm
    from slca.simulator import Simulator
    from slca.training.engines import build_engine
    from slca.training.sft import LENGTH_WINDOW, build_example, micro_batches, sft

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, default=REPO / "models/base")
    parser.add_argument("--in-dir", type=Path, default=REPO / "data/tasks")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--examples", type=int, default=8 * LENGTH_WINDOW)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm(args.base, dtype="float32")
    synth = [t for t in io.load_train_set(args.in_dir) if t.source == "synth"]
    tasks = random.Random(0).sample(synth, min(args.examples, len(synth)))
    examples = [build_example(t, tokenizer, Simulator()) for t in tasks]
    lengths = [len(e.token_ids) for e in examples]
    engine = build_engine(model, EngineConfig(optim={"lr": 1e-4}))
    seconds: dict[bool, list[float]] = {False: [], True: []}
    padded = {}
    for round_ in range(args.rounds):
        for grouped in (False, True):
            order = list(range(len(examples)))
            rng = random.Random(f"{round_}:0")
            rng.shuffle(order)
            batches = micro_batches(order, lengths, args.micro_batch_size, rng, grouped)
            padded[grouped] = sum(max(lengths[i] for i in b) * len(b) for b in batches)
            start = time.perf_counter()
            sft(
                engine,
                examples,
                epochs=1,
                micro_batch_size=args.micro_batch_size,
                pad_id=tokenizer.pad_token_id,
                seed=round_,
                group_by_length=grouped,
            )
            seconds[grouped].append(time.perf_counter() - start)
    layers = model.config.num_hidden_layers
    print(
        f"{len(examples)} trajectories (mean {statistics.mean(lengths):.0f} tokens), "
        f"{layers} layers × {model.config.hidden_size} wide, {args.threads} threads, "
        f"{args.rounds} rounds"
    )
    print("| batching | padded / real tokens | median s (one epoch) | runs (s) |")
    print("|---|---|---|---|")
    for grouped in (False, True):
        runs = ", ".join(f"{s:.1f}" for s in seconds[grouped])
        print(
            f"| {'group_by_length' if grouped else 'shuffled'} | "
            f"{padded[grouped] / sum(lengths):.3f} | "
            f"{statistics.median(seconds[grouped]):.1f} | {runs} |"
        )
    speedup = statistics.median(seconds[False]) / statistics.median(seconds[True])
    print(f"speed-up of group_by_length: {speedup:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
