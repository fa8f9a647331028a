"""Step records: what lets a re-run flow skip the steps that already completed.

After a step's outputs are complete, a small JSON record is written under the flow's
state directory (like a ``dvc.lock`` entry): a fingerprint of the step's params, of the
slca code, of its input paths and of its output paths, plus the step's return value.
A re-run skips a step — and hands back the recorded value — only when every
fingerprint still matches; a deleted or rewritten output, changed params, changed
inputs or changed code run it again. Outputs themselves are written by the library
atomically (write beside, rename), so a step that fails leaves the previous outputs and
the previous records as they were.

Fingerprints of paths use each file's relative path, size and modification time (as
DVC's state cache does), not a content hash: checkpoints run to gigabytes, and a step's
outputs are only ever replaced by rename, which changes them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import slca
from slca.atomic import atomic_write_text

#: The library whose code every step runs; a change to it re-runs every step.
_CODE_ROOT = Path(slca.__file__).resolve().parent


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def path_fingerprint(path: str | Path) -> str:
    """Relative path, size and mtime of every file under ``path`` (``absent`` if none)."""
    root = Path(path)
    if root.is_file():
        st = root.stat()
        return _digest([root.name, st.st_size, st.st_mtime_ns])
    if not root.is_dir():
        return "absent"
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            f = Path(dirpath) / name
            st = f.stat()
            entries.append([f.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns])
    return _digest(entries)


@cache
def code_fingerprint() -> str:
    """Content hash of the slca package's Python sources (computed once per process)."""
    h = hashlib.sha256()
    for f in sorted(_CODE_ROOT.rglob("*.py")):
        h.update(f.relative_to(_CODE_ROOT).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Step:
    """One pipeline step as the flow sees it: params, input paths, output paths."""

    name: str
    params: BaseModel
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    state_dir: str
    extra: tuple[tuple[str, str], ...] = ()
    """Anything else the result depends on (e.g. source package versions)."""

    @property
    def record_path(self) -> Path:
        # one record per step and primary output, so two RL runs keep separate records
        where = hashlib.sha256(str(Path(self.outputs[0]).resolve()).encode()).hexdigest()[:12]
        return Path(self.state_dir) / f"{self.name}.{where}.json"

    def input_key(self) -> str:
        """Params, code, inputs and extras: what the step's result depends on."""
        return _digest(
            {
                "step": self.name,
                "params": self.params.model_dump(mode="json"),
                "code": code_fingerprint(),
                "inputs": {p: path_fingerprint(p) for p in self.inputs},
                "extra": dict(self.extra),
            }
        )

    def outputs_fingerprint(self) -> dict[str, str]:
        return {p: path_fingerprint(p) for p in self.outputs}

    def read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.record_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def up_to_date(self) -> dict[str, Any] | None:
        """The recorded result when nothing changed since the step completed, else None."""
        record = self.read()
        if (
            record is None
            or record.get("status") != "completed"
            or record.get("input_key") != self.input_key()
            or record.get("outputs") != self.outputs_fingerprint()
            or "absent" in record["outputs"].values()
        ):
            return None
        return record

    def mark(self, status: str, result: Any = None) -> None:
        """Record ``started`` (before the work) or ``completed`` (after the outputs exist)."""
        record = {"step": self.name, "status": status, "input_key": self.input_key()}
        if status == "completed":
            record |= {"outputs": self.outputs_fingerprint(), "result": result}
        atomic_write_text(self.record_path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def run_step(step: Step, work: Callable[[], Any], log: Callable[[str], None]) -> Any:
    """Run ``work`` unless ``step`` is up to date; record it as completed afterwards."""
    record = step.up_to_date()
    if record is not None:
        log(f"{step.name}: up to date ({', '.join(step.outputs)}); skipped")
        return record["result"]
    step.mark("started")
    result = work()
    step.mark("completed", result)
    return result


def same_started_run(step: Step) -> bool:
    """True when the last attempt of ``step`` started with the same params, code and inputs
    (so its partial outputs, e.g. RL checkpoints, may be continued)."""
    record = step.read()
    return record is not None and record.get("input_key") == step.input_key()


def as_paths(*paths: str | Path | None) -> tuple[str, ...]:
    return tuple(str(p) for p in paths if p is not None)
