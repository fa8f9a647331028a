"""The RL stage: a training run from its configuration, with everything around the
trainer that makes a run safe to start, repeat and resume.

:func:`training_session` checks the output directories, takes the run's locks, loads
and checks the tasks, plans the start against the checkpoint directory's run identity
(:mod:`slca.training.identity`), builds the trainer once (:mod:`slca.training.factory`),
opens or continues the MLflow run, and on a normal exit writes the final policy.
:func:`run_train` runs it to the end; a Prefect flow runs its steps phase by phase.
The command line is :mod:`slca.training.stages`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from slca.config import ConfigError
from slca.config.train import TrainConfig
from slca.data import io
from slca.data.splits import draw_split
from slca.faults import naming_the_place
from slca.rollout.chat import fitting_tasks
from slca.tracking.run_file import RUN_FILE

log = logging.getLogger(__name__)


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


def checkpoint_path(config: TrainConfig, init: str = "") -> Path:
    """``train.checkpoint_dir`` with ``{fingerprint}`` filled in (``init``: the init
    checkpoint's :func:`~slca.training.identity.init_hash`)."""
    from slca.training.identity import config_fingerprint

    text = config.checkpoint_dir
    if "{fingerprint}" in text:
        text = text.replace("{fingerprint}", config_fingerprint(config, init))
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
    one would be scored against another) or a tool schema is not a valid JSON Schema or
    over the data's size limits; validation gates this too, but a run must not depend
    on it having run."""
    from collections import Counter

    from slca.data.checks import schema_problems

    limits = io.dataset_limits(in_dir)

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
        problems = schema_problems([t.model_dump() for t in task.tools], limits)
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

    In order, so that nothing is lost to a typo, a crash or a second run: every engine
    the run names is checked, once (:func:`slca.training.factory.check_engines`); the
    output directories must be creatable; the checkpoint directory and ``out_dir`` are
    locked (a second run is refused at once, naming the holder); the inputs load (the
    tasks, refused when a split's content is not what its manifest records, then the
    tokenizer); the start is planned against the checkpoint directory's run identity
    (:func:`slca.training.identity.plan_start`: continue its run, start fresh, or refuse
    naming both runs) and against ``out_dir``; the model loads; only then are replaced
    checkpoints removed. A resumed run continues its own MLflow run (its fingerprint
    tags must match) and uploads again the checkpoints whose upload was cut short.

    Under a data-parallel launcher every rank calls it; only rank 0 locks, plans, tracks,
    reports progress and writes ``out_dir`` (checkpoints are the engine's collective
    save). ``track=False`` logs nothing (no MLflow import: a machine without it)."""
    from slca.training import identity as ids
    from slca.training.checkpoints import complete_checkpoints
    from slca.training.factory import build_trainer

    run = _Run.checked(config, track)
    with contextlib.ExitStack() as stack:
        if run.main:
            _lock(stack, run.checkpoint_dir, run.out_dir)
        tracker = stack.enter_context(_tracker(config, run.track))
        inputs = _load_inputs(config, run.init_dir)
        ours = ids.identity_of(config, ids.rows_hash(inputs.tasks), run.init_hash)
        action, run_id = _plan(run, ours, resume=resume, overwrite=overwrite)
        # the policy, engines, simulator and scorer, once, from the configuration; what
        # must be closed (vLLM engines, the simulator's cache) closes with the session
        trainer = build_trainer(
            config,
            tokenizer=inputs.tokenizer,
            tasks=inputs.tasks,
            checkpoint_dir=run.checkpoint_dir,
            stack=stack,
            validation_tasks=inputs.validation,
            tracker=tracker,
            progress=progress if run.main else None,
        )
        if action == "resume":
            # before anything about the run changes (run.json, the MLflow run's status):
            # a resume that finds no checkpoint to trust leaves both as they were
            trainer.restore()
        if run.main and action == "replace":  # the inputs loaded: the old checkpoints may go
            ids.remove_checkpoints(run.checkpoint_dir)
        if tracker is not None:
            hashes = {**(data_hashes or {}), "init.sha256": run.init_hash or "not local"}
            ours = _start_tracking(tracker, config, ours, run_id, inputs, hashes)
        if run.main:
            ids.write_identity(run.checkpoint_dir, ours)
        if tracker is not None:
            trainer.state.run_id = tracker.run_id
            if action == "resume":
                for path in complete_checkpoints(run.checkpoint_dir):  # uploads cut short
                    tracker.log_checkpoint(path, int(path.name.split("_")[1]))
        yield trainer
        _finish(trainer, run, config, ours, inputs.tokenizer, tracker, overwrite=overwrite)


@dataclasses.dataclass(frozen=True)
class _Run:
    """Where a run reads and writes, and what this rank does of it."""

    init_dir: Path
    init_hash: str
    """The init checkpoint's content (:func:`~slca.training.identity.init_hash`)."""
    checkpoint_dir: Path
    out_dir: Path
    main: bool
    """Rank 0 (the launcher's ``RANK``): it locks, plans, tracks and writes ``out_dir``."""
    track: bool

    @classmethod
    def checked(cls, config: TrainConfig, track: bool) -> _Run:
        """The run's places, after checking its engines and that its directories can be
        made: what fails here fails before anything is loaded or written."""
        from slca.training.factory import check_engines
        from slca.training.identity import init_hash

        # an absolute path: a relative one ("models/sft") reads as a Hub repo id to
        # mlflow.transformers, which then spends a minute retrying the network for its card
        init_dir = Path(config.init_dir).resolve()
        # the run's one check of its engines: the factory does not check them again
        check_engines(config, init_dir=init_dir)
        init = init_hash(init_dir)
        checkpoint_dir = checkpoint_path(config, init)
        out_dir = Path(config.out_dir)
        # the launcher's rank: known before the engine exists, and the engine agrees with it
        main = os.environ.get("RANK", "0") == "0"
        track = track and main
        _usable_directory("checkpoint_dir", checkpoint_dir)
        _usable_directory("out_dir", out_dir.parent)
        if track and "MLFLOW_TRACKING_URI" not in os.environ:
            _usable_directory("tracking_dir", Path(config.tracking_dir))
        return cls(init_dir, init, checkpoint_dir, out_dir, main, track)


def _lock(stack: contextlib.ExitStack, checkpoint_dir: Path, out_dir: Path) -> None:
    """Lock the checkpoint directory and ``out_dir`` for this run (a second run is refused
    naming the holder), and clear what a killed save left."""
    from slca.locks import ExclusiveLock
    from slca.training.checkpoints import clean_staging
    from slca.training.identity import LOCK_FILE

    stack.enter_context(
        ExclusiveLock(checkpoint_dir / LOCK_FILE, what=f"train.checkpoint_dir {checkpoint_dir}")
    )
    for done in clean_staging(checkpoint_dir):  # what a killed save left
        log.info("train.checkpoint_dir %s: %s", checkpoint_dir, done)
    # out_dir itself is renamed over: its lock lives beside it
    out_lock = out_dir.parent / f".{out_dir.name}.lock"
    stack.enter_context(ExclusiveLock(out_lock, what=f"train.out_dir {out_dir}"))


@dataclasses.dataclass
class _Inputs:
    tasks: list[Any]
    validation: list[Any]
    tokenizer: Any
    read: dict[str, str]
    """``{split: content hash}`` of every split file the run read."""


def _load_inputs(config: TrainConfig, init_dir: Path) -> _Inputs:
    """The train tasks (checked, of ``train.sources``, fitting the rollout budget), the
    validation draw and the tokenizer. The data first (cheap, and the likelier to be
    refused): each split read is the content the manifest records (validated data
    cannot drift), and the run records the hash of what it read."""
    from slca.modeling import load_tokenizer, resolve_model_source

    read: dict[str, str] = {}
    train, read["train"] = io.verified_split(config.in_dir, "train")
    tasks = checked_train_tasks(io.build_train_set(train), config.in_dir)
    if config.sources is not None:
        tasks = [t for t in tasks if t.source in config.sources]
        if not tasks:
            raise ValueError(f"train: no train task from train.sources={config.sources}")
    pool = None
    if config.validation.every:
        pool, read[config.validation.split] = io.verified_split(
            config.in_dir, config.validation.split
        )
    tokenizer = load_tokenizer(resolve_model_source(init_dir))
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tasks = fitting_tasks(
        tasks,
        tokenizer,
        config.rollout.max_total_tokens - config.rollout.max_new_tokens,
    )
    return _Inputs(tasks, validation_tasks(config, tokenizer, pool), tokenizer, read)


def _plan(run: _Run, ours: Any, *, resume: bool, overwrite: bool) -> tuple[str, str | None]:
    """``(action, MLflow run id to continue)``: rank 0 plans the start against the
    checkpoint directory's run identity and ``out_dir``; the other ranks follow rank 0's
    checkpoints."""
    from slca.training import identity as ids
    from slca.training.checkpoints import latest_checkpoint

    if not run.main:  # rank 0 planned the same start; the others follow its checkpoints
        action = "resume" if resume and latest_checkpoint(run.checkpoint_dir) else "fresh"
        return action, None
    action, previous = ids.plan_start(run.checkpoint_dir, ours, resume=resume, overwrite=overwrite)
    run_id = previous.run_id if action == "resume" else None
    ids.check_output(
        run.out_dir,
        dataclasses.replace(ours, run_id=run_id),
        overwrite=overwrite,
        run_file=RUN_FILE,
    )
    return action, run_id


def _start_tracking(
    tracker: Any,
    config: TrainConfig,
    ours: Any,
    run_id: str | None,
    inputs: _Inputs,
    data_hashes: dict[str, str] | None,
) -> Any:
    """Start (or continue, ``run_id``) the MLflow run with the run's fingerprint tags, its
    parameters and data hashes, and the splits it read as dataset inputs; returns the
    run identity with the MLflow run recorded."""
    from slca.training import identity as ids

    hashes = {
        **(data_hashes or {}),
        **{f"read.{split}": digest for split, digest in inputs.read.items()},
        "tasks.train": ours.data_hash,
    }
    if inputs.validation:
        hashes["tasks.validation"] = ids.rows_hash(inputs.validation)
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
    tracker.log_datasets(_read_inputs(config, inputs.read))
    return ours


def _finish(
    trainer: Any,
    run: _Run,
    config: TrainConfig,
    ours: Any,
    tokenizer: Any,
    tracker: Any,
    *,
    overwrite: bool,
) -> None:
    """After the last step: the final policy to ``out_dir`` (written then renamed, with
    its ``run.json``), the model and the learning curves to MLflow, and the run
    identity marked complete. Every rank gathers the weights; rank 0 writes."""
    from slca.training import identity as ids

    if not trainer.done:
        raise RuntimeError(
            f"train: the session ended at step {trainer.state.step} of {config.steps}"
        )
    update = trainer.update
    weights = update.state_dict_for_rollout()  # every rank: ZeRO-3 gathers
    if not run.main:
        return
    out_dir = run.out_dir
    ids.check_output(out_dir, ours, overwrite=overwrite, run_file=RUN_FILE)
    with naming_the_place(out_dir, "train.out_dir"), io.atomic_dir(out_dir) as tmp:
        update.module.save_pretrained(tmp, state_dict=weights)
        tokenizer.save_pretrained(tmp)
        record = {
            "run_id": ours.run_id,
            "experiment": config.experiment,
            "estimator": ours.estimator,
            "fingerprint": ours.fingerprint,
            "data_hash": ours.data_hash,
            "steps": config.steps,
        }
        (Path(tmp) / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")
    if tracker is not None:
        _log_model(tracker, config, update, tokenizer)
    ids.write_identity(run.checkpoint_dir, ids.completed(ours))


def _log_model(tracker: Any, config: TrainConfig, update: Any, tokenizer: Any) -> None:
    """The final policy (read back from ``out_dir`` when ZeRO-3 sharded it) and the
    learning curves to MLflow."""
    from slca.modeling import load_causal_lm
    from slca.tracking import write_curves

    sharded = config.engine.engine == "deepspeed" and config.engine.zero_stage == 3
    logged = load_causal_lm(Path(config.out_dir))[0] if sharded else update.module
    tracker.log_model(logged, tokenizer)
    if config.curve_path is not None:
        write_curves(tracker.run_id, config.curve_path, tracking_uri=tracker.tracking_uri)


def _read_inputs(config: TrainConfig, read: dict[str, str]) -> list[Any]:
    """The splits the run read (``{split: content hash}``) as MLflow dataset inputs: the
    train split in context ``training``, the validation split in ``validation``."""
    from slca.tracking import split_input

    return [
        split_input(config.in_dir, split, digest, "training" if split == "train" else "validation")
        for split, digest in read.items()
    ]


@contextmanager
def _tracker(config: TrainConfig, enabled: bool) -> Iterator[Any]:
    """The run's MLflow tracker, or None (not rank 0, or tracking off)."""
    if not enabled:
        yield None
        return
    from slca.training.stage_run import locked_tracker

    with locked_tracker(config, "train") as tracker:
        yield tracker


def validation_tasks(
    config: TrainConfig, tokenizer: Any, pool: list[Any] | None = None
) -> list[Any]:
    """The held-out tasks ``train.validation`` names (none when it is off): a seeded
    subset of the split (``pool``: its records, already read), of the training sources,
    that fits the rollout budget."""
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
        records=pool,
    )
    budget = config.rollout.max_total_tokens - config.rollout.max_new_tokens
    return fitting_tasks(drawn, tokenizer, budget)


def data_hashes(in_dir: str | Path) -> dict[str, str]:
    """The manifest's content hashes per split (``manifest.<split>``), for the run's
    params; the run adds ``read.<split>``, the content hash of each split file it read
    (it refuses one whose hash the manifest does not record), and ``tasks.train``, the
    hash of the rows it trains on."""
    manifest = Path(in_dir) / "manifest.json"
    if not manifest.exists():
        return {}
    hashes = json.loads(manifest.read_text())["content_sha256"]
    return {f"manifest.{k}": v for k, v in hashes.items()}
