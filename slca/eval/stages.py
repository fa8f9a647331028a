"""The evaluation step: greedy rollouts of one model on the held-out sets, scored.

A DVC stage (``python -m slca.eval.stages --params params.yaml``) and a Prefect task
call :func:`evaluate`. The task subsets are drawn from ``seed`` and the data alone, so
every model of a comparison meets the same tasks. The metrics (JSON) and one line per
task (JSON Lines) are written then renamed; they also go to MLflow, into
the run that trained the model (``mlflow_run.json`` in ``model_dir``) or a new run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from slca.config import ConfigError, StrictModel, load_section, parse_override
from slca.data import io
from slca.data.record import TaskRecord
from slca.rewards.config import RewardConfig

Progress = Callable[[str, int], Callable[[int], Any]]
"""Given a set's name and task count before the set runs, returns what is called with
the number of tasks each generation step finished."""


class InDomainSet(StrictModel):
    split: str = "test"
    """The held-out split (never trained on)."""
    sources: list[str] | None = None
    """Only tasks of these sources (e.g. ``[synth]``); null keeps every source."""
    max_tasks: int | None = Field(200, ge=1)
    """A seeded subset of this many tasks; null evaluates the whole split."""


class EvaluateParams(StrictModel):
    model_dir: str = "models/sft"
    """The model to evaluate (HF format)."""
    in_dir: str = "data/tasks"
    """Task data."""
    report_path: str = "reports/eval/sft.json"
    """The metrics (JSON); one line per task goes beside it (``<stem>.tasks.jsonl``)."""
    seed: int = 0
    """Draws the task subsets."""
    in_domain: InDomainSet = Field(default_factory=InDomainSet)
    """The in-domain set."""
    max_new_tokens: int = Field(96, ge=1)
    """Tokens per policy turn."""
    max_turns: int = Field(3, ge=1)
    """Policy turns per task."""
    max_total_tokens: int = Field(2048, ge=16)
    """Prompt + turns + tool responses; tasks whose prompt alone leaves no room for a
    turn are left out and counted (``<set>/too_long``)."""
    generation_batch_size: int = Field(32, ge=1)
    """Rollouts generated together."""
    rewards: RewardConfig = Field(default_factory=lambda: RewardConfig(mode="process"))
    """The scorer (process mode: against gold)."""
    tracking_dir: str | None = "mlflow"
    """MLflow store the metrics go to; null logs nothing."""
    experiment: str = "slca"
    """MLflow experiment (of the training runs)."""
    run_name: str | None = None
    """Name of the new MLflow run when the model has no training run (e.g. the SFT
    model); default ``eval-<model_dir name>``."""


def draw(tasks: Sequence[TaskRecord], n: int | None, seed: int) -> list[TaskRecord]:
    """``n`` tasks drawn with ``seed`` from ``tasks`` in id order (all when ``n`` is None
    or larger): the same data and seed give the same subset, whatever the file order."""
    ordered = sorted(tasks, key=lambda t: t.id)
    if n is None or n >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, n), key=lambda t: t.id)


def evaluate(params: EvaluateParams, progress: Progress | None = None) -> dict[str, float]:
    """Evaluate ``params.model_dir``; writes the report and returns its metrics."""
    import torch

    from slca.eval.in_domain import in_domain_metrics
    from slca.modeling import load_causal_lm
    from slca.rewards.score import score_batch
    from slca.rollout.engines import HFEngine, SamplingParams
    from slca.rollout.loop import RolloutLimits, run_rollouts
    from slca.simulator import Simulator
    from slca.training.stages import RUN_FILE

    torch.manual_seed(params.seed)
    model, tokenizer = load_causal_lm(params.model_dir, dtype="float32")
    engine = HFEngine(model, tokenizer, batch_size=params.generation_batch_size)
    sampling = SamplingParams(max_new_tokens=params.max_new_tokens, temperature=0.0)
    limits = RolloutLimits(max_turns=params.max_turns, max_total_tokens=params.max_total_tokens)
    budget = params.max_total_tokens - params.max_new_tokens

    split = params.in_domain
    pool = [
        t
        for t in io.read_dataset(params.in_dir, [split.split])
        if split.sources is None or t.source in split.sources
    ]
    if not pool:
        raise ValueError(
            f"evaluate: no {split.split!r} task in {params.in_dir}"
            + (f" from sources {split.sources}" if split.sources else "")
        )
    drawn = draw(pool, split.max_tasks, params.seed)
    tasks = _fitting(drawn, tokenizer, budget)
    metrics: dict[str, float] = {"in_domain/too_long": float(len(drawn) - len(tasks))}
    lines: list[dict[str, Any]] = []
    if tasks:
        with Simulator(seed=params.seed) as simulator:
            rollouts = run_rollouts(
                tasks,
                engine=engine,
                tokenizer=tokenizer,
                simulator=simulator,
                group_size=1,
                sampling=sampling,
                limits=limits,
                progress=None if progress is None else progress("in_domain", len(tasks)),
            )
        breakdowns = score_batch(rollouts, tasks, params.rewards)
        metrics.update(in_domain_metrics(breakdowns))
        lines += [
            {
                "set": "in_domain",
                "task_id": t.id,
                "process": b.tool,
                "summary": b.summary_raw,
                "calls": b.n_calls,
                "redundant": b.redundant_calls,
                "finish": r.finish_reason,
                "answer": r.summary[:500],
            }
            for t, r, b in zip(tasks, rollouts, breakdowns)
        ]
    report = Path(params.report_path)
    per_task = report.with_name(report.stem + ".tasks.jsonl")
    io.atomic_write_text(
        per_task, "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
    )
    io.atomic_write_text(report, json.dumps(metrics, indent=1, sort_keys=True) + "\n")
    if params.tracking_dir is not None:
        from slca.tracking import log_evaluation

        run_file = Path(params.model_dir) / RUN_FILE
        run = json.loads(run_file.read_text()) if run_file.exists() else {}
        log_evaluation(
            params.tracking_dir,
            experiment=params.experiment,
            metrics={f"eval/{k}": v for k, v in metrics.items()},
            reports=[report, per_task],
            run_id=run.get("run_id") if run.get("experiment") == params.experiment else None,
            run_name=params.run_name or f"eval-{Path(params.model_dir).name}",
        )
    return metrics


def _fitting(tasks: list[TaskRecord], tokenizer: Any, budget: int) -> list[TaskRecord]:
    from slca.training.stages import fitting_tasks

    try:
        return fitting_tasks(tasks, tokenizer, budget)
    except ValueError:  # none fits: the set is reported as all too long
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m slca.eval.stages", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "-S",
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a param, as dvc exp run -S (evaluate.model_dir=models/sft); repeatable",
    )
    args = parser.parse_args(argv)
    try:
        overrides = dict(parse_override(text) for text in args.set)
        params = load_section(args.params, "evaluate", EvaluateParams, overrides)
        metrics = evaluate(params, progress=tqdm_progress())
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"evaluate failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(metrics, indent=1, sort_keys=True))
    return 0


def tqdm_progress() -> Progress:
    """A progress bar per evaluation set (on stderr)."""
    from tqdm.auto import tqdm

    def start(name: str, total: int) -> Callable[[int], Any]:
        return tqdm(total=total, desc=f"evaluate {name}", unit="task").update

    return start


if __name__ == "__main__":
    raise SystemExit(main())
