"""Headroom of a policy: what RL can exploit, per HierR part.

GRPO-style RL learns only where a group of G samples of one prompt differs: it moves
the policy from its average sample (pass@1) towards its best one (pass@G). This
module samples G rollouts per task at the training temperature, scores them against
gold (process mode, as ``evaluate`` does) and reports, for every HierR part, R_tool
and Success@0.9:

- ``pass1``: the mean over tasks of the mean over samples (the expected score of one
  sample);
- ``passG``: the mean over tasks of the best sample's score (for a 0/1 score this is
  pass@G; for a graded part, the best-of-G mean);
- ``signal``: the share of tasks whose G samples do not all score the same (the
  groups that give GRPO a non-zero advantage on that part).

``passG − pass1`` is the room RL has on that part at this temperature. A part with no
room cannot be learnt by sampling more; only the SFT policy (or a bigger model) can.

``python -m slca.eval.headroom --model models/sft --splits train val`` writes a JSON
report and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from slca.atomic import atomic_write_text
from slca.config.rewards import RewardConfig
from slca.data.record import TaskRecord
from slca.eval.in_domain import SUCCESS_THRESHOLD, TOLERANCE
from slca.generation.engines import Engine, SamplingParams
from slca.rewards.score import RewardBreakdown, score_batch
from slca.rollout.loop import RolloutLimits, run_rollouts
from slca.rollout.types import is_truncated
from slca.simulator import Simulator

PARTS = ("format", "name", "key", "value", "parallel", "tool", "success")
"""What is reported: the five process parts, R_tool and Success@0.9."""


def part_scores(breakdown: RewardBreakdown) -> dict[str, float]:
    """One rollout's score on each of :data:`PARTS`."""
    out = {p: float(getattr(breakdown, p)) for p in PARTS[:6]}
    out["success"] = float(breakdown.tool >= SUCCESS_THRESHOLD - TOLERANCE)
    return out


def headroom_of(groups: Sequence[Sequence[RewardBreakdown]]) -> dict[str, dict[str, float]]:
    """``pass1``, ``passG`` and ``signal`` per part over groups of one task's samples
    (every group non-empty); see the module docstring."""
    if not groups or any(not g for g in groups):
        raise ValueError("headroom needs at least one task and one sample per task")
    out: dict[str, dict[str, float]] = {}
    n = len(groups)
    for part in PARTS:
        values = [[part_scores(b)[part] for b in group] for group in groups]
        out[part] = {
            "pass1": sum(sum(v) / len(v) for v in values) / n,
            "passG": sum(max(v) for v in values) / n,
            "signal": sum(max(v) > min(v) for v in values) / n,
        }
    return out


def measure(
    tasks: Sequence[TaskRecord],
    *,
    engine: Engine,
    tokenizer: Any,
    group_size: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    max_turns: int = 3,
    max_total_tokens: int = 2048,
    seed: int = 0,
    rewards: RewardConfig | None = None,
    measuring: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> dict[str, Any]:
    """Sample ``group_size`` rollouts of every task and report :func:`headroom_of`,
    plus the share of rollouts cut off by a length limit. ``measuring()``: the context
    the rollouts run in (:func:`run` passes :func:`slca.modeling.eval_autocast`)."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 to compare pass@1 with pass@G; got {group_size}")
    with Simulator(seed=seed) as simulator, measuring():
        rollouts = run_rollouts(
            tasks,
            engine=engine,
            tokenizer=tokenizer,
            simulator=simulator,
            group_size=group_size,
            sampling=SamplingParams(
                max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
            ),
            limits=RolloutLimits(max_turns=max_turns, max_total_tokens=max_total_tokens),
        )
    scores = score_batch(rollouts, tasks_by_rollout(tasks, group_size), rewards or _PROCESS)
    groups = [scores[g * group_size : (g + 1) * group_size] for g in range(len(tasks))]
    return {
        "tasks": len(tasks),
        "group_size": group_size,
        "temperature": temperature,
        "truncated_frac": sum(is_truncated(r) for r in rollouts) / len(rollouts),
        "parts": headroom_of(groups),
        "per_task": per_task(tasks, groups),
    }


def per_task(
    tasks: Sequence[TaskRecord], groups: Sequence[Sequence[RewardBreakdown]]
) -> list[dict[str, Any]]:
    """One line per task (in ``tasks``' order): its id, its samples, and the mean over
    them of Success@0.9 and R_tool, with the best sample's success. A comparison of two
    models pairs these lines by task (``tools/gpu_credit.py``)."""
    out = []
    for task, group in zip(tasks, groups, strict=True):
        scores = [part_scores(b) for b in group]
        out.append(
            {
                "task_id": task.id,
                "samples": len(scores),
                "success": sum(s["success"] for s in scores) / len(scores),
                "tool": sum(s["tool"] for s in scores) / len(scores),
                "best_success": max(s["success"] for s in scores),
            }
        )
    return out


_PROCESS = RewardConfig(mode="process")


def tasks_by_rollout(tasks: Sequence[TaskRecord], group_size: int) -> list[TaskRecord]:
    """The task of every rollout in :func:`run_rollouts`' order (task g at g·G + i)."""
    return [t for t in tasks for _ in range(group_size)]


def table(report: dict[str, dict[str, Any]]) -> str:
    """A Markdown table: one row per split and part."""
    lines = [
        "| split | part | pass@1 | pass@G | room | groups with signal |",
        "|---|---|---|---|---|---|",
    ]
    for split, result in report.items():
        for part, v in result["parts"].items():
            lines.append(
                f"| {split} | {part} | {v['pass1']:.3f} | {v['passG']:.3f} | "
                f"{v['passG'] - v['pass1']:+.3f} | {v['signal']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    parser = argparse.ArgumentParser(
        prog="python -m slca.eval.headroom", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", default="models/sft", help="HF checkpoint directory")
    parser.add_argument("--in-dir", default="data/tasks")
    parser.add_argument("--splits", nargs="+", default=["train", "val"])
    parser.add_argument("--sources", nargs="*", default=["synth"], help="none: every source")
    parser.add_argument("--tasks", type=int, default=64, help="tasks drawn per split")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-total-tokens", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device",
        default=None,
        help="default: cuda when there is a GPU, else cpu; the precision is "
        "slca.modeling.eval_dtype's (bf16 autocast on a bf16 GPU, else fp32), as evaluate's",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sequences per generate call")
    parser.add_argument("--out", type=Path, default=None, help="JSON report path")
    args = parser.parse_args(argv)
    try:
        report = run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"headroom failed: {exc}", file=sys.stderr)
        return 1
    print(table(report))
    return 0


def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    import functools

    import torch

    from slca.data.splits import draw_split
    from slca.generation.device import resolve_device
    from slca.generation.engines import HFEngine
    from slca.modeling import eval_autocast, load_causal_lm
    from slca.rollout.chat import fitting_tasks

    device = resolve_device(args.device, key="--device")
    # fp32 weights under the measurement precision (eval_autocast), as evaluate and
    # in-training validation score, so headroom compares with their figures
    model, tokenizer = load_causal_lm(args.model, device=device, dtype=torch.float32)
    engine = HFEngine(model, tokenizer, batch_size=args.batch_size)
    report = {}
    for split in args.splits:
        drawn = draw_split(
            args.in_dir,
            split,
            args.sources or None,
            args.tasks,
            args.seed,
            where="headroom",
            sources_label="--sources ",
        )
        tasks = fitting_tasks(drawn, tokenizer, args.max_total_tokens - args.max_new_tokens)
        report[split] = measure(
            tasks,
            engine=engine,
            tokenizer=tokenizer,
            group_size=args.group_size,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            max_turns=args.max_turns,
            max_total_tokens=args.max_total_tokens,
            seed=args.seed,
            measuring=functools.partial(eval_autocast, device),
        )
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    raise SystemExit(main())
