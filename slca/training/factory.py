"""One place that turns a :class:`~slca.config.TrainConfig` into a ready
:class:`~slca.training.rl.Trainer`: the policy and its frozen reference, the update and
rollout engines, the simulator, the summary scorer (with the judge's engine) — each
built once, from the configuration, and nothing built that it does not name.

:func:`check_engines` refuses an engine that cannot start before anything is loaded;
:func:`build_trainer` builds the rest, in the order device memory needs (vLLM engines
take their share of the device before the update engine does). Engines and files that
must be closed are closed by the caller's :class:`contextlib.ExitStack`.

The summary scorer and the judge's own engine come from
:mod:`slca.rewards.judge_engine`, as evaluation's do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slca.config.simulator import SimulatorConfig
from slca.config.train import TrainConfig
from slca.data.record import TaskRecord
from slca.rewards.judge_engine import build_scorer, check_judge
from slca.simulator import Simulator
from slca.training.rl import Tracker, Trainer

SUMMARY_SETTING = "train.rewards.summary"
SIMULATOR_SETTING = "train.simulator.llm.engine"


def check_engines(config: TrainConfig, *, init_dir: str | Path) -> None:
    """Raise :class:`~slca.generation.vllm_engine.EngineUnavailable` (one line naming the
    setting and the fix) when a vLLM engine the configuration asks for cannot start."""
    from slca.generation.vllm_engine import check_engine

    rollout = config.rollout
    check_engine(
        rollout.engine,
        rollout.vllm,
        setting="train.rollout.engine",
        model_dir=init_dir,
        max_model_len=rollout.max_total_tokens,
    )
    check_judge(config.rewards.summary, where=SUMMARY_SETTING)
    simulator = config.simulator
    if simulator.backend == "llm" and simulator.llm.engine == "vllm":
        check_engine("vllm", simulator.llm.vllm, setting=SIMULATOR_SETTING)


def build_simulator(
    config: SimulatorConfig, *, device: Any = "cpu", stack: contextlib.ExitStack | None = None
) -> Simulator:
    """The simulator ``train.simulator`` describes. With ``stack``, its cache file is
    locked for the run on rank 0 (one writer per store) and closed when the stack is."""
    options: dict[str, Any] = {}
    if config.backend == "llm":
        llm = config.llm
        options = {
            "model": llm.model,
            "engine": llm.engine,
            "device": str(llm.device or device),
            "max_new_tokens": llm.max_new_tokens,
            "temperature": llm.temperature,
            "top_p": llm.top_p,
            "vllm": llm.vllm,
        }
    if config.cache is not None and stack is not None and os.environ.get("RANK", "0") == "0":
        from slca.locks import ExclusiveLock

        cache = Path(config.cache)
        stack.enter_context(
            ExclusiveLock(
                cache.with_name(f".{cache.name}.lock"), what=f"train.simulator.cache {cache}"
            )
        )
    simulator = Simulator(config.backend, seed=config.seed, cache_path=config.cache, **options)
    if stack is not None:
        stack.enter_context(simulator)
    return simulator


def build_trainer(
    config: TrainConfig,
    *,
    tokenizer: Any,
    tasks: Sequence[TaskRecord],
    checkpoint_dir: str | Path,
    stack: contextlib.ExitStack,
    validation_tasks: Sequence[TaskRecord] = (),
    tracker: Tracker | None = None,
    progress: Any = None,
) -> Trainer:
    """A :class:`Trainer` whose every part comes from ``config``: the policy (and, with a
    KL term, the frozen reference) from ``init_dir``; vLLM engines (rollout, judge,
    simulator) before the update engine; the rollout engine (vLLM, the update's own
    module, or a copy under ZeRO-3); the simulator (``train.simulator``) and the summary
    scorer (``train.rewards.summary``). Engines, the simulator's cache and its lock
    close with ``stack``. Loads models: call :func:`check_engines` first (a run checks
    each engine once, at its top: the rollout's vLLM engine is not checked again here)."""
    from slca.generation.device import resolve_device
    from slca.modeling import load_causal_lm, resolve_model_source
    from slca.training.engines import build_engine

    # an absolute path: a relative one ("models/sft") reads as a Hub repo id to
    # transformers helpers that then try the network
    init_dir = Path(config.init_dir).resolve()
    source = resolve_model_source(init_dir)
    model, _ = load_causal_lm(source, dtype="float32")
    reference = None
    if config.algorithm.loss.kl_coef > 0:
        reference, _ = load_causal_lm(source, dtype="float32")
        reference.requires_grad_(False)
    device = resolve_device(config.engine.device, key="train.engine.device")
    # vLLM engines start before the update engine takes device memory (each one's share
    # is a share of the whole device)
    vllm_engine = _vllm_rollout_engine(config, init_dir, tokenizer, stack)
    scorer = build_scorer(
        config.rewards.summary, where=SUMMARY_SETTING, device=device, seed=config.seed, stack=stack
    )
    simulator = build_simulator(config.simulator, device=device, stack=stack)
    update = build_engine(model, config.engine)
    rollout_engine = (
        vllm_engine
        if vllm_engine is not None
        else _hf_rollout_engine(config, update, source, tokenizer)
    )
    return Trainer(
        config,
        tasks=tasks,
        tokenizer=tokenizer,
        update=update,
        rollout_engine=rollout_engine,
        simulator=simulator,
        checkpoint_dir=checkpoint_dir,
        reference=reference,
        tracker=tracker,
        summary_scorer=scorer,
        progress=progress,
        validation_tasks=validation_tasks,
    )


def _vllm_rollout_engine(
    config: TrainConfig, init_dir: Path, tokenizer: Any, stack: contextlib.ExitStack
) -> Any:
    """The rollout's vLLM engine (None under ``rollout.engine: hf``), closed with
    ``stack``; :func:`check_engines` checked it at the run's top."""
    if config.rollout.engine != "vllm":
        return None
    from slca.generation.vllm_engine import VLLMEngine
    from slca.rollout.chat import turn_stop_ids

    return stack.enter_context(
        VLLMEngine(
            init_dir,
            stop_token_ids=turn_stop_ids(tokenizer),
            settings=config.rollout.vllm,
            max_model_len=config.rollout.max_total_tokens,
            seed=config.seed,
            setting="train.rollout.engine",
            checked=True,
        )
    )


def _hf_rollout_engine(config: TrainConfig, update: Any, source: Any, tokenizer: Any) -> Any:
    """The HF rollout engine: on the update's own module, or, under ZeRO-3 (each rank
    holds a shard of the module, generation needs it whole), on a copy of the policy."""
    from slca.generation.engines import HFEngine
    from slca.modeling import load_causal_lm
    from slca.rollout.chat import turn_stop_ids

    batch_size = config.rollout.generation_batch_size
    stops = turn_stop_ids(tokenizer)
    if config.engine.engine == "deepspeed" and config.engine.zero_stage == 3:
        dtype = next(update.module.parameters()).dtype
        copy, _ = load_causal_lm(source, dtype=dtype, device=update.device)
        return HFEngine(
            copy, tokenizer, batch_size=batch_size, stop_token_ids=stops, shares_module=False
        )
    return HFEngine(update.module, tokenizer, batch_size=batch_size, stop_token_ids=stops)
