"""Prefect flows: compose the tasks in ``tasks/`` (DESIGN §6).

``data`` (prepare + validate), ``simulator_check``, ``sft`` (base model + SFT),
``train`` (one RL stage) and ``pipeline`` (all of them). Deployments: ``prefect.yaml``.
"""

import os

# With analytics on, every run of a local Prefect server logs "database is locked".
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
