"""SFT throughput: the padding mask, ``sft.group_by_length``, side by side in one process.

    .venv/bin/python benchmarks/sft_batching.py --base models/base --rounds 3

Every mode runs ``slca.training.sft.sft`` for one epoch on the same random sample of
synth train trajectories (``--examples``, one length window by default), from the same
base checkpoint, as the SFT stage builds them; the modes alternate ``--rounds`` times so
a busy machine slows them alike:

- ``padding mask``: shuffled batches with the padding mask passed to the model, as
  ``token_logprobs`` did before it dropped the mask of right-padded batches (the
  baseline, reproduced by reporting every batch as not right-padded);
- ``shuffled``: the default;
- ``group_by_length``: ``sft.group_by_length``.

The table gives padded tokens per real token, median seconds, and each mode's speed-up
over the baseline (its median seconds / the mode's).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from pathlib import Path
from unittest import mock

import torch

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    from slca.config.engine import EngineConfig
    from slca.data import io
    from slca.modeling import load_causal_lm
    from slca.rollout.gold import build_example
    from slca.simulator import Simulator
    from slca.training.engines import build_engine
    from slca.training.sft import LENGTH_WINDOW, micro_batches, sft

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
    modes = {"padding mask": False, "shuffled": False, "group_by_length": True}
    seconds: dict[str, list[float]] = {mode: [] for mode in modes}
    padded = {}
    for round_ in range(args.rounds):
        for mode, grouped in modes.items():
            order = list(range(len(examples)))
            rng = random.Random(f"{round_}:0")
            rng.shuffle(order)
            batches = micro_batches(order, lengths, args.micro_batch_size, rng, grouped)
            padded[mode] = sum(max(lengths[i] for i in b) * len(b) for b in batches)
            keep_mask = (
                mock.patch("slca.training.batch.is_right_padded", return_value=False)
                if mode == "padding mask"
                else contextlib.nullcontext()
            )
            with keep_mask:
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
                seconds[mode].append(time.perf_counter() - start)
    layers = model.config.num_hidden_layers
    print(
        f"{len(examples)} trajectories (mean {statistics.mean(lengths):.0f} tokens), "
        f"{layers} layers × {model.config.hidden_size} wide, {args.threads} threads, "
        f"{args.rounds} rounds"
    )
    baseline = statistics.median(seconds["padding mask"])
    print("| mode | padded / real tokens | median s (one epoch) | speed-up | runs (s) |")
    print("|---|---|---|---|---|")
    for mode in modes:
        median = statistics.median(seconds[mode])
        runs = ", ".join(f"{s:.1f}" for s in seconds[mode])
        print(
            f"| {mode} | {padded[mode] / sum(lengths):.3f} | {median:.1f} | "
            f"{baseline / median:.2f}× | {runs} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
