"""The simulator check (slca.simulator.check.validate_simulator)."""

from __future__ import annotations

from typing import Any

from slca.config.simulator import SimulatorCheckParams
from slca.simulator.check import validate_simulator
from slca_pipeline.tasks.steps import Step, as_paths, step_task


class SimulatorCheckFailed(RuntimeError):
    """Simulator responses broke an expectation; the message lists which."""


def _transient(task, task_run, state) -> bool:
    """Retry I/O trouble (an llm backend's server, a full disk), not a failed expectation
    or bad input, which would fail the same way again."""
    try:
        state.result()
    except (SimulatorCheckFailed, ValueError, FileNotFoundError):
        return False
    except Exception:
        return True
    return False


def simulator_check_step(params: SimulatorCheckParams) -> Step:
    return Step(
        "simulator_check",
        params,
        inputs=as_paths(params.in_dir),
        outputs=as_paths(params.report_dir),
    )


@step_task(
    simulator_check_step,
    name="simulator_check",
    retries=2,
    retry_delay_seconds=5,
    retry_condition_fn=_transient,
)
def simulator_check_task(params: SimulatorCheckParams) -> dict[str, Any]:
    """Simulate the split's gold calls and check the responses; returns the summary."""
    ok, failures, summary = validate_simulator(params)
    if not ok:
        # one line: the command lines print an error's first line only
        raise SimulatorCheckFailed("simulator responses failed the check: " + "; ".join(failures))
    return summary
