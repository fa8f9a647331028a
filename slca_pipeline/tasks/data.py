"""Task-data tasks: prepare (slca.data.prepare.prepare), validate (slca.data.validate)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

from slca.config.data import PrepareParams, ValidateParams
from slca.data.prepare import DISTRIBUTIONS, prepare
from slca.data.validate import load_frame, run_suite
from slca_pipeline.tasks.artifacts import publish_validation
from slca_pipeline.tasks.steps import Step, as_paths, step_task


class ValidationFailed(RuntimeError):
    """Great Expectations found problems; the message lists them."""


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def prepare_step(params: PrepareParams) -> Step:
    # the source packages' data is an input too: another version, another result
    versions = tuple((d, _version(d)) for s in params.sources if (d := DISTRIBUTIONS.get(s)))
    return Step("prepare", params, outputs=as_paths(params.out_dir), extra=versions)


@step_task(prepare_step, name="prepare")
def prepare_task(params: PrepareParams) -> dict[str, Any]:
    """Import, check and split the task data; returns the manifest's totals and rejects."""
    manifest = prepare(params)
    return {"totals": manifest["totals"], "rejected": manifest["rejected"]}


def validate_step(params: ValidateParams) -> Step:
    return Step(
        "validate", params, inputs=as_paths(params.in_dir), outputs=as_paths(params.report_dir)
    )


@step_task(validate_step, name="validate")
def validate_task(params: ValidateParams) -> list[str]:
    """Run the data expectations and publish them as the ``slca-validation`` table;
    raises :class:`ValidationFailed` when any fails (after publishing, so the failed
    run's page shows which)."""
    # slca.data.validate.validate_dir's two calls: the suite's full result is the table
    ok, failures, result = run_suite(
        load_frame(params.in_dir), params.report_dir, params.max_examples, min_rows=params.min_rows
    )
    publish_validation(result, params.in_dir, params.report_dir)
    if not ok:
        raise ValidationFailed("task data failed validation:\n  " + "\n  ".join(failures))
    return failures
