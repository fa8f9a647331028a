"""The credit benchmark on SmolLM2 in one GPU call (issue 15, items 4 and 5): one SFT
checkpoint, then GRPO and SLCA × N seeds run side by side on the one GPU, each evaluated
on the same in-domain test tasks, with paired differences (SLCA − GRPO, each − SFT; 95 %
BCa intervals over tasks, ``slca.eval.paired``).

Why side by side: the GPU check measured one HF-engine RL run at 0.2–0.5 % MFU of its
step (generation is latency-bound); ten runs time-sharing one H200 then measured
2.4–4.1× the steps per second of one alone, so a 5-seed comparison fits a 10-minute
call that one run after another would not.

Every setting is fixed here, before any run, and is the same for every arm (``SETTINGS``
and the check's RL settings in ``tools/gpu_check.py``); the evaluation never depends on
the arm. It reuses the GPU check's parts, environment and bundle (``make gpu-bundle``;
run it as ``make gpu-check`` runs ``tools/gpu_check.py``, README "Scaling out")::

    python tools/gpu_credit.py --model /tmp/smollm2.gguf --out /tmp/credit.json
    python tools/gpu_credit.py --smoke --out /tmp/credit.json   # tiny model, CPU if no GPU

The report (JSON, rewritten after every part) holds each run's status, RL figures,
evaluation, held-out curve and sampled val scores; ``<out>.md`` holds the tables and
``<out>.work.tar.gz`` every run's own files. A run that fails or outlives ``--budget-s``
is reported as such; the comparison uses the runs that finished, and the held-out
curves whatever steps each run reached.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TOOLS = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("gpu_check", TOOLS / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)

SETTINGS: dict[str, Any] = {
    # What fits: the first run (H200, 2026-12-04; docs/results.md) planned 16 steps,
    # and ten runs sharing the GPU reached 12-14 of them (about 33 s a step each) before
    # the budget killed them, with no test evaluation.
    "steps": 10,
    # That run's 5e-6 moved neither arm's held-out success by more than one task of 86
    # in 12 steps; 4x it for the shorter run (the same for every arm).
    "lr": 2e-5,
    "micro_batch_size": 4,  # half the check's: ten runs' activations share 141 GB
    "eval_tasks": 100,  # at most; the check's 800 synth tasks leave 74 in the test split
    "validation": {"every": 5, "max_tasks": 100},  # every val task: held-out curves that a
    # run killed by the time budget keeps (step 0: the SFT policy, evaluated on val)
    "generation_batch_size": 128,  # generation is latency-bound: one call, not four
}
"""The comparison's settings besides the GPU check's RL settings (8 tasks × G 4, up to
3 turns of 96 new tokens, temperature 1, the default rewards, KL and estimators)."""


VAL = "val"


def run_name(estimator: str, seed: int) -> str:
    return f"{estimator}-s{seed}"


def arm_of(name: str) -> str:
    """The estimator of a :func:`run_name`."""
    return name.rsplit("-s", 1)[0]


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def worker(args: argparse.Namespace) -> int:
    """One arm × seed: train, then evaluate; its own report under ``work/runs``."""
    estimator, seed = args.worker[0], int(args.worker[1])
    name = run_name(estimator, seed)
    report = gpu_check.Report(args.work / "runs" / f"{name}.json", "credit-run")
    check = gpu_check.Check(args, report, args.work)
    curve = args.work / "runs" / f"{name}.steps.jsonl"

    def on_step(step: int, metrics: dict[str, float]) -> None:
        with curve.open("a") as lines:
            lines.write(json.dumps({"step": step, **metrics}) + "\n")

    check.on_step = on_step
    check.generation_batch_size = SETTINGS["generation_batch_size"]
    extra: dict[str, Any] = {"seed": seed, "validation": SETTINGS["validation"]}
    if not args.smoke:
        extra.update(
            steps=args.steps,
            update={"micro_batch_size": SETTINGS["micro_batch_size"]},
            engine={"optim": {"lr": args.lr}},
        )
    check.run("train", (), lambda: check.train(estimator, "hf", f"s{seed}", **extra))
    check.run("eval", ("train",), lambda: check.evaluate(name))
    # last: a run the budget stops here has already been evaluated
    check.run("headroom", ("train",), lambda: check.headroom(name))
    return 1 if report.data["summary"]["failed"] else 0


def launch(args: argparse.Namespace, runs: list[tuple[str, int]], deadline: float) -> dict:
    """The runs as subprocesses, ``--parallel`` at a time; what each one ended with."""
    base = [sys.executable, str(Path(__file__).resolve()), "--work", str(args.work)]
    base += ["--model", args.model, "--steps", str(args.steps), "--lr", str(args.lr)]
    base += ["--eval-tasks", str(args.eval_tasks), "--budget-s", str(args.budget_s)]
    base += ["--smoke"] if args.smoke else []
    # ten processes' CPU thread pools would otherwise fight over the cores that launch
    # their kernels
    threads = str(max(1, (os.cpu_count() or 1) // args.parallel))
    env = {
        **os.environ,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    pending, active, ended = list(runs), {}, {}
    while pending or active:
        while pending and len(active) < args.parallel and time.perf_counter() < deadline:
            estimator, seed = pending.pop(0)
            name = run_name(estimator, seed)
            log = (args.work / "logs" / f"{name}.log").open("w")
            cmd = base + ["--worker", estimator, str(seed)]
            active[name] = (
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
                log,
            )
        for name, (proc, log) in list(active.items()):
            if proc.poll() is None and time.perf_counter() > deadline:
                proc.kill()
            if proc.poll() is not None:
                log.close()
                ended[name] = proc.returncode
                del active[name]
        if not active and time.perf_counter() >= deadline:
            ended.update({run_name(e, s): "not started (time budget)" for e, s in pending})
            pending = []
        time.sleep(1)
    return ended


def task_lines(work: Path, model: str) -> list[dict]:
    return jsonl(work / "eval" / f"{model}.tasks.jsonl")


def compare(args: argparse.Namespace, ended: dict) -> tuple[dict, str]:
    """Each run's parts, the arms' means and the paired differences, as ``slca report``
    computes them from MLflow runs (here from the runs' own reports; MLflow is not on
    the GPU image); and its markdown tables."""
    from slca.eval.report import markdown_table, paired_differences, paired_table, summarise

    def record(name: str, metrics: dict, params: dict) -> SimpleNamespace:
        # what summarise reads of an MLflow run (slca.tracking.RunRecord)
        evaluated = {f"eval/{key}": value for key, value in metrics.items()}
        return SimpleNamespace(
            run_id=name, name=name, start_time=0, params=params, metrics=evaluated
        )

    sft = json.loads((args.work / "eval" / "sft.json").read_text())
    records = [record("eval-sft", sft, {})]
    lines = {"eval-sft": task_lines(args.work, "sft")}
    runs: dict[str, Any] = {}
    for estimator in args.arms:
        for seed in range(args.seeds):
            name = run_name(estimator, seed)
            path = args.work / "runs" / f"{name}.json"
            parts = json.loads(path.read_text())["parts"] if path.exists() else {}
            runs[name] = {"exit": ended.get(name), "curve": curve(args.work, name), **parts}
            if parts.get("eval", {}).get("status") == "ok":
                params = {"algorithm.advantage.estimator": estimator, "seed": str(seed)}
                records.append(record(name, parts["eval"]["metrics"], params))
                lines[name] = task_lines(args.work, name)
    summaries = summarise(records)
    paired = paired_differences(summaries, lines)
    arms = {s.arm: {"seeds": s.seeds, "mean": s.mean, "std": s.std} for s in summaries}
    sampled = sampled_scores(args.work, runs, args.arms)
    curves = mean_curves(runs, args.arms)
    sft_val = args.work / "eval" / "sft.val.json"
    if sft_val.exists():  # every arm starts from the SFT policy: its step 0
        start = json.loads(sft_val.read_text())["in_domain/success_at_0.9"]
        for points in curves.values():
            points.insert(0, {"step": 0, "seeds": 1, "mean": round(start, 4)})
    tables = (markdown_table(summaries), paired_table(paired), curves_table(curves))
    results = {"runs": runs, "arms": arms, "paired": paired, "curves": curves}
    results["sampled"] = sampled
    return results, "\n".join((*tables, sampled_table(sampled)))


def sampled_scores(work: Path, runs: dict[str, Any], arms: list[str]) -> dict[str, dict]:
    """Each model's sampled val scores (``headroom``: 4 rollouts a task at temperature
    1, seed 0): the SFT policy's, and each arm's mean over the runs that got there.
    Greedy scores can stay flat while RL sharpens what it samples; this shows that."""
    models = {"sft": ["sft"], **{arm: [n for n in runs if arm_of(n) == arm] for arm in arms}}
    out: dict[str, dict] = {}
    for model, names in models.items():
        # a model's report exists once its measurement finished (written, then renamed)
        paths = [work / "headroom" / f"{name}.{VAL}.json" for name in names]
        done = [json.loads(p.read_text())[VAL] for p in paths if p.exists()]
        if done:
            out[model] = {"runs": len(done), **sampled_figures(done)}
    return out


def sampled_figures(reports: list[dict]) -> dict[str, float]:
    def mean(part: str, key: str) -> float:
        return round(sum(r["parts"][part][key] for r in reports) / len(reports), 4)

    return {
        "success_pass1": mean("success", "pass1"),
        "success_best_of_g": mean("success", "passG"),
        "tool_pass1": mean("tool", "pass1"),
        "success_signal": mean("success", "signal"),
    }


def sampled_table(sampled: dict[str, dict]) -> str:
    rows = [
        "| sampled val (temperature 1) | runs | Success@0.9 pass@1 | best of G "
        "| R_tool pass@1 | groups with a success signal |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model, f in sampled.items():
        rows.append(
            f"| {model} | {f['runs']} | {f['success_pass1']:.3f} | {f['success_best_of_g']:.3f} "
            f"| {f['tool_pass1']:.3f} | {f['success_signal']:.2f} |"
        )
    return "\n".join(rows) + "\n"


CURVE_KEYS = ("reward/tool", "reward/summary", f"{VAL}/success_at_0.9", f"{VAL}/value")


def curve(work: Path, name: str) -> list[dict[str, float]]:
    """The run's per-step figures as far as it got (written as each step ended)."""
    path = work / "runs" / f"{name}.steps.jsonl"
    if not path.exists():
        return []
    return [{"step": m["step"], **{k: m[k] for k in CURVE_KEYS if k in m}} for m in jsonl(path)]


def mean_curves(runs: dict[str, Any], arms: list[str]) -> dict[str, list[dict[str, float]]]:
    """Each arm's held-out success at each validated step: the mean over the seeds that
    reached it, and how many did."""
    out: dict[str, list[dict[str, float]]] = {}
    key = f"{VAL}/success_at_0.9"
    for arm in arms:
        by_step: dict[int, list[float]] = {}
        for name, run in runs.items():
            if arm_of(name) == arm:
                for point in run["curve"]:
                    if key in point:
                        by_step.setdefault(point["step"], []).append(point[key])
        out[arm] = [
            {"step": step, "seeds": len(v), "mean": round(sum(v) / len(v), 4)}
            for step, v in sorted(by_step.items())
        ]
    return out


def curves_table(curves: dict[str, list[dict[str, float]]]) -> str:
    steps = sorted({p["step"] for points in curves.values() for p in points})
    rows = [
        f"| held-out {VAL}/success_at_0.9 | " + " | ".join(f"step {s}" for s in steps) + " |",
        "|---|" + "---:|" * len(steps),
    ]
    for arm, points in curves.items():
        at = {p["step"]: f"{p['mean']:.3f} (n={p['seeds']})" for p in points}
        rows.append(f"| {arm} | " + " | ".join(at.get(s, "–") for s in steps) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, 1 step; CPU if no GPU")
    parser.add_argument("--model", default="smollm2", help="smollm2, a .gguf file or HF dir")
    parser.add_argument("--arms", nargs="+", default=["grpo", "slca"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=10, help="runs at a time on the GPU")
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"])
    parser.add_argument("--lr", type=float, default=SETTINGS["lr"])
    parser.add_argument("--eval-tasks", type=int, default=SETTINGS["eval_tasks"])
    parser.add_argument("--budget-s", type=float, default=540.0, help="runs are killed after")
    parser.add_argument("--out", type=Path, help="the JSON report (default: reports/gpu-credit/)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--worker", nargs=2, metavar=("ESTIMATOR", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.weights = "pretrained"
    sys.path.insert(0, str(gpu_check.REPO))
    if args.worker:
        return worker(args)

    started = time.perf_counter()
    mode = "credit-smoke" if args.smoke else "credit"
    out = args.out or gpu_check.REPO / "reports" / "gpu-credit" / f"{int(time.time())}.json"
    report = gpu_check.Report(out, mode)
    report.data["settings"] = {**SETTINGS, **{k: str(v) for k, v in vars(args).items()}}
    if report.data["environment"]["missing_modules"]:
        report.part("environment", "failed", error="missing modules; see tools/gpu_check.py")
        return 1
    args.work = args.work or Path(tempfile.mkdtemp(prefix="slca-gpu-credit-"))
    check = gpu_check.Check(args, report, args.work)
    check.generation_batch_size = SETTINGS["generation_batch_size"]
    gpu = not args.smoke
    check.run("prepare", (), check.prepare, cuda=gpu)
    check.run("base_model", ("prepare",), check.base_model, cuda=gpu)
    check.run("sft", ("base_model",), check.sft, cuda=gpu)
    check.run("eval/sft", ("sft",), lambda: check.evaluate("sft"), cuda=gpu)
    check.run("eval/sft-val", ("sft",), lambda: check.evaluate("sft", "val"), cuda=gpu)
    check.run("headroom/sft", ("sft",), lambda: check.headroom("sft"), cuda=gpu)
    if report.status("eval/sft") != "ok":
        return 1
    runs = [(estimator, seed) for seed in range(args.seeds) for estimator in args.arms]
    ended = launch(args, runs, started + args.budget_s)
    results, tables = compare(args, ended)
    report.data["comparison"] = results
    failed = [n for n, r in results["runs"].items() if r.get("eval", {}).get("status") != "ok"]
    report.part("runs", "failed" if failed else "ok", **({"error": f"{failed}"} if failed else {}))
    out.with_suffix(".md").write_text(tables)
    # every run's own report, per-step figures, log and evaluation lines in one file: a
    # device call returns a limited number of files
    with tarfile.open(out.with_suffix(".work.tar.gz"), "w:gz") as bundle:
        for part in ("runs", "logs", "eval"):
            if (args.work / part).exists():
                bundle.add(args.work / part, arcname=part)
    print(tables, file=sys.stderr)
    return 1 if report.data["summary"]["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
