"""The comparison report: runs of one MLflow experiment as tables and PNG plots.

Runs are grouped into *arms* by what they trained (estimator, profile, per-call
granularity, summary weight); an evaluation-only run (the SFT model) is its own arm. Within an
arm, seeds aggregate as mean ± std; for a repeated (arm, seed) only the newest
finished run counts, so re-running a pipeline replaces rather than adds a seed. Where the
runs logged their per-task evaluation lines, every arm is also compared with GRPO and
with SFT task by task (:mod:`slca.eval.paired`): mean paired difference and its 95 %
bootstrap interval. The learning curves (``curve_learning.png``: held-out Success@0.9
from step 0, the SFT policy, and the training reward as a moving average) are also
logged into every RL run the report covers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slca.atomic import atomic_write_text

if TYPE_CHECKING:  # annotations only: the tables and pairing need no MLflow
    from slca.tracking import RunRecord

#: (metric key, column title, scale) of the report table, in order.
COLUMNS = (
    ("eval/in_domain/success_at_0.9", "Success@0.9 (%)", 100.0),
    ("eval/in_domain/process", "process", 1.0),
    ("eval/in_domain/summary", "summary", 1.0),
    ("eval/in_domain/tool_calls_per_task", "calls/task", 1.0),
    ("eval/in_domain/redundant_calls_per_task", "redundant/task", 1.0),
    ("eval/in_domain/no_call_accuracy", "no-call acc", 1.0),
    ("eval/value_probe/value_accuracy", "value probe (val)", 1.0),
    ("eval/bfcl/overall", "BFCL (%)", 100.0),
    ("eval/tau2/overall", "τ² (%)", 100.0),
    ("reward/total", "final train reward", 1.0),
    ("actor/grad_cos_tool_sum", "grad cos(tool, sum)", 1.0),
)

#: An overall column → the count of its set's tasks whose prompt did not fit the context,
#: which the overall counts as failures; shown beside it when any.
TOO_LONG = {
    "eval/in_domain/success_at_0.9": "eval/in_domain/too_long",
    "eval/bfcl/overall": "eval/bfcl/too_long",
    "eval/tau2/overall": "eval/tau2/too_long",
}

#: The arms every other arm is compared with, task by task.
BASELINES = ("grpo", "sft")

#: The held-out curve of the learning figure: the same val tasks at every validation.
VAL_CURVE = "val/success_at_0.9"
#: The training curve of the learning figure.
REWARD_CURVE = "reward/total"
#: Steps in the trailing moving average of the training reward: each step draws other
#: tasks, so a step's mean reward moves with how hard its draw was; averaging over 5
#: steps (40 tasks at the demo's 8 per step) leaves the trend.
REWARD_WINDOW = 5
#: The learning figure's file, in the report directory and under ``report/`` in MLflow.
LEARNING_FIGURE = "curve_learning.png"


def arm(run: RunRecord) -> str:
    """The arm a run belongs to: ``slca``, ``slca/reference``, ``slca/per_call``,
    ``grpo/w_sum=0.5``, ``sft``…"""
    params = run.params
    estimator = params.get("algorithm.advantage.estimator")
    if estimator is None:
        return run.name.removeprefix("eval-")
    label = estimator
    if params.get("algorithm.profile", "default") != "default":
        label += f"/{params['algorithm.profile']}"
    if params.get("algorithm.advantage.granularity") == "per_call":
        label += "/per_call"
    weight = params.get("algorithm.advantage.weights.summary")
    if weight is not None and float(weight) != 1.0:
        label += f"/w_sum={float(weight):g}"
    return label


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    seeds: list[str]
    run_ids: list[str]
    mean: dict[str, float]
    std: dict[str, float]


def summarise(runs: Sequence[RunRecord]) -> list[ArmSummary]:
    """One summary per arm (``sft`` first, then by name); the newest run per seed."""
    latest: dict[tuple[str, str], RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.start_time):
        latest[(arm(run), run.params.get("seed", "-"))] = run
    arms: dict[str, list[RunRecord]] = {}
    for (name, _), run in latest.items():
        arms.setdefault(name, []).append(run)
    out = []
    for name, members in sorted(arms.items(), key=lambda item: (item[0] != "sft", item[0])):
        mean, std = {}, {}
        for key in {k for r in members for k in r.metrics}:
            values = [r.metrics[key] for r in members if key in r.metrics]
            mean[key] = statistics.fmean(values)
            std[key] = statistics.stdev(values) if len(values) > 1 else 0.0
        out.append(
            ArmSummary(
                arm=name,
                seeds=[r.params.get("seed", "-") for r in members],
                run_ids=[r.run_id for r in members],
                mean=mean,
                std=std,
            )
        )
    return out


def markdown_table(summaries: Sequence[ArmSummary]) -> str:
    """Mean ± std per arm; a column appears when some arm has its metric."""
    columns = [c for c in COLUMNS if any(c[0] in s.mean for s in summaries)]
    head = ["arm", "seeds", *(title for _, title, _ in columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        cells = [s.arm, str(len(s.seeds))]
        for key, _, scale in columns:
            if key in s.mean:
                cell = f"{s.mean[key] * scale:.3g} ± {s.std[key] * scale:.2g}"
                too_long = s.mean.get(TOO_LONG.get(key, ""), 0.0)
                cells.append(cell + (f" ({too_long:g} too long)" if too_long else ""))
            else:
                cells.append("–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paired_differences(
    summaries: Sequence[ArmSummary], lines_by_run: Mapping[str, list[dict] | None]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per arm and baseline (``vs_grpo``, ``vs_sft``): the paired difference of in-domain
    Success@0.9 (points) and, against GRPO, of redundant calls per task, with 95 %
    bootstrap intervals. Arms or baselines without per-task lines are left out."""
    from slca.eval.paired import paired_difference, redundant_by_task, success_by_task

    def outcomes(summary: ArmSummary, per_task) -> dict[str, dict[str, float]] | None:
        found = {}
        for seed, run_id in zip(summary.seeds, summary.run_ids):
            lines = lines_by_run.get(run_id)
            if lines is None:
                return None
            found[seed] = per_task(lines)
        return found

    by_arm = {s.arm: s for s in summaries}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for summary in summaries:
        for base in BASELINES:
            if base == summary.arm or base not in by_arm or summary.arm == "sft":
                continue
            measures = [("success_points", success_by_task, 100.0)]
            if base == "grpo":
                measures.append(("redundant_per_task", redundant_by_task, 1.0))
            for name, per_task, scale in measures:
                arm, baseline = outcomes(summary, per_task), outcomes(by_arm[base], per_task)
                if arm is None or baseline is None:
                    continue
                d = paired_difference(arm, baseline)
                out.setdefault(summary.arm, {}).setdefault(f"vs_{base}", {})[name] = {
                    "mean": d.mean * scale,
                    "low": d.low * scale,
                    "high": d.high * scale,
                    "tasks": d.tasks,
                    "seeds": d.seeds,
                    "no_difference": d.no_difference,
                }
    return out


def paired_table(paired: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]]) -> str:
    """The paired differences as a markdown table: mean [95 % interval]."""

    def cell(arm: str, base: str, measure: str, fmt: str) -> str:
        d = paired.get(arm, {}).get(f"vs_{base}", {}).get(measure)
        if d is None:
            return "–"
        if d.get("no_difference"):
            return f"no difference observed ({d['tasks']} tasks)"
        return f"{d['mean']:{fmt}} [{d['low']:{fmt}}, {d['high']:{fmt}}]"

    head = [
        "arm",
        "Success@0.9 − GRPO (points)",
        "Success@0.9 − SFT (points)",
        "redundant/task − GRPO",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in paired:
        cells = [
            arm,
            cell(arm, "grpo", "success_points", "+.1f"),
            cell(arm, "sft", "success_points", "+.1f"),
            cell(arm, "grpo", "redundant_per_task", "+.2f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The trailing mean of ``values`` over the last ``window`` of them at each position
    (over all so far while fewer than ``window`` are in): one value per input, so the
    curve starts at the first step instead of ``window`` steps late."""
    if window < 1:
        raise ValueError(f"moving_average: window must be >= 1, got {window}")
    # each mean from its own slice, not a running sum: no rounding carried along the run
    return [statistics.fmean(values[max(0, i + 1 - window) : i + 1]) for i in range(len(values))]


def _smoothed(curve: Sequence[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """One run's curve, finite points in step order, as its trailing moving average."""
    points = sorted((step, value) for step, value in curve if math.isfinite(value))
    return list(zip([s for s, _ in points], moving_average([v for _, v in points], window)))


def _by_arm(
    runs: Sequence[RunRecord], key: str, window: int = 1
) -> dict[str, dict[int, list[float]]]:
    """Per arm and step, every seed's value of ``key`` (each run's curve smoothed over
    ``window`` steps first: a seed is averaged over its own steps, then over seeds)."""
    by_arm: dict[str, dict[int, list[float]]] = {}
    for run in runs:
        for step, value in _smoothed(run.curves.get(key, []), window):
            by_arm.setdefault(arm(run), {}).setdefault(step, []).append(value)
    return by_arm


def _draw_arms(ax, by_arm: Mapping[str, Mapping[int, list[float]]]) -> None:
    """Per arm, the mean over seeds against the step, ± their std where seeds differ."""
    for name, points in sorted(by_arm.items()):
        steps = sorted(points)
        means = [statistics.fmean(points[s]) for s in steps]
        ax.plot(steps, means, label=name, marker="o" if len(steps) < 30 else None)
        if any(len(points[s]) > 1 for s in steps):
            spread = [statistics.pstdev(points[s]) for s in steps]
            ax.fill_between(
                steps,
                [m - d for m, d in zip(means, spread)],
                [m + d for m, d in zip(means, spread)],
                alpha=0.2,
            )
    ax.set_xlabel("step")
    ax.legend()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(runs: Sequence[RunRecord], key: str, path: Path) -> bool:
    """Per arm, the mean over seeds of ``key`` against the step; False if no run has it."""
    by_arm = _by_arm(runs, key)
    if not by_arm:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    _draw_arms(ax, by_arm)
    ax.set_ylabel(key)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def learning_curves(
    runs: Sequence[RunRecord], window: int = REWARD_WINDOW
) -> tuple[dict[str, dict[int, list[float]]], dict[str, dict[int, list[float]]]]:
    """The learning figure's data, per arm and step with one value per seed: held-out
    Success@0.9 as validated (step 0 included), and the training reward as each run's
    trailing moving average over ``window`` steps."""
    return _by_arm(runs, VAL_CURVE), _by_arm(runs, REWARD_CURVE, window)


def plot_learning(runs: Sequence[RunRecord], path: Path, window: int = REWARD_WINDOW) -> bool:
    """Whether training learned, per arm (mean over seeds ± std): left, held-out
    Success@0.9 on the same val tasks at every validation, from step 0 (the SFT policy,
    before any update); right, the training reward as a trailing moving average over
    ``window`` steps. A step's raw reward mostly says which tasks that step drew (every
    arm draws the same ones, so the arms rise and fall together); fixed val tasks and
    the average show the trend. False, and no file, when no run has validation."""
    val, reward = learning_curves(runs, window)
    if not val:
        return False
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), sharex=True)
    _draw_arms(left, val)
    left.set_title("held-out val Success@0.9 (step 0: SFT)")
    left.set_ylabel(VAL_CURVE)
    if reward:
        _draw_arms(right, reward)
    right.set_title(f"training reward, moving average of {window} steps")
    right.set_ylabel(REWARD_CURVE)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_eval(summaries: Sequence[ArmSummary], path: Path) -> bool:
    """Bars of every evaluation column per arm (mean, std as error bars)."""
    columns = [
        c for c in COLUMNS if c[0].startswith("eval/") and any(c[0] in s.mean for s in summaries)
    ]
    if not columns:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(columns), figsize=(3 * len(columns), 3.5), squeeze=False)
    for ax, (key, title, scale) in zip(axes[0], columns):
        names = [s.arm for s in summaries if key in s.mean]
        ax.bar(
            names,
            [s.mean[key] * scale for s in summaries if key in s.mean],
            yerr=[s.std[key] * scale for s in summaries if key in s.mean],
        )
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


PROBE_KEY = "eval/value_probe/value_accuracy"
PROBE_NOTE = (
    "value probe (val): the share of string argument values the policy writes token for "
    "token right when teacher-forced along the gold trajectory, on synth tasks of the val "
    "split (slca.eval.value_probe; no sampling).\n"
)
LEARNING_NOTE = (
    f"Learning curves ({LEARNING_FIGURE}): left, held-out Success@0.9 on the same val "
    "tasks at every validation, step 0 being the SFT policy before any update; right, the "
    f"training reward as a trailing moving average over {REWARD_WINDOW} steps (a single "
    "step's reward mostly reflects which tasks it drew). Mean over seeds ± std.\n"
)


def write_report(
    runs: Sequence[RunRecord],
    out_dir: str | os.PathLike[str],
    title: str,
    lines_by_run: Mapping[str, list[dict] | None] | None = None,
) -> Path:
    """``report.md`` (table, paired differences, plots, run ids), ``summary.json`` and
    the PNG plots in ``out_dir``; returns the markdown file. ``lines_by_run``: each
    run's per-task evaluation lines (None where it has none), for the paired table."""
    if not runs:
        raise ValueError("report: no finished run to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries = summarise(runs)
    latest = {rid for s in summaries for rid in s.run_ids}
    kept = [r for r in runs if r.run_id in latest]
    lines = [f"# {title}\n", markdown_table(summaries)]
    if any(PROBE_KEY in s.mean for s in summaries):
        lines.append(PROBE_NOTE)
    paired = paired_differences(summaries, lines_by_run or {})
    if paired:
        lines += [
            "Paired differences on the same test tasks (mean over seeds per task; 95 % "
            "BCa bootstrap interval over tasks):\n",
            paired_table(paired),
        ]
    if plot_learning(kept, out / LEARNING_FIGURE):
        lines += [LEARNING_NOTE, f"![learning curves]({LEARNING_FIGURE})\n"]
    for key, name in (
        ("reward/total", "reward_total"),
        ("reward/tool", "reward_tool"),
        ("reward/sum", "reward_sum"),
        ("rollout/redundant_calls", "redundant"),
        ("val/success_at_0.9", "val_success"),
        ("val/redundant_calls_per_task", "val_redundant"),
    ):
        if plot_curves(kept, key, out / f"curve_{name}.png"):
            lines.append(f"![{key}](curve_{name}.png)\n")
    if plot_eval(summaries, out / "eval.png"):
        lines.append("![evaluation](eval.png)\n")
    lines.append("Runs: " + "; ".join(f"{s.arm}: {', '.join(s.run_ids)}" for s in summaries) + "\n")
    summary = {
        s.arm: {
            "seeds": s.seeds,
            "runs": s.run_ids,
            "mean": s.mean,
            "std": s.std,
            **({"paired": paired[s.arm]} if s.arm in paired else {}),
        }
        for s in summaries
    }
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    return report


def report(
    tracking_dir: str | os.PathLike[str] = "mlflow",
    experiment: str = "slca",
    out_dir: str | os.PathLike[str] = "reports/summary",
) -> Path:
    """The report of every finished run of ``experiment`` in the store at ``tracking_dir``."""
    from slca.tracking import evaluation_lines, experiment_runs, resolve_uri

    if (
        not os.environ.get("MLFLOW_TRACKING_URI")
        and not (Path(tracking_dir) / "mlflow.db").exists()
    ):
        raise ValueError(f"report: no MLflow store at {tracking_dir} (mlflow.db is missing)")
    runs = experiment_runs(tracking_dir, experiment=experiment)
    if not runs:
        raise ValueError(f"report: experiment {experiment!r} has no finished run in {tracking_dir}")
    uri = resolve_uri(tracking_dir, None)
    latest = {rid for s in summarise(runs) for rid in s.run_ids}
    lines_by_run = {rid: evaluation_lines(rid, tracking_uri=uri) for rid in latest}
    path = write_report(runs, out_dir, f"slca: experiment {experiment!r}", lines_by_run)
    if f"]({LEARNING_FIGURE})" in path.read_text():  # drawn now, not left by an older report
        trained = [r.run_id for r in runs if r.run_id in latest and is_training_run(r)]
        log_learning_figure(path.parent / LEARNING_FIGURE, trained, tracking_dir, experiment)
    return path


def is_training_run(run: RunRecord) -> bool:
    """Whether ``run`` trained a policy (an RL run), not only evaluated one."""
    return "algorithm.advantage.estimator" in run.params


def log_learning_figure(
    figure: Path, run_ids: Sequence[str], tracking_dir: str | os.PathLike[str], experiment: str
) -> None:
    """``figure`` into each of ``run_ids`` as ``report/<name>``, so the MLflow UI shows
    a run's learning beside its metrics; nothing when the report drew no such figure.
    The runs are finished: an artifact is a file in the run's artifact store, which
    MLflow accepts whatever the run's status (through the store's one-writer lock)."""
    from slca.tracking import Tracker

    if not run_ids or not figure.exists():
        return
    tracker = Tracker(tracking_dir, experiment=experiment)
    for run_id in run_ids:
        tracker.add_to_run(run_id, {}, [figure], artifact_path="report")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m slca.eval.report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--tracking-dir", default="mlflow")
    parser.add_argument("--experiment", default="slca")
    parser.add_argument("--out", default="reports/summary")
    args = parser.parse_args(argv)
    try:
        path = report(args.tracking_dir, args.experiment, args.out)
    except ValueError as exc:
        print(f"report failed: {exc}", file=sys.stderr)
        return 1
    print(path.read_text().split("\n![")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
