"""``python -m slca.training.stages`` with MLflow's local artifact uploads made slow and
announced on stdout, so a test can kill -9 a run in the middle of a checkpoint upload.

Every directory upload prints ``UPLOAD <artifact path>``, then copies its files one by
one with ``SLOW_UPLOAD_S`` seconds between them, then prints ``UPLOADED <artifact path>``.
The training code is not changed: only the copy is slowed, as a slow disk would.
"""

from __future__ import annotations

import os
import sys
import time

from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository


def slow_log_artifacts(self, local_dir, artifact_path=None):
    print(f"UPLOAD {artifact_path}", flush=True)
    pause = float(os.environ.get("SLOW_UPLOAD_S", "0.2"))
    for root, _dirs, files in sorted(os.walk(local_dir)):
        relative = os.path.relpath(root, local_dir)
        target = artifact_path if relative == "." else f"{artifact_path}/{relative}"
        for name in sorted(files):
            self.log_artifact(os.path.join(root, name), target)
            time.sleep(pause)
    print(f"UPLOADED {artifact_path}", flush=True)


LocalArtifactRepository.log_artifacts = slow_log_artifacts

if __name__ == "__main__":
    from slca.training.stages import main

    sys.exit(main(sys.argv[1:]))
