"""Evaluation tasks: one model on the held-out sets; the comparison report."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from slca.config.evaluate import EvaluateParams
from slca.eval.report import report
from slca.eval.stages import evaluate, tqdm_progress
from slca_pipeline.tasks.artifacts import publish_comparison
from slca_pipeline.tasks.steps import Step, as_paths, step_task


def evaluate_step(params: EvaluateParams) -> Step:
    return Step(
        "evaluate",
        params,
        inputs=as_paths(params.model_dir, params.in_dir),
        outputs=as_paths(params.report_path),
    )


@step_task(evaluate_step, name="evaluate")
def evaluate_task(params: EvaluateParams) -> dict[str, float]:
    """Greedy rollouts of ``params.model_dir`` scored; returns the metrics."""
    return evaluate(params, progress=tqdm_progress(get_run_logger()))


# Not a cached step: it reads every finished run of the experiment, which no key covers.
@task(name="report", cache_policy=NO_CACHE)
def report_task(tracking_dir: str, experiment: str, out_dir: str) -> str:
    """The comparison of every finished run of ``experiment``, also published as the
    ``slca-comparison`` markdown artifact; returns report.md's path."""
    path = report(tracking_dir, experiment, out_dir)
    get_run_logger().info(f"report: {path}")
    publish_comparison(path, tracking_dir)
    return str(Path(path))
