"""The demo's pretrained base: a tiny model trained from scratch, once, on a generated
tool-calling corpus, and shipped with the repository like a checkpoint from a hub.

The corpus comes from the controlled generator with its own seed and wide values (most
cities, airports and passengers made up), so the cheapest way to write a call's value
is to copy it from the request. No user message of the demo's val or test split may
be in it. The checkpoint's card (``card.json``, rendered as ``README.md``) holds the
recipe, the corpus hash, the wall time, the git commit, the value probe's figures and
every shipped file's sha256, which :func:`verify_pretrained` checks before use.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from slca.config import ConfigError
from slca.config.steps import PRETRAIN_NOT_IN_RECIPE, PretrainParams
from slca.data import io
from slca.data.record import TaskRecord
from slca.tracking.provenance import cpu_kernels

CARD = "card.json"
# A frozen DVC stage never runs, not even under `dvc repro -f`: it only checks its output
RESTORE = (
    "restore it with `git checkout -- {dir}`, or retrain it with `slca pretrain` "
    "(then `dvc commit -f pretrain`)"
)


def normalised(text: str) -> str:
    """A user message folded for comparison: case and whitespace runs ignored."""
    return " ".join(text.split()).casefold()


def user_messages(task: TaskRecord) -> list[str]:
    return [normalised(m.content) for m in task.messages if m.role == "user"]


def heldout_messages(heldout_dir: str) -> set[str]:
    """The normalised user messages of the val and test splits in ``heldout_dir``."""
    tasks = io.read_dataset(heldout_dir, ["val", "test"])
    if not tasks:
        raise ValueError(f"pretrain: no val or test split in {heldout_dir} (run prepare first)")
    return {m for t in tasks for m in user_messages(t)}


def overlap(corpus: Iterable[TaskRecord], heldout: set[str]) -> list[TaskRecord]:
    """The corpus tasks that hold a held-out user message."""
    return [t for t in corpus if any(m in heldout for m in user_messages(t))]


def check_disjoint(corpus: Sequence[TaskRecord], heldout: set[str], where: str) -> None:
    """Refuse a corpus that holds a held-out user message, naming the count and the first."""
    found = overlap(corpus, heldout)
    if found:
        first = next(m for m in user_messages(found[0]) if m in heldout)
        raise ValueError(
            f"pretrain: {where}: {len(found)} of {len(corpus)} tasks hold a user message "
            f"of the demo's val or test split; the first, task {found[0].id}: {first!r}"
        )


def build_corpus(params: PretrainParams, heldout: set[str]) -> tuple[list[TaskRecord], int]:
    """The corpus and how many generated tasks were dropped as held-out twins."""
    if params.corpus is not None:
        corpus = io.read_records(params.corpus)
        check_disjoint(corpus, heldout, params.corpus)
        return corpus, 0
    from slca.data.synth import generate

    generated = generate(params.synth, params.seed)
    twins = {t.id for t in overlap(generated, heldout)}
    return [t for t in generated if t.id not in twins], len(twins)


def corpus_hash(corpus: Iterable[TaskRecord]) -> str:
    digest = hashlib.sha256()
    for task in corpus:
        digest.update(task.model_dump_json().encode())
    return digest.hexdigest()


def file_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file in ``directory`` but the card and its rendering."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name not in (CARD, "README.md")
    }


def verify_pretrained(directory: str | Path) -> dict[str, Any]:
    """The card of the shipped base in ``directory``, after checking every file it lists
    against its sha256; a missing, truncated or altered file raises one line naming it
    and how to restore or retrain the base."""
    directory = Path(directory)
    restore = RESTORE.format(dir=directory)
    card_path = directory / CARD
    try:
        card = json.loads(card_path.read_text())
        expected = dict(card["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"base_model: {card_path}: no readable model card ({exc.__class__.__name__}); {restore}"
        ) from None
    if not expected:  # a card that lists nothing would vouch for anything
        raise ConfigError(f"base_model: {card_path} lists no file; {restore}")
    for name, sha in expected.items():
        path = directory / name
        if not path.is_file():
            raise ConfigError(f"base_model: {path} is missing; {restore}")
        if hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            raise ConfigError(
                f"base_model: {path} does not match the sha256 in {card_path}; {restore}"
            )
    return card


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _weights_mb(params: PretrainParams) -> float:
    """float32 size of the model these settings build (embeddings tied)."""
    h, i, layers = params.hidden_size, params.intermediate_size, params.num_hidden_layers
    kv = h // params.num_attention_heads * params.num_key_value_heads
    per_layer = h * h * 2 + h * kv * 2 + h + 2 * kv + 3 * h * i + 2 * h
    return 4 * (params.vocab_size * h + layers * per_layer + h) / 2**20


def _render_card(card: dict[str, Any]) -> str:
    from slca.eval.value_probe import probe_table

    probe = card["value_probe"]
    return "\n".join(
        [
            "# The demo's pretrained base",
            "",
            "A tiny Qwen2 policy trained from scratch by `slca pretrain` (DVC stage",
            "`pretrain`, frozen) on a generated tool-calling corpus; `base_model.kind:",
            "pretrained` loads it after checking every file against `card.json`.",
            "",
            f"- git commit: `{card['git_commit']}`",
            f"- corpus: {card['corpus']['tasks']} tasks, sha256 `{card['corpus']['sha256']}`"
            f" ({card['corpus']['dropped_heldout_twins']} generated tasks dropped as twins of"
            " the demo's val/test user messages)",
            f"- training: {card['training']['steps']} steps, "
            f"{card['training']['tokens']:,} tokens, wall time "
            f"{card['training']['wall_s']:.0f} s, last loss {card['training']['last_loss']:.3f}",
            f"- weights: {card['weights_mb']:.1f} MB",
            f"- value probe on the demo's val split ({card['value_probe_split']}): value accuracy"
            f" {probe['value_accuracy']:.3f}, first token {probe['first_token_accuracy']:.3f},"
            f" later tokens {probe['later_token_accuracy']:.3f} ({probe['values']} values)",
            "",
            "## Recipe (params.yaml `pretrain`)",
            "",
            "```json",
            json.dumps(card["recipe"], indent=2, sort_keys=True),
            "```",
            "",
            "## Value probe",
            "",
            probe_table(probe),
            "",
        ]
    )


def run_pretrain(params: PretrainParams, progress: Any = None) -> dict[str, Any]:
    """Build the corpus, train the base, write it with its card to ``out_dir``; returns
    the card. With ``params.tracking_dir`` (the default) it is an MLflow run
    (:func:`slca.training.stage_run.stage_run`; the model registered, stage ``pretrain``)."""
    from slca.training.stage_run import stage_run

    _check_weight_size(params)
    heldout = heldout_messages(params.heldout_dir)
    corpus, dropped = build_corpus(params, heldout)
    check_disjoint(corpus, heldout, "the generated corpus")
    # the store is opened once the corpus is known to be usable, before any training
    with stage_run("pretrain", params) as run:
        return _pretrain(params, corpus, dropped, progress, run)


def _pretrain(
    params: PretrainParams, corpus: list[TaskRecord], dropped: int, progress: Any, run: Any
) -> dict[str, Any]:
    """:func:`run_pretrain`'s training, probe and card, inside its run."""
    from slca.eval.value_probe import VALUE_PROBE_FIGURES, value_probe
    from slca.training.copy_examples import copy_examples_hash, id_copy_examples
    from slca.training.session import data_hashes
    from slca.training.tiny import build_tiny, tokenizer_texts

    started = time.monotonic()
    tokenizer, model = build_tiny(tokenizer_texts(corpus), params, params.init_seed)
    examples, too_long = _examples(corpus, tokenizer, params)
    drawn = id_copy_examples(
        tokenizer, params.copy_first_examples + params.copy_examples, params.seed
    )
    first, copies = drawn[: params.copy_first_examples], drawn[params.copy_first_examples :]
    examples += copies
    hashes = {**data_hashes(params.heldout_dir), "corpus.sha256": corpus_hash(corpus)}
    run.begin(hashes, [(params.heldout_dir, "val", None)])  # what the probe reads
    losses = _train(model, tokenizer, params, [first, examples], progress, run)
    tokens = params.epochs * _tokens(examples) + _tokens(first)
    training = _training_record(tokens, losses, time.monotonic() - started)
    val = io.read_dataset(params.heldout_dir, ["val"])
    probe = value_probe(model, tokenizer, val)
    figures = {f"pretrain/value_probe/{k}": float(probe[k]) for k in VALUE_PROBE_FIGURES}
    run.finish(model, tokenizer, {**figures, "pretrain/steps": float(len(losses))}, len(losses))
    out = Path(params.out_dir)
    with io.atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        card = {
            "recipe": params.model_dump(mode="json", exclude=set(PRETRAIN_NOT_IN_RECIPE)),
            "git_commit": _git_commit(),
            "corpus": {
                "tasks": len(corpus),
                "sha256": corpus_hash(corpus),
                "dropped_heldout_twins": dropped,
                "too_long": too_long,
                "copy_first_examples": len(first),
                "copy_examples": len(copies),
                "copy_examples_sha256": copy_examples_hash(drawn),
            },
            "training": training,
            "weights_mb": _megabytes(tmp),
            "value_probe_split": f"{params.heldout_dir}/val.parquet",
            "value_probe": probe,
            "files": file_hashes(tmp),
        }
        (tmp / CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
        (tmp / "README.md").write_text(_render_card(card))
    return card


def _train(
    model: Any,
    tokenizer: Any,
    params: PretrainParams,
    phases: list[list[Any]],
    progress: Any,
    run: Any,
) -> list[float]:
    """The copy-only start (``phases[0]``, one pass, ``copy_first_lr``), then the corpus
    with its copies (``phases[1]``, ``epochs`` passes, ``lr``), each
    with an engine of its own; steps number on across them. Returns every step's loss."""
    import torch

    from slca.training.sft import sft, sft_steps
    from slca.training.tiny import save_checkpoint

    first, examples = phases
    # every step's loss of the phases before this one: their steps number on from it
    done: list[float] = []

    def step_done(step: int, loss: float) -> None:
        if progress is not None:
            progress(len(done) + step, loss)
        if params.snapshot_dir and (len(done) + step) % params.snapshot_every == 0:
            name = f"step-{len(done) + step:06d}"
            save_checkpoint(model, tokenizer, str(Path(params.snapshot_dir) / name))

    def logged(step: int, figures: dict[str, float]) -> None:
        run.step(len(done) + step, figures)

    settings = [
        (phase, epochs, lr, sft_steps(len(phase), epochs, params.micro_batch_size))
        for phase, epochs, lr in (
            (first, 1, params.copy_first_lr),
            (examples, params.epochs, params.lr),
        )
        if phase
    ]
    if progress is not None and hasattr(progress, "start"):
        progress.start(sum(steps for *_, steps in settings))
    torch.manual_seed(params.init_seed)
    for phase_examples, epochs, lr, phase_steps in settings:
        done.extend(
            sft(
                _sft_engine(model, params.model_copy(update={"lr": lr}), phase_steps),
                phase_examples,
                epochs=epochs,
                micro_batch_size=params.micro_batch_size,
                pad_id=tokenizer.pad_token_id,
                seed=params.init_seed,
                group_by_length=params.group_by_length,
                progress=step_done,
                on_step=logged,
            )
        )
    return done


def _check_weight_size(params: PretrainParams) -> None:
    size = _weights_mb(params)
    if size > params.max_weight_mb:
        raise ConfigError(
            f"pretrain: these settings build {size:.1f} MB of weights, over "
            f"pretrain.max_weight_mb={params.max_weight_mb}"
        )


def _examples(
    corpus: Sequence[TaskRecord], tokenizer: Any, params: PretrainParams
) -> tuple[list[Any], int]:
    """The corpus's gold SFT examples that fit ``pretrain.max_tokens``, and how many did not."""
    from slca.rollout.gold import build_example, summary_for
    from slca.simulator import Simulator

    simulator = Simulator()
    examples, too_long = [], 0
    for task in corpus:
        summary = summary_for(task, params.poor_summary_frac, params.init_seed)
        example = build_example(task, tokenizer, simulator, summary)
        if len(example.token_ids) > params.max_tokens:
            too_long += 1
        else:
            examples.append(example)
    if not examples:
        raise ValueError(f"pretrain: no corpus task fits pretrain.max_tokens={params.max_tokens}")
    return examples, too_long


def _sft_engine(model: Any, params: PretrainParams, steps: int) -> Any:
    """The update engine of the pretraining: a cosine schedule over ``steps``."""
    from slca.config.engine import SFTEngineConfig
    from slca.training.engines import build_engine

    return build_engine(
        model,
        SFTEngineConfig.model_validate(
            {
                "optim": {
                    "lr": params.lr,
                    "warmup_steps": min(params.warmup_steps, steps),
                    "schedule": "cosine",
                    "total_steps": steps,
                    "min_lr_ratio": params.min_lr_ratio,
                }
            }
        ),
    )


def _tokens(examples: Sequence[Any]) -> int:
    return sum(len(e.token_ids) for e in examples)


def _training_record(tokens: int, losses: Sequence[float], wall: float) -> dict[str, Any]:
    """The card's ``training`` section: steps, tokens, wall time, first and last loss,
    and the threads and CPU kernels (slca/cpu_kernels.py) that produced the weights."""
    import torch

    window = max(1, len(losses) // 20)
    return {
        "steps": len(losses),
        "tokens": tokens,
        "wall_s": round(wall, 1),
        "first_loss": sum(losses[:window]) / window,
        "last_loss": sum(losses[-window:]) / window,
        "torch_threads": torch.get_num_threads(),
        "cpu_kernels": cpu_kernels(),
    }


def _megabytes(directory: Path) -> float:
    return round(sum(p.stat().st_size for p in directory.glob("*.safetensors")) / 2**20, 2)


REPOSITORY = Path(__file__).resolve().parents[2]


def shipped_dir(directory: str | Path) -> Path:
    """``directory`` as given, or, when it is relative and not there, under the
    repository root (where ``assets/demo-base`` ships), so a run from another working
    directory finds the base."""
    path = Path(directory)
    if path.is_absolute() or path.exists() or not (REPOSITORY / path).exists():
        return path
    return REPOSITORY / path


def install_pretrained(source: str | Path, out_dir: str | Path) -> Path:
    """Copy the verified shipped base into ``out_dir`` (written then renamed)."""
    source = shipped_dir(source)
    card = verify_pretrained(source)
    out = Path(out_dir)
    with io.atomic_dir(out) as tmp:
        # only what the card vouches for, and the card itself
        for name in [*card["files"], CARD, "README.md"]:
            if (source / name).is_file():
                shutil.copy2(source / name, tmp / name)
    return out
