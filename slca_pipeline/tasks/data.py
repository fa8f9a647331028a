"""Task-data tasks: prepare (slca.data.prepare.prepare), validate (slca.data.validate)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from slca.data.params import PrepareParams, ValidateParams
from slca.data.prepare import DISTRIBUTIONS, prepare
from slca.data.validate import validate_dir
from slca_pipeline.tasks.steps import Step, as_paths, run_step


class ValidationFailed(RuntimeError):
    """Great Expectations found problems; the message lists them."""


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@task(name="prepare", cache_policy=NO_CACHE)
def prepare_task(params: PrepareParams, state_dir: str) -> dict[str, Any]:
    """Import, check and split the task data; returns the manifest's totals and rejects."""
    step = Step(
        "prepare",
        params,
        inputs=(),
        outputs=as_paths(params.out_dir),
        state_dir=state_dir,
        extra=tuple((d, _version(d)) for s in params.sources if (d := DISTRIBUTIONS.get(s))),
    )

    def work() -> dict[str, Any]:
        manifest = prepare(params)
        return {"totals": manifest["totals"], "rejected": manifest["rejected"]}

    return run_step(step, work, get_run_logger().info)


@task(name="validate", cache_policy=NO_CACHE)
def validate_task(params: ValidateParams, state_dir: str) -> list[str]:
    """Run the data expectations; raises :class:`ValidationFailed` when any fails."""
    step = Step(
        "validate",
        params,
        inputs=as_paths(params.in_dir),
        outputs=as_paths(params.report_dir),
        state_dir=state_dir,
    )

    def work() -> list[str]:
        ok, failures = validate_dir(
            params.in_dir, params.report_dir, params.max_examples, params.min_rows
        )
        if not ok:
            raise ValidationFailed("task data failed validation:\n  " + "\n  ".join(failures))
        return failures

    return run_step(step, work, get_run_logger().info)
