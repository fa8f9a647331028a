"""Estimator cost: slca vs grpo, each under the default and the reference profile, and
both against one training step of a tiny model.

    .venv/bin/python benchmarks/advantages.py            # the tables in docs/benchmarks.md
    .venv/bin/python benchmarks/advantages.py --quick    # small sizes, a few seconds

All arms run side by side in one process on the same inputs (interleaved repeats,
median), so the ratios are robust to machine noise. The reference profile's arms pass
its estimator switches (float32 numerics, verl's singleton rule, the unweighted
penalty with a guarded row in every group); its segmenting (mask runs) is timed against
the grammar routing on the same layout. The training step is one forward+backward over
the same B×T tokens of a tiny Qwen2-architecture model, micro-batched the way any
trainer accumulates gradients: we time a few micro-batches and scale by their count.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from slca.advantages import compute_advantages
from slca.config.train import TrainConfig
from slca.segments import ENV, KIND_CODE, head_masks

REFERENCE = TrainConfig(algorithm={"profile": "reference"}).algorithm.advantage.switches()


def make_batch(B: int, T: int, group_size: int = 8, seed: int = 0):
    """Rollouts laid out as [tool tokens | tool response (env) | summary | padding]."""
    gen = torch.Generator().manual_seed(seed)
    positions = torch.arange(T)[None, :]
    tool_end = torch.randint(T // 8, T // 3, (B, 1), generator=gen)
    env_end = tool_end + torch.randint(1, T // 6, (B, 1), generator=gen)
    length = env_end + torch.randint(1, T // 3, (B, 1), generator=gen)
    masks = {
        "tool": positions < tool_end,
        "summary": (positions >= env_end) & (positions < length),
    }
    rewards = {
        "tool": torch.rand(B, generator=gen).round(decimals=1),
        "summary": torch.rand(B, generator=gen),
    }
    groups = torch.arange(B) // group_size
    return rewards, masks, groups


def time_estimators(B: int, T: int, repeats: int) -> dict[str, float]:
    """Median seconds of ``compute_advantages`` per arm: ``grpo``/``slca`` (default
    profile) and ``grpo_ref``/``slca_ref`` (the reference profile's switches)."""
    rewards, masks, groups = make_batch(B, T)
    guarded = torch.arange(B) % 8 == 0  # one guarded rollout per group of 8
    arms = {
        "grpo": ("grpo", {}),
        "slca": ("slca", {}),
        "grpo_ref": ("grpo", {**REFERENCE, "guarded": guarded}),
        "slca_ref": ("slca", {**REFERENCE, "guarded": guarded}),
    }
    samples: dict[str, list[float]] = {arm: [] for arm in arms}

    def call(arm: str) -> None:
        name, switches = arms[arm]
        compute_advantages(name, rewards=rewards, head_masks=masks, group_index=groups, **switches)

    for arm in arms:  # warm-up
        call(arm)
    for _ in range(repeats):
        for arm in arms:  # interleaved, so drift hits every arm alike
            start = time.perf_counter()
            call(arm)
            samples[arm].append(time.perf_counter() - start)
    return {arm: statistics.median(values) for arm, values in samples.items()}


def time_segmenting(B: int, T: int, repeats: int) -> dict[str, float]:
    """Median seconds of ``head_masks`` in grammar mode and in mask-run mode."""
    _, masks, _ = make_batch(B, T)
    codes = torch.full((B, T), ENV)
    codes[masks["tool"]] = KIND_CODE["tool_call"]
    codes[masks["summary"]] = KIND_CODE["summary"]
    samples: dict[str, list[float]] = {"grammar": [], "mask_runs": []}
    for mode in samples:
        head_masks(codes, mode=mode)
    for _ in range(repeats):
        for mode in samples:
            start = time.perf_counter()
            head_masks(codes, mode=mode)
            samples[mode].append(time.perf_counter() - start)
    return {mode: statistics.median(values) for mode, values in samples.items()}


def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=4096,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config), config


def time_train_step(model, vocab: int, B: int, T: int, tokens_per_micro: int) -> tuple[float, int]:
    """Seconds for forward+backward over B×T tokens, from timed micro-batches."""
    rows = max(1, tokens_per_micro // T)
    ids = torch.randint(0, vocab, (rows, T))
    micro_batches = -(-B // rows)
    timed = min(3, micro_batches)
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()  # warm-up
    start = time.perf_counter()
    for _ in range(timed):
        model(input_ids=ids, labels=ids).loss.backward()
    per_micro = (time.perf_counter() - start) / timed
    return per_micro * micro_batches, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--no-step", action="store_true", help="skip the training-step comparison")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = (
        [(64, 512), (512, 512)]
        if args.quick
        else [(b, t) for b in (64, 512, 4096) for t in (512, 4096)]
    )

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("| B | T | grpo ms | slca ms | slca/grpo |")
    print("|---:|---:|---:|---:|---:|")
    results = {}
    for B, T in sizes:
        t = time_estimators(B, T, args.repeats)
        results[(B, T)] = t
        print(
            f"| {B} | {T} | {t['grpo'] * 1e3:.2f} | {t['slca'] * 1e3:.2f} | "
            f"{t['slca'] / t['grpo']:.2f}x |",
            flush=True,
        )

    print("\nReference profile: the same estimators with its switches (float32 numerics,")
    print("verl singleton rule, unweighted penalty), and its segmenting, same inputs\n")
    print("| B | T | grpo ms | grpo ref ms | ref/default | slca ms | slca ref ms | ref/default |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for B, T in sizes:
        t = results[(B, T)]
        print(
            f"| {B} | {T} | {t['grpo'] * 1e3:.2f} | {t['grpo_ref'] * 1e3:.2f} | "
            f"{t['grpo_ref'] / t['grpo']:.2f}x | {t['slca'] * 1e3:.2f} | "
            f"{t['slca_ref'] * 1e3:.2f} | {t['slca_ref'] / t['slca']:.2f}x |",
            flush=True,
        )
    print("\n| B | T | grammar routing ms | mask runs ms | mask runs/grammar |")
    print("|---:|---:|---:|---:|---:|")
    for B, T in sizes:
        t = time_segmenting(B, T, args.repeats)
        print(
            f"| {B} | {T} | {t['grammar'] * 1e3:.2f} | {t['mask_runs'] * 1e3:.2f} | "
            f"{t['mask_runs'] / t['grammar']:.2f}x |",
            flush=True,
        )

    if args.no_step:
        return
    model, config = tiny_model()
    params = sum(p.numel() for p in model.parameters())
    step_sizes = [(512, 512)] if args.quick else [(64, 512), (512, 512), (512, 4096)]
    print(
        f"\nTraining step: Qwen2 architecture, {params / 1e6:.2f} M parameters, "
        "forward+backward of every token\n"
    )
    print("| B | T | step s (micro-batch rows) | slca ms | slca / step |")
    print("|---:|---:|---:|---:|---:|")
    for B, T in step_sizes:
        step, rows = time_train_step(model, config.vocab_size, B, T, tokens_per_micro=8192)
        slca_s = results[(B, T)]["slca"]
        print(
            f"| {B} | {T} | {step:.1f} ({rows}) | {slca_s * 1e3:.2f} | "
            f"{100 * slca_s / step:.3f}% |",
            flush=True,
        )


if __name__ == "__main__":
    main()
