"""Prefect tasks: each loads its inputs, calls one slca function and writes its outputs.

The DVC stage for the same step calls the same function (DESIGN §6). Every step task is
cached by Prefect (:mod:`slca_pipeline.tasks.steps`), so a re-run flow skips a step
whose params, code and inputs are unchanged and whose outputs are as its run left them
(docs/decisions.md, "One cache").
"""
