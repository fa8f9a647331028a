"""Browser check of the MLflow and Prefect UIs: runs, datasets, metrics, models, artifacts show.

Serves the MLflow UI of a store on 127.0.0.1, renders pages in headless Chromium
(Debian's ``chromium``), checks the rendered DOM and keeps screenshots: the runs table
(with its Dataset column), each run's metrics, a histogram, the system-metrics tab, the
evaluation tables, the registered model and its aliases. With ``--prefect-url``, also the
Prefect UI's artifacts (ADR 0082) on that server:

    python tools/ui_check.py --tracking-dir mlflow --experiment slca --screenshot-dir docs
    python tools/ui_check.py ... --prefect-url http://127.0.0.1:4200

Used by ``make ui-check`` (the demo's store) and by tests/test_ui.py (a store it builds
with the trainer's own Tracker).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

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


HISTOGRAM_SHOT = "mlflow-ui-histogram.png"
SYSTEM_SHOT = "mlflow-ui-system-metrics.png"
TABLE_SHOT = "mlflow-ui-evaluation-table.png"
MODEL_SHOT = "mlflow-ui-model.png"
PREFECT_SHOT = "prefect-ui-artifacts.png"
SCREENSHOTS = ("mlflow-ui-runs.png", HISTOGRAM_SHOT, SYSTEM_SHOT, TABLE_SHOT, MODEL_SHOT)
"""The MLflow UI's screenshots :func:`check` keeps, one of each kind of page."""
SLOW_PAGE_MS = 20000
"""Virtual time for pages that fill in after their frame: the Prefect UI's artifact cards
(12 s showed only their count on a loaded machine) and the system-metrics charts (12 s
showed no chart there, once)."""
STARTUP_S = 180
"""How long the UI may take to answer (a loaded CI machine starts it in tens of seconds)."""


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
                    # one browser asks: one worker starts in a quarter of four's CPU time
                    "--workers",
                    "1",
                ]
            ),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow ui exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2).read()
            except OSError:
                time.sleep(0.5)
                continue
            # the first store request opens the store (imports, schema check): minutes on a
            # loaded machine, which a browser's first page would spend instead
            search = f"{self.url}/ajax-api/2.0/mlflow/experiments/search?max_results=1"
            with contextlib.suppress(OSError):
                left = max(deadline - time.monotonic(), 10)
                urllib.request.urlopen(search, timeout=left).read()
            return self
        self.__exit__()
        raise RuntimeError(f"mlflow ui did not answer on {self.url} within {STARTUP_S} s")

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
    args = [binary, *CHROMIUM_FLAGS, f"--virtual-time-budget={budget_ms}", "--dump-dom"]
    if screenshot is not None:
        # one browser start does both: headless Chromium runs every action it is given
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        args += [f"--screenshot={screenshot}", "--window-size=1400,900"]
    done = subprocess.run([*args, url], check=True, capture_output=True, text=True, timeout=300)
    return done.stdout


def text_of(dom: str) -> str:
    """The text of a DOM: tags dropped, entities decoded, whitespace as single spaces."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def check(
    tracking_dir: Path,
    experiment: str,
    screenshot_dir: Path | None = None,
    ui: MlflowUI | None = None,
) -> dict[str, list[str]]:
    """Render the experiment's runs table (each run's row and the datasets it read), each
    run's page (its metrics), one histogram artifact, the system-metrics tab and the
    evaluation tables (``eval/*.table.json``) of each run that has them, and the
    experiment's registered model (``<experiment>-policy``: its aliases); return what was
    not found per page (empty lists when everything shows). Screenshots (the first page
    of each kind) go to ``screenshot_dir``: :data:`SCREENSHOTS`. ``ui``: an already
    running UI of the store (started, and stopped, here when None)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{(Path(tracking_dir) / 'mlflow.db').resolve()}")
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"{tracking_dir}: no experiment {experiment!r}")
    runs = client.search_runs([found.experiment_id])
    if not runs:
        raise ValueError(f"{tracking_dir}: experiment {experiment!r} has no run")
    shots = {} if screenshot_dir is None else {n: Path(screenshot_dir) / n for n in SCREENSHOTS}

    missing: dict[str, list[str]] = {}
    with contextlib.nullcontext(ui) if ui is not None else MlflowUI(tracking_dir) as ui:
        base = f"{ui.url}/#/experiments/{found.experiment_id}"
        dom = render(f"{base}/runs", screenshot=shots.pop("mlflow-ui-runs.png", None))
        # each row links to its run page, so a run's id in the DOM means its row rendered
        missing["runs table"] = [r.info.run_name for r in runs if r.info.run_id not in dom]
        text = text_of(dom)  # the Dataset column shows each input as "<name> (<digest>)"
        missing["runs table datasets"] = [
            f"{r.info.run_name}: {d.dataset.name}"
            for r in runs
            for d in r.inputs.dataset_inputs
            if f"{d.dataset.name} ({d.dataset.digest})" not in text
        ]
        for run in runs:
            missing.update(_run_pages(client, run, f"{base}/runs/{run.info.run_id}", shots))
        missing.update(_registered_model(client, experiment, ui.url, shots))
    return missing


def _run_pages(client: Any, run: Any, page: str, shots: dict[str, Path]) -> dict[str, list[str]]:
    """A run's page, one of its histograms, its system metrics, its evaluation tables."""
    name, run_id, missing = run.info.run_name, run.info.run_id, {}
    dom = render(page)
    missing[f"run {name} metrics"] = [key for key in run.data.metrics if f">{key}</a>" not in dom]
    steps = client.list_artifacts(run_id, "histograms")
    if steps:
        figure = next(
            f.path for f in client.list_artifacts(run_id, steps[0].path) if f.path.endswith(".png")
        )
        dom = render(f"{page}/artifacts/{figure}", screenshot=shots.pop(HISTOGRAM_SHOT, None))
        missing[f"run {name} histogram"] = [] if figure in dom and "<img" in dom else [figure]
    system = [key for key in run.data.metrics if key.startswith("system/")]
    if system:
        # The "System metrics" tab counts the run's system metrics in its section
        # header. Its charts are drawn lazily, only those in view and not always within
        # the render budget (a run with disk and network samples has more than the
        # first screen holds), so the count is what is checked; the screenshot shows them.
        dom = render(
            f"{page}/system-metrics",
            screenshot=shots.pop(SYSTEM_SHOT, None),
            budget_ms=SLOW_PAGE_MS,
        )
        header = f"System metrics ({len(system)})"
        missing[f"run {name} system metrics"] = [] if header in text_of(dom) else [header]
    for table in client.list_artifacts(run_id, "eval"):
        if not table.path.endswith(".table.json"):
            continue
        # the artifact view shows a log_table file as a table: its header, its first rows
        with tempfile.TemporaryDirectory() as tmp:  # log_table's {"columns", "data"}
            logged = json.loads(
                Path(client.download_artifacts(run_id, table.path, tmp)).read_text()
            )
        dom = render(f"{page}/artifacts/{table.path}", screenshot=shots.pop(TABLE_SHOT, None))
        text = text_of(dom)
        cells = [v for row in logged["data"][:3] for v in row if isinstance(v, str) and v]
        missing[f"run {name} evaluation table {table.path}"] = [
            *(f"column {c}" for c in logged["columns"] if f'title="{c}"' not in dom),
            *(v for v in dict.fromkeys(cells) if len(v) <= 60 and " ".join(v.split()) not in text),
        ]
    return missing


def _registered_model(
    client: Any, experiment: str, url: str, shots: dict[str, Path]
) -> dict[str, list[str]]:
    """The registered model of the experiment's final models: its page shows every alias
    (``@ champion``) the store holds."""
    from mlflow.exceptions import MlflowException

    from slca.tracking.registry import policy_model_name

    name = policy_model_name(experiment)
    try:
        aliases = client.get_registered_model(name).aliases
    except MlflowException:
        return {f"registered model {name}": ["not registered"]}
    dom = render(f"{url}/#/models/{name}", screenshot=shots.pop(MODEL_SHOT, None))
    return {f"registered model {name}": [f"@{a}" for a in aliases if f">@&nbsp;{a}<" not in dom]}


def check_prefect(
    url: str, keys: list[str], screenshot_dir: Path | None = None
) -> dict[str, list[str]]:
    """Render each key's page in the Prefect UI (``/artifacts/key/<key>``: the key's
    history, which a scheduled run's artifacts line up in) and each key's latest artifact
    (a table's header and first rows, a markdown's headings, a link's text); return what
    was not found per page. ``url``: the Prefect server (``http://127.0.0.1:4200``).
    Screenshot: ``prefect-ui-artifacts.png``, the first key's page. (The all-artifacts
    list renders its count before its cards, so a slow machine catches it empty.)"""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = url.rstrip("/")
    shot = None if screenshot_dir is None else Path(screenshot_dir) / PREFECT_SHOT
    missing: dict[str, list[str]] = {"prefect artifacts": []}
    for i, key in enumerate(keys):
        page = render(
            f"{url}/artifacts/key/{key}",
            screenshot=shot if i == 0 else None,
            budget_ms=SLOW_PAGE_MS,
        )
        if key not in text_of(page):
            missing["prefect artifacts"].append(key)
    with temporary_settings({PREFECT_API_URL: f"{url}/api"}), get_client(sync_client=True) as api:
        for key in keys:
            latest = api.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                sort=ArtifactSort.CREATED_DESC,
                limit=1,
            )
            if not latest:
                missing[f"prefect artifact {key}"] = ["no such artifact"]
                continue
            page = f"{url}/artifacts/artifact/{latest[0].id}"
            text = text_of(render(page, budget_ms=SLOW_PAGE_MS))
            missing[f"prefect artifact {key}"] = [
                t for t in _shown(latest[0].type, latest[0].data) if t not in text
            ]
    return missing


def _shown(kind: str | None, data: Any) -> list[str]:
    """What the page of a Prefect artifact shows of its ``data``: a table's header and
    first rows; a markdown's headings and link texts (Prefect stores a link artifact as
    the markdown ``[text](url)``)."""
    if kind == "table":
        rows = json.loads(data) if isinstance(data, str) else data
        rows = [r for r in rows[:3] if isinstance(r, dict)] if isinstance(rows, list) else []
        return list(dict.fromkeys(str(v) for r in rows for item in r.items() for v in item))
    text = str(data or "")
    headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    return [*headings, *re.findall(r"\[([^\]]+)\]\(", text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-dir", type=Path, default=Path("mlflow"))
    parser.add_argument("--experiment", default="slca")
    parser.add_argument("--screenshot-dir", type=Path, default=Path("docs"))
    parser.add_argument("--prefect-url", help="a Prefect server whose artifacts to check")
    parser.add_argument(
        "--prefect-key",
        action="append",
        help="an artifact key to check (repeatable; default: slca-comparison, slca-validation)",
    )
    args = parser.parse_args(argv)
    missing = check(args.tracking_dir, args.experiment, args.screenshot_dir)
    if args.prefect_url:
        keys = args.prefect_key or ["slca-comparison", "slca-validation"]
        missing.update(check_prefect(args.prefect_url, keys, args.screenshot_dir))
    for page, names in missing.items():
        print(f"{page}: {'ok' if not names else 'MISSING ' + ', '.join(names)}")
    return 1 if any(missing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
