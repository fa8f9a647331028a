"""The MLflow Model Registry: final models as versions with their provenance, the
champion/challenger rule, ``models:/`` URIs as model directories, bad input, the lock."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from mlflow.tracking import MlflowClient

from slca.locks import ExclusiveLock, LockHeld
from slca.tracking import RUN_FILE, WRITER_LOCK, Tracker, log_evaluation, split_input, sqlite_uri
from slca.tracking.registry import (
    CHALLENGER,
    CHAMPION,
    MOVE_TAG,
    RANKING,
    SUMMARY_TAG,
    model_directory,
    move_aliases,
    policy_model_name,
)

TEXTS = ["What is the weather in Paris?", '<tool_call>{"name": "get_weather"}</tool_call>']


pytestmark = pytest.mark.usefixtures("no_ambient_mlflow")


@pytest.fixture(scope="module")
def tiny():
    from slca.training.tiny import tiny_model, train_tokenizer

    tokenizer = train_tokenizer(TEXTS * 20, vocab_size=300)
    return tiny_model(tokenizer), tokenizer


def train_like(store, experiment, model, tokenizer, tags, tracking_uri=None) -> str:
    """A run as a training stage leaves it: params (the git commit), its training split,
    the final model (registered by ``log_model``)."""
    with Tracker(store, experiment=experiment, tracking_uri=tracking_uri) as tracker:
        tracker.start(tags=tags)
        tracker.log_params({"lr": 1.0})
        tracker.log_datasets([split_input(store / "tasks", "train", "ab" * 32, "training")])
        tracker.log_model(model, tokenizer)
        assert tracker.log_model(model, tokenizer)  # once: no second version
        return tracker.run_id


def aliases(client, name) -> dict[str, str]:
    """A registered model's aliases (the SQLite store gives versions as ints)."""
    return {k: str(v) for k, v in client.get_registered_model(name).aliases.items()}


def scored_versions(client, name, scores):
    """Versions of ``name`` (no files) with the ranking tag each score gives (None: not
    evaluated)."""
    client.create_registered_model(name)
    for score in scores:
        version = client.create_model_version(name, source="file:///nowhere")
        if score is not None:
            client.set_model_version_tag(name, version.version, RANKING, repr(score))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny):
    """A store with the final models of an SFT run (version 1) and an RL run (2)."""
    store = tmp_path_factory.mktemp("registry")
    model, tokenizer = tiny
    sft = train_like(store, "exp", model, tokenizer, {"slca.kind": "sft"})
    rl_tags = {"slca.estimator": "slca", "slca.data_hash": "sha256:rows"}
    rl = train_like(store, "exp", model, tokenizer, rl_tags)
    return store, sft, rl


def test_sft_and_rl_models_are_versions_of_the_experiments_model_with_provenance(trained):
    store, sft, rl = trained
    client = MlflowClient(sqlite_uri(store))
    versions = client.search_model_versions("name = 'exp-policy'")
    versions = sorted(versions, key=lambda v: int(v.version))
    assert [(str(v.version), v.run_id) for v in versions] == [("1", sft), ("2", rl)]
    commit = client.get_run(rl).data.tags["mlflow.source.git.commit"]
    assert versions[0].tags == {
        "slca.run_id": sft,
        "slca.git_commit": commit,
        "slca.data_digest": "ab" * 32,
        "slca.stage": "sft",
        "slca.estimator": "sft",
    }
    assert versions[1].tags["slca.estimator"] == "slca"
    assert versions[1].tags["slca.stage"] == "rl"
    assert versions[1].tags["slca.data_hash"] == "sha256:rows"


def test_champion_is_the_best_evaluated_version_and_challenger_the_newest(tmp_path, caplog):
    client = MlflowClient(sqlite_uri(tmp_path))
    scored_versions(client, "m", [0.3, 0.5, 0.5, None])
    with caplog.at_level(logging.INFO, logger="slca.tracking.registry"):
        moves = move_aliases(client, "m")
    # a tie goes to the older version; the unevaluated v4 is neither
    assert aliases(client, "m") == {CHAMPION: "2", CHALLENGER: "3"}
    assert [(m.alias, m.before, m.after) for m in moves] == [
        (CHAMPION, None, "2"),
        (CHALLENGER, None, "3"),
    ]
    logged = [r.getMessage() for r in caplog.records]
    assert f"m@champion: unset -> v2 ({RANKING} 0.5000)" in logged
    assert "m@champion: unset -> v2" in client.get_registered_model("m").tags[MOVE_TAG]
    assert move_aliases(client, "m") == []  # nothing new: nothing moves
    client.set_model_version_tag("m", "4", RANKING, "0.7")
    moves = move_aliases(client, "m")
    assert [(m.alias, m.before, m.after) for m in moves] == [
        (CHAMPION, "2", "4"),
        (CHALLENGER, "3", "4"),
    ]


def test_moving_the_aliases_while_another_process_writes_is_refused(trained):
    store, _, rl = trained
    (store / "held").mkdir()
    (store / "held" / RUN_FILE).write_text(json.dumps({"run_id": rl, "experiment": "exp"}))
    client = MlflowClient(sqlite_uri(store))
    before = aliases(client, "exp-policy")
    with ExclusiveLock(store / WRITER_LOCK, what="the other writer"):
        with pytest.raises(LockHeld, match="one writer at a time"):
            log_evaluation(
                store,
                experiment="exp",
                metrics={"eval/in_domain/success_at_0.9": 0.999},
                reports=[],
                run_id=rl,
                model_dir=store / "held",
            )
    assert aliases(client, "exp-policy") == before
    assert client.get_model_version("exp-policy", "2").tags.get(RANKING) != "0.999"


def test_an_evaluation_tags_its_version_and_moves_the_aliases(trained):
    store, sft, rl = trained
    client = MlflowClient(sqlite_uri(store))
    assert aliases(client, "exp-policy") == {}  # none before evaluation
    for run_id, success in ((sft, 0.25), (rl, 0.125)):
        model_dir = store / run_id
        model_dir.mkdir()
        (model_dir / RUN_FILE).write_text(json.dumps({"run_id": run_id, "experiment": "exp"}))
        figures = {"in_domain/success_at_0.9": success, "in_domain/process": 0.5}
        figures["bfcl/simple/accuracy"] = 1.0  # a category's figure: not in the summary
        log_evaluation(
            store,
            experiment="exp",
            metrics={f"eval/{k}": v for k, v in figures.items()},
            reports=[],
            run_id=run_id,
            model_dir=model_dir,
        )
    one, two = (client.get_model_version("exp-policy", v) for v in ("1", "2"))
    assert one.tags[RANKING] == "0.25" and two.tags[RANKING] == "0.125"
    summary = json.loads(two.tags[SUMMARY_TAG])
    assert summary == {"in_domain/process": 0.5, "in_domain/success_at_0.9": 0.125}
    assert aliases(client, "exp-policy") == {CHAMPION: "1", CHALLENGER: "2"}
    champion = model_directory("models:/exp-policy@champion", store)
    assert json.loads((champion / RUN_FILE).read_text())["version"] == "1"
    # a model that is no version of the experiment's model (no run file): logged into
    # a run of its own as before, the aliases stay
    log_evaluation(
        store,
        experiment="exp",
        metrics={"eval/in_domain/success_at_0.9": 1.0},
        reports=[],
        run_name="elsewhere",
        model_dir=store / "no-run-file",
    )
    assert aliases(client, "exp-policy") == {CHAMPION: "1", CHALLENGER: "2"}


def test_a_registered_version_is_the_same_model_as_the_one_saved(trained, tiny, tmp_path):
    from slca.modeling import load_causal_lm

    store, _, rl = trained
    model, tokenizer = tiny
    out_dir = tmp_path / "out"  # what the training stage's out_dir holds
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    directory = model_directory("models:/exp-policy/2", store)
    assert directory == store / "registry/exp-policy/2"
    run = json.loads((directory / RUN_FILE).read_text())
    assert run["run_id"] == rl and run["experiment"] == "exp"
    assert (run["registered_model"], run["version"]) == ("exp-policy", "2")
    saved, saved_tokenizer = load_causal_lm(out_dir, dtype="float32")
    fetched, fetched_tokenizer = load_causal_lm(directory, dtype="float32")
    for name, tensor in fetched.state_dict().items():
        torch.testing.assert_close(tensor, saved.state_dict()[name], rtol=0, atol=0)
    assert fetched_tokenizer.encode(TEXTS[1]) == saved_tokenizer.encode(TEXTS[1])
    chat = [{"role": "user", "content": TEXTS[0]}]
    assert fetched_tokenizer.apply_chat_template(chat) == saved_tokenizer.apply_chat_template(chat)
    stamp = (directory / "config.json").stat().st_mtime_ns
    assert model_directory("models:/exp-policy/2", store) == directory
    assert (directory / "config.json").stat().st_mtime_ns == stamp  # fetched once
    # a directory there that is not this version (another store's, or edited) is kept
    # and named, never removed: another process may be evaluating from it
    (directory / RUN_FILE).write_text(json.dumps({**run, "version": "7"}))
    with pytest.raises(ValueError, match=r"holds files of another model than version 2"):
        model_directory("models:/exp-policy/2", store)
    assert (directory / "config.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("models:/m@nope", r"^models:/m@nope: 'm' has no alias 'nope' \(its aliases: champion\)$"),
        ("models:/m/7", r"^models:/m/7: 'm' has no version '7' in sqlite:///"),
        ("models:/absent@champion", r"^models:/absent@champion: no registered model 'absent'"),
        ("models:/a:b@champion", r"^registered model name 'a:b' in models:/a:b@champion: "),
        ("models:/m", r"^models:/m: expected models:/<registered model>@<alias>"),
    ],
)
def test_a_uri_the_store_cannot_answer_is_one_line_naming_it(tmp_path, uri, message):
    client = MlflowClient(sqlite_uri(tmp_path))
    scored_versions(client, "m", [0.5])
    client.set_registered_model_alias("m", CHAMPION, "1")
    with pytest.raises(ValueError, match=message) as caught:
        model_directory(uri, tmp_path)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "registry").exists()  # nothing fetched


def test_a_uri_needs_a_store_and_a_name_mlflow_refuses_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="models:/m@champion: a registered model needs"):
        model_directory("models:/m@champion", None)
    with pytest.raises(ValueError, match="models:/m@champion: no MLflow store at "):
        model_directory("models:/m@champion", tmp_path / "none")
    assert not (tmp_path / "none").exists()
    with pytest.raises(ValueError, match=r"registered model name 'a/b-policy' \(from experiment"):
        Tracker(tmp_path, experiment="a/b")
    assert policy_model_name("slca") == "slca-policy"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """An ``mlflow server`` on 127.0.0.1 with its own SQLite store and artifacts."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        sqlite_uri(tmp_path / "server"),
        "--artifacts-destination",
        (tmp_path / "server-artifacts").as_uri(),
    ]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    process = subprocess.Popen(  # a group of its own: the server starts uvicorn and a job runner
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                MlflowClient(uri).search_experiments(max_results=1)
                break
            except Exception:
                assert process.poll() is None, "mlflow server exited"
                time.sleep(1)
        yield uri
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@pytest.mark.slow
def test_a_tracking_server_registers_and_serves_a_version(tmp_path, tiny, server, monkeypatch):
    model, tokenizer = tiny
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    local = tmp_path / "client"
    run_id = train_like(local, "exp", model, tokenizer, {"slca.estimator": "grpo"}, server)
    (local / "m").mkdir(parents=True)
    (local / "m" / RUN_FILE).write_text(json.dumps({"run_id": run_id, "experiment": "exp"}))
    log_evaluation(
        local,
        experiment="exp",
        metrics={"eval/in_domain/success_at_0.9": 0.5},
        reports=[],
        run_id=run_id,
        tracking_uri=server,
        model_dir=local / "m",
    )
    client = MlflowClient(server)
    assert aliases(client, "exp-policy") == {CHAMPION: "1", CHALLENGER: "1"}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    directory = model_directory("models:/exp-policy@champion", local)
    assert json.loads((directory / RUN_FILE).read_text())["run_id"] == run_id
    assert (directory / "config.json").is_file() and (directory / "tokenizer.json").is_file()
    with pytest.raises(ValueError, match="models:/exp-policy@gone: 'exp-policy' has no alias"):
        model_directory("models:/exp-policy@gone", local)
