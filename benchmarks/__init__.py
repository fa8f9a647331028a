"""Benchmarks of the pipeline: run from the repo root as ``python -m benchmarks.NAME``.

Not part of the wheel (pyproject's package find includes slca and slca_pipeline only).
"""
