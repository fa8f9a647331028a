"""The summary scorer a stage scores with, built once from its configuration, and the
judge's own generation engine (``hf`` or ``vllm``): training's factory
(:mod:`slca.training.factory`) and evaluation (:mod:`slca.eval.stages`) build it here,
so a judge works, and a reward model loads once, in both.

The judge never shares the policy's engine: a policy that judged its own answers would
be rewarded by a moving target that it can learn to please (see docs/decisions.md,
"Trainer factory").
"""

from __future__ import annotations

import contextlib
from typing import Any

from slca.config.rewards import JudgeConfig, SummaryConfig
from slca.rewards.preference import Generate, SummaryScorer, build_summary_scorer


def check_judge(summary: SummaryConfig, *, where: str) -> None:
    """Raise :class:`~slca.generation.vllm_engine.EngineUnavailable` (one line naming the
    setting and the fix) when ``summary`` names a judge whose vLLM engine cannot start;
    ``where`` is ``summary``'s key (``train.rewards.summary``)."""
    from slca.generation.vllm_engine import check_engine

    if summary.name == "judge":
        check_engine(
            summary.judge.engine,
            summary.judge.vllm,
            setting=f"{where}.judge.engine",
            model_dir=summary.judge.model,
        )


def judge_generate(
    judge: JudgeConfig,
    *,
    where: str,
    device: Any = "cpu",
    seed: int = 0,
    stack: contextlib.ExitStack | None = None,
) -> Generate:
    """``generate(prompts) -> replies`` on the judge's own model: transformers (``hf``)
    on ``judge.device`` (null: ``device``, the policy's) or a vLLM engine, each prompt a
    user turn in the judge's chat template. ``where`` is the summary section's key
    (``train.rewards.summary``), for messages."""
    from slca.generation.engines import HFEngine, SamplingParams, text_generator
    from slca.modeling import load_causal_lm, load_tokenizer, resolve_model_source

    if not judge.model:
        raise ValueError(f"{where}.judge.model: required for the judge scorer")
    source = resolve_model_source(judge.model)
    params = SamplingParams(
        max_new_tokens=judge.max_new_tokens, temperature=judge.temperature, seed=seed
    )
    if judge.engine == "vllm":
        from slca.generation.vllm_engine import VLLMEngine

        tokenizer = load_tokenizer(source)
        engine: Any = VLLMEngine(
            source.directory,
            stop_token_ids=[tokenizer.eos_token_id],
            settings=judge.vllm,
            seed=seed,
            setting=f"{where}.judge.engine",
        )
        if stack is not None:
            stack.enter_context(engine)
    else:
        where = judge.device or device
        model, tokenizer = load_causal_lm(source, device=where, dtype="float32")
        model.requires_grad_(False)
        engine = HFEngine(model, tokenizer, batch_size=judge.batch_size, shares_module=False)
    return text_generator(engine, tokenizer, params)


def build_scorer(
    summary: SummaryConfig,
    *,
    where: str,
    device: Any = "cpu",
    seed: int = 0,
    stack: contextlib.ExitStack | None = None,
) -> SummaryScorer:
    """The summary scorer ``summary.name`` names, built once (a reward model loads once,
    a judge gets its engine): training's and evaluation's scorer alike. ``where`` is
    ``summary``'s key, for messages."""
    generate = None
    if summary.name == "judge":
        generate = judge_generate(summary.judge, where=where, device=device, seed=seed, stack=stack)
    return build_summary_scorer(summary, generate=generate)
