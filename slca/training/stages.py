"""The training steps of the pipeline as library functions: base model, SFT, the
summary reward model; and the command line of every training step, RL included (whose
stage is :mod:`slca.training.session`).

A DVC stage (``python -m slca.training.stages <step> --params params.yaml``) and a
Prefect task call the same function. Outputs are written beside their target and
renamed, so a failed step leaves the previous output intact.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from slca.config import ConfigError, load_section, overrides_of
from slca.config.loader import stage_parser
from slca.config.steps import BaseModelParams, PretrainParams, SFTParams, SummaryRMParams
from slca.config.train import TrainConfig
from slca.data import io
from slca.faults import FaultError
from slca.training.session import data_hashes, run_train


def build_base_model(params: BaseModelParams) -> Path:
    """Write the base checkpoint (model + tokenizer) to ``params.out_dir``."""
    from slca.modeling import load_causal_lm, load_tokenizer
    from slca.rollout.chat import choose_template

    out = Path(params.out_dir)
    if params.kind == "path" and not params.path:
        raise ConfigError("base_model.path: required when base_model.kind is 'path'")
    if params.kind == "pretrained":
        from slca.training.pretrain import install_pretrained

        return install_pretrained(params.pretrained_dir, out)
    with io.atomic_dir(out) as tmp:
        if params.kind in ("smollm2", "path"):
            # SmolLM2's own chat template drops tools=: the policy would never see the
            # tool schemas; base_model.chat_template says what replaces a failing one
            source = "smollm2" if params.kind == "smollm2" else params.path
            checked = load_tokenizer(source)  # the template is checked before the weights load
            note = choose_template(checked, params.chat_template, str(source))
            if note:
                logging.getLogger(__name__).warning(note)
            model, tokenizer = load_causal_lm(source)
            tokenizer.chat_template = checked.chat_template
        else:
            from slca.training.tiny import build_tiny, pretrain_copying, tokenizer_texts

            texts = tokenizer_texts(io.load_train_set(params.in_dir))
            tokenizer, model = build_tiny(texts, params, params.seed)
            if params.copy_pretrain_steps:
                pretrain_copying(
                    model, tokenizer, texts, steps=params.copy_pretrain_steps, seed=params.seed
                )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out


def build_summary_rm(params: SummaryRMParams, progress: Any = None) -> dict[str, float]:
    """Train the summary reward model; writes ``out_dir``; returns loss and accuracy."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    from slca.training.summary_rm import pair_accuracy, preference_pairs, train_reward_model
    from slca.training.tiny import save_checkpoint, tiny_config

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
    save_checkpoint(model, tokenizer, params.out_dir)
    return {
        "summary_rm/pairs": float(len(train)),
        **_loss_figures("summary_rm", losses),
        "summary_rm/val_accuracy_untrained": before["accuracy"],
        **{f"summary_rm/val_{k}": v for k, v in after.items()},
    }


def _loss_figures(prefix: str, losses: list[float]) -> dict[str, float]:
    """Mean loss over the first and the last tenth of the steps (one step's loss is noise)."""
    window = max(1, len(losses) // 10)
    return {
        f"{prefix}/first_loss": sum(losses[:window]) / window,
        f"{prefix}/last_loss": sum(losses[-window:]) / window,
    }


def run_sft(params: SFTParams, progress: Any = None) -> dict[str, float]:
    """SFT from ``base_dir`` on the train split; writes ``out_dir``; returns loss figures.

    With ``params.tracking_dir`` (the default) it is an MLflow run
    (:func:`slca.training.stage_run.stage_run`):
    the store's writer lock is taken first (a second writer is refused before any work),
    the run opens once the examples are built, and ``out_dir`` names it in its run file
    (``mlflow_run.json``), so the SFT model's evaluation is logged into it."""
    from slca.modeling import load_causal_lm
    from slca.rollout.gold import build_example, reference_summary, summary_for
    from slca.simulator import Simulator
    from slca.training.engines import build_engine
    from slca.training.sft import sft
    from slca.training.stage_run import stage_run

    with stage_run("sft", params) as run:
        model, tokenizer = load_causal_lm(params.base_dir, dtype="float32")
        simulator = Simulator()
        examples, too_long, poor = [], 0, 0
        records, content = io.verified_split(params.in_dir, "train")
        tasks = io.build_train_set(records)
        if params.sources is not None:
            tasks = [t for t in tasks if t.source in params.sources]
            if not tasks:
                raise ValueError(f"sft: no train task from sft.sources={params.sources}")
        # a gold call whose arguments the data does not give (the authors' verl rows) has
        # no trajectory to imitate: written with empty arguments it would teach failing
        # calls. RL and evaluation still use these tasks (their rewards skip the arguments).
        known = [t for t in tasks if _arguments_known(t)]
        unknown, tasks = len(tasks) - len(known), known
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
            why = f" ({unknown} have gold calls without arguments)" if unknown else ""
            raise ValueError(f"sft: no train task fits sft.max_tokens={params.max_tokens}{why}")
        engine = build_engine(model, params.engine)
        hashes = {**data_hashes(params.in_dir), "read.train": content}
        run.begin(hashes, [(params.in_dir, "train", content)])
        losses = sft(
            engine,
            examples,
            epochs=params.epochs,
            micro_batch_size=params.micro_batch_size,
            pad_id=tokenizer.pad_token_id,
            seed=params.seed,
            group_by_length=params.group_by_length,
            progress=progress,
            on_step=run.step,
        )
        figures = {
            **_loss_figures("sft", losses),
            "sft/steps": float(len(losses)),
            "sft/examples": float(len(examples)),
            "sft/tokens": float(params.epochs * sum(len(e.token_ids) for e in examples)),
            "sft/too_long": float(too_long),
            "sft/poor_summaries": float(poor),
            "sft/unknown_arguments": float(unknown),
        }
        run.finish(model, tokenizer, figures, len(losses))
        with io.atomic_dir(params.out_dir) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            run.write_run_file(Path(tmp))
    return figures


def _arguments_known(task: Any) -> bool:
    return all(call.arguments_known for step in task.gold for call in step)


def progress_bar(desc: str, total: int | None = None, logger: Any = None) -> Any:
    """The ``progress(step, figures)`` hook of SFT and RL as a :class:`slca.progress.Progress`
    (a bar on a terminal, a log line every 30 s elsewhere, through ``logger``): the step
    count, and the loss (SFT) or the tool and summary rewards (RL). Only rank 0 of a
    data-parallel launch shows it."""
    from slca.progress import Progress

    shown = Progress(desc, total, unit="step", logger=logger)

    def update(step: int, figures: Any) -> None:
        if isinstance(figures, dict):
            keys = [k for k in ("reward/tool", "reward/sum") if k in figures]
            shown.update(step, {k.split("/")[-1]: float(figures[k]) for k in keys})
        else:
            shown.update(step, {"loss": float(figures)})
        if shown.total is not None and step >= shown.total:
            shown.close()

    def start(steps: int) -> None:  # the loop's length, when only the loop knows it
        shown.total = steps

    update.start = start  # type: ignore[attr-defined]
    update.close = shown.close  # type: ignore[attr-defined]
    return update


def main(argv: list[str] | None = None) -> int:
    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    parser = stage_parser(
        "python -m slca.training.stages", "train.steps=4", description=__doc__.splitlines()[0]
    )
    parser.add_argument("step", choices=["pretrain", "base_model", "sft", "summary_rm", "train"])
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
    args = parser.parse_args(argv)
    try:
        overrides = overrides_of(args)
        if args.step == "pretrain":
            from slca.training.pretrain import run_pretrain

            params = load_section(args.params, "pretrain", PretrainParams, overrides)
            card = run_pretrain(params, progress=progress_bar("pretrain"))
            print(f"{params.out_dir}: value accuracy {card['value_probe']['value_accuracy']:.3f}")
        elif args.step == "base_model":
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
    except (ConfigError, ValueError, OSError, FaultError) as exc:
        print(f"{args.step} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
