"""CPU, memory and GPU use while an evaluation runs, as MLflow system metrics.

A training run writes its own while it is open (:class:`~slca.tracking.Tracker`'s
``system_metrics_s``, MLflow's monitor). An evaluation writes into its run only at the
end, under the store's writer lock (it may be the finished run that trained the
model): :class:`SystemSampler` samples with MLflow's own monitors (psutil; NVIDIA GPUs
through nvidia-ml-py, where installed) in a thread and keeps the samples in memory,
and :meth:`~slca.tracking.Tracker.add_to_run` logs them with the results, their steps
after the run's last ``system/*`` step.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

PREFIX = "system/"
"""MLflow's prefix of system metrics (the UI's "System metrics" tab)."""


def _monitors() -> list[Any]:
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor

    monitors: list[Any] = [CPUMonitor()]
    try:
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        monitors.append(GPUMonitor())
    except Exception:  # no NVIDIA GPU, or no nvidia-ml-py: CPU and memory only
        pass
    return monitors


class SystemSampler:
    """Samples every ``interval_s`` seconds while the ``with`` block runs (the first at
    once, the last as it ends); ``samples`` holds ``{system/<name>: value}`` dicts, one
    per sample. ``interval_s`` None: samples nothing."""

    def __init__(self, interval_s: float | None) -> None:
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._monitors: list[Any] = []

    def __enter__(self) -> SystemSampler:
        if self.interval_s is not None:
            self._monitors = _monitors()
            self._sample()
            self._thread = threading.Thread(target=self._loop, daemon=True, name="slca-system")
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finish()

    def finish(self) -> list[dict[str, float]]:
        """Stop (a last sample now); returns the samples. Again: nothing more."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()
        return self.samples

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        sample: dict[str, float] = {}
        for monitor in self._monitors:
            try:
                monitor.collect_metrics()
                sample.update(monitor.aggregate_metrics())
            except Exception:  # a sensor that fails once costs a sample, not the run
                pass
            monitor.clear_metrics()
        if sample:
            self.samples.append({PREFIX + k: float(v) for k, v in sample.items()})


def start_monitor(tracker: Any, interval_s: float) -> Any:
    """MLflow's monitor of ``tracker``'s open run, started: a sample every
    ``interval_s`` seconds, written as it comes (the run holds the store's writer lock);
    a resumed run's samples continue its steps."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(
        tracker.run_id,
        sampling_interval=interval_s,
        resume_logging=tracker.resumed,
        tracking_uri=tracker.tracking_uri,
    )
    monitor.start()
    return monitor


def sample_metrics(run: Any, samples: Sequence[Mapping[str, float]], now: int) -> list[Any]:
    """``samples`` as MLflow metrics of ``run`` (an ``mlflow.entities.Run``), at the
    steps after its last ``system/*`` step (0 without any)."""
    from mlflow.entities import Metric

    steps = [m.step for m in run.data._metric_objs if m.key.startswith(PREFIX)]
    first = max(steps) + 1 if steps else 0
    return [
        Metric(k, float(v), now, first + i)
        for i, sample in enumerate(samples)
        for k, v in sample.items()
    ]
