"""One RL step of SmolLM2-135M-Instruct on CPU, broken down by phase.

    .venv/bin/python benchmarks/rl_step.py --engine vllm --steps 3 --threads 2

The trainer's own phases on synth tasks, with the rollout engine of ``--engine``:
weight sync (the trainer's weights into the rollout engine), rollouts (the tool loop),
score (HierR), log-probs (old log-probs when recomputed, and the frozen reference's),
update (forward, backward and optimizer steps) and the rest of ``learn`` (collation,
advantages, metrics). The first step also pays vLLM's first-call costs; the table shows
every step and the mean over the steps after the first.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from slca.config.data import SynthParams
from slca.config.train import TrainConfig
from slca.data.synth import generate
from slca.simulator import Simulator

PHASES = ("sync", "rollout", "score", "logprobs", "update", "rest", "step")


class TimedSync:
    """Wraps the rollout engine to time its weight loads apart from its generation."""

    def __init__(self, engine):
        self.engine, self.name, self.sync_s = engine, engine.name, 0.0
        self.shares_module = getattr(engine, "shares_module", False)
        if hasattr(engine, "model"):
            self.model = engine.model

    def generate(self, prompts, params):
        return self.engine.generate(prompts, params)

    def load_weights(self, state_dict):
        start = time.perf_counter()
        self.engine.load_weights(state_dict)
        self.sync_s += time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["hf", "vllm"], default="vllm")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--kl-coef", type=float, default=0.001, help="0: no reference model")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from slca.config.vllm import VLLMConfig
    from slca.generation.engines import HFEngine
    from slca.generation.vllm_engine import VLLMEngine
    from slca.modeling import load_causal_lm, save_hf_checkpoint
    from slca.rollout.chat import ensure_tool_template
    from slca.training.engines import TorchEngine
    from slca.training.rl import Trainer

    config = TrainConfig.model_validate(
        {
            "steps": args.steps,
            "histogram_every": 10_000,
            "rollout": {
                "tasks_per_step": args.tasks_per_step,
                "group_size": args.group,
                "max_new_tokens": args.max_new_tokens,
                "max_turns": args.max_turns,
                "max_total_tokens": 2048,
                "engine": args.engine,
                "vllm": {"dtype": "float32", "cpu_threads_bind": f"0-{args.threads - 1}"},
            },
            "update": {"micro_batch_size": args.micro_batch_size},
            "algorithm": {"loss": {"kl_coef": args.kl_coef}},
        }
    )
    tasks = generate(SynthParams(n_tasks=args.tasks_per_step * args.steps), seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = load_causal_lm("smollm2")
        ensure_tool_template(tokenizer)
        path = save_hf_checkpoint(model, tokenizer, Path(tmp) / "smollm2")
        model.train()
        reference = None
        if args.kl_coef > 0:
            reference, _ = load_causal_lm(path, dtype="float32")
            reference.requires_grad_(False)
        update = TorchEngine(model, config.engine)
        started = time.perf_counter()
        if args.engine == "vllm":
            engine = VLLMEngine(
                path,
                stop_token_ids=[tokenizer.eos_token_id],
                settings=VLLMConfig(**config.rollout.vllm.model_dump()),
                max_model_len=config.rollout.max_total_tokens,
            )
        else:
            engine = HFEngine(model, tokenizer)
        print(f"{args.engine} engine start-up: {time.perf_counter() - started:.1f} s")
        timed = TimedSync(engine)
        trainer = Trainer(
            config,
            tasks=tasks,
            tokenizer=tokenizer,
            update=update,
            rollout_engine=timed,
            simulator=Simulator(),
            checkpoint_dir=Path(tmp) / "ckpt",
            reference=reference,
        )
        rows = []
        print("| step | " + " | ".join(f"{p} s" for p in PHASES) + " | policy tokens |")
        print("|---:|" + "---:|" * (len(PHASES) + 1))
        for step in range(1, args.steps + 1):
            timed.sync_s = 0.0
            t0 = time.perf_counter()
            sampled = trainer.sample()
            t1 = time.perf_counter()
            scores = trainer.score(sampled)
            t2 = time.perf_counter()
            metrics = trainer.learn(sampled, scores)
            t3 = time.perf_counter()
            phases = {
                "sync": timed.sync_s,
                "rollout": (t1 - t0) - timed.sync_s,
                "score": t2 - t1,
                "logprobs": metrics["perf/logprobs_s"],
                "update": metrics["perf/update_s"],
                "rest": (t3 - t2) - metrics["perf/logprobs_s"] - metrics["perf/update_s"],
                "step": t3 - t0,
            }
            rows.append(phases)
            cells = " | ".join(f"{phases[p]:.1f}" for p in PHASES)
            print(f"| {step} | {cells} | {metrics['rollout/policy_tokens']:.0f} |", flush=True)
        later = rows[1:] or rows
        mean = {p: sum(r[p] for r in later) / len(later) for p in PHASES}
        cells = " | ".join(f"{mean[p]:.1f}" for p in PHASES)
        print(f"| mean of steps 2.. | {cells} | |")
        if hasattr(engine, "close"):
            engine.close()


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it re-imports __main__
    torch.manual_seed(0)
    main()
