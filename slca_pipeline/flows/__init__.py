"""Prefect flows: compose the tasks in :mod:`slca_pipeline.tasks` (DESIGN §6).

``data`` (prepare + validate), ``simulator_check``, ``sft`` (base model + SFT),
``train`` (one RL stage), ``evaluate`` and ``pipeline`` (all of them). Deployments:
``prefect.yaml``.
"""
