"""The credit experiment on SmolLM2 in one GPU call (issue 35): one SFT checkpoint, then
GRPO and SLCA × seeds side by side on the one GPU, beside the SFT policy's own
evaluation; each model scored by sampling, paired task by task.

The registered shape (``SETTINGS``, fixed before any run and the same for every arm):
the primary measure is sampled pass@1 of Success@0.9 at temperature 1, k = 8 samples of
each of 100 val and 100 test tasks (200 tasks; 1,200 synth tasks are prepared so that
each split has more than 100), paired by task between arms (per task: the mean over
seeds × k samples), with 95 % BCa intervals over tasks (``slca.eval.paired``). Three
seeds per arm when the GPU's memory holds them, else what fits (the plan says so). The
greedy test evaluation stays as a secondary measure; validation during training is off
(its time goes to the primary measure). Why sampling: on the SFT policy greedy val is
already at the best-of-4 level (0.78) while one sample scores 0.57 (docs/results.md,
session 9): the room RL has is in what it samples.

Time is one budget (``tools/gpu_plan.py``): the orchestrator fixes an absolute deadline
and every part's limit in ``plan.json`` before anything runs; workers read them there.
RL training stops early enough for its evaluations to finish; the SFT policy's
evaluations run beside the RL runs, not before them. ``--dry-run`` prints the plan (CPU
is enough) and refuses one that does not fit the budget or the GPU's memory.

Nothing is lost on the device. ``--out DIR`` is a directory; every worker writes its
report, per-step figures, log and per-task evaluation lines under ``DIR/raw/`` as they
are produced. The summary is computed from those files afterwards (also elsewhere:
``--summarise DIR``) and writes only its own files (``summary.md``, ``summary.json``,
``raw.tar.gz``; each written, then renamed). Without scipy (the GPU image has none) it
reports means and paired differences, and says to compute the intervals with
``--summarise`` where scipy is installed. Data, models and checkpoints (gigabytes) go to
``--work``, a scratch directory.

    python tools/gpu_credit.py --dry-run                 # the plan for an H200 (139 GiB)
    python tools/gpu_credit.py --dry-run --gpu-gib 78    # ... for an H100
    python tools/gpu_credit.py --model /tmp/smollm2.gguf --out $OUT/credit
    python tools/gpu_credit.py --summarise $OUT/credit   # again, with scipy: intervals
    python tools/gpu_credit.py --smoke --out /tmp/credit # tiny model, CPU if no GPU

With ``--out $OUT/credit`` the device returns the five top-level files (it returns at
most 8, and none more than two folders down): ``raw/`` travels in ``raw.tar.gz``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
if "gpu_check" in sys.modules:
    gpu_check = sys.modules["gpu_check"]
else:
    _spec = importlib.util.spec_from_file_location("gpu_check", TOOLS / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(_spec)
    sys.modules["gpu_check"] = gpu_check
    _spec.loader.exec_module(gpu_check)
gpu_plan = gpu_check.gpu_plan

SETTINGS: dict[str, Any] = {
    # What fits the budget at the measured figures (tools/gpu_plan.py): on an H200, two
    # seeds per arm side by side reach 9 steps; 10 do not fit (the dry run shows it).
    "steps": 9,
    # 4x the first run's 5e-6, which moved neither arm's greedy val by more than one task
    # in 12 steps (the same for every arm)
    "lr": 2e-5,
    "micro_batch_size": 4,  # half the check's: the runs' activations share the GPU
    "seeds": 3,  # per arm, when the GPU's memory holds them (else what fits, stated)
    "synth_tasks": 1200,  # 955 train, 126 val, 119 test (the check's 800 left 86 and 74)
    "sampled": {  # the primary measure (slca.eval.headroom's sampling)
        "k": 8,  # samples per task at temperature 1
        "temperature": 1.0,  # the RL temperature
        "splits": ["val", "test"],
        "tasks_per_split": 100,  # 200 tasks: the same ones for every model (seeded draw)
        "batch": 128,  # sequences per generate call (16 tasks × 8): the measured batch
        "seed": 0,  # the same for every model: chunk i samples with seed + 1000 i
    },
    "greedy_tasks": 100,  # the secondary greedy test evaluation
    "validation": {"every": 0},  # off: its time goes to the primary measure
    "generation_batch_size": 128,  # rollouts and the greedy evaluation (latency-bound)
}
"""The experiment's settings besides the GPU check's RL settings (8 tasks × G 4, up to
3 turns of 96 new tokens, temperature 1, the default rewards, KL and estimators)."""

SMOKE: dict[str, Any] = {
    "steps": 1,
    "sampled": {**SETTINGS["sampled"], "k": 2, "tasks_per_split": 4, "batch": 8},
    "greedy_tasks": 4,
    "synth_tasks": 40,
}
"""What ``--smoke`` reduces (a tiny model on the CPU; the shape stays)."""

H200_GIB = 139.0
"""What ``--dry-run`` plans for on a machine without a GPU (an H200's free memory)."""

RAW, PLAN, REPORT = "raw", "plan.json", "credit.json"
SUMMARY_MD, SUMMARY_JSON, ARCHIVE = "summary.md", "summary.json", "raw.tar.gz"
SFT = "sft"
NO_SCIPY = (
    "intervals not computed (scipy is not importable here): run "
    "`python tools/gpu_credit.py --summarise DIR` where it is installed"
)


def run_name(estimator: str, seed: int) -> str:
    return f"{estimator}-s{seed}"


def arm_of(name: str) -> str:
    """The estimator of a :func:`run_name` (``sft`` for the SFT policy)."""
    return name.rsplit("-s", 1)[0]


def seed_of(name: str) -> str:
    return name.rsplit("-s", 1)[1] if "-s" in name else "-"


def jsonl(path: Path) -> list[dict]:
    """The lines of a JSON-lines file; a line a killed writer left half-written is
    skipped (every earlier line is whole: each was flushed when written)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def append_lines(path: Path, lines: list[dict]) -> None:
    """Append ``lines`` and push them to disk now: a worker may be killed next."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, written then renamed."""
    from slca.atomic import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


# --- the plan ---------------------------------------------------------------------------


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """This run's settings: ``SETTINGS`` (``SMOKE``'s reductions with ``--smoke``), the
    steps, lr and seeds as given."""
    settings = {**SETTINGS, **(SMOKE if args.smoke else {})}
    settings["sampled"] = dict(settings["sampled"])
    settings["sampled"]["tasks"] = settings["sampled"]["tasks_per_split"] * len(
        settings["sampled"]["splits"]
    )
    if args.steps is not None:
        settings["steps"] = args.steps
    settings.update(lr=args.lr, seeds=args.seeds, arms=list(args.arms))
    return settings


def free_gib(args: argparse.Namespace) -> float | None:
    """The GPU memory to plan with: ``--gpu-gib``; else what the GPU has free now; on a
    machine without one, an H200's for ``--dry-run``, nothing for ``--smoke`` (its tiny
    model is not planned), else an error."""
    if args.gpu_gib is not None:
        return args.gpu_gib
    import torch

    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return free / 2**30
    if args.smoke:
        return None
    if args.dry_run:
        return H200_GIB
    raise SystemExit("gpu_credit: no CUDA device (--smoke runs on the CPU; --dry-run plans)")


def make_plan(args: argparse.Namespace, settings: dict[str, Any], gib: float | None):
    return gpu_plan.plan_credit(
        budget_s=args.budget_s,
        free_gib=gib,
        arms=settings["arms"],
        seeds=settings["seeds"],
        steps=settings["steps"],
        sampled=settings["sampled"],
        greedy_tasks=settings["greedy_tasks"],
        greedy_batch=settings["generation_batch_size"],
        synth_tasks=settings["synth_tasks"],
        parallel=args.parallel,
    )


def deadlines(plan, started: float) -> dict[str, float]:
    """Each part's limit as epoch seconds (the plan's, from ``started``), the latest
    launch of the workers that leaves their planned steps, and the deadline."""
    first = {key: next(p for p in plan.parts if p.name.startswith(key)) for key in KEYS}
    out = {key: started + part.end_by_s for key, part in first.items()}
    out["launch"] = out["worker start"] - first["worker start"].estimate_s
    out["deadline"] = started + plan.budget_s
    return out


KEYS = ("prepare", "base_model", "sft", "worker start", "train", "sampled", "greedy")
"""The plan's parts by the start of their names (``train (9 steps)``, ``sampled
val+test ...``, ``greedy test``)."""


def plan_record(plan, settings: dict[str, Any], started: float) -> dict[str, Any]:
    """What ``plan.json`` holds: the plan, the settings every worker uses, the absolute
    deadline and limits, and the estimates a worker needs before it has measured."""
    n = max(plan.processes, 1)
    s = settings["sampled"]
    per = gpu_plan.chunk_tasks(s["batch"], s["k"])
    return {
        "started": started,
        "started_utc": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        "end_by": deadlines(plan, started),
        "settings": settings,
        "estimates": {
            "rl_step_s": gpu_plan.rl_step_s(n),
            "chunk_s": gpu_plan.generation_s(per * s["k"], s["batch"], n),
            "greedy_s": gpu_plan.generation_s(
                settings["greedy_tasks"], settings["generation_batch_size"], n
            ),
        },
        "runs": [run_name(a, seed) for seed in range(plan.seeds) for a in plan.arms],
        "memory_gib": {"rl": plan.rl_gib, "eval": plan.eval_gib},
        "plan": plan.to_json(),
    }


# --- the workers ------------------------------------------------------------------------


def cap_memory(gib: float) -> None:
    """Hold this process to its planned share of the GPU: past it the allocator frees
    its cache and retries, then fails this process, not a neighbour."""
    import torch

    if torch.cuda.is_available() and gib:
        total = torch.cuda.get_device_properties(0).total_memory / 2**30
        torch.cuda.set_per_process_memory_fraction(min(1.0, gib / total))


def worker(args: argparse.Namespace) -> int:
    """One model: an RL run (``grpo-s0``…: train, then evaluate) or the SFT policy
    (``sft``: evaluate only); its own report under ``raw/runs``. Limits and settings
    come from ``plan.json``."""
    plan = json.loads((args.out / PLAN).read_text())
    settings, end_by, est = plan["settings"], plan["end_by"], plan["estimates"]
    name, raw = args.worker, args.out / RAW
    args.steps, args.eval_tasks = settings["steps"], settings["greedy_tasks"]
    report = gpu_check.Report(raw / "runs" / f"{name}.json", "credit-run")
    # when this process could begin (imports done): the plan's start-up, measured
    report.data["started_s"] = round(time.time() - plan["started"], 1)
    report.write()
    check = gpu_check.Check(args, report, args.work, deadline=end_by["deadline"], results=raw)
    check.generation_batch_size = settings["generation_batch_size"]
    if not args.smoke:
        cap_memory(plan["memory_gib"]["eval" if name == SFT else "rl"])
    needs: tuple[str, ...] = ()
    if name != SFT:
        estimator, seed = arm_of(name), int(seed_of(name))
        curve = raw / "runs" / f"{name}.steps.jsonl"
        check.on_step = lambda step, metrics: append_lines(curve, [{"step": step, **metrics}])
        extra: dict[str, Any] = {"seed": seed, "validation": settings["validation"]}
        if not args.smoke:
            extra.update(
                update={"micro_batch_size": settings["micro_batch_size"]},
                engine={"optim": {"lr": settings["lr"]}},
            )
        check.run(
            "train",
            (),
            lambda: check.train(
                estimator,
                "hf",
                f"s{seed}",
                stop_at=end_by["train"],
                step_s=est["rl_step_s"],
                **extra,
            ),
            estimate_s=est["rl_step_s"],
            end_by=end_by["train"],
        )
        needs = ("train",)
    model = name  # Check.train wrote an RL run's policy to models/<name>
    check.run(
        "sampled",
        needs,
        lambda: sampled_evaluation(check, model, name, settings["sampled"], end_by, est),
        estimate_s=est["chunk_s"],
        end_by=end_by["sampled"],
    )
    check.run(
        "eval",
        needs,
        lambda: check.evaluate(model),
        estimate_s=est["greedy_s"],
        end_by=end_by["greedy"],
    )
    return 1 if report.data["summary"]["failed"] else 0


def sampled_evaluation(
    check, model: str, name: str, s: dict[str, Any], end_by: dict[str, float], est: dict
) -> dict[str, Any]:
    """The primary measure for ``model``: ``k`` samples of each of the val and test tasks
    at the RL temperature (``slca.eval.headroom.measure``, chunk by chunk), each chunk's
    per-task lines appended to ``raw/sampled/<name>.jsonl`` as it ends. No chunk starts
    that would not end by the limit (the longest chunk so far tells)."""
    import functools

    import torch

    from slca.data.splits import draw_split
    from slca.eval.headroom import measure
    from slca.generation.device import resolve_device
    from slca.generation.engines import HFEngine
    from slca.modeling import eval_autocast, load_causal_lm
    from slca.rollout.chat import fitting_tasks

    smoke = check.smoke
    max_new, turns, total = (16, 2, 4096) if smoke else (96, 3, 4096)  # as the RL rollouts
    device = resolve_device(None, key="device")
    # fp32 weights under the measurement precision, as slca.eval.headroom.run loads them
    policy, tokenizer = load_causal_lm(check.model(model), device=device, dtype=torch.float32)
    engine = HFEngine(policy, tokenizer, batch_size=s["batch"])
    tasks = []
    for split in s["splits"]:
        drawn = draw_split(
            check.data,
            split,
            ["synth"],
            s["tasks_per_split"],
            s["seed"],
            where="sampled evaluation",
            sources_label="",
        )
        tasks += [(split, t) for t in fitting_tasks(drawn, tokenizer, total - max_new)]
    path = check.results / "sampled" / f"{name}.jsonl"
    per = gpu_plan.chunk_tasks(s["batch"], s["k"])
    longest, done, stopped, started = est["chunk_s"], 0, None, time.perf_counter()
    for i, first in enumerate(range(0, len(tasks), per)):
        if time.time() + longest > end_by["sampled"]:
            stopped = f"time limit after {done} of {len(tasks)} tasks"
            break
        chunk = tasks[first : first + per]
        began = time.perf_counter()
        result = measure(
            [t for _, t in chunk],
            engine=engine,
            tokenizer=tokenizer,
            group_size=s["k"],
            temperature=s["temperature"],
            max_new_tokens=max_new,
            max_turns=turns,
            max_total_tokens=total,
            seed=s["seed"] + 1000 * i,
            measuring=functools.partial(eval_autocast, device),
        )
        lines = [{"split": split, **line} for (split, _), line in zip(chunk, result["per_task"])]
        append_lines(path, lines)
        took = time.perf_counter() - began
        longest = took if i == 0 else max(longest, took)
        done += len(chunk)
    lines = jsonl(path) if path.exists() else []
    return {
        "tasks": len(tasks),
        "done": done,
        "k": s["k"],
        "stopped": stopped,
        "chunks_s": round(time.perf_counter() - started, 2),
        "longest_chunk_s": round(longest, 2),
        "success_pass1": round(statistics.fmean(x["success"] for x in lines), 4) if lines else None,
    }


def launch(args: argparse.Namespace, names: list[str], deadline: float) -> dict[str, Any]:
    """Every worker at once (the plan fits them side by side); each one's exit status,
    or that the deadline killed it."""
    base = [sys.executable, str(Path(__file__).resolve()), "--out", str(args.out)]
    base += ["--work", str(args.work)]
    base += ["--smoke"] if args.smoke else []
    # many processes' CPU thread pools would otherwise fight over the cores that launch
    # their kernels
    threads = str(max(1, (os.cpu_count() or 1) // len(names)))
    env = {
        **os.environ,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "PYTHONUNBUFFERED": "1",  # the log is written as it happens
    }
    logs = args.out / RAW / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    active = {}
    for name in names:
        log = (logs / f"{name}.log").open("w")
        proc = subprocess.Popen(
            [*base, "--worker", name], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        active[name] = (proc, log)
    ended: dict[str, Any] = {}
    while active:
        for name, (proc, log) in list(active.items()):
            if proc.poll() is None and time.time() > deadline:
                proc.kill()
                proc.wait()
                ended[name] = "killed at the deadline"
            if proc.poll() is not None:
                log.close()
                ended.setdefault(name, proc.returncode)
                del active[name]
        time.sleep(0.5)
    return ended


# --- the summary ------------------------------------------------------------------------


def scipy_available() -> bool:
    """Whether the bootstrap intervals can be computed here (``scipy.stats``)."""
    try:
        import scipy.stats  # noqa: F401
    except ImportError:
        return False
    return True


def paired_mean(arm: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]]):
    """``slca.eval.paired.paired_difference``'s pairing and mean without its interval:
    seeds pair by name, a single baseline run pairs with every seed, the tasks every
    pair scored enter, each task's difference is averaged over the pairs."""
    from slca.eval.paired import paired_runs

    pairs, tasks = paired_runs(arm, baseline)
    diffs = [statistics.fmean(a[t] - b[t] for a, b in pairs) for t in tasks]
    return {
        "mean": statistics.fmean(diffs),
        "tasks": len(tasks),
        "seeds": len(pairs),
        "no_difference": all(d == 0 for d in diffs),
    }


def paired(arm, baseline, intervals: bool, scale: float = 100.0) -> dict[str, Any]:
    """Arm − baseline (``seed → task → value``), in points: the mean, and with
    ``intervals`` its 95 % BCa interval (``slca.eval.paired``); ``no_difference`` when
    no task differs (the interval is then degenerate, and is not shown as one)."""
    out = paired_mean(arm, baseline)
    if intervals:
        from slca.eval.paired import paired_difference

        d = paired_difference(arm, baseline)
        out.update(low=d.low, high=d.high, no_difference=d.no_difference)
    return {k: (v * scale if k in ("mean", "low", "high") else v) for k, v in out.items()}


def per_task(lines: list[dict], key: str = "success") -> dict[str, float]:
    """A model's value per task from its sampled lines (the mean over its k samples)."""
    return {line["task_id"]: float(line[key]) for line in lines}


def comparisons(outcomes: dict[str, dict[str, dict[str, float]]], intervals: bool) -> dict:
    """Every arm against GRPO and against SFT (``arm → seed → task → value``)."""
    out: dict[str, dict] = {}
    for arm in outcomes:
        for base in ("grpo", SFT):
            if arm in (base, SFT) or base not in outcomes:
                continue
            try:
                out.setdefault(arm, {})[f"vs_{base}"] = paired(
                    outcomes[arm], outcomes[base], intervals
                )
            except ValueError as exc:  # nothing pairs: said, not fatal
                out.setdefault(arm, {})[f"vs_{base}"] = {"error": str(exc)}
    return out


def by_arm(models: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """``name → task → value`` regrouped as ``arm → seed → task → value``."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, values in sorted(models.items()):
        out.setdefault(arm_of(name), {})[seed_of(name)] = values
    return out


def arm_rates(outcomes: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict]:
    """Per arm, on the tasks all its runs scored: the rate (mean over tasks of the mean
    over seeds), each seed's rate, and the tasks."""
    out = {}
    for arm, seeds in outcomes.items():
        tasks = sorted(set.intersection(*(set(v) for v in seeds.values())))
        if not tasks:
            continue
        rates = {s: statistics.fmean(v[t] for t in tasks) for s, v in seeds.items()}
        out[arm] = {
            "runs": len(seeds),
            "tasks": len(tasks),
            "rate": statistics.fmean(rates.values()),
            "std": statistics.stdev(rates.values()) if len(rates) > 1 else 0.0,
            "seeds": rates,
        }
    return out


def read_runs(raw: Path) -> dict[str, dict]:
    """Every worker's report by name (``raw/runs/<name>.json``)."""
    runs = {}
    for path in sorted((raw / "runs").glob("*.json")):
        runs[path.stem] = json.loads(path.read_text())
    return runs


def summary_of(out: Path, intervals: bool) -> tuple[dict[str, Any], str]:
    """The summary of an experiment directory: from its files alone, nothing written."""
    from slca.eval.paired import success_by_task

    raw = out / RAW
    plan = json.loads((out / PLAN).read_text()) if (out / PLAN).exists() else {}
    main = json.loads((out / REPORT).read_text()) if (out / REPORT).exists() else {}
    runs = read_runs(raw)
    sampled = {p.stem: per_task(jsonl(p)) for p in sorted((raw / "sampled").glob("*.jsonl"))}
    sampled = {name: values for name, values in sampled.items() if values}
    greedy = {}
    for p in sorted((raw / "eval").glob("*.tasks.jsonl")):
        greedy[p.name.removesuffix(".tasks.jsonl")] = success_by_task(jsonl(p))
    primary, secondary = by_arm(sampled), by_arm(greedy)
    data = {
        "intervals": "95 % BCa over tasks" if intervals else NO_SCIPY,
        "plan": plan.get("plan", {}),
        "settings": plan.get("settings", {}),
        "exits": main.get("parts", {}).get("runs", {}).get("exits", {}),
        "runs": {name: run_status(report) for name, report in runs.items()},
        "primary": {"arms": arm_rates(primary), "paired": comparisons(primary, intervals)},
        "secondary": {"arms": arm_rates(secondary), "paired": comparisons(secondary, intervals)},
        "measured": measured(main, runs, plan),
    }
    return data, summary_markdown(data)


def run_status(report: dict) -> dict[str, Any]:
    """A worker's parts in short: status, and what a part reached when it stopped."""
    parts = report.get("parts", {})
    out: dict[str, Any] = {"started_s": report.get("started_s")}
    for name, part in parts.items():
        entry = {"status": part["status"]}
        for key in ("steps", "planned_steps", "stopped", "done", "tasks", "wall_s"):
            if part.get(key) is not None:
                entry[key] = part[key]
        if part.get("reason") or part.get("error"):
            entry["why"] = part.get("reason") or part.get("error")
        out[name] = entry
    return out


def measured(main: dict, runs: dict[str, dict], plan: dict) -> dict[str, Any]:
    """What this run measured of the plan's estimates (the next plan's figures)."""
    out: dict[str, Any] = {}
    for part in ("prepare", "base_model", "sft"):
        wall = main.get("parts", {}).get(part, {}).get("wall_s")
        if wall is not None:
            out[f"{part}_s"] = wall
    starts = [r["started_s"] for r in runs.values() if r.get("started_s") is not None]
    if starts:
        launched = main.get("parts", {}).get("runs", {}).get("launched_s")
        out["worker_started_s"] = [min(starts), max(starts)]
        if launched is not None:
            out["worker_start_s"] = round(max(starts) - launched, 1)
    steps = [
        r["parts"]["train"]["step_s"]
        for r in runs.values()
        if "step_s" in r.get("parts", {}).get("train", {})
    ]
    if steps:
        out["rl_step_s"] = [min(steps), max(steps)]
    for part in ("sampled", "eval"):
        walls = [
            r["parts"][part]["wall_s"]
            for r in runs.values()
            if r.get("parts", {}).get(part, {}).get("wall_s")
        ]
        if walls:
            out[f"{part}_wall_s"] = [min(walls), max(walls)]
    out["estimated"] = plan.get("estimates", {})
    return out


def summary_markdown(data: dict[str, Any]) -> str:
    """The summary's tables."""
    s = data["settings"].get("sampled", {})
    lines = [
        "# Credit experiment: summary\n",
        f"Primary: sampled pass@1 of Success@0.9 at temperature {s.get('temperature', '?')}, "
        f"k = {s.get('k', '?')} samples per task on {'+'.join(s.get('splits', []))} "
        f"({s.get('tasks', '?')} tasks), paired by task (per task: the mean over seeds × k). "
        f"Intervals: {data['intervals']}.\n",
        rate_table("sampled pass@1", data["primary"]["arms"]),
        paired_markdown(data["primary"]["paired"]),
        "Secondary: greedy Success@0.9 on the test split.\n",
        rate_table("greedy test", data["secondary"]["arms"]),
        paired_markdown(data["secondary"]["paired"]),
        runs_table(data["runs"], data["exits"]),
    ]
    return "\n".join(lines)


def rate_table(title: str, arms: dict[str, dict]) -> str:
    rows = [f"| {title} | runs | tasks | Success@0.9 (%) |", "|---|---:|---:|---:|"]
    for arm, a in arms.items():
        rows.append(
            f"| {arm} | {a['runs']} | {a['tasks']} | {100 * a['rate']:.1f} ± {100 * a['std']:.1f} |"
        )
    return "\n".join(rows) + "\n"


def difference_cell(d: dict[str, Any] | None) -> str:
    """A paired difference in points: "no difference observed" when no task differs
    (never a degenerate "[0, 0]"), the mean with its interval where computed."""
    if d is None:
        return "–"
    if "error" in d:
        return f"not paired ({d['error']})"
    if d.get("no_difference"):
        return f"no difference observed ({d['tasks']} tasks)"
    cell = f"{d['mean']:+.1f}"
    if "low" in d:
        cell += f" [{d['low']:+.1f}, {d['high']:+.1f}]"
    return cell + f" ({d['tasks']} tasks, {d['seeds']} seeds)"


def paired_markdown(comparisons_: dict[str, dict]) -> str:
    rows = ["| arm | − GRPO (points) | − SFT (points) |", "|---|---|---|"]
    for arm, vs in comparisons_.items():
        cells = [difference_cell(vs.get(f"vs_{base}")) for base in ("grpo", SFT)]
        rows.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def runs_table(runs: dict[str, dict], exits: dict[str, Any]) -> str:
    rows = ["| model | exit | train | sampled | greedy |", "|---|---|---|---|---|"]

    def cell(part: dict | None, reached: str) -> str:
        if part is None:
            return "–"
        text = part["status"] + (f" {reached}" if reached else "")
        return text + (f" ({part['why']})" if "why" in part else "")

    for name, run in runs.items():
        train, sampled = run.get("train"), run.get("sampled")
        steps = (
            f"{train.get('steps', '?')}/{train.get('planned_steps', '?')} steps"
            if train and train["status"] == "ok"
            else ""
        )
        if train and train.get("stopped"):
            steps += f", {train['stopped']}"
        tasks = (
            f"{sampled.get('done', '?')}/{sampled.get('tasks', '?')} tasks"
            if sampled and sampled["status"] == "ok"
            else ""
        )
        rows.append(
            f"| {name} | {exits.get(name, '–')} | {cell(train, steps)} | {cell(sampled, tasks)} "
            f"| {cell(run.get('eval'), '')} |"
        )
    return "\n".join(rows) + "\n"


def archive(out: Path) -> Path:
    """``raw/`` in one file (the device returns at most 8 files), written then renamed."""
    path = out / ARCHIVE
    tmp = out / f".{ARCHIVE}.tmp"
    try:
        with tarfile.open(tmp, "w:gz") as bundle:
            bundle.add(out / RAW, arcname=RAW)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def summarise(out: Path) -> int:
    """The summary of ``out`` from its files: ``raw.tar.gz``, then ``summary.json`` and
    ``summary.md``, each written then renamed; the run files are only read. Exit 1, in
    one line, when something fails (the files are then as they were)."""
    from slca.atomic import atomic_write_text

    if not (out / RAW).is_dir():
        print(f"gpu_credit: {out} holds no {RAW}/ (not an experiment directory)", file=sys.stderr)
        return 1
    try:
        archive(out)
        intervals = scipy_available()
        data, text = summary_of(out, intervals)
        atomic_write_text(out / SUMMARY_JSON, json.dumps(data, indent=1, sort_keys=True) + "\n")
        atomic_write_text(out / SUMMARY_MD, text)
    except Exception as exc:  # the run files stay; the summary can be run again
        first = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        print(f"gpu_credit: summary failed ({first}); {out}/{RAW} is intact", file=sys.stderr)
        return 1
    print(text, file=sys.stderr)
    return 0


# --- the orchestrator --------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, 1 step; CPU if no GPU")
    parser.add_argument(
        "--model", help="a .gguf file or HF dir (default: SmolLM2, gpu_check.resolve_model)"
    )
    parser.add_argument("--arms", nargs="+", default=["grpo", "slca"])
    parser.add_argument("--seeds", type=int, default=SETTINGS["seeds"], help="per arm, at most")
    parser.add_argument(
        "--parallel", type=int, help="RL runs side by side (default: as many as the memory holds)"
    )
    parser.add_argument("--steps", type=int, help=f"RL steps (default {SETTINGS['steps']})")
    parser.add_argument("--lr", type=float, default=SETTINGS["lr"])
    parser.add_argument("--budget-s", type=float, default=540.0, help="everything ends by then")
    parser.add_argument("--out", type=Path, help="the experiment's directory")
    parser.add_argument("--work", type=Path, help="scratch: data, models (default: temporary)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    parser.add_argument("--gpu-gib", type=float, help="free GPU memory to plan with")
    parser.add_argument("--summarise", type=Path, metavar="DIR", help="summarise DIR again")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.weights = "pretrained"
    return args


def main(argv: list[str] | None = None) -> int:
    started = time.time()  # the budget counts from here, for every process
    args = parse(argv)
    sys.path.insert(0, str(gpu_check.REPO))
    if args.summarise is not None:
        return summarise(args.summarise)
    if args.worker:
        return worker(args)
    settings = settings_of(args)
    gib = free_gib(args)
    plan = make_plan(args, settings, gib)
    if args.dry_run and gib == H200_GIB and args.gpu_gib is None:
        plan.notes.insert(
            0,
            f"no GPU here: planned for an H200's {H200_GIB:.0f} GiB free "
            "(--gpu-gib 78 plans for an H100)",
        )
    if args.dry_run:
        print(gpu_plan.format_plan(plan))
        print(gpu_plan.sources())
    if plan.refusal is not None:  # one line; nothing has started
        print(f"gpu_credit: refused: {plan.refusal}", file=sys.stderr)
        return 1
    if args.dry_run:
        return 0
    if not args.smoke:  # a model that is not there stops the experiment before any part
        try:
            args.model = gpu_check.resolve_model(args.model, args.weights)
        except gpu_check.gpu_bundle.BundleError as exc:
            raise SystemExit(str(exc)) from None
    return orchestrate(args, settings, plan, started)


def orchestrate(args: argparse.Namespace, settings: dict[str, Any], plan, started: float) -> int:
    """The SFT chain here, then every worker at once; the summary from their files."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out = args.out or gpu_check.REPO / "reports" / "gpu-credit" / stamp
    args.out.mkdir(parents=True, exist_ok=True)
    report = gpu_check.Report(args.out / REPORT, "credit-smoke" if args.smoke else "credit")
    record = plan_record(plan, settings, started)
    write_json(args.out / PLAN, record)
    end_by = record["end_by"]
    report.data["settings"] = settings
    if report.data["environment"]["missing_modules"]:
        report.part("environment", "failed", error="missing modules; see tools/gpu_check.py")
        return 1
    args.work = args.work or Path(tempfile.mkdtemp(prefix="slca-gpu-credit-"))
    check = gpu_check.Check(
        args, report, args.work, deadline=end_by["deadline"], results=args.out / RAW
    )
    check.generation_batch_size = settings["generation_batch_size"]
    check.synth_tasks = settings["synth_tasks"]
    gpu = not args.smoke
    # the smoke's parts take seconds on a CPU; the plan's estimates are GPU figures
    estimate = {p.name: 0.0 if args.smoke else p.estimate_s for p in plan.parts}
    for name, needs, body in (
        ("prepare", (), check.prepare),
        ("base_model", ("prepare",), check.base_model),
        ("sft", ("base_model",), check.sft),
    ):
        check.run(name, needs, body, cuda=gpu, estimate_s=estimate[name], end_by=end_by[name])
    names = [SFT, *record["runs"]]
    late = time.time() > end_by["launch"]
    if report.status("sft") != "ok" or late:
        why = (
            "the SFT policy is missing"
            if report.status("sft") != "ok"
            else (
                f"the SFT chain ended after its limit ({end_by['sft'] - started:.0f} s): "
                "the planned steps no longer fit"
            )
        )
        report.part("runs", "skipped", reason=why)
    else:
        _empty_gpu_cache()
        launched = round(time.time() - started, 1)
        exits = launch(args, names, end_by["deadline"])
        failed = [n for n, code in exits.items() if code != 0]
        report.part(
            "runs",
            "failed" if failed else "ok",
            launched_s=launched,
            exits=exits,
            **({"error": f"{failed}"} if failed else {}),
        )
    code = summarise(args.out)
    return 1 if code or report.data["summary"]["failed"] else 0


def _empty_gpu_cache() -> None:
    """What the SFT held goes back to the GPU before the workers ask for their shares."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


if __name__ == "__main__":
    raise SystemExit(main())
