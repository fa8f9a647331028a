"""The credit lab: GRPO against SLCA where credit is the only difference that matters.

    .venv/bin/python -m benchmarks.credit.run --lab            # docs/results.md's lab figures
    .venv/bin/python -m benchmarks.credit.run --lab --seeds 0 --spreads 2 --steps 4  # quick

1. Tasks (slca.data.lab): the request's cue word decides which of two tools is right;
   RL tasks have the cued tool as gold, the SFT demonstrations call each tool for half
   of each cue's tasks (so the tool is independent of the cue). By default every
   request names the same day (``--cues today``): the tiny policy does not learn to
   read a cue within an RL budget, so the choice is a two-tool bandit.
2. The pipeline's stages with ``benchmarks/credit/lab.yaml``: a tiny base model whose
   tokenizer is trained on the demonstrations, SFT on them with half the summaries
   poor (no "Here is what I found"). The policy starts at chance on both choices.
3. The pipeline's train stage for every method × spread × seed, two at a time, one
   torch thread each: R_tool = 1 for the cued tool, 0 for the other; R_sum = 1 for a
   summary with the marker, 0 without (the ``marker`` scorer); the spread is the
   summary weight (GRPO: R = R_tool + spread·R_sum; SLCA: Â_sum = spread·z(R_sum)).
   Only the estimator, the seed and the spread differ between runs.
4. Report: steps until the trailing 5-step mean of ``reward/name`` (the share of
   rollouts calling the cued tool: R_tool's only weighted part here, read on its own
   so that a price a run adds to R_tool, as ``-S train.rewards.truncation.head=tool``
   does, is not counted as a wrong tool) reaches 0.9, per run and their median over seeds
   (a run that never reaches it counts as more than the budget); learning curves
   (PNG and table); ``lab.md`` and ``summary.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.credit import run as credit  # its MLflow server the parallel runs log through

REPO = Path(__file__).resolve().parents[2]
PARAMS = Path(__file__).with_name("lab.yaml")
METHODS = ("grpo", "slca")
SPREADS = (0.5, 1.0, 2.0)
SEEDS = (0, 1, 2, 3, 4)
RL_TASKS, DEMONSTRATIONS = 512, 512
CUES = ("today",)  # one cue: the tiny policy does not learn to read one (slca.data.lab)
TASK_SEED, DEMO_SEED = 1, 0
THRESHOLD, WINDOW = 0.9, 5
ACCURACY = "reward/name"  # the name part: 1 for the cued tool, 0 for the other
TARGET_RATIO = 0.8
CURVE_KEYS = (
    ACCURACY,
    "reward/tool",
    "reward/sum",
    "rollout/tool_calls_per_task",
    "rollout/finished_frac",
    "actor/grad_cos_tool_sum",
    "actor/entropy",
    "adv/tool_std",
    "adv/sum_std",
    "perf/step_s",
)


def run_name(method: str, spread: float, seed: int) -> str:
    return f"{method}-sp{spread:g}-s{seed}"


def jobs(args: argparse.Namespace) -> list[dict]:
    """Every run: seeds outermost, so a partial lab still covers every arm."""
    return [
        {"name": run_name(m, spread, seed), "method": m, "spread": spread, "seed": seed}
        for seed in args.seeds
        for spread in args.spreads
        for m in args.methods
    ]


def train_command(job: dict, args: argparse.Namespace) -> list[str]:
    work = args.work / "runs" / job["name"]
    weights = json.dumps({"tool": 1.0, "summary": job["spread"]})
    command = [
        sys.executable, "-m", "slca.training.stages", "train", "--params", str(args.params),
        "-S", f"train.estimator={job['method']}",
        "-S", f"train.seed={job['seed']}",
        "-S", f"train.algorithm.advantage.weights={weights}",
        "-S", f"train.init_dir={args.work / 'models/sft'}",
        "-S", f"train.in_dir={args.work / 'data/tasks'}",
        "-S", f"train.out_dir={work / 'model'}",
        "-S", f"train.checkpoint_dir={work / 'checkpoints'}",
        "-S", f"train.tracking_dir={args.tracking_dir}",
        "-S", f"train.experiment={args.experiment}",
        "-S", f"train.run_name={job['name']}",
    ]  # fmt: skip
    if args.steps is not None:
        command += ["-S", f"train.steps={args.steps}", "-S", f"train.checkpoint_every={args.steps}"]
    for item in args.set:
        command += ["-S", item]
    return command


def _run(name: str, commands: list[list[str]], log: Path) -> tuple[str, int, float]:
    started = time.perf_counter()
    with log.open("w") as handle:
        for command in commands:
            done = subprocess.run(
                command,
                cwd=REPO,
                env=credit.job_env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
            if done.returncode != 0:
                return name, done.returncode, time.perf_counter() - started
    return name, 0, time.perf_counter() - started


def build_policy(args: argparse.Namespace) -> tuple[str, int, float]:
    """Lab tasks and demonstrations, then the base model and SFT stages."""
    from slca.data.lab import lab_tasks, write_dataset

    started = time.perf_counter()
    data = args.work / "data"
    write_dataset(lab_tasks(args.rl_tasks, TASK_SEED, cues=args.cues), data / "tasks")
    demos = lab_tasks(args.demonstrations, DEMO_SEED, demonstrations=True, cues=args.cues)
    write_dataset(demos, data / "demos")
    stage = [sys.executable, "-m", "slca.training.stages"]
    base = [
        *stage, "base_model", "--params", str(args.params),
        "-S", f"base_model.in_dir={data / 'demos'}",
        "-S", f"base_model.out_dir={args.work / 'models/base'}",
    ]  # fmt: skip
    sft = [
        *stage, "sft", "--params", str(args.params),
        "-S", f"sft.base_dir={args.work / 'models/base'}",
        "-S", f"sft.in_dir={data / 'demos'}",
        "-S", f"sft.out_dir={args.work / 'models/sft'}",
        # the lab's policy is a fixture of its runs, not a run to compare: no MLflow run
        # (the default store, ./mlflow, is the repository's)
        "-S", "sft.tracking_dir=null",
    ]  # fmt: skip
    name, code, seconds = _run("policy", [base, sft], args.work / "policy.log")
    return name, code, time.perf_counter() - started


def run_all(args: argparse.Namespace) -> list[tuple[str, int, float]]:
    """The policy (once per work directory) and every run. One lab per work directory
    (a second is refused, naming the first); a run's earlier output is left to the train
    stage, which replaces only the same configuration's and refuses anything else."""
    from slca.locks import ExclusiveLock

    with ExclusiveLock(args.work / ".lab.lock", what=f"credit lab work directory {args.work}"):
        return _run_all(args)


def _run_all(args: argparse.Namespace) -> list[tuple[str, int, float]]:
    results = []
    if not (args.work / "models/sft/config.json").exists():
        results.append(build_policy(args))
        _print(*results[-1])
        if results[-1][1] != 0:
            return results
    (args.work / "runs").mkdir(parents=True, exist_ok=True)
    prepare_store(args)
    with credit.tracking_server(args), ThreadPoolExecutor(args.workers) as pool:
        futures = [
            pool.submit(
                _run,
                job["name"],
                [train_command(job, args)],
                args.work / "runs" / f"{job['name']}.log",
            )
            for job in jobs(args)
        ]
        for future in futures:
            results.append(future.result())
            _print(*results[-1])
    return results


def prepare_store(args: argparse.Namespace) -> None:
    """Create the MLflow store and experiment before runs start in parallel: two
    processes that find no store both migrate a new SQLite file, and one fails
    ("duplicate column name"), as they would both create a missing experiment."""
    from slca.tracking import Tracker

    Tracker(args.tracking_dir, experiment=args.experiment).ensure_experiment()


def _print(name: str, code: int, seconds: float) -> None:
    print(f"{name}: {'ok' if code == 0 else f'FAILED ({code})'} in {seconds:.0f} s", flush=True)


# ------------------------------------------------------------------ report


def collect(args: argparse.Namespace) -> dict[str, dict]:
    """The newest finished run of each lab job: its curves, by run name."""
    from slca.tracking import experiment_runs

    wanted = {job["name"]: job for job in jobs(args)}
    found: dict[str, dict] = {}
    for run in experiment_runs(
        args.tracking_dir, experiment=args.experiment, curve_keys=CURVE_KEYS
    ):
        if run.name in wanted:  # oldest first: a rerun replaces an earlier run
            found[run.name] = {**wanted[run.name], "curves": run.curves}
    return found


def analyse(runs: dict[str, dict], cap: int) -> dict:
    """Steps to threshold per run, medians per method × spread, mean curves."""
    from slca.eval.lab import censored_median, steps_to_threshold, trailing_mean

    arms: dict[tuple[str, float], dict] = {}
    for run in runs.values():
        tool = run["curves"].get(ACCURACY, [])
        reached = steps_to_threshold(tool, THRESHOLD, WINDOW)
        arm = arms.setdefault((run["method"], run["spread"]), {"seeds": {}, "curves": {}})
        arm["seeds"][run["seed"]] = reached
        for key, curve in run["curves"].items():
            arm["curves"].setdefault(key, []).append(dict(curve))
        arm["curves"].setdefault("smoothed_tool", []).append(dict(trailing_mean(tool, WINDOW)))
    out = {"threshold": THRESHOLD, "window": WINDOW, "cap": cap, "arms": []}
    for (method, spread), arm in sorted(arms.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        values = [arm["seeds"][s] for s in sorted(arm["seeds"])]
        means = {key: _mean_curve(curves) for key, curves in arm["curves"].items()}
        out["arms"].append(
            {
                "method": method,
                "spread": spread,
                "seeds": {str(s): arm["seeds"][s] for s in sorted(arm["seeds"])},
                "median": censored_median(values, cap),
                "censored": sum(v is None for v in values),
                "curves": means,
            }
        )
    return out


def _mean_curve(curves: list[dict[int, float]]) -> dict[int, tuple[float, float]]:
    """Step → (mean, std over runs) at the steps every run logged (finite values)."""
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    out = {}
    for step in steps:
        xs = [c[step] for c in curves if math.isfinite(c[step])]
        if xs:
            out[step] = (statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)
    return out


def verdict(result: dict) -> tuple[str, float | None]:
    """The target at the largest spread: SLCA's median ≤ 0.8 × GRPO's."""
    by = {(a["method"], a["spread"]): a["median"] for a in result["arms"]}
    spreads = sorted({a["spread"] for a in result["arms"]})
    if not spreads or ("slca", spreads[-1]) not in by or ("grpo", spreads[-1]) not in by:
        return "not evaluated (both methods are needed)", None
    slca, grpo = by[("slca", spreads[-1])], by[("grpo", spreads[-1])]
    if math.isinf(slca):
        return f"not met: SLCA's median exceeds the budget at spread {spreads[-1]:g}", None
    if math.isinf(grpo):  # GRPO's true median is above the cap, so the ratio is below slca/cap
        ratio = slca / result["cap"]
        met = ratio <= TARGET_RATIO
        return (f"{'met' if met else 'undecided'}: GRPO's median exceeds the budget; "
                f"SLCA/GRPO < {ratio:.2f}"), ratio  # fmt: skip
    ratio = slca / grpo
    return f"{'met' if ratio <= TARGET_RATIO else 'not met'}: SLCA/GRPO = {ratio:.2f}", ratio


def markdown(result: dict, cap: int) -> str:
    from slca.eval.lab import format_steps

    seeds = sorted({s for a in result["arms"] for s in a["seeds"]}, key=int)
    lines = [
        f"Steps until the trailing {WINDOW}-step mean of {ACCURACY} (the share of rollouts "
        f"calling the cued tool) reaches {THRESHOLD}; budget {cap} steps (`>{cap}`: not "
        "reached, counted as more than the budget in the median).",
        "",
        "| spread | method | median | " + " | ".join(f"seed {s}" for s in seeds) + " | censored |",
        "|---|---|---|" + "---|" * len(seeds) + "---|",
    ]
    for a in result["arms"]:
        cells = [format_steps(math.inf if v is None else v, cap) for v in a["seeds"].values()]
        lines.append(
            f"| {a['spread']:g} | {a['method']} | {format_steps(a['median'], cap)} | "
            + " | ".join(cells)
            + f" | {a['censored']}/{len(cells)} |"
        )
    lines += ["", f"Target (SLCA ≤ {TARGET_RATIO} × GRPO at the largest spread): "
              f"{verdict(result)[0]}.", ""]  # fmt: skip
    marks = [1, *range(10, cap + 1, 10)]
    for key, title in (
        (ACCURACY, f"tool accuracy ({ACCURACY})"),
        ("reward/sum", "summary marker rate (reward/sum)"),
    ):
        lines += [
            f"Mean {title} over seeds, by step:",
            "",
            "| spread | method | " + " | ".join(str(m) for m in marks) + " |",
            "|---|---|" + "---|" * len(marks),
        ]
        for a in result["arms"]:
            curve = a["curves"].get(key, {})
            cells = [f"{curve[m][0]:.2f}" if m in curve else "–" for m in marks]
            lines.append(f"| {a['spread']:g} | {a['method']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Means over each run's steps, then over seeds:",
        "",
        "| spread | method | calls/rollout | finished | entropy | adv/tool_std | adv/sum_std "
        "| grad cos(tool, sum) | step s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in result["arms"]:
        cells = []
        for key in (
            "rollout/tool_calls_per_task",
            "rollout/finished_frac",
            "actor/entropy",
            "adv/tool_std",
            "adv/sum_std",
            "actor/grad_cos_tool_sum",
            "perf/step_s",
        ):
            points = [m for m, _ in a["curves"].get(key, {}).values()]
            cells.append(f"{statistics.fmean(points):.3f}" if points else "–")
        lines.append(f"| {a['spread']:g} | {a['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spreads = sorted({a["spread"] for a in result["arms"]})
    paths = []
    for key, name, ylabel in (
        ("smoothed_tool", "lab_tool_accuracy.png", f"tool accuracy ({WINDOW}-step mean)"),
        ("reward/sum", "lab_summary_marker.png", "summary marker rate"),
    ):
        fig, axes = plt.subplots(1, len(spreads), figsize=(4.2 * len(spreads), 3.4), sharey=True)
        axes = [axes] if len(spreads) == 1 else list(axes)
        for ax, spread in zip(axes, spreads):
            for a in (a for a in result["arms"] if a["spread"] == spread):
                curve = a["curves"].get(key, {})
                steps = sorted(curve)
                mean = [curve[s][0] for s in steps]
                std = [curve[s][1] for s in steps]
                label = f"{a['method']} (median {_short(a['median'], result['cap'])})"
                ax.plot(steps, mean, label=label if key == "smoothed_tool" else a["method"])
                ax.fill_between(
                    steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    alpha=0.2,
                )  # fmt: skip
            if key == "smoothed_tool":
                ax.axhline(THRESHOLD, color="grey", linestyle="--", linewidth=0.8)
            ax.set_title(f"spread {spread:g}")
            ax.set_xlabel("step")
            ax.legend(fontsize=8)
        axes[0].set_ylabel(ylabel + ", mean ± std over seeds")
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _short(value: float, cap: int) -> str:
    from slca.eval.lab import format_steps

    return format_steps(value, cap)


def report(args: argparse.Namespace) -> Path:
    cap = args.steps or _configured_steps(args.params)
    runs = collect(args)
    if not runs:
        raise SystemExit(
            f"credit lab: no finished run of experiment {args.experiment!r} in "
            f"{args.tracking_dir}; each run's log is under {args.work / 'runs'}"
        )
    result = analyse(runs, cap)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(result, args.out)
    text = markdown(result, cap)
    from slca.atomic import atomic_write_text

    atomic_write_text(args.out / "lab.md", "# Credit lab\n\n" + text)
    summary = {
        **result,
        "arms": [{k: v for k, v in a.items() if k != "curves"} for a in result["arms"]],
    }
    summary["verdict"] = verdict(result)[0]
    atomic_write_text(args.out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    print(text)
    return args.out / "lab.md"


def _configured_steps(params: Path) -> int:
    from slca.config import load_section
    from slca.config.train import TrainConfig

    return load_section(params, "train", TrainConfig).steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=PARAMS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--spreads", nargs="+", type=float, default=list(SPREADS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--steps", type=int, default=None, help="default: lab.yaml's")
    parser.add_argument("--rl-tasks", type=int, default=RL_TASKS, help="RL tasks (cued gold)")
    parser.add_argument(
        "--demonstrations", type=int, default=DEMONSTRATIONS, help="SFT weather demonstrations"
    )
    parser.add_argument(
        "--cues", nargs="+", default=list(CUES), help="days requests name (slca.data.lab)"
    )
    parser.add_argument(
        "-S", "--set", action="append", default=[], metavar="KEY=VALUE",
        help="an extra override of every train run (pilots, and conditions such as the "
        "optimizer; lab.yaml's own figures use none)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks/credit/work/lab")
    parser.add_argument("--tracking-dir", type=Path, default=None, help="default: WORK/mlflow")
    parser.add_argument("--experiment", default="credit-lab")
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/lab")
    parser.add_argument("--report-only", action="store_true", help="no runs: the report only")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be >= 1; got {args.steps}")
    args.work = args.work.resolve()
    args.tracking_dir = (args.tracking_dir or args.work / "mlflow").resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = [] if args.report_only else run_all(args)
    path = report(args)
    print(f"report: {path}; {(time.perf_counter() - started) / 60:.1f} min in all")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
