"""The credit benchmark: grpo, slca, toolpo and rltr from one SFT checkpoint, at the
same rollout budget, over seeds, each evaluated; all runs in one MLflow experiment.

    .venv/bin/python -m benchmarks.credit.run                  # docs/results.md's figures
    .venv/bin/python -m benchmarks.credit.run --seeds 0 --methods grpo slca --steps 4  # quick
    .venv/bin/python -m benchmarks.credit.run --methods grpo slca --profiles default reference \
        --no-ablations                      # both arms under both profiles, one table
    .venv/bin/python -m benchmarks.credit.run --lab   # the controlled credit lab (lab.py)

Every run is the pipeline's own RL stage and evaluation step, launched as their DVC
commands (``python -m slca.training.stages train`` / ``python -m slca.eval.stages``)
with ``-S`` overrides of params.yaml: same SFT checkpoint (``train.init_dir``), same
steps × tasks_per_step × group_size (the rollout budget), same evaluation tasks (drawn
from the evaluation seed, not the run's). Only the estimator (and the ablations'
granularity or summary weight) and the seed differ. Runs go two at a time, one torch
thread each. With ``--profiles default reference`` every method the reference profile
reproduces (grpo, dr_grpo, slca) also runs under ``train.algorithm.profile=reference``
(arm ``<method>/reference``: the authors' reward, segmenting, numerics and dual-clip
loss), in the same experiment, so the report puts both profiles in one table. The SFT
model is evaluated too (arm ``sft``). Then the report
(slca.eval.report) is written to ``--out`` and one advantage histogram per segment of
each method (seed 0, last histogram step) is copied beside it. Parallel runs log
through an MLflow server over the one store (slca refuses a second writer on a SQLite
store).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "slca", "toolpo", "rltr")
PROFILES = ("default", "reference")


def jobs(args: argparse.Namespace) -> list[dict]:
    from slca.config.algorithm import REFERENCE_ESTIMATORS

    out = []
    for seed in [] if args.ablations_only else args.seeds:
        for profile in args.profiles:
            for method in args.methods:
                if profile == "default":
                    out.append({"name": f"{method}-s{seed}", "estimator": method, "seed": seed})
                elif method in REFERENCE_ESTIMATORS:
                    out.append(
                        {
                            "name": f"{method}-ref-s{seed}",
                            "estimator": method,
                            "seed": seed,
                            "extra": [f"train.algorithm.profile={profile}"],
                        }
                    )
    if args.ablations:
        for seed in args.seeds:
            out.append(
                {
                    "name": f"slca_per_call-s{seed}",
                    "estimator": "slca",
                    "seed": seed,
                    "extra": ["train.algorithm.advantage.granularity=per_call"],
                }
            )
        for weight in args.summary_weights:
            out.append(
                {
                    "name": f"slca_wsum{weight:g}-s{args.seeds[0]}",
                    "estimator": "slca",
                    "seed": args.seeds[0],
                    "extra": [
                        "train.algorithm.advantage.weights="
                        + json.dumps({"tool": 1.0, "summary": weight})
                    ],
                }
            )
    return out


def run_job(job: dict, args: argparse.Namespace) -> tuple[str, int, float]:
    work = args.work / job["name"]
    log = args.work / f"{job['name']}.log"
    train = [
        sys.executable, "-m", "slca.training.stages", "train", "--params", str(args.params),
        "-S", f"train.estimator={job['estimator']}",
        "-S", f"train.seed={job['seed']}",
        "-S", f"train.init_dir={args.init}",
        "-S", f"train.out_dir={work / 'model'}",
        "-S", f"train.checkpoint_dir={work / 'checkpoints'}",
        "-S", f"train.tracking_dir={args.tracking_dir}",
        "-S", f"train.experiment={args.experiment}",
        "-S", f"train.run_name={job['name']}",
    ]  # fmt: skip
    if args.steps is not None:
        train += ["-S", f"train.steps={args.steps}"]
    if args.summary_scorer == "reward_model":
        train += [
            "-S", "train.rewards.summary.name=reward_model",
            "-S", f"train.rewards.summary.reward_model.path={summary_rm_dir(args)}",
        ]  # fmt: skip
    # always given: --validate-every 0 must turn off the validation params.yaml turns on
    train += [
        "-S", f"train.validation.every={args.validate_every}",
        "-S", f"train.validation.max_tasks={args.validate_tasks}",
    ]  # fmt: skip
    for item in job.get("extra", []):
        train += ["-S", item]
    evaluate = evaluate_command(args, work / "model", job["name"])
    return _chain(job["name"], [train, evaluate], log, work)


def summary_rm_dir(args: argparse.Namespace) -> Path:
    return args.work / "summary_rm"


def build_summary_rm(args: argparse.Namespace) -> tuple[str, int, float]:
    """The preference reward model every run's R_summary comes from, trained once, with
    the policy's tokenizer (slca.training.summary_rm)."""
    command = [
        sys.executable, "-m", "slca.training.stages", "summary_rm", "--params", str(args.params),
        "-S", f"summary_rm.tokenizer_dir={args.init}",
        "-S", f"summary_rm.out_dir={summary_rm_dir(args)}",
    ]  # fmt: skip
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    with (args.work / "summary_rm.log").open("w") as handle:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    return "summary_rm", done.returncode, time.perf_counter() - started


def evaluate_command(args: argparse.Namespace, model: Path, name: str) -> list[str]:
    command = [
        sys.executable, "-m", "slca.eval.stages", "--params", str(args.params),
        "-S", f"evaluate.model_dir={model}",
        "-S", f"evaluate.report_path={args.work / (name + '.eval.json')}",
        "-S", f"evaluate.tracking_dir={args.tracking_dir}",
        "-S", f"evaluate.experiment={args.experiment}",
        "-S", f"evaluate.run_name={name}",
    ]  # fmt: skip
    if args.eval_tasks is not None:
        command += ["-S", f"evaluate.in_domain.max_tasks={args.eval_tasks}"]
    if not args.eval_benchmarks:  # the tiny model's context holds no τ² prompt
        command += [
            "-S",
            "evaluate.bfcl.max_per_category=0",
            "-S",
            "evaluate.tau2.max_per_domain=0",
        ]
    return command


#: The MLflow server the parallel jobs log through (see :func:`tracking_server`).
_SERVER_URI: list[str] = []


@contextlib.contextmanager
def tracking_server(args: argparse.Namespace) -> Iterator[None]:
    """With more than one worker, the jobs log through an MLflow server on 127.0.0.1 over
    ``--tracking-dir``'s SQLite store: slca lets one process at a time write a SQLite
    store (a second is refused), while a server serialises its clients' writes itself.
    The server runs under slca's supervisor, so it stops with this script."""
    if args.workers <= 1:
        yield
        return
    import socket
    import urllib.request

    from slca.processes import supervised
    from slca.tracking import ensure_store, sqlite_uri

    store = args.tracking_dir.resolve()
    ensure_store(sqlite_uri(store))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        supervised(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--backend-store-uri",
                sqlite_uri(store),
                "--default-artifact-root",
                (store / "artifacts").as_uri(),
                "--no-serve-artifacts",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
        ),  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the MLflow server for {store} did not start") from None
                time.sleep(1)
        _SERVER_URI.append(url)
        yield
    finally:
        _SERVER_URI.clear()
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def job_env() -> dict[str, str]:
    """A parallel job's environment: one torch thread, and the MLflow server when one
    runs (slca refuses a second writer on one SQLite store)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("MLFLOW_TRACKING_URI", None)
    if _SERVER_URI:
        env["MLFLOW_TRACKING_URI"] = _SERVER_URI[0]
    return env


def _chain(name: str, commands: list[list[str]], log: Path, work: Path) -> tuple[str, int, float]:
    env = job_env()
    started = time.perf_counter()
    shutil.rmtree(work, ignore_errors=True)
    with log.open("w") as handle:
        for command in commands:
            done = subprocess.run(
                command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT
            )
            if done.returncode != 0:
                return name, done.returncode, time.perf_counter() - started
    return name, 0, time.perf_counter() - started


def copy_histograms(args: argparse.Namespace) -> list[Path]:
    """Seed 0's last advantage histograms of each method, beside the report."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{(args.tracking_dir / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name(args.experiment)
    copied = []
    for method in args.methods:
        name = f"{method}-s{args.seeds[0]}"
        runs = client.search_runs(
            [experiment.experiment_id],
            filter_string=f"attributes.run_name = '{name}' and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not runs:
            continue
        steps = client.list_artifacts(runs[0].info.run_id, "histograms")
        if not steps:
            continue
        last = max(steps, key=lambda f: int(f.path.rsplit("_", 1)[1]))
        # without dst_path MLflow downloads into a temp folder it never removes
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(client.download_artifacts(runs[0].info.run_id, last.path, tmp))
            for png in sorted(local.glob("*.png")):
                target = args.out / f"hist_{method}_{png.stem}.png"
                shutil.copyfile(png, target)
                copied.append(target)
    return copied


#: Per-step training statistics averaged over a run's steps for the analysis table.
TRAINING_KEYS = (
    "reward/tool",
    "reward/sum",
    "adv/zero_group_frac",
    "adv/tool_std",
    "adv/sum_std",
    "actor/grad_cos_tool_sum",
    "rollout/redundant_calls",
)


def training_table(args: argparse.Namespace) -> str:
    """Per arm: each key's mean over a run's steps, then mean ± std over seeds."""
    import statistics

    from slca.eval.report import arm, summarise
    from slca.tracking import experiment_runs

    runs = experiment_runs(args.tracking_dir, experiment=args.experiment, curve_keys=TRAINING_KEYS)
    kept = {rid for s in summarise(runs) for rid in s.run_ids}
    by_arm: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        if run.run_id not in kept or not run.curves:
            continue
        for key, points in run.curves.items():
            mean = statistics.fmean(v for _, v in points)
            by_arm.setdefault(arm(run), {}).setdefault(key, []).append(mean)
    lines = ["| arm | " + " | ".join(TRAINING_KEYS) + " |", "|" + "---|" * (len(TRAINING_KEYS) + 1)]
    for name, values in sorted(by_arm.items()):
        cells = []
        for key in TRAINING_KEYS:
            xs = values.get(key, [])
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            cells.append(f"{statistics.fmean(xs):.3f} ± {sd:.3f}" if xs else "–")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--init", type=Path, default=REPO / "models/sft")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--profiles",
        nargs="+",
        choices=PROFILES,
        default=["default"],
        help="train.algorithm.profile of the method runs; 'reference' runs the methods it "
        "reproduces (grpo, dr_grpo, slca) as the authors' code (ablations: default only)",
    )
    parser.add_argument("--steps", type=int, default=None, help="default: params.yaml's")
    parser.add_argument("--no-ablations", dest="ablations", action="store_false")
    parser.add_argument("--ablations-only", action="store_true", help="(re)run the ablations only")
    parser.add_argument("--summary-weights", nargs="*", type=float, default=[0.5, 2.0])
    parser.add_argument("--eval-benchmarks", action="store_true", help="also BFCL and τ²")
    parser.add_argument(
        "--eval-tasks", type=int, default=200, help="in-domain test tasks (params' split/sources)"
    )
    parser.add_argument(
        "--summary-scorer",
        choices=["reward_model", "grounded"],
        default="reward_model",
        help="R_summary in training: a preference model trained first (credit v2's "
        "protocol, chosen when the CPU policies could not ground an answer), or the "
        "grounded scorer the demo trains with",
    )
    parser.add_argument(
        "--validate-every",
        type=int,
        default=0,
        help="held-out validation (the val split) every N steps during training; 0: none",
    )
    parser.add_argument("--validate-tasks", type=int, default=32, help="val tasks per validation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks/credit/work")
    parser.add_argument("--tracking-dir", type=Path, default=REPO / "benchmarks/credit/mlflow")
    parser.add_argument("--experiment", default="credit")
    parser.add_argument("--out", type=Path, default=REPO / "docs/results")
    parser.add_argument("--report-only", action="store_true", help="no runs: the report only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--lab" in argv:  # the controlled credit lab: its own options (lab.py --help)
        from benchmarks.credit.lab import main as lab_main

        return lab_main([a for a in argv if a != "--lab"])
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.init / "config.json").exists():
        print(f"no SFT model at {args.init}: run `dvc repro sft` first", file=sys.stderr)
        return 1

    started = time.perf_counter()
    results = [] if args.report_only else run_all(args)
    from slca.eval.report import report

    path = report(args.tracking_dir, args.experiment, args.out)
    copied = copy_histograms(args)
    (args.out / "training.md").write_text(training_table(args))
    total = time.perf_counter() - started
    print(path.read_text().split("\n![")[0])
    print((args.out / "training.md").read_text())
    print(f"report: {path}; {len(copied)} histograms; {total / 60:.1f} min in all")
    return 0 if all(code == 0 for _, code, _ in results) else 1


def run_all(args: argparse.Namespace) -> list[tuple[str, int, float]]:
    sft_eval = ("sft", [evaluate_command(args, args.init, "sft")])
    needs_rm = args.summary_scorer == "reward_model"
    if needs_rm and not (summary_rm_dir(args) / "config.json").exists():
        name, code, seconds = build_summary_rm(args)
        print(f"{name}: {'ok' if code == 0 else f'FAILED ({code})'} in {seconds:.0f} s", flush=True)
        if code != 0:
            return [(name, code, seconds)]
    with tracking_server(args), ThreadPoolExecutor(args.workers) as pool:
        futures = []
        if not args.ablations_only:
            futures.append(pool.submit(_chain, *sft_eval, args.work / "sft.log", args.work / "sft"))
        futures += [pool.submit(run_job, job, args) for job in jobs(args)]
        results = []
        for future in futures:
            name, code, seconds = future.result()
            results.append((name, code, seconds))
            print(
                f"{name}: {'ok' if code == 0 else f'FAILED ({code})'} in {seconds:.0f} s",
                flush=True,
            )
    return results


if __name__ == "__main__":
    raise SystemExit(main())
