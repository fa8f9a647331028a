"""Rollout throughput on CPU: the HF engine and vLLM side by side, in one run.

    .venv/bin/python benchmarks/rollout.py --model smollm2 --engines hf,vllm --threads 2
    .venv/bin/python benchmarks/rollout.py --model tiny --engines hf

The full loop on synth tasks: chat-template prompts, batched generation, labelling,
simulator calls, environment tokens. For each engine, on the same tasks and settings:
generated policy tokens per second of wall time (``tok/s``), per second inside the
engine (``engine tok/s``), and the share of the time outside the engine. The loop runs
``--repeats`` times per engine, the engines taking turns (vLLM's prefix cache is warm
from its second run on). The last line is vLLM's throughput over the HF engine's (best
repeat of each).
Defaults: the issue-14 workload (8 synth prompts, G=4, 64 new tokens, temperature 1,
fp32, one turn).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from slca.config.data import SynthParams
from slca.data.synth import generate
from slca.generation.engines import HFEngine, SamplingParams
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


def checkpoint(name: str, tasks, directory: Path) -> Path:
    """A local HF checkpoint of the model (vLLM loads directories only)."""
    from slca.modeling import load_causal_lm, save_hf_checkpoint
    from slca.rollout.chat import ensure_tool_template

    if name == "tiny":
        from slca.training.tiny import tiny_model, train_tokenizer

        texts = [m.content for t in tasks for m in t.messages]
        tokenizer = train_tokenizer(texts * 4, vocab_size=2048)
        # head size 32: the smallest vLLM's CPU attention supports
        model = tiny_model(tokenizer, hidden_size=128, num_attention_heads=4)
    else:
        model, tokenizer = load_causal_lm("smollm2")
        ensure_tool_template(tokenizer)
    return save_hf_checkpoint(model, tokenizer, directory / name)


def build(engine: str, path: Path, args):
    from slca.modeling import load_causal_lm, load_tokenizer

    if engine == "hf":
        model, tokenizer = load_causal_lm(path, dtype="float32")
        return HFEngine(model, tokenizer, batch_size=args.batch_size), tokenizer
    from slca.config.vllm import VLLMConfig
    from slca.generation.vllm_engine import VLLMEngine

    tokenizer = load_tokenizer(path)
    bind = args.vllm_bind or (f"0-{args.threads - 1}" if args.threads else None)
    settings = VLLMConfig(dtype="float32", kv_cache_gib=1.0, cpu_threads_bind=bind)
    vllm = VLLMEngine(
        path, stop_token_ids=[tokenizer.eos_token_id], settings=settings, max_model_len=4096
    )
    return vllm, tokenizer


def run(engine, tokenizer, tasks, args) -> tuple[int, float, float]:
    timed = TimedEngine(engine)
    start = time.perf_counter()
    rollouts = run_rollouts(
        tasks,
        engine=timed,
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=args.group,
        sampling=SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0),
        limits=RolloutLimits(max_turns=args.max_turns, max_total_tokens=4096),
    )
    return sum(r.n_policy_tokens for r in rollouts), time.perf_counter() - start, timed.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="smollm2")
    parser.add_argument("--engines", default="hf,vllm", help="comma-separated: hf, vllm")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-turns", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32, help="HF engine batch")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (0: default)")
    parser.add_argument("--vllm-bind", default=None, help="vLLM worker cores (default 0-threads)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = generate(SynthParams(n_tasks=args.tasks), seed=0)
    columns = "model engine repeat rollouts policy_tokens s tok/s engine_tok/s outside_engine"
    print("| " + " | ".join(c.replace("_", " ") for c in columns.split()) + " |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = checkpoint(args.model, tasks, Path(tmp))
        engines = {}
        for name in args.engines.split(","):
            started = time.perf_counter()
            engines[name] = build(name, path, args)
            print(f"{name}: engine start-up {time.perf_counter() - started:.1f} s", flush=True)
        # repeats interleave the engines, so both see the same load on a shared machine
        for repeat in range(1, args.repeats + 1):
            for name, (engine, tokenizer) in engines.items():
                tokens, seconds, inside = run(engine, tokenizer, tasks, args)
                best[name] = max(best.get(name, 0.0), tokens / seconds)
                print(
                    f"| {args.model} | {name} | {repeat} | {args.tasks * args.group} | {tokens} "
                    f"| {seconds:.1f} | {tokens / seconds:,.1f} | {tokens / inside:,.1f} "
                    f"| {100 * (1 - inside / seconds):.1f}% |",
                    flush=True,
                )
        for engine, _ in engines.values():
            if hasattr(engine, "close"):
                engine.close()
    if "hf" in best and "vllm" in best:
        print(f"vllm / hf (best repeat): {best['vllm'] / best['hf']:.2f}x")


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it re-imports __main__
    torch.manual_seed(0)
    main()
