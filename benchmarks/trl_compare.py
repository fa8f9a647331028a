"""One RL training step, slca against TRL's GRPOTrainer, on CPU, side by side.

    .venv/bin/pip install -e '.[bench]'     # trl 1.16 (see docs/decisions.md)
    .venv/bin/python benchmarks/trl_compare.py                 # the tables in docs/benchmarks.md
    .venv/bin/python benchmarks/trl_compare.py --steps 2 --repeats 1 --est-steps 2   # quick

Same work on both sides:

- one tiny Qwen2-architecture model (the ``tiny`` base model: BPE tokenizer trained on
  the task texts, random init), built once here and loaded by both sides from disk;
- the same prompts in the same order: synth tasks rendered with the chat template and
  their tools, exactly as slca's rollout loop renders them (TRL gets the rendered
  text and tokenizes it to the same ids; checked);
- G completions per prompt, P prompts per step, ``max_new_tokens`` per completion,
  temperature 1, top-p 1, no top-k, fp32, no gradient checkpointing;
- one optimizer step per RL step on the whole generation batch (one micro-batch):
  slca ``epochs=1, minibatches=1, micro_batch_size=P·G``; TRL
  ``num_iterations=1, steps_per_generation=1, gradient_accumulation_steps=1,
  per_device_train_batch_size=P·G``;
- AdamW (torch's, β=(0.9, 0.999), ε=1e-8, no weight decay), constant lr, clip-norm 1;
- clipped surrogate ε=0.2, no KL (β=0, no reference model), token-mean loss (TRL
  ``loss_type="dapo"``: the sum over the batch's completion tokens divided by their
  count, which is slca's ``token-mean`` over a one-minibatch step);
- rewards from slca's own scorer: slca's loop with ``max_turns=1`` parses the turn and
  runs its calls in the simulator; TRL's reward function hands TRL's completions to the
  same loop (``run_rollouts`` with ``max_turns=1`` over an engine that replays them) and
  scores them with ``slca.rewards.score_batch``.

Each side runs in its own subprocess (so peak RSS, ``ru_maxrss``, is per side), with
the same torch thread count, warms up, then times ``--steps`` optimizer steps, from
the end of one step to the end of the next (everything the trainer does between
steps counts). Sides alternate ``--repeats`` times; the table gives medians.
Phases (generation, scoring, old log-probs, forward+loss, backward, clip+optimizer)
are timed in every run: slca's from its step metrics (``perf/<phase>_s``, see
``slca.training.rl.PHASES``; a renamed phase is a KeyError), TRL's by wrapping its own
methods (exclusive times; a wrapped method that never ran stops the run).

The second table is slca's own loop with estimator ``grpo`` and ``slca``: two
trainers from the same weights and seeds in one process, steps interleaved.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SIDES = ("slca", "slca-reuse", "trl")
"""slca as configured by default (recomputes the old log-probs), slca with
``recompute_old_logprobs=false`` (reuses the sampler's, as TRL does at μ=1), TRL."""
PHASES = ("generate", "score", "old_logprobs", "forward_loss", "backward", "optimizer", "other")


# ----------------------------------------------------------------------------- shared


class PhaseTimer:
    """Exclusive wall time per named phase: a wrapped call nested in another is
    charged to itself only."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []
        self.on = False

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            self._stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                nested = self._stack.pop()
                elapsed = time.perf_counter() - start
                if self.on:
                    self.totals[name] += elapsed - nested
                if self._stack:
                    self._stack[-1] += elapsed

        return timed

    def add(self, name: str, seconds: float) -> None:
        if self.on:
            self.totals[name] += seconds

    def wrap_method(self, owner: Any, attribute: str, name: str) -> None:
        """Time ``owner.attribute`` as phase ``name`` (AttributeError when it is gone)."""
        setattr(owner, attribute, self.wrap(name, getattr(owner, attribute)))

    def check(self, names: Sequence[str]) -> None:
        """Every phase in ``names`` was timed: a method that was renamed or is no longer
        called would report 0 s, silently."""
        missing = [n for n in names if self.totals.get(n, 0.0) <= 0.0]
        if missing:
            raise SystemExit(f"phases never timed: {missing}; did the library change?")


def rss_mb() -> float:
    """Current resident set (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def load_tasks(workspace: Path):
    from slca.data.record import TaskRecord

    lines = (workspace / "tasks.jsonl").read_text().splitlines()
    return [TaskRecord.model_validate_json(line) for line in lines]


def prompt_order(tasks, seed: int, n: int):
    """The tasks slca's sampler draws, in order (TRL gets its dataset in this order)."""
    from slca.training.rl import TaskSampler

    return TaskSampler(tasks, seed).take(0, n)


def render_prompt(task, tokenizer) -> str:
    """The prompt text slca's rollout loop tokenizes (chat template with the tools)."""
    from slca.rollout.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer, [tool.model_dump() for tool in task.tools])
    return renderer.render(
        [{"role": m.role, "content": m.content} for m in task.messages],
        add_generation_prompt=True,
    )


def slca_config(args, estimator: str, init_dir: Path):
    from slca.config.train import TrainConfig

    batch = args.tasks_per_step * args.group_size
    return TrainConfig.model_validate(
        {
            "init_dir": str(init_dir),
            "seed": args.seed,
            "steps": args.warmup + args.steps,
            "histogram_every": 10**6,  # the gradient-cosine probe is a diagnostic, off here
            "checkpoint_every": 10**6,
            "rollout": {
                "tasks_per_step": args.tasks_per_step,
                "group_size": args.group_size,
                "max_new_tokens": args.max_new_tokens,
                "max_turns": 1,
                "max_total_tokens": 4096,
                "temperature": 1.0,
                "top_p": 1.0,
                "generation_batch_size": batch,
            },
            "update": {
                "epochs": 1,
                "minibatches": 1,
                "micro_batch_size": batch,
                "recompute_old_logprobs": not args.no_recompute,
            },
            "algorithm": {
                "advantage": {"estimator": estimator},
                "loss": {
                    "clip_low": 0.2,
                    "clip_high": 0.2,
                    "kl_coef": 0.0,
                    "aggregation": "token-mean",
                },
            },
            "engine": {
                "engine": "torch",
                "bf16": False,
                "gradient_checkpointing": False,
                "optim": {"lr": args.lr, "weight_decay": 0.0, "max_grad_norm": 1.0},
            },
        }
    )


def slca_trainer(args, workspace: Path, estimator: str, stack):
    """slca's trainer as the train stage builds it (slca.training.factory)."""
    from slca.modeling import load_tokenizer
    from slca.training.factory import build_trainer

    config = slca_config(args, estimator, init_dir=workspace / "model")
    return build_trainer(
        config,
        tokenizer=load_tokenizer(workspace / "model"),
        tasks=load_tasks(workspace),
        checkpoint_dir=workspace / f"ckpt-{estimator}-{os.getpid()}",
        stack=stack,
    )


SLCA_PHASES = {
    "generate": "rollout",
    "score": "score",
    "old_logprobs": "logprobs",
    "backward": "backward",
    "optimizer": "optimizer",
}
"""This table's phases from slca's step metrics (``perf/<phase>_s``)."""


def slca_phases(metrics: dict[str, float]) -> dict[str, float]:
    """One step's phases (s, exclusive) from its metrics: ``forward_loss`` is the
    update less its backward and optimizer parts. A phase slca no longer reports is a
    KeyError, never a silent 0."""
    out = {ours: metrics[f"perf/{theirs}_s"] for ours, theirs in SLCA_PHASES.items()}
    out["forward_loss"] = metrics["perf/update_s"] - out["backward"] - out["optimizer"]
    return out


def setup_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)


# ----------------------------------------------------------------------------- children


def child_slca(args, workspace: Path) -> dict[str, Any]:
    import contextlib

    setup_threads(args.threads)
    timer = PhaseTimer()
    with contextlib.ExitStack() as stack:
        trainer = slca_trainer(args, workspace, "grpo", stack)
        rss_ready = rss_mb()
        ends, tokens = [], 0.0
        for step in range(args.warmup + args.steps):
            if step == args.warmup:
                timer.on = True
                ends.append(time.perf_counter())
            metrics = trainer.train_step()
            if step >= args.warmup:
                tokens += metrics["rollout/policy_tokens"]
                for phase, seconds in slca_phases(metrics).items():
                    timer.add(phase, seconds)
                ends.append(time.perf_counter())
    return result(args.child, args, timer, ends, tokens, rss_ready)


def child_trl(args, workspace: Path) -> dict[str, Any]:
    setup_threads(args.threads)
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from slca.config.rewards import RewardConfig
    from slca.rewards.score import score_batch
    from slca.simulator import Simulator

    timer = PhaseTimer()
    tokenizer = AutoTokenizer.from_pretrained(workspace / "model")
    model = AutoModelForCausalLM.from_pretrained(workspace / "model", dtype=torch.float32)
    tasks = load_tasks(workspace)
    by_id = {t.id: t for t in tasks}
    total_steps = args.warmup + args.steps
    order = prompt_order(tasks, args.seed, args.tasks_per_step * total_steps)
    rows = [{"prompt": render_prompt(t, tokenizer), "task_id": t.id} for t in order]
    dataset = Dataset.from_list(rows)
    simulator = Simulator()
    rewards_config = RewardConfig()
    weights = {"tool": 1.0, "summary": 1.0}

    def slca_reward(prompts, completions, completion_ids, task_id, **_):
        """slca's single-turn rollouts of TRL's completions (its loop parses each turn
        and runs its calls in the simulator, as with max_turns=1), scored by slca's
        scorer: HierR total = R_tool + R_summary."""
        rollouts = single_turn_rollouts(
            completion_ids, task_id, by_id, tokenizer, simulator, args.group_size
        )
        scores = score_batch(rollouts, by_id, rewards_config)
        return [weights["tool"] * s.tool + weights["summary"] * s.summary for s in scores]

    ends: list[float] = []
    tokens = [0.0]
    optimizer_started = [0.0]

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if state.global_step == args.warmup and not ends:
                timer.on = True
                ends.append(time.perf_counter())

        def on_pre_optimizer_step(self, a, state, control, **kw):
            optimizer_started[0] = time.perf_counter()

        def on_optimizer_step(self, a, state, control, **kw):
            timer.add("optimizer", time.perf_counter() - optimizer_started[0])

        def on_step_end(self, a, state, control, **kw):
            if ends:
                ends.append(time.perf_counter())

    batch = args.tasks_per_step * args.group_size
    config = GRPOConfig(
        output_dir=str(workspace / f"trl-out-{os.getpid()}"),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        seed=args.seed,
        max_steps=total_steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=args.group_size,
        num_iterations=1,
        shuffle_dataset=False,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        use_vllm=False,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        optim="adamw_torch",
        max_grad_norm=1.0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[slca_reward],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    # Phase timers on TRL's own methods (instance attributes shadow the class's).
    original_generate = trainer._generate_single_turn

    def generate(*a, **kw):
        completion_ids, logprobs = original_generate(*a, **kw)
        if timer.on:
            tokens[0] += sum(len(c) for c in completion_ids)
        return completion_ids, logprobs

    trainer._generate_single_turn = timer.wrap("generate", generate)
    timer.wrap_method(trainer, "_calculate_rewards", "score")
    timer.wrap_method(trainer, "compute_loss", "forward_loss")
    timer.wrap_method(trainer.accelerator, "backward", "backward")
    timer.wrap_method(trainer, "_clip_grad_norm", "optimizer")
    same = [
        tokenizer(r["prompt"])["input_ids"] == slca_prompt_ids(t, tokenizer)
        for r, t in zip(rows, order)
    ]
    if not all(same):
        raise SystemExit("TRL's prompt ids differ from slca's; the comparison would be unfair")
    rss_ready = rss_mb()
    trainer.train()
    timer.check(("generate", "score", "forward_loss", "backward", "optimizer"))
    out = result("trl", args, timer, ends, tokens[0], rss_ready)
    out["trl_version"] = trl.__version__
    return out


class Replay:
    """An engine that answers each prompt with a given completion, in order (TRL's
    completions, so slca's rollout loop can take them as its first turn)."""

    name = "replay"
    shares_module = False

    def __init__(self, completions: Sequence[Sequence[int]], stop_ids: Sequence[int]):
        self.completions, self.stop_ids = [list(c) for c in completions], set(stop_ids)

    def generate(self, prompts, params):
        from slca.generation.engines import Generation

        if len(prompts) != len(self.completions):
            raise RuntimeError(f"{len(prompts)} prompts for {len(self.completions)} completions")
        out = [
            Generation(ids, [0.0] * len(ids), stopped=bool(ids) and ids[-1] in self.stop_ids)
            for ids in self.completions
        ]
        self.completions = []  # one turn: a second call is an error
        return out

    def load_weights(self, state_dict) -> None:
        raise NotImplementedError


def single_turn_rollouts(completion_ids, task_ids, tasks_by_id, tokenizer, simulator, group):
    """slca's rollouts of TRL's completions (``group`` consecutive ones per prompt, as
    TRL repeats them): ``run_rollouts`` with ``max_turns=1`` parses each and runs its
    calls in the simulator, exactly as slca's own single-turn rollouts do."""
    from slca.generation.engines import SamplingParams
    from slca.rollout.chat import END_OF_TURN
    from slca.rollout.loop import RolloutLimits, run_rollouts

    prompts = [tasks_by_id[t] for t in task_ids[::group]]
    if [t for t in task_ids[::group] for _ in range(group)] != list(task_ids):
        raise RuntimeError("TRL's completions are not in groups of consecutive prompts")
    longest = max(len(c) for c in completion_ids)
    return run_rollouts(
        prompts,
        engine=Replay(completion_ids, [tokenizer.convert_tokens_to_ids(END_OF_TURN)]),
        tokenizer=tokenizer,
        simulator=simulator,
        group_size=group,
        sampling=SamplingParams(max_new_tokens=max(longest, 1)),
        limits=RolloutLimits(max_turns=1, max_total_tokens=1 << 20),
    )


def slca_prompt_ids(task, tokenizer) -> list[int]:
    from slca.rollout.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer, [tool.model_dump() for tool in task.tools])
    return renderer.prompt_ids([{"role": m.role, "content": m.content} for m in task.messages])


def child_estimators(args, workspace: Path) -> dict[str, Any]:
    """slca's loop, estimator grpo vs slca: same weights and seeds, steps interleaved
    (the order flips every step), one process."""
    import contextlib

    setup_threads(args.threads)
    stack = contextlib.ExitStack()
    trainers = {name: slca_trainer(args, workspace, name, stack) for name in ("grpo", "slca")}
    for trainer in trainers.values():  # warm-up, untimed
        for _ in range(args.warmup):
            trainer.train_step()
    times: dict[str, list[float]] = {name: [] for name in trainers}
    tokens = {name: 0.0 for name in trainers}
    for step in range(args.est_steps):
        names = ["grpo", "slca"] if step % 2 == 0 else ["slca", "grpo"]
        for name in names:
            start = time.perf_counter()
            metrics = trainers[name].train_step()
            times[name].append(time.perf_counter() - start)
            tokens[name] += metrics["rollout/policy_tokens"]
    return {
        name: {"step_s": times[name], "tokens": tokens[name], "threads": args.threads}
        for name in trainers
    }


def result(side, args, timer, ends, tokens, rss_ready) -> dict[str, Any]:
    steps = len(ends) - 1
    if steps != args.steps:
        raise SystemExit(f"{side}: timed {steps} steps, expected {args.steps}")
    wall = ends[-1] - ends[0]
    phases = {p: timer.totals.get(p, 0.0) / steps for p in PHASES if p != "other"}
    phases["other"] = wall / steps - sum(phases.values())
    return {
        "side": side,
        "steps": steps,
        "wall_s": wall,
        "steps_per_s": steps / wall,
        "step_s": [b - a for a, b in zip(ends, ends[1:])],
        "tokens_per_step": tokens / steps,
        "peak_rss_mb": peak_rss_mb(),
        "rss_ready_mb": rss_ready,
        "phases_s": phases,
        "threads": args.threads,
    }


# ----------------------------------------------------------------------------- parent


def build_workspace(args, workspace: Path) -> dict[str, Any]:
    """Tasks and the tiny model, written once; both sides load them from disk."""
    from slca.config.data import SynthParams
    from slca.config.steps import BaseModelParams
    from slca.data.synth import generate
    from slca.training.tiny import tiny_model, tokenizer_texts, train_tokenizer

    tasks = generate(SynthParams(n_tasks=args.n_tasks), seed=args.seed)
    (workspace / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    base = BaseModelParams(kind="tiny")  # the `tiny` base model's defaults
    tokenizer = train_tokenizer(tokenizer_texts(tasks), base.vocab_size)
    model = tiny_model(
        tokenizer,
        seed=base.seed,
        hidden_size=base.hidden_size,
        num_hidden_layers=base.num_hidden_layers,
        num_attention_heads=base.num_attention_heads,
        num_key_value_heads=base.num_key_value_heads,
        intermediate_size=base.intermediate_size,
    )
    model.save_pretrained(workspace / "model")
    tokenizer.save_pretrained(workspace / "model")
    lengths = [len(slca_prompt_ids(t, tokenizer)) for t in tasks]
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer),
        "hidden": base.hidden_size,
        "layers": base.num_hidden_layers,
        "prompt_tokens_mean": sum(lengths) / len(lengths),
        "prompt_tokens_max": max(lengths),
    }


def run_child(kind: str, args, workspace: Path) -> dict[str, Any]:
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(args.threads),
        MKL_NUM_THREADS=str(args.threads),
        TOKENIZERS_PARALLELISM="false",
        MLFLOW_DISABLE_TELEMETRY="true",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
    )
    command = [sys.executable, str(HERE), "--child", kind, "--workspace", str(workspace)]
    command += forwarded(args)
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"{kind} failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def forwarded(args) -> list[str]:
    out = []
    for name in (
        "steps",
        "warmup",
        "est_steps",
        "tasks_per_step",
        "group_size",
        "max_new_tokens",
        "threads",
        "seed",
        "lr",
    ):
        out += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return out


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "accelerate", "trl", "datasets"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def median(values):
    return statistics.median(values)


def report(runs: dict[str, list[dict]], estimators: dict | None, meta: dict) -> str:
    lines = [
        f"model: {meta['parameters'] / 1e6:.2f} M parameters (vocab {meta['vocab']}, hidden "
        f"{meta['hidden']}, {meta['layers']} layers); prompts {meta['prompt_tokens_mean']:.0f} "
        f"tokens on average (max {meta['prompt_tokens_max']}); P={meta['args']['tasks_per_step']} "
        f"prompts x G={meta['args']['group_size']}, max_new_tokens="
        f"{meta['args']['max_new_tokens']}; torch threads {meta['args']['threads']}; "
        f"{meta['args']['steps']} timed steps after {meta['args']['warmup']} warm-up, "
        f"{len(runs['slca'])} runs per side, order alternating (medians)",
        "versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "| side | steps/s | s/step | peak RSS MB | RSS before step 1 MB | tokens/step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    med = {}
    for side in SIDES:
        rs = runs[side]
        med[side] = {
            "steps_per_s": median([r["steps_per_s"] for r in rs]),
            "peak": median([r["peak_rss_mb"] for r in rs]),
            "ready": median([r["rss_ready_mb"] for r in rs]),
            "tokens": median([r["tokens_per_step"] for r in rs]),
            "phases": {p: median([r["phases_s"][p] for r in rs]) for p in PHASES},
        }
        m = med[side]
        lines.append(
            f"| {side} | {m['steps_per_s']:.3f} | {1 / m['steps_per_s']:.2f} | {m['peak']:.0f} "
            f"| {m['ready']:.0f} | {m['tokens']:.0f} |"
        )
    trl = med["trl"]
    for side in ("slca", "slca-reuse"):
        m = med[side]
        lines.append(
            f"| **{side} / trl** | **{m['steps_per_s'] / trl['steps_per_s']:.2f}x** | "
            f"| **{m['peak'] / trl['peak']:.2f}x** | {m['ready'] / trl['ready']:.2f}x | "
            f"{m['tokens'] / max(trl['tokens'], 1e-9):.2f}x |"
        )
    lines += [
        "",
        "per-step phases (s, exclusive, medians):",
        "",
        "| phase | " + " | ".join(SIDES) + " |",
        "|---|" + "---:|" * len(SIDES),
    ]
    for p in PHASES:
        lines.append(f"| {p} | " + " | ".join(f"{med[s]['phases'][p]:.3f}" for s in SIDES) + " |")
    if estimators:
        g, s = estimators["grpo"], estimators["slca"]
        total_g, total_s = sum(g["step_s"]), sum(s["step_s"])
        n = len(g["step_s"])
        lines += [
            "",
            f"slca's loop, estimator grpo vs slca ({n} interleaved steps each, same weights "
            "and seeds):",
            "",
            "| estimator | mean s/step | median s/step | tokens/step |",
            "|---|---:|---:|---:|",
            f"| grpo | {total_g / n:.3f} | {median(g['step_s']):.3f} | {g['tokens'] / n:.0f} |",
            f"| slca | {total_s / n:.3f} | {median(s['step_s']):.3f} | {s['tokens'] / n:.0f} |",
            f"| **slca / grpo** | **{total_s / total_g:.3f}x** | "
            f"{median(s['step_s']) / median(g['step_s']):.3f}x | "
            f"{s['tokens'] / max(g['tokens'], 1e-9):.2f}x |",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per side")
    parser.add_argument("--est-steps", type=int, default=10, help="estimator table: steps each")
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--n-tasks", type=int, default=400, help="synth tasks in the pool")
    parser.add_argument("--skip-estimators", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--child", choices=[*SIDES, "estimators"], help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        args.no_recompute = args.child == "slca-reuse"
        child = {
            "slca": child_slca,
            "slca-reuse": child_slca,
            "trl": child_trl,
            "estimators": child_estimators,
        }
        print(json.dumps(child[args.child](args, args.workspace)))
        return 0

    with tempfile.TemporaryDirectory(prefix="slca-trl-bench-") as tmp:
        workspace = Path(tmp)
        meta = build_workspace(args, workspace)
        meta.update(versions=versions(), args=vars(args) | {"json": str(args.json)})
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        for repeat in range(args.repeats):
            order = list(SIDES) if repeat % 2 == 0 else list(reversed(SIDES))
            for side in order:
                runs[side].append(run_child(side, args, workspace))
                r = runs[side][-1]
                print(
                    f"# run {repeat + 1} {side}: {r['steps_per_s']:.3f} steps/s, "
                    f"peak RSS {r['peak_rss_mb']:.0f} MB",
                    file=sys.stderr,
                )
        estimators = None if args.skip_estimators else run_child("estimators", args, workspace)
    text = report(runs, estimators, meta)
    print(text)
    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "runs": runs, "estimators": estimators}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
