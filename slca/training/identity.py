"""Which run a checkpoint directory (and an RL output) belongs to, and what a new start
may do with it.

A checkpoint directory holds ``run.json``, the :class:`RunIdentity` of the run writing
there: its MLflow run id, estimator, config fingerprint and the hash of the rows it
trains on. A start reads it and decides (:func:`plan_start`): continue that run, start
fresh, replace the checkpoints of a finished run of the same configuration, or refuse,
naming both runs. ``--overwrite`` turns a refusal into a replacement; nothing is removed
until the new run's inputs have loaded.

The config fingerprint covers what makes two runs the same experiment: the estimator,
algorithm, rewards, sampling, optimizer, seed, data paths, and the init checkpoint, by
path and by content (:func:`init_hash`): a run from another SFT or base model in the same
``init_dir`` is another experiment, refused without ``--overwrite``, and a checkpoint
directory named by ``{fingerprint}`` is its own. It leaves out
what may change on a resume without making it another run (:data:`NOT_IDENTITY`): the
step count (a resume may train further), where outputs go, how often to checkpoint or
validate, the other arm's estimator (``baseline``), and memory knobs (lower
``update.micro_batch_size`` after running out of memory and resume).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from slca.atomic import atomic_write_text
from slca.data import io
from slca.jsonutil import canonical_json
from slca.tracking.run_file import RUN_FILE as MLFLOW_RUN_FILE

IDENTITY_FILE = "run.json"
LOCK_FILE = ".lock"

NOT_IDENTITY = (
    "baseline",
    "steps",
    "out_dir",
    "checkpoint_dir",
    "curve_path",
    "checkpoint_every",
    "histogram_every",
    "max_bad_steps",
    "verify_checkpoints",
    "validation",
    "tracking_dir",
    "experiment",
    "run_name",
    "system_metrics_s",
    "rollout.engine",
    "rollout.generation_batch_size",
    "update.micro_batch_size",
    "engine.gradient_checkpointing",
    "simulator.cache",
)
"""Dotted ``train`` keys left out of the config fingerprint."""


class RunConflict(ValueError):
    """The directory belongs to another run (or to an unfinished one not resumed); the
    message names both. A ``ValueError``, so the command lines report it in one line."""


@dataclass(frozen=True)
class RunIdentity:
    """What ``run.json`` records about the run writing a checkpoint directory."""

    estimator: str
    fingerprint: str
    """:func:`config_fingerprint` of the run's config."""
    data_hash: str
    """:func:`rows_hash` of the tasks it trains on."""
    steps: int
    run_id: str | None = None
    """The MLflow run (None until it is created)."""
    experiment: str | None = None
    tracking_uri: str | None = None
    status: Literal["running", "completed"] = "running"

    def describe(self) -> str:
        run = self.run_id or "not yet tracked"
        return f"run {run} (estimator {self.estimator}, config {self.fingerprint})"


def init_hash(directory: str | Path) -> str:
    """sha256 over the init checkpoint's files, names and bytes (its ``mlflow_run.json``
    and dotfiles aside: a rerun SFT with the same weights is the same init); "" when it
    is not a local directory. Top-level files only, as ``from_pretrained`` reads them (a
    trainer's ``checkpoint-*`` folders inside are not the model). Reads every byte:
    about a second per GB."""
    root = Path(directory)
    if not root.is_dir():
        return ""
    digest = hashlib.sha256()
    for path in sorted(root.iterdir()):
        if not path.is_file() or path.name == MLFLOW_RUN_FILE or path.name.startswith("."):
            continue
        with open(path, "rb") as f:
            digest.update(f"{path.name}\0".encode() + hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()


def config_fingerprint(config: Any, init: str = "") -> str:
    """16 hex digits of sha256 over the config's JSON without :data:`NOT_IDENTITY`, and
    the init checkpoint's :func:`init_hash` where known."""
    data = config.model_dump(mode="json")
    if init:
        data["init_content"] = init
    for key in NOT_IDENTITY:
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node.get(part, {})
        node.pop(leaf, None)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:16]


def rows_hash(tasks: list[Any]) -> str:
    """sha256 of the exact rows trained on (canonical JSON lines, ordered by id)."""
    return io.content_hash(sorted(tasks, key=lambda t: t.id))


def identity_of(config: Any, data_hash: str, init: str = "") -> RunIdentity:
    return RunIdentity(
        estimator=config.algorithm.advantage.estimator,
        fingerprint=config_fingerprint(config, init),
        data_hash=data_hash,
        steps=config.steps,
    )


def read_identity(directory: str | Path) -> RunIdentity | None:
    path = Path(directory) / IDENTITY_FILE
    try:
        data = json.loads(path.read_text())
        return RunIdentity(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise RunConflict(f"{path}: not a run identity ({exc}); move it away") from None


def write_identity(directory: str | Path, identity: RunIdentity) -> None:
    atomic_write_text(
        Path(directory) / IDENTITY_FILE, json.dumps(asdict(identity), indent=2) + "\n"
    )


def checkpoints(directory: str | Path) -> list[Path]:
    """Every ``step_*`` entry (complete or not) of a checkpoint directory."""
    root = Path(directory)
    return sorted(root.glob("step_*")) if root.is_dir() else []


Action = Literal["fresh", "resume", "replace"]


def plan_start(
    directory: str | Path,
    ours: RunIdentity,
    *,
    resume: bool,
    overwrite: bool,
    key: str = "train.checkpoint_dir",
) -> tuple[Action, RunIdentity | None]:
    """What a start into ``directory`` does: ``fresh`` (nothing there to keep),
    ``resume`` (the returned identity's run), or ``replace`` (remove the checkpoints
    there once the inputs have loaded); :class:`RunConflict` when it may not start."""
    found = checkpoints(directory)
    previous = read_identity(directory)
    same = (
        previous is not None
        and previous.fingerprint == ours.fingerprint
        and previous.data_hash == ours.data_hash
    )
    if not found:
        # killed before its first checkpoint: continue its MLflow run from step 0
        if resume and same and previous.status == "running" and previous.run_id:
            return "resume", previous
        return "fresh", None
    steps = f"{found[0].name}…{found[-1].name}" if len(found) > 1 else found[0].name
    if not same:
        if overwrite:
            return "replace", previous
        theirs = previous.describe() if previous else "an unknown run (no run.json)"
        data = (
            " trained on other data"
            if previous and previous.fingerprint == ours.fingerprint
            else ""
        )
        raise RunConflict(
            f"{key} {directory} holds checkpoints {steps} of {theirs}{data}; this is "
            f"{ours.describe()}: choose another {key}, or pass --overwrite to replace them"
        )
    if previous.status == "running":
        if resume:
            return "resume", previous
        if overwrite:
            return "replace", previous
        raise RunConflict(
            f"{key} {directory} holds checkpoints {steps} of the unfinished "
            f"{previous.describe()} of this configuration: continue it with --resume "
            "(the flows and the DVC stage always do), or pass "
            "--overwrite to replace it"
        )
    if resume and ours.steps > previous.steps:  # a finished run trained further
        return "resume", previous
    return "replace", previous  # the same configuration's finished run: start it again


def remove_checkpoints(directory: str | Path) -> None:
    """Remove every ``step_*`` of a checkpoint directory and its identity (a planned
    ``replace``, after the new run's inputs loaded)."""
    for path in checkpoints(directory):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    (Path(directory) / IDENTITY_FILE).unlink(missing_ok=True)


def check_output(
    out_dir: str | Path,
    ours: RunIdentity,
    *,
    overwrite: bool,
    run_file: str,
    key: str = "train.out_dir",
) -> None:
    """Refuse to replace ``out_dir`` unless it is empty, holds this run's output, or the
    output of a run with the same configuration, data and step count; ``--overwrite``
    allows any."""
    root = Path(out_dir)
    if overwrite or not root.exists():
        return
    if root.is_dir() and not any(root.iterdir()):
        return
    try:
        theirs = json.loads((root / run_file).read_text())
    except (OSError, ValueError):
        theirs = None
    if theirs is not None:
        if ours.run_id is not None and theirs.get("run_id") == ours.run_id:
            return
        if (
            theirs.get("fingerprint") == ours.fingerprint
            and theirs.get("data_hash") == ours.data_hash
            and theirs.get("steps") == ours.steps
        ):
            return
        other = RunIdentity(
            estimator=str(theirs.get("estimator", "?")),
            fingerprint=str(theirs.get("fingerprint", "?")),
            data_hash="",
            steps=int(theirs.get("steps") or 0),
            run_id=theirs.get("run_id"),
        )
        what = f"the output of {other.describe()} ({other.steps} steps)"
    else:
        what = "files that are not an RL run's output"
    raise RunConflict(
        f"{key} {root} holds {what}; this is {ours.describe()} ({ours.steps} steps): "
        f"choose another {key}, or pass --overwrite to replace it"
    )


def completed(identity: RunIdentity) -> RunIdentity:
    return replace(identity, status="completed")
