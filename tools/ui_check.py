"""Browser check of the MLflow UI: runs, their metrics and histogram artifacts show.

Serves the MLflow UI of a store on 127.0.0.1, renders pages in headless Chromium
(Debian's ``chromium``), checks the rendered DOM and keeps a screenshot:

    python tools/ui_check.py --tracking-dir mlflow --experiment slca --screenshot-dir docs

Used by ``make ui-check`` (the demo's store) and by tests/test_ui.py (a store it builds
with the trainer's own Tracker).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from slca.processes import supervised

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowUI:
    """``mlflow ui`` on 127.0.0.1 for the store in ``tracking_dir``; stopped on exit."""

    def __init__(self, tracking_dir: Path, port: int | None = None):
        self.db = (Path(tracking_dir) / "mlflow.db").resolve()
        if not self.db.exists():
            raise FileNotFoundError(f"{self.db}: no MLflow store (run `make demo` first)")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MlflowUI:
        env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
        env.pop("MLFLOW_TRACKING_URI", None)
        # under a supervisor: the server and its workers stop with this process (kill -9
        # included), see slca/processes.py
        self.process = subprocess.Popen(
            supervised(
                [
                    str(Path(sys.executable).parent / "mlflow"),
                    "ui",
                    "--backend-store-uri",
                    f"sqlite:///{self.db}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ]
            ),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow ui exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2).read()
                return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"mlflow ui did not answer on {self.url} within 90 s")

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def render(url: str, *, screenshot: Path | None = None, budget_ms: int = 12000) -> str:
    """The DOM of ``url`` after its scripts ran (``budget_ms`` of virtual time)."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (`make chromium` installs it)")
    args = [binary, *CHROMIUM_FLAGS, f"--virtual-time-budget={budget_ms}"]
    with_shot = (
        [] if screenshot is None else [f"--screenshot={screenshot}", "--window-size=1400,900"]
    )
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*args, *with_shot, url], check=True, capture_output=True, timeout=180)
    done = subprocess.run(
        [*args, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=180
    )
    return done.stdout


def check(
    tracking_dir: Path, experiment: str, screenshot_dir: Path | None = None
) -> dict[str, list[str]]:
    """Render the experiment's runs table, each run's page and one histogram artifact of
    each run that has them; return what was not found per page (empty lists when
    everything shows). Screenshots of the runs table and of a histogram go to
    ``screenshot_dir`` (``mlflow-ui-runs.png``, ``mlflow-ui-histogram.png``)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{(Path(tracking_dir) / 'mlflow.db').resolve()}")
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"{tracking_dir}: no experiment {experiment!r}")
    runs = client.search_runs([found.experiment_id])
    if not runs:
        raise ValueError(f"{tracking_dir}: experiment {experiment!r} has no run")

    def shot(name: str) -> Path | None:
        return None if screenshot_dir is None else Path(screenshot_dir) / name

    missing: dict[str, list[str]] = {}
    with MlflowUI(tracking_dir) as ui:
        base = f"{ui.url}/#/experiments/{found.experiment_id}"
        dom = render(f"{base}/runs", screenshot=shot("mlflow-ui-runs.png"))
        # each row links to its run page, so a run's id in the DOM means its row rendered
        missing["runs table"] = [r.info.run_name for r in runs if r.info.run_id not in dom]
        histogram_shot = shot("mlflow-ui-histogram.png")
        for run in runs:
            page = f"{base}/runs/{run.info.run_id}"
            dom = render(page)
            missing[f"run {run.info.run_name} metrics"] = [
                key for key in run.data.metrics if f">{key}</a>" not in dom
            ]
            steps = client.list_artifacts(run.info.run_id, "histograms")
            if not steps:
                continue
            figure = next(
                f.path
                for f in client.list_artifacts(run.info.run_id, steps[0].path)
                if f.path.endswith(".png")
            )
            dom = render(f"{page}/artifacts/{figure}", screenshot=histogram_shot)
            histogram_shot = None  # one screenshot is enough
            missing[f"run {run.info.run_name} histogram"] = (
                [] if figure in dom and "<img" in dom else [figure]
            )
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-dir", type=Path, default=Path("mlflow"))
    parser.add_argument("--experiment", default="slca")
    parser.add_argument("--screenshot-dir", type=Path, default=Path("docs"))
    args = parser.parse_args(argv)
    missing = check(args.tracking_dir, args.experiment, args.screenshot_dir)
    for page, names in missing.items():
        print(f"{page}: {'ok' if not names else 'MISSING ' + ', '.join(names)}")
    return 1 if any(missing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
