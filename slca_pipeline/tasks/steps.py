"""One cache for the flows' steps: Prefect's own task cache, keyed on what a step's
result depends on, and held to the outputs the step left.

A step task (:func:`step_task`) carries a :class:`StepCache` policy. Prefect computes
its key before the task runs, from the step's name, its params, the code (the ``slca``
and ``slca_pipeline`` sources), the content of its input files, its output paths and
any extras (source package versions). A run whose key has a record is a cache hit: the
task does not run and hands back its recorded value. Records are Prefect results in the
flow's ``state_dir``. A failed task records nothing, and the library writes outputs
atomically, so a failure leaves the previous outputs and records as they were.

The key covers inputs only, because it is computed before the task runs: a key that
took in the outputs would be the key of the outputs *before* the run, which no later
run sees again, so the step would run every time. Instead a step's recorded value
carries a fingerprint of its outputs as the run left them, and :func:`run_step` runs a
hit again (refreshing its record) when those outputs were deleted or rewritten since.
Output fingerprints are relative path, size and modification time (as DVC's state
cache): checkpoints run to gigabytes, and a step's outputs are only replaced by rename,
which changes them. See docs/decisions.md, "One cache".
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from prefect import Task, get_run_logger, task
from prefect.cache_policies import CachePolicy
from pydantic import BaseModel

import slca
import slca_pipeline

#: The code every step runs; a change to it runs every step again.
_CODE_ROOTS = tuple(Path(p.__file__).resolve().parent for p in (slca, slca_pipeline))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _files(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        found += [Path(dirpath) / name for name in sorted(filenames)]
    return found


@cache
def _content_hash(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """sha256 of one file, once per process while its stat is unchanged (a pipeline run
    reads ``models/sft`` for several steps)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fingerprint(path: str | Path, entry: Callable[[Path, os.stat_result], Any]) -> str:
    """Digest of ``[relative name, entry(file, stat)]`` for every file under ``path``
    (the file itself if it is one; ``absent`` if nothing is there)."""
    root = Path(path)
    files = [root] if root.is_file() else _files(root) if root.is_dir() else None
    if files is None:
        return "absent"
    return _digest([[f.relative_to(root).as_posix(), entry(f, f.stat())] for f in files])


def content_fingerprint(path: str | Path) -> str:
    """Content hash of every file under ``path`` with its relative name."""
    return _fingerprint(
        path, lambda f, st: _content_hash(str(f), st.st_size, st.st_mtime_ns, st.st_ino)
    )


def state_fingerprint(path: str | Path) -> str:
    """Relative path, size and mtime of every file under ``path``."""
    return _fingerprint(path, lambda f, st: [st.st_size, st.st_mtime_ns])


@cache
def code_fingerprint() -> str:
    """Content hash of the ``slca`` and ``slca_pipeline`` sources (once per process)."""
    h = hashlib.sha256()
    for root in _CODE_ROOTS:
        for f in sorted(root.rglob("*.py")):
            h.update(f.relative_to(root.parent).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Step:
    """One pipeline step as its task sees it: params, input paths, output paths."""

    name: str
    params: BaseModel
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()
    """Anything else the result depends on (e.g. source package versions)."""

    def cache_key(self) -> str:
        """What the step's result depends on: name, params, code, the content of its
        inputs, where its outputs go, extras."""
        return f"{self.name}-" + _digest(
            {
                "params": self.params.model_dump(mode="json"),
                "code": code_fingerprint(),
                "inputs": {p: content_fingerprint(p) for p in self.inputs},
                "outputs": [str(Path(p).resolve()) for p in self.outputs],
                "extra": dict(self.extra),
            }
        )

    def outputs_fingerprint(self) -> dict[str, str]:
        return {p: state_fingerprint(p) for p in self.outputs}


@dataclass
class StepCache(CachePolicy):
    """Prefect cache policy of a step task: the :meth:`Step.cache_key` of the step that
    ``step_of`` makes of the task's ``params``."""

    step_of: Callable[[Any], Step] | None = None

    def compute_key(
        self,
        task_ctx: Any,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        assert self.step_of is not None, "StepCache needs step_of"
        return self.step_of(inputs["params"]).cache_key()


def step_task(step_of: Callable[[Any], Step], **options: Any) -> Callable[[Callable], Task]:
    """Decorate ``fn(params, ...)`` into a Prefect task cached by ``StepCache(step_of)``
    whose recorded value is ``{"value": fn's value, "outputs": fingerprint}``. Run it
    through :func:`run_step`."""

    def decorate(fn: Callable) -> Task:
        @functools.wraps(fn)
        def body(params: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            value = fn(params, *args, **kwargs)
            return {"value": value, "outputs": step_of(params).outputs_fingerprint()}

        return task(body, cache_policy=StepCache(step_of=step_of), **options)

    return decorate


def run_step(step: Task, params: Any, state_dir: str | Path, **kwargs: Any) -> Any:
    """Run the step task ``step`` on ``params`` (recorded in ``state_dir``), or skip it on
    a Prefect cache hit whose outputs are as its run left them; returns its value."""
    policy = step.cache_policy
    assert isinstance(policy, StepCache) and policy.step_of is not None, step.name
    run = step.with_options(result_storage=Path(state_dir).resolve())
    state = run(params, return_state=True, **kwargs)
    done = state.result()  # raises the task's exception when it failed
    if state.name != "Cached":  # it ran
        return done["value"]
    described = policy.step_of(params)
    if done["outputs"] == described.outputs_fingerprint():
        get_run_logger().info(f"{step.name}: up to date ({', '.join(described.outputs)}); skipped")
        return done["value"]
    get_run_logger().info(f"{step.name}: outputs deleted or rewritten since its run; running again")
    return run.with_options(refresh_cache=True)(params, **kwargs)["value"]


def as_paths(*paths: str | Path | None) -> tuple[str, ...]:
    return tuple(str(p) for p in paths if p is not None)
