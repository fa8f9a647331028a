"""The two-head bandit: the credit lab with the language model taken out.

The credit lab (``run.py --lab``) is a two-armed bandit played by a tiny LM: one tool
choice (R_tool) and one summary-style choice (R_sum, weighted by the spread), drawn
independently. This benchmark plays the same bandit with two independent softmax heads
of two logits each, through the pipeline's own estimators (``compute_advantages`` from
the registry, ``grpo`` and ``slca``), the same batch (8 tasks × 4 rollouts), the same
token-mean policy-gradient loss (one decision token per head), the same gradient
clipping and the same step-to-threshold rule (:mod:`slca.eval.lab`). What it adds is
the optimizer as a factor: AdamW (the lab's and the pipeline's) against plain SGD.

It answers one question about the lab's result (SLCA as slow as GRPO at spread 2):
is the credit effect absent from the bandit itself under the optimizer the lab uses, or
does the LM (shared parameters between the two choices) remove it? Seconds on a CPU.

    .venv/bin/python benchmarks/credit/bandit.py --out docs/results/bandit
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from slca.advantages import compute_advantages
from slca.eval.lab import censored_median, format_steps, steps_to_threshold

METHODS = ("grpo", "slca")
SPREADS = (0.5, 1.0, 2.0)
TASKS_PER_STEP, GROUP_SIZE = 8, 4
THRESHOLD, WINDOW = 0.9, 5
MAX_GRAD_NORM = 1.0
"""The lab's batch, threshold rule and clipping (benchmarks/credit/lab.yaml)."""


def run_bandit(
    method: str,
    spread: float,
    *,
    optimizer: str,
    lr: float,
    steps: int,
    seed: int,
    start: float = 0.5,
    tasks_per_step: int = TASKS_PER_STEP,
) -> list[tuple[int, float]]:
    """One run: the tool-accuracy curve ``[(step, share of the step's rollouts that
    chose the right tool)]``.

    Both heads start at probability ``start`` of the rewarded choice (the lab's SFT
    brings each to about 50 %). R_tool is 1 for the right tool, R_sum 1 for the marker,
    each drawn from its own head, so R_sum is noise for the tool choice.
    """
    generator = torch.Generator().manual_seed(seed)
    logit = float(torch.logit(torch.tensor(start)))
    heads = {h: torch.tensor([0.0, logit], requires_grad=True) for h in ("tool", "summary")}
    params = list(heads.values())
    if optimizer == "adamw":
        optim = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    elif optimizer == "sgd":
        optim = torch.optim.SGD(params, lr=lr)
    else:
        raise ValueError(f"optimizer must be adamw or sgd; got {optimizer!r}")
    batch = tasks_per_step * GROUP_SIZE
    group_index = torch.arange(tasks_per_step).repeat_interleave(GROUP_SIZE)
    # token 0 decides the tool, token 1 the summary style
    head_masks = {
        "tool": torch.tensor([[True, False]] * batch),
        "summary": torch.tensor([[False, True]] * batch),
    }
    curve = []
    for step in range(1, steps + 1):
        with torch.no_grad():
            probs = {h: torch.softmax(v, 0)[1].item() for h, v in heads.items()}
            choice = {
                h: (torch.rand(batch, generator=generator) < p).long() for h, p in probs.items()
            }
        advantages, _ = compute_advantages(
            method,
            rewards={h: choice[h].double() for h in heads},
            head_masks=head_masks,
            group_index=group_index,
            weights={"tool": 1.0, "summary": spread},
        )
        logp = torch.stack(
            [torch.log_softmax(heads[h], 0)[choice[h]] for h in ("tool", "summary")], dim=1
        )
        loss = -(advantages.float() * logp).sum() / logp.numel()  # token-mean
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optim.step()
        curve.append((step, choice["tool"].float().mean().item()))
    return curve


def sweep(args: argparse.Namespace) -> dict:
    rows = []
    settings = [
        (tasks, optimizer, lr)
        for tasks in args.tasks_per_step
        for optimizer, lrs in (("adamw", args.adamw_lrs), ("sgd", args.sgd_lrs))
        for lr in lrs
    ]
    for tasks, optimizer, lr in settings:
        for spread in args.spreads:
            for method in args.methods:
                steps = [
                    steps_to_threshold(
                        run_bandit(
                            method, spread, optimizer=optimizer, lr=lr, steps=args.steps,
                            seed=seed, tasks_per_step=tasks,
                        ),
                        THRESHOLD,
                        WINDOW,
                    )
                    for seed in range(args.seeds)
                ]  # fmt: skip
                rows.append(
                    {
                        "tasks_per_step": tasks,
                        "optimizer": optimizer,
                        "lr": lr,
                        "spread": spread,
                        "method": method,
                        "median": censored_median(steps, args.steps),
                        "censored": sum(s is None for s in steps),
                        "mean_reached": statistics.mean(s for s in steps if s is not None)
                        if any(s is not None for s in steps)
                        else None,
                    }
                )
    return {"steps": args.steps, "seeds": args.seeds, "rows": rows}


def markdown(result: dict) -> str:
    cap = result["steps"]
    by = {
        (r["tasks_per_step"], r["optimizer"], r["lr"], r["spread"], r["method"]): r
        for r in result["rows"]
    }
    settings = sorted(
        {(r["tasks_per_step"], r["optimizer"], r["lr"]) for r in result["rows"]},
        key=lambda s: (-s[0], s[1], s[2]),
    )
    spreads = sorted({r["spread"] for r in result["rows"]})
    lines = [
        "# The two-head bandit",
        "",
        f"Median steps to {THRESHOLD} tool accuracy (trailing {WINDOW}-step mean) over "
        f"{result['seeds']} seeds, budget {cap} steps; SLCA/GRPO in brackets. "
        "`benchmarks/credit/bandit.py`.",
        "",
        "| rollouts a step | optimizer | lr | "
        + " | ".join(f"spread {s:g}: grpo / slca" for s in spreads)
        + " |",
        "|---|---|---|" + "---|" * len(spreads),
    ]
    for tasks, optimizer, lr in settings:
        cells = []
        for s in spreads:
            g, c = by[(tasks, optimizer, lr, s, "grpo")], by[(tasks, optimizer, lr, s, "slca")]
            # a median of steps is >= 1; a censored one (inf) leaves no ratio
            both = not (math.isinf(g["median"]) or math.isinf(c["median"]))
            shown = f"{c['median'] / g['median']:.2f}" if both else "–"
            cells.append(
                f"{format_steps(g['median'], cap)} / {format_steps(c['median'], cap)} ({shown})"
            )
        rollouts = f"{tasks} × {GROUP_SIZE}"
        lines.append(f"| {rollouts} | {optimizer} | {lr:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--spreads", nargs="+", type=float, default=list(SPREADS))
    parser.add_argument("--seeds", type=int, default=101, help="runs per cell")
    parser.add_argument("--steps", type=int, default=60, help="the lab's budget")
    parser.add_argument(
        "--tasks-per-step", nargs="+", type=int, default=[TASKS_PER_STEP, 1],
        help="groups of 4 a step (the lab: 8); fewer make each step's gradient noisier",
    )  # fmt: skip
    parser.add_argument("--adamw-lrs", nargs="*", type=float, default=[0.02, 0.05, 0.1, 0.2])
    parser.add_argument("--sgd-lrs", nargs="*", type=float, default=[0.2, 0.3, 0.5, 1.0])
    parser.add_argument("--out", type=Path, default=None, help="directory for bandit.{md,json}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = sweep(args)
    text = markdown(result)
    print(text, end="")
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.out is not None:
        from slca.atomic import atomic_write_text

        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "bandit.md", text)
        atomic_write_text(args.out / "bandit.json", json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
