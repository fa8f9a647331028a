"""What pinning ATen, MKL and oneDNN to AVX2 (slca/cpu_kernels.py) costs on this CPU:
the CPU's own kernels and the pinned ones, side by side in one run.

    .venv/bin/python -m benchmarks.cpu_kernels

Each measurement is a fresh process (the libraries choose their kernels once per
process), the two settings taking turns ``--repeats`` times. A process loads the shipped
demo base and times, after one untimed warm-up each, ``--steps`` training steps (forward,
backward and AdamW on 8 sequences of 512 random token ids, as a pretrain or SFT
micro-batch) and one greedy generation (32 prompts of 300 token ids, 64 new tokens, the
evaluation's path). The table gives each setting's median seconds, the ratio, the
kernels ATen reported, and whether the two settings trained the same weights (on a CPU
without AVX-512 they should: the pins change nothing there).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

from slca.cpu_kernels import OPT_OUT, PINS

SETTINGS = ("native", "pinned")


def worker(model_dir: str, steps: int) -> dict:
    """One process's timings; run under the setting's environment."""
    import torch

    from slca.generation.engines import HFEngine, SamplingParams
    from slca.modeling import load_causal_lm

    torch.manual_seed(0)
    model, tokenizer = load_causal_lm(model_dir, dtype="float32", device="cpu")
    vocab = model.config.vocab_size
    batch = torch.randint(10, vocab, (8, 512), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step() -> None:
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    train_step()
    started = time.perf_counter()
    for _ in range(steps):
        train_step()
    train_s = time.perf_counter() - started
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().numpy().tobytes())

    model.eval()
    engine = HFEngine(model, tokenizer, batch_size=32)
    prompts = batch[:, :300].repeat(4, 1).tolist()
    sampling = SamplingParams(max_new_tokens=64, temperature=0.0)
    engine.generate(prompts[:2], sampling)
    started = time.perf_counter()
    engine.generate(prompts, sampling)
    generate_s = time.perf_counter() - started
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "train_s": train_s,
        "generate_s": generate_s,
        "weights": digest.hexdigest()[:12],
    }


def environment(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PINS and k != OPT_OUT}
    if setting == "native":
        env[OPT_OUT] = "native"
    return env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/demo-base")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.model, args.steps)))
        return
    runs: dict[str, list[dict]] = {setting: [] for setting in SETTINGS}
    command = [sys.executable, "-m", "benchmarks.cpu_kernels", "--worker"]
    command += ["--model", args.model, "--steps", str(args.steps)]
    for _ in range(args.repeats):
        for setting in SETTINGS:
            done = subprocess.run(
                command, env=environment(setting), capture_output=True, text=True, check=True
            )
            runs[setting].append(json.loads(done.stdout.strip().splitlines()[-1]))
    kernels = {s: runs[s][0]["capability"] for s in SETTINGS}
    same = {runs[s][0]["weights"] for s in SETTINGS}
    print(f"kernels: native {kernels['native']}, pinned {kernels['pinned']}")
    print(f"same weights after {args.steps + 1} steps: {len(same) == 1}")
    print("| workload | native (s) | pinned (s) | pinned / native |")
    print("|---|---|---|---|")
    for key, label in (
        ("train_s", f"{args.steps} training steps (8 × 512 tokens)"),
        ("generate_s", "greedy generation (32 × 300 + 64 tokens)"),
    ):
        native, pinned = (statistics.median(r[key] for r in runs[s]) for s in SETTINGS)
        print(f"| {label} | {native:.2f} | {pinned:.2f} | {pinned / native:.2f} |")


if __name__ == "__main__":
    main()
