"""Shared test doubles (importable as ``helpers`` via pytest's ``pythonpath``)."""

from pathlib import Path

from slca.generation.engines import Generation

DESIGN_METRICS = (
    "reward/tool",
    "reward/sum",
    "reward/total",
    "adv/tool_mean",
    "adv/tool_std",
    "adv/sum_mean",
    "adv/sum_std",
    "adv/zero_group_frac",
    "actor/pg_loss",
    "actor/kl",
    "actor/clipfrac",
    "actor/entropy",
    "actor/grad_norm",
    "rollout/tool_calls_per_task",
    "rollout/redundant_calls",
    "sim/invalid_rate",
    "perf/tokens_per_s",
    "perf/step_s",
)
"""The per-step metrics DESIGN §8 names."""


class ScriptedEngine:
    """A policy that answers turn n of the rollout at position p of a generation call
    with ``script[n]`` — or, when ``script[n]`` is a list, ``script[n][p % len]`` —
    followed by the end-of-turn token. Lets tests choose exactly what the policy says."""

    name = "scripted"

    def __init__(self, tokenizer, script, stop=True):
        self.tokenizer, self.script, self.stop = tokenizer, script, stop
        self.prompts = []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        start = self.tokenizer.convert_tokens_to_ids("<|im_start|>")
        out = []
        for position, prompt in enumerate(prompts):
            turn = self.tokenizer.decode(prompt).count("<|im_start|>assistant") - 1
            text = self.script[min(turn, len(self.script) - 1)]
            if isinstance(text, list):
                text = text[position % len(text)]
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_new_tokens]
            if self.stop and len(ids) < params.max_new_tokens:
                ids.append(self.tokenizer.eos_token_id)
            assert start not in ids
            stopped = ids[-1:] == [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), stopped=stopped))
        return out

    def load_weights(self, state_dict):
        self.loaded = state_dict


def bfcl_json_step(task_id, calls):
    """A policy turn that makes a BFCL multi-turn entry's gold call strings as JSON tool
    calls (positional arguments bound to their names)."""
    import inspect
    import json

    from slca.data.sources.bfcl_backends import parse_call
    from slca.eval import bfcl_multi_turn as mt

    entry = mt.entries()[task_id.removeprefix("bfcl-")]
    table = mt.methods(mt.new_instances(entry))
    blocks = []
    for text in calls:
        name, args, kwargs = parse_call(text, "gold")
        arguments = inspect.signature(table[name]).bind(*args, **kwargs).arguments
        blocks.append(json.dumps({"name": name, "arguments": dict(arguments)}))
    return "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)


def tiny_params(root: Path) -> dict:
    """The tiny pipeline configuration: 40 synthetic tasks, a hidden_size=32 model, SFT on
    8 tasks, 2 RL steps; every path under ``root``. Shared by the stage and flow tests."""
    return {
        "prepare": {
            "sources": ["synth"],
            "out_dir": str(root / "data/tasks"),
            "synth": {"n_tasks": 40, "domains": ["weather"]},
        },
        "validate": {"in_dir": str(root / "data/tasks"), "report_dir": str(root / "data/val")},
        "simulator_check": {
            "in_dir": str(root / "data/tasks"),
            "report_dir": str(root / "data/simcheck"),
        },
        # the frozen DVC stage never runs it (its output ships in git), but DVC reads the
        # section when it records the stage; test_pretrain.py trains it
        "pretrain": {
            "heldout_dir": str(root / "data/tasks"),
            "out_dir": str(root / "assets/demo-base"),
            "synth": {"n_tasks": 40, "values": "wide"},
            "vocab_size": 400,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "intermediate_size": 64,
            "epochs": 1,
            "warmup_steps": 2,
            "tracking_dir": str(root / "mlflow"),
        },
        "base_model": {
            # built here, 2 layers x 32: the shipped demo base is 3 x 128
            "kind": "tiny",
            "in_dir": str(root / "data/tasks"),
            "out_dir": str(root / "models/base"),
            "vocab_size": 400,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
        },
        "sft": {
            "base_dir": str(root / "models/base"),
            "in_dir": str(root / "data/tasks"),
            "out_dir": str(root / "models/sft"),
            "epochs": 2,
            "max_tasks": 8,
            "micro_batch_size": 4,
            # the tiny pipeline's tests were written for these (not params.yaml's 0.3, 2e-3)
            "poor_summary_frac": 0.0,
            "engine": {"optim": {"lr": 1e-3}},
            # no MLflow run (and no model logged) per SFT: tests of the SFT run set a store
            "tracking_dir": None,
            "system_metrics_s": None,  # system metrics are off in tests that do not check them
        },
        "train": {
            "steps": 2,
            "checkpoint_every": 1,
            "histogram_every": 2,
            "init_dir": str(root / "models/sft"),
            "in_dir": str(root / "data/tasks"),
            "out_dir": str(root / "models/rl"),
            "checkpoint_dir": str(root / "ckpt"),
            "tracking_dir": str(root / "mlflow"),
            # dvc.yaml's simulator_check stage reads this key, so DVC needs it written
            "simulator": {"backend": "schema"},
            "rollout": {
                "tasks_per_step": 2,
                "group_size": 2,
                "max_new_tokens": 16,
                "max_turns": 2,
                "max_total_tokens": 4096,
            },
            "update": {"micro_batch_size": 4},
            "engine": {"optim": {"lr": 1e-5}},  # as the tiny pipeline's tests were written
            # written without validation (params.yaml turns it on); tests of it turn it on
            "validation": {"every": 0},
            "system_metrics_s": None,
        },
        "evaluate": {
            "model_dir": str(root / "models/sft"),
            "in_dir": str(root / "data/tasks"),
            "report_path": str(root / "reports/eval/sft.json"),
            "in_domain": {"max_tasks": 6},
            "bfcl": {"max_per_category": 0},  # the tiny data has no eval records
            "tau2": {"max_per_domain": 0},
            "max_new_tokens": 16,
            "max_turns": 2,
            "max_total_tokens": 4096,
            "tracking_dir": str(root / "mlflow"),
            "system_metrics_s": None,
        },
    }


# ---------------------------------------------------------------- Prefect servers


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_request(port: int, method: str, path: str, host=None, body=None, **headers):
    """(status, headers, body) of one request to 127.0.0.1:``port`` naming ``host`` in
    its ``Host`` header (default ``127.0.0.1:<port>``)."""
    import http.client

    headers = {"Host": host or f"127.0.0.1:{port}", **headers}
    if body is not None:
        headers["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def stop_session(process, interrupts: int = 1, wait_s: float = 20) -> None:
    """SIGINT to the session ``process`` leads (``interrupts`` times; a process worker
    exits on the second), then SIGKILL: only processes the test started, by PID."""
    import os
    import signal
    import subprocess

    for _ in range(interrupts):
        if process.poll() is not None:
            break
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def prefect_api(api_url: str):
    """A context manager pointing this process's Prefect at ``api_url`` for its block.
    On the way out, the process-wide event and log workers deliver what they hold while
    that server still runs, and are dropped: each keeps the API URL it was created under,
    so one left bound to a stopped server sends every later event there, a minute's
    timeout each, and Prefect's test harness drains them at the session's end with no
    timeout (a fresh-clone CI run sat at its last test for minutes)."""
    import contextlib

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    @contextlib.contextmanager
    def pointed():
        with temporary_settings({PREFECT_API_URL: api_url}):
            try:
                yield
            finally:
                APILogWorker.drain_all(timeout=60)
                EventsWorker.drain_all(timeout=60)

    return pointed()


def running_prefect_server(
    home: Path, command: list[str] | None = None, env=None, timeout: float = 180
):
    """Start a Prefect API server on a free 127.0.0.1 port (default: ``python -m
    slca_pipeline.server``, the one ``slca ui`` starts; ``command`` gets ``--port``
    appended), in a session of its own, logging to ``home/server.log``; wait for
    ``/api/health``. A context manager yielding ``(port, env)``: ``env`` is ``env`` (or
    this environment) with ``PREFECT_HOME`` and ``PREFECT_API_URL`` pointing at it.
    Stopped (its session, by PID) when the block ends."""
    import contextlib
    import os
    import subprocess
    import sys
    import time

    from slca_pipeline.server import server_environment

    @contextlib.contextmanager
    def started():
        home.mkdir(parents=True, exist_ok=True)
        port = free_port()
        base = dict(os.environ if env is None else env)
        for key in (*server_environment("127.0.0.1", port), "PREFECT_SERVER_MEMO_STORE_PATH"):
            base.pop(key, None)  # the server's own defaults, not the test session's
        server_env = dict(
            base, PREFECT_HOME=str(home), PREFECT_API_URL=f"http://127.0.0.1:{port}/api"
        )
        argv = [*(command or [sys.executable, "-m", "slca_pipeline.server"]), "--port", str(port)]
        log = open(home / "server.log", "w")
        process = subprocess.Popen(
            argv, env=server_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                assert process.poll() is None, (home / "server.log").read_text()[-3000:]
                try:
                    if http_request(port, "GET", "/api/health")[0] == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, f"no answer on /api/health in {timeout} s"
                time.sleep(0.5)
            yield port, server_env
        finally:
            stop_session(process)
            log.close()

    return started()
