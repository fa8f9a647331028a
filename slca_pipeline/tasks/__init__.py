"""Prefect tasks: each loads its inputs, calls one slca function and writes its outputs.

The DVC stage for the same step calls the same function (DESIGN §6). Every task is
wrapped in :func:`slca_pipeline.tasks.steps.run_step`, so a re-run flow skips a step whose params,
code, inputs and outputs are unchanged since it completed (see docs/decisions.md,
"Orchestration").
"""
