"""slca's orchestration: Prefect tasks (:mod:`slca_pipeline.tasks`) and flows
(:mod:`slca_pipeline.flows`) around the library in ``slca/``, which imports neither
Prefect nor DVC (DESIGN §6). Deployments: ``prefect.yaml``; DVC stages: ``dvc.yaml``.

Prefect's settings below are fixed here, before any task or flow module imports Prefect.
"""

import os
from pathlib import Path

# With analytics on, every run of a local Prefect server logs "database is locked".
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect 3 derives its server's memo store from ~/.prefect even when PREFECT_HOME is set
# (the default is computed in the server settings, which do not see PREFECT_HOME), then
# warns that it cannot write there. Point it into PREFECT_HOME, where it belongs.
if os.environ.get("PREFECT_HOME"):
    os.environ.setdefault(
        "PREFECT_SERVER_MEMO_STORE_PATH",
        str(Path(os.environ["PREFECT_HOME"]).expanduser() / "memo_store.toml"),
    )
