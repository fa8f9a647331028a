"""The learning lab: RL runs of the pipeline's own stages with settings overridden,
each evaluated in-domain, with every per-step diagnostic kept (issue 15).

    .venv/bin/python benchmarks/learning/run.py --name default-grpo -S train.estimator=grpo
    .venv/bin/python benchmarks/learning/run.py --summarize       # one table of all runs

A run is ``python -m slca.training.stages train`` from ``--init`` (the SFT checkpoint)
with ``-S`` overrides of params.yaml, then ``python -m slca.eval.stages`` on its model
(in-domain only: the params' test tasks). Everything goes under ``--work/<name>``:
``curves.json`` (every metric of every step, from MLflow), ``eval.json`` and its
per-task lines. ``--eval-init`` evaluates the SFT checkpoint itself (arm ``sft``).
One torch thread per process, so two runs can share two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHOWN = (
    "reward/tool",
    "reward/value",
    "reward/name",
    "reward/parallel",
    "rollout/finished_frac",
    "rollout/truncated_frac",
    "rollout/response_tokens_mean",
    "reward/total_finished",
    "reward/total_truncated",
    "adv/token_mean",
    "actor/entropy",
    "actor/kl",
    "actor/rollout_logprob_diff",
)
"""Training metrics the summary shows, as the mean of the first and the last quarter."""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _call(cmd: list[str], log: Path) -> None:
    with log.open("a") as out:
        done = subprocess.run(cmd, cwd=REPO, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}; see {log}")


def evaluate(model: Path, work: Path, args: argparse.Namespace, log: Path) -> None:
    _call(
        [
            sys.executable, "-m", "slca.eval.stages", "--params", str(args.params),
            "-S", f"evaluate.model_dir={model}",
            "-S", f"evaluate.report_path={work / 'eval.json'}",
            "-S", "evaluate.tracking_dir=null",
            "-S", "evaluate.bfcl.max_per_category=0",
            "-S", "evaluate.tau2.max_per_domain=0",
            *(x for s in args.eval_set for x in ("-S", s)),
        ],
        log,
    )  # fmt: skip


def train(work: Path, args: argparse.Namespace, log: Path) -> None:
    from slca.tracking import metric_history, sqlite_uri

    cmd = [
        sys.executable, "-m", "slca.training.stages", "train", "--params", str(args.params),
        "-S", f"train.init_dir={args.init}",
        "-S", f"train.out_dir={work / 'model'}",
        "-S", f"train.checkpoint_dir={work / 'checkpoints'}",
        "-S", f"train.tracking_dir={work / 'mlflow'}",
        "-S", "train.experiment=learning",
        "-S", f"train.run_name={args.name}",
    ]  # fmt: skip
    for setting in args.set:
        cmd += ["-S", setting]
    _call(cmd, log)
    run_id = json.loads((work / "model" / "mlflow_run.json").read_text())["run_id"]
    from mlflow import MlflowClient

    uri = sqlite_uri(work / "mlflow")
    keys = sorted(MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics)
    curves = {k: metric_history(run_id, k, tracking_uri=uri) for k in keys}
    (work / "curves.json").write_text(json.dumps(curves) + "\n")


def summarize(root: Path) -> str:
    rows = []
    for work in sorted(p for p in root.iterdir() if (p / "eval.json").exists()):
        ev = json.loads((work / "eval.json").read_text())
        row = {
            "run": work.name,
            "S@0.9": 100 * ev["in_domain/success_at_0.9"],
            "process": ev["in_domain/process"],
            "value": ev["in_domain/value"],
            "calls": ev["in_domain/tool_calls_per_task"],
        }
        curves_file = work / "curves.json"
        if curves_file.exists():
            curves = json.loads(curves_file.read_text())
            for key in SHOWN:
                values = [v for _, v in curves.get(key, [])]
                if values:
                    q = max(1, len(values) // 4)
                    row[key] = f"{sum(values[:q]) / q:.3f}→{sum(values[-q:]) / q:.3f}"
        rows.append(row)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = [r.get(k, "") for k in keys]
        lines.append(
            "| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="run name (a directory under --work)")
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--init", type=Path, default=REPO / "models/sft")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks/learning/work")
    parser.add_argument("-S", "--set", action="append", default=[], help="train.KEY=VALUE")
    parser.add_argument("--eval-set", action="append", default=[], help="evaluate.KEY=VALUE")
    parser.add_argument("--eval-init", action="store_true", help="evaluate --init only")
    parser.add_argument("--summarize", action="store_true")
    args = parser.parse_args()
    if args.summarize:
        print(summarize(args.work))
        return 0
    if not args.name:
        parser.error("--name is required")
    work = args.work / args.name
    if work.exists():
        raise SystemExit(f"{work} exists: choose another --name (runs are never overwritten)")
    work.mkdir(parents=True)
    log = work / "log.txt"
    started = time.perf_counter()
    if args.eval_init:
        evaluate(args.init, work, args, log)
    else:
        train(work, args, log)
        evaluate(work / "model", work, args, log)
    (work / "seconds.txt").write_text(f"{time.perf_counter() - started:.0f}\n")
    print(f"{args.name}: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
