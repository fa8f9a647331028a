"""slca's orchestration: Prefect tasks (:mod:`slca_pipeline.tasks`), flows
(:mod:`slca_pipeline.flows`) and the ``slca`` command (:mod:`slca_pipeline.cli`) around
the library in ``slca/``, which imports neither Prefect, DVC nor this package (DESIGN
§6). Deployments: ``prefect.yaml``; DVC stages: ``dvc.yaml``.

Prefect's settings below are fixed here, before any task or flow module imports Prefect.
"""

import logging
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


class _NoCpuFallbackNotice(logging.Filter):
    """DeepSpeed, imported by ``transformers`` on every ``save_pretrained``, warns that it
    fell back to its CPU accelerator and "was unable to detect" a GPU, whether or not
    DeepSpeed trains. A run that needs a GPU says so (``engine.device: cuda``), which is
    refused before any work when torch sees none; DeepSpeed's other messages still
    show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Setting accelerator to CPU")


logging.getLogger("DeepSpeed").addFilter(_NoCpuFallbackNotice())
