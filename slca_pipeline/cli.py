"""The ``slca`` command: the pipeline's flows from a shell.

Each command runs a Prefect flow (ephemeral mode unless ``PREFECT_API_URL`` points at
a server), so a run from the shell and a run on a work pool are the same code. The
flows are imported when a command runs (so ``slca --help`` does not start Prefect). The
command lives in the orchestration package, above both it and the library: the library
(``slca.*``) imports neither Prefect nor ``slca_pipeline``; this module is the
composition root that does.

Errors print one line plus a hint; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from slca.config import ConfigError, parse_override
from slca.config.data import PrepareParams, ValidateParams, own_tasks_overrides
from slca.config.loader import with_preset
from slca.processes import die_with_parent, end_like_ctrl_c, supervised

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Segment-Locked Credit Assignment: RL for tool-calling language models.",
)
_state = {"debug": False}

ParamsFile = Annotated[Path, typer.Option("--params", help="The params file.")]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Let an RL run replace another configuration's checkpoints and output "
        "(refused otherwise).",
    ),
]
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set", "-S", help="Override a param, as `dvc exp run -S`: train.steps=4 (repeatable)."
    ),
]
Tasks = Annotated[
    Path | None,
    typer.Option(
        help="Your own file of tool-calling data (any format of `slca data import`) instead "
        "of the built-in tasks: `run` imports it; `train` and `eval` use the tasks `run "
        "--tasks` prepared from it; -S overrides still win.",
    ),
]
Preset = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="A params overlay per hardware class, applied on top of the params file and "
        "under -S: cpu-tiny, cpu-smollm2, gpu-1x-1b, gpu-8x-7b (configs/presets/), or a "
        "YAML path.",
    ),
]


@app.callback()
def main(debug: Annotated[bool, typer.Option(help="Show tracebacks on errors.")] = False) -> None:
    _state["debug"] = debug
    end_like_ctrl_c()  # `finally` blocks stop the servers, the MLflow run ends KILLED
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # a first ephemeral start creates Prefect's database (migrations): more than
    # Prefect's default 20 s on a busy 2-core machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models are local; never reach for the Hub
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


class _NoTraceback(logging.Filter):
    """Keep Prefect's run logs but drop the tracebacks they attach (``--debug`` keeps them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


def _quiet_prefect_tracebacks() -> None:
    import prefect  # noqa: F401  (configures Prefect's loggers)

    names = [n for n in logging.root.manager.loggerDict if n.startswith("prefect")]
    for logger in [logging.getLogger("prefect"), *map(logging.getLogger, names)]:
        for handler in logger.handlers:
            handler.addFilter(_NoTraceback())


@contextlib.contextmanager
def prefect_server() -> Iterator[None]:
    """Prefect's ephemeral API server for this process's flows (unless
    ``PREFECT_API_URL`` names a server) with a parent-death signal, so it never outlives
    this process, kill -9 included, answering loopback host names only
    (:func:`slca_pipeline.server.ephemeral_app`: it listens on a socket, so a page
    rebound to 127.0.0.1 could reach it) and with CSRF protection on; stopped when the
    block ends.

    It is Prefect's own ``SubprocessASGIServer`` (its command, port search and health
    wait), registered where Prefect looks for its ephemeral server (as Prefect's test
    harness does), so it still starts only when a flow first needs it."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.server.api import server as prefect_server_module

    base = prefect_server_module.SubprocessASGIServer
    if None in base._instances:  # one is registered already (e.g. a test harness)
        yield
        return

    class _Popen(subprocess.Popen):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            from slca_pipeline.server import ephemeral_environment, host_checked

            kwargs.setdefault("preexec_fn", die_with_parent())
            kwargs["env"] = ephemeral_environment(kwargs.get("env") or os.environ)
            if "args" in kwargs:
                kwargs["args"] = host_checked(kwargs["args"])
            else:
                args = (host_checked(args[0]), *args[1:])
            super().__init__(*args, **kwargs)

    class _Server(base):
        def _run_uvicorn_command(self) -> subprocess.Popen:
            popen = prefect_server_module.subprocess.Popen
            prefect_server_module.subprocess.Popen = _Popen  # only for this one call
            try:
                return super()._run_uvicorn_command()
            finally:
                prefect_server_module.subprocess.Popen = popen

    server = _Server()  # registered under the key Prefect's SubprocessASGIServer() uses
    try:
        yield
    finally:
        # the flow's last log lines go to the server before it stops, not to a closed port
        # ("--- Error logging to API ---" on stderr)
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)
        server.stop()
        base._instances.pop(None, None)


def _run(call: Any, hint: str) -> Any:
    if not _state["debug"]:
        _quiet_prefect_tracebacks()
    try:
        with prefect_server():
            return call()
    except (ConfigError, ValueError, OSError, RuntimeError, TypeError) as exc:
        if _state["debug"]:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        typer.secho(f"error: {first}", fg=typer.colors.RED, err=True)
        typer.echo(f"hint: {_hint(exc, hint)} (--debug shows the traceback)", err=True)
        raise typer.Exit(1) from None


def _hint(exc: Exception, hint: str) -> str:
    """The hint under an error: the command's own ``hint`` unless the error is one whose
    fix does not depend on the command's inputs (a bad key, another run's directory)."""
    from slca.training.identity import RunConflict

    if isinstance(exc, ConfigError):
        return "fix that key in the params file, the --preset or the -S override"
    if isinstance(exc, RunConflict):  # raised by the RL commands, which take --overwrite
        return (
            "rerun with `-S <the key named>=<another directory>` to keep that run, "
            "or with --overwrite to replace it"
        )
    return hint


def _overrides(
    items: list[str] | None, preset: str | None = None, tasks: Path | None = None
) -> dict[str, Any]:
    """The ``-S`` overrides on top of ``--tasks``' and ``preset``'s, as the flows'
    dotted ``overrides``."""
    own = own_tasks_overrides(str(tasks)) if tasks is not None else {}
    return with_preset(preset, {**own, **dict(parse_override(item) for item in items or [])})


@app.command()
def run(
    params: ParamsFile = Path("params.yaml"),
    set_: Overrides = None,
    overwrite: Overwrite = False,
    preset: Preset = None,
    tasks: Tasks = None,
) -> None:
    """The whole pipeline: data, simulator check, SFT, a GRPO and an SLCA run, their
    evaluation and the comparison report."""
    from slca_pipeline.flows.params import read_document
    from slca_pipeline.flows.pipeline import DEFAULT_ESTIMATORS, pipeline, pipeline_sections

    def go() -> Any:  # a bad section fails here, before Prefect's server starts
        document = read_document(params, _overrides(set_, preset, tasks))
        pipeline_sections(document, params, DEFAULT_ESTIMATORS)
        return pipeline(params_file=params, overwrite=overwrite, document=document)

    runs = _run(go, "check the params file and `make data` / `make test` output")
    report = Path(runs.pop("report"))
    for estimator, run_id in runs.items():
        typer.echo(f"{estimator}: MLflow run {run_id}")
    typer.echo(report.read_text().split("\n![")[0])
    typer.echo(f"report and plots: {report}")
    typer.echo(f"open the MLflow UI: {Path(sys.executable).parent / 'slca'} ui")


data_app = typer.Typer(
    invoke_without_command=True,
    help="prepare + validate the task data (with no subcommand); `import` brings in a file.",
)
app.add_typer(data_app, name="data")


@data_app.callback()
def data(
    ctx: typer.Context,
    params: ParamsFile = Path("params.yaml"),
    set_: Overrides = None,
    preset: Preset = None,
) -> None:
    """prepare + validate the task data."""
    if ctx.invoked_subcommand is not None:
        return
    from slca_pipeline.flows.data import data as data_flow
    from slca_pipeline.flows.params import read_document, section

    def go() -> Any:  # settings are checked before any flow run starts
        overrides = _overrides(set_, preset)
        document = read_document(params, overrides)
        section(document, "prepare", PrepareParams, params)
        section(document, "validate", ValidateParams, params)
        return data_flow(params_file=params, document=document)  # the file read once

    summary = _run(go, "the source packages come with `make .venv/.installed`")
    typer.echo(f"task data ready: {summary}")


@data_app.command(name="import")
def import_(
    path: Annotated[Path, typer.Argument(help="JSONL, JSON, parquet or a datasets directory.")],
    out: Annotated[
        Path,
        typer.Option(
            help="Directory for tasks.parquet, report.json and rejects.jsonl (replaced as a whole)."
        ),
    ],
    format_: Annotated[
        str,
        typer.Option("--format", help="auto, openai, toucan, verl, xlam or sharegpt."),
    ] = "auto",
    name: Annotated[
        str | None,
        typer.Option(
            help="The tasks' source name and id prefix (default: the file's name up to "
            "its first dot)."
        ),
    ] = None,
    split: Annotated[
        str,
        typer.Option(
            help="train: every task in the train split; eval: every task evaluation-only. "
            "The seeded train/val/test split is prepare's (`split: auto` under "
            "prepare.imports)."
        ),
    ] = "train",
) -> None:
    """Import a file of tool-calling data into task records: every row imported or
    rejected with its reason (docs/data.md). Exits 2 when no row is imported."""
    from slca.data.importers import import_to_dir

    def go() -> Any:
        if split not in ("train", "eval"):
            # auto's train/val/test split is made by prepare over all its tasks at once
            # (near duplicates kept together), so one file on its own cannot have it
            raise ValueError(
                f"--split {split!r}: expected train or eval; for the seeded train/val/test "
                "split, list the file under prepare.imports with split: auto (or "
                "`slca run --tasks FILE`)"
            )
        return import_to_dir(path, format_, out, source=name, split=split)

    result = _run(go, "docs/data.md lists the formats and what each needs")
    typer.echo(result.summary())
    typer.echo(f"wrote {out}/tasks.parquet, report.json, rejects.jsonl")
    if result.imported == 0:
        line = f"error: no row was imported; {out}/rejects.jsonl says why each was rejected"
        if format_ == "auto":
            line += f" (auto read the file as {result.format}: --format names another)"
        typer.secho(line, fg=typer.colors.RED, err=True)
        raise typer.Exit(2)


@app.command()
def pretrain(
    params: ParamsFile = Path("params.yaml"),
    set_: Overrides = None,
    preset: Preset = None,
) -> None:
    """Train the demo's base from scratch, as the frozen DVC stage `pretrain`: a generated
    corpus without the demo's val or test user messages; writes the checkpoint, its card
    and README (params: pretrain)."""
    from slca.config.steps import PretrainParams
    from slca_pipeline.flows.params import read_document, section

    def go() -> Any:  # settings are checked before any work
        document = read_document(params, _overrides(set_, preset))
        settings = section(document, "pretrain", PretrainParams, params)
        from slca.training.pretrain import run_pretrain
        from slca.training.stages import progress_bar

        return settings, run_pretrain(settings, progress=progress_bar("pretrain"))

    settings, card = _run(go, "the held-out val and test splits come from `slca data`")
    typer.echo(
        f"{settings.out_dir}: {card['corpus']['tasks']} tasks, {card['training']['steps']} "
        f"steps, value accuracy {card['value_probe']['value_accuracy']:.3f}"
    )
    typer.echo(f"model card: {settings.out_dir}/README.md; record it: dvc commit -f pretrain")


@app.command()
def train(
    params: ParamsFile = Path("params.yaml"),
    set_: Overrides = None,
    estimator: Annotated[str | None, typer.Option(help="grpo, dr_grpo, slca, toolpo, rltr")] = None,
    overwrite: Overwrite = False,
    preset: Preset = None,
    tasks: Tasks = None,
) -> None:
    """One RL run from the SFT checkpoint (resumes an interrupted run with the same settings)."""
    from slca_pipeline.flows.params import read_document
    from slca_pipeline.flows.train import train as train_flow
    from slca_pipeline.flows.train import train_config

    def go() -> str:  # settings are checked before any flow run starts
        document = read_document(params, _overrides(set_, preset, tasks))
        train_config(document, params, estimator)
        return train_flow(  # on the document read here: the file is read once
            params_file=params, document=document, estimator=estimator, overwrite=overwrite
        )

    run_id = _run(go, "the SFT checkpoint comes from `slca run` or `dvc repro sft`")
    typer.echo(f"MLflow run {run_id}; compare runs: slca ui")


@app.command(name="eval")
def eval_(
    params: ParamsFile = Path("params.yaml"),
    set_: Overrides = None,
    model: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=DIR of a model to evaluate (repeatable), or NAME=models:/<registered "
            "model>@<alias> (or /<version>) for a registered version; default: sft=models/sft"
        ),
    ] = None,
    preset: Preset = None,
    tasks: Tasks = None,
) -> None:
    """Evaluate models on the held-out sets (in-domain, BFCL, τ²), then write the report."""
    from slca_pipeline.flows.evaluate import evaluate, evaluate_params
    from slca_pipeline.flows.params import read_document

    def go() -> str:  # settings and model directories are checked before any flow run
        models = {}
        for item in model or ["sft=models/sft"]:
            name, sep, directory = item.partition("=")
            if not sep or not name or not directory:
                raise ValueError(f"--model {item!r}: expected NAME=DIR (e.g. sft=models/sft)")
            models[name] = directory
        overrides = _overrides(set_, preset, tasks)
        document = read_document(params, overrides)
        for name, directory in models.items():
            if directory.startswith("models:/"):  # the registered version's files, fetched
                from slca.tracking.registry import model_directory

                store = evaluate_params(document, params, directory, name, must_exist=False)
                models[name] = str(model_directory(directory, store.tracking_dir))
            evaluate_params(document, params, models[name], name)
        models = {name: Path(directory) for name, directory in models.items()}
        return evaluate(models=models, params_file=params, document=document)

    path = _run(go, "train a model first: `slca run` or `dvc repro sft`")
    typer.echo(f"report: {path}")


@app.command()
def report(
    tracking_dir: Annotated[Path, typer.Option(help="MLflow store directory.")] = Path("mlflow"),
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "slca",
    out: Annotated[Path, typer.Option(help="Report directory.")] = Path("reports/summary"),
) -> None:
    """Tables and PNG plots comparing the runs of an MLflow experiment."""
    from slca.eval.report import report as write

    path = _run(
        lambda: write(tracking_dir, experiment, out), "run `slca run` or `slca train` first"
    )
    typer.echo(path.read_text().split("\n![")[0])
    typer.echo(f"report: {path}")


@app.command()
def ui(
    tracking_dir: Annotated[Path, typer.Option(help="MLflow store directory.")] = Path("mlflow"),
    mlflow_port: int = 5000,
    prefect_port: int = 4200,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
) -> None:
    """Serve the MLflow UI and the Prefect UI (on --host, 127.0.0.1 by default) until Ctrl-C.

    Both refuse a request naming a foreign host (DNS rebinding): MLflow by its own
    check, Prefect's server through slca_pipeline/server.py, which also turns on
    Prefect's CSRF protection."""
    db = (tracking_dir / "mlflow.db").resolve()
    env = dict(
        os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false", MLFLOW_DISABLE_TELEMETRY="true"
    )
    bin_dir = Path(sys.executable).parent
    from slca.tracking import ensure_store, sqlite_uri

    ensure_store(sqlite_uri(tracking_dir))  # created (migrated) under the store's lock
    # Each server runs under a supervisor in its own process group: the group (workers
    # included) stops on SIGTERM/SIGINT of this command and when it dies (kill -9 too).
    servers = [
        subprocess.Popen(
            supervised(
                [
                    str(bin_dir / "mlflow"),
                    "ui",
                    "--backend-store-uri",
                    f"sqlite:///{db}",
                    "--host",
                    host,
                    "--port",
                    str(mlflow_port),
                ]
            ),
            env=env,
            start_new_session=True,
        ),
        subprocess.Popen(
            supervised(
                # Prefect's server answering loopback host names only, CSRF on
                [sys.executable, "-m", "slca_pipeline.server"]
                + ["--host", host, "--port", str(prefect_port)]
            ),
            env=env,
            start_new_session=True,
        ),
    ]
    typer.echo(f"MLflow UI:  http://{host}:{mlflow_port}")
    typer.echo(f"Prefect UI: http://{host}:{prefect_port}")
    try:
        while all(server.poll() is None for server in servers):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for server in servers:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGINT)
        for server in servers:
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    app()
