"""Logging a trained model into its run: ``mlflow.transformers``, with explicit
requirements and a model card (see :meth:`slca.tracking.Tracker.log_model`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import LoggedModelStatus

from slca.tracking.figures import SAFE_NAME
from slca.tracking.provenance import default_pip_requirements


def model_card(model: Any) -> Any:
    """The logged model's card: the checkpoint's own (``README.md``, with its license)
    when it has one, else a short slca card. Given to MLflow so that it does not look the
    local path up on the Hub as a repo id (two warnings per model, nothing to act on)."""
    from huggingface_hub import ModelCard

    source = str(getattr(model, "name_or_path", "") or "")
    if source and (Path(source) / "README.md").is_file():
        return ModelCard.load(Path(source) / "README.md")
    origin = f" from `{source}`" if source else ""
    return ModelCard(
        "---\nlibrary_name: transformers\ntags: [slca]\n---\n"
        f"# {Path(source).name or 'model'}\n\nA checkpoint logged by slca{origin}.\n"
    )


def log_model(
    tracker: Any,
    model: Any,
    tokenizer: Any,
    *,
    name: str,
    task: str,
    pip_requirements: list[str] | None,
    register: bool,
    step: int | None,
) -> str:
    """:meth:`slca.tracking.Tracker.log_model`: the model into ``tracker``'s run, once
    per name, and registered; returns its URI."""
    uri = _logged_model(tracker, model, tokenizer, name, task, pip_requirements, step)
    if register:
        from slca.tracking.registry import register_version

        register_version(tracker, uri)
    return uri


def _logged_model(
    tracker: Any,
    model: Any,
    tokenizer: Any,
    name: str,
    task: str,
    pip_requirements: list[str] | None,
    step: int | None,
) -> str:
    run_id = tracker._require_run()
    if not SAFE_NAME.match(name):
        raise ValueError(f"model name {name!r}: use letters, digits, '_', '.', '-'")
    existing = tracker.client.search_logged_models(
        experiment_ids=[tracker.experiment_id],
        filter_string=f"source_run_id = '{run_id}' AND name = '{name}'",
    )
    for logged in existing:
        if logged.status == LoggedModelStatus.READY:
            return f"models:/{logged.model_id}"
    # our pins are the running versions: MLflow's check of them against the environment
    # (a scan of every installed distribution's files, 16 of a model's 19 s here) is moot
    checked = contextlib.nullcontext() if pip_requirements else _pins_need_no_check()
    with checked:
        info = mlflow.transformers.log_model(
            {"model": model, "tokenizer": tokenizer},
            name=name,
            task=task,
            model_card=model_card(model),
            pip_requirements=pip_requirements or default_pip_requirements(),
            step=0 if step is None else step,
        )
    return info.model_uri


@contextlib.contextmanager
def _pins_need_no_check() -> Iterator[None]:
    """MLflow's requirement-mismatch warning off while a model logs with
    :func:`default_pip_requirements` (pinned from this very environment, so it cannot
    find a mismatch); as it was after, and nothing where MLflow has no such function."""
    from mlflow.utils import environment

    real = getattr(environment, "warn_dependency_requirement_mismatches", None)
    if real is None:
        yield
        return
    environment.warn_dependency_requirement_mismatches = lambda requirements: None
    try:
        yield
    finally:
        environment.warn_dependency_requirement_mismatches = real
