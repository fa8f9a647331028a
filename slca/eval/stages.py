"""The evaluation step: greedy rollouts of one model on the held-out sets, scored.

A DVC stage (``python -m slca.eval.stages --params params.yaml``) and a Prefect task
call :func:`evaluate`. The task subsets are drawn from ``seed`` and the data alone, so
every model of a comparison meets the same tasks. The metrics (JSON) and one line per
task (JSON Lines) are written then renamed; they also go to MLflow, into the run that
trained the model (``mlflow_run.json`` in ``model_dir``) or a new run, and onto its
registered version (ADR 0083), which ``model_dir`` may name: ``models:/<name>@<alias>``.
Beside the rollouts, the teacher-forced value probe (:mod:`slca.eval.value_probe`)
scores the model on the val split's synth tasks (``value_probe/*``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slca.atomic import atomic_write_text
from slca.config import ConfigError
from slca.config.evaluate import EvaluateParams
from slca.config.loader import load_stage_section, stage_parser
from slca.data import io
from slca.data.record import TaskRecord
from slca.data.splits import draw, draw_split
from slca.eval.bfcl_multi_turn import CATEGORY as MULTI_TURN
from slca.eval.value_probe import VALUE_PROBE_SPLIT, value_probe_metrics
from slca.generation.vllm_engine import check_engine
from slca.rewards.judge_engine import build_scorer, check_judge
from slca.rewards.preference import SummaryScorer
from slca.rollout.chat import fitting_tasks

SUMMARY_SETTING = "evaluate.rewards.summary"
"""Where evaluation's summary scorer is configured (named in its messages)."""

Progress = Callable[[str, int], Callable[[int], Any]]
"""Given a set's name and task count before the set runs, returns what is called with
the number of tasks each generation step finished."""


def evaluate(params: EvaluateParams, progress: Progress | None = None) -> dict[str, float]:
    """Evaluate ``params.model_dir``; writes the report and returns its metrics (and
    logs them, with the CPU, memory and GPU use meanwhile, when ``tracking_dir`` is set)."""
    from slca.tracking.system import SystemSampler

    if params.model_dir.startswith("models:/"):  # a registered version: its files, fetched
        from slca.tracking.registry import model_directory

        local = model_directory(params.model_dir, params.tracking_dir)
        params = params.model_copy(update={"model_dir": str(local)})
    interval = params.system_metrics_s if params.tracking_dir is not None else None
    with SystemSampler(interval) as system:
        return _evaluate_model(params, progress, system)


def _evaluate_model(
    params: EvaluateParams, progress: Progress | None, system: Any
) -> dict[str, float]:
    import torch

    from slca.generation.device import resolve_device
    from slca.modeling import eval_autocast, load_causal_lm

    torch.manual_seed(params.seed)
    # an engine that cannot start fails before any work
    check_engine(
        params.engine,
        params.vllm,
        setting="evaluate.engine",
        model_dir=params.model_dir,
        max_model_len=params.max_total_tokens,
    )
    check_judge(params.rewards.summary, where=SUMMARY_SETTING)
    device = resolve_device(params.device, key="evaluate.device")
    if params.engine == "vllm":
        from slca.modeling import load_tokenizer

        model, tokenizer = None, load_tokenizer(params.model_dir)  # vLLM loads the weights
    else:  # fp32 weights: eval_autocast sets the precision the forwards run in
        model, tokenizer = load_causal_lm(params.model_dir, dtype="float32", device=device)
    # before vLLM starts: its engine takes the GPU memory the probe's own copy freed
    probe = value_probe_metrics(params, model, tokenizer, device)
    if model is None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(_engine(params, model, tokenizer))
        # built once, as training builds it: a judge on its own engine, a reward model
        scorer = build_scorer(
            params.rewards.summary,
            where=SUMMARY_SETTING,
            device=device,
            seed=params.seed,
            stack=stack,
        )
        # the HF engine generates in this process, in the measurement precision (as
        # validation and headroom do); vLLM in its own processes, in its own dtype
        measuring = (
            functools.partial(eval_autocast, device)
            if params.engine == "hf"
            else contextlib.nullcontext
        )
        return _evaluate(params, engine, tokenizer, progress, scorer, probe, measuring, system)


def _engine(params: EvaluateParams, model: Any, tokenizer: Any) -> Any:
    """The generation engine ``params.engine`` names, as a context (vLLM's processes
    stop when it closes)."""
    from slca.generation.engines import HFEngine
    from slca.rollout.chat import turn_stop_ids

    stops = turn_stop_ids(tokenizer)
    if params.engine == "hf":
        batch = params.generation_batch_size
        return contextlib.nullcontext(
            HFEngine(model, tokenizer, batch_size=batch, stop_token_ids=stops)
        )
    from slca.generation.vllm_engine import VLLMEngine

    return VLLMEngine(
        Path(params.model_dir).resolve(),
        stop_token_ids=stops,
        settings=params.vllm,
        max_model_len=params.max_total_tokens,
        seed=params.seed,
        setting="evaluate.engine",
        checked=True,  # evaluate checked it at its top, on the same arguments (ADR 0079)
    )


def _evaluate(
    params: EvaluateParams,
    engine: Any,
    tokenizer: Any,
    progress: Progress | None,
    summary_scorer: SummaryScorer,
    probe: dict[str, float],
    measuring: Callable[[], contextlib.AbstractContextManager[Any]],
    system: Any,
) -> dict[str, float]:
    """Roll out and score every set; ``measuring()`` is the context the policy's
    rollouts run in (its precision); ``system`` samples the machine's use meanwhile."""
    from slca.generation.engines import SamplingParams
    from slca.rollout.loop import RolloutLimits, run_rollouts

    sampling = SamplingParams(max_new_tokens=params.max_new_tokens, temperature=0.0)
    budget = params.max_total_tokens - params.max_new_tokens

    def rollouts(
        name: str, tasks: list[TaskRecord], simulator: Any, max_turns: int, follow_ups=None
    ) -> list:
        """One greedy rollout per task (``follow_ups``: later user turns by task id)."""
        with measuring():
            return run_rollouts(
                tasks,
                engine=engine,
                tokenizer=tokenizer,
                simulator=simulator,
                group_size=1,
                sampling=sampling,
                limits=RolloutLimits(max_turns=max_turns, max_total_tokens=params.max_total_tokens),
                progress=None if progress is None else progress(name, len(tasks)),
                follow_ups=follow_ups,
            )

    metrics: dict[str, float] = dict(probe)
    lines: list[dict[str, Any]] = []
    sets = (
        (
            "in_domain",
            _in_domain_tasks(params),
            functools.partial(_score_in_domain, summary_scorer),
        ),
        ("bfcl", _bfcl_tasks(params), _score_bfcl),
        ("tau2", _tau2_tasks(params), _score_tau2),
    )
    for name, drawn, scorer in sets:
        if not drawn:
            continue
        tasks = _fitting(drawn, tokenizer, budget)
        fit = {t.id for t in tasks}
        # A prompt the model cannot take is a failure in the set's overall figures, as
        # BFCL scores it; left out, the overall would flatter a short context.
        too_long = [t for t in drawn if t.id not in fit]
        metrics[f"{name}/too_long"] = float(len(too_long))
        set_metrics, set_lines = scorer(params, tasks, too_long, rollouts)
        metrics.update(set_metrics)
        lines += [{"set": name, **line} for line in set_lines]
    report = Path(params.report_path)
    per_task = report.with_name(report.stem + ".tasks.jsonl")
    read = splits_read(params, {name for name, drawn, _ in sets if drawn}, bool(probe))
    atomic_write_text(per_task, "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    atomic_write_text(report, json.dumps(metrics, indent=1, sort_keys=True) + "\n")
    if params.tracking_dir is not None:
        _log_to_mlflow(params, metrics, lines, [report, per_task], read, system)
    return metrics


def _log_to_mlflow(
    params: EvaluateParams,
    metrics: dict[str, float],
    lines: list[dict[str, Any]],
    reports: list[Path],
    read: list[str],
    system: Any,
) -> None:
    """The figures, the report files, the per-task table, the splits read and the
    system samples into the run that trained the model (else a run of their own), and
    onto its registered version."""
    from slca.eval.table import evaluation_table
    from slca.tracking import log_evaluation, read_run_file, split_input

    run = read_run_file(params.model_dir)
    log_evaluation(
        params.tracking_dir,
        experiment=params.experiment,
        metrics={f"eval/{k}": v for k, v in metrics.items()},
        reports=reports,
        run_id=run.get("run_id") if run.get("experiment") == params.experiment else None,
        run_name=params.run_name or f"eval-{Path(params.model_dir).name}",
        datasets=[split_input(params.in_dir, split) for split in read],
        system=system.finish(),
        tables={f"eval/{reports[0].stem}.table.json": evaluation_table(lines)},
        model_dir=params.model_dir,  # its registered version: figures, aliases
    )


def splits_read(params: EvaluateParams, sets: set[str], probed: bool) -> list[str]:
    """The split files an evaluation read: the in-domain set's, the value probe's
    (``val``) and, for BFCL's single-turn categories or τ², the ``eval`` split (BFCL's
    multi-turn tasks come with the checker, not the data)."""
    read = [params.in_domain.split] if "in_domain" in sets else []
    if probed:
        read.append(VALUE_PROBE_SPLIT)
    single = [c for c in params.bfcl.categories if c != MULTI_TURN]
    if ("bfcl" in sets and single and params.bfcl.max_per_category) or "tau2" in sets:
        read.append("eval")
    return list(dict.fromkeys(read))


def _in_domain_tasks(params: EvaluateParams) -> list[TaskRecord]:
    split = params.in_domain
    return draw_split(
        params.in_dir,
        split.split,
        split.sources,
        split.max_tasks,
        params.seed,
        where="evaluate",
        sources_label="sources ",
    )


def _eval_tasks(params: EvaluateParams, source: str, groups: list[str], n: int) -> list[TaskRecord]:
    """``n`` tasks of each group (BFCL category / τ² domain) of ``source``'s eval records."""
    if n == 0 or not groups:
        return []
    pool = [t for t in io.read_dataset(params.in_dir, ["eval"]) if t.source == source]
    drawn = []
    for group in groups:
        members = [t for t in pool if t.domain == group]
        if not members:
            raise ValueError(f"evaluate.{source}: no eval task of {group!r} in {params.in_dir}")
        drawn += draw(members, n, params.seed)
    return drawn


def _bfcl_tasks(params: EvaluateParams) -> list[TaskRecord]:
    single = [c for c in params.bfcl.categories if c != MULTI_TURN]
    drawn = _eval_tasks(params, "bfcl", single, params.bfcl.max_per_category)
    if MULTI_TURN in params.bfcl.categories and params.bfcl.max_per_category:
        from slca.eval import bfcl_multi_turn

        drawn += draw(bfcl_multi_turn.tasks(), params.bfcl.max_per_category, params.seed)
    return drawn


def _tau2_tasks(params: EvaluateParams) -> list[TaskRecord]:
    return _eval_tasks(params, "tau2", params.tau2.domains, params.tau2.max_per_domain)


def transcript(rollout: Any) -> list[dict[str, Any]]:
    """Every policy turn of a rollout as the model wrote it: the raw text, the calls
    parsed from it (with the response each executed call got), and the error of each
    malformed call block. What a per-task line keeps so a failure can be inspected."""
    responses: dict[int, list[Any]] = {}
    for call in rollout.calls:
        responses.setdefault(call.turn, []).append(call.response)
    turns = []
    for number, turn in enumerate(rollout.turns):
        answered = iter(responses.get(number, ()))
        calls = []
        for call in turn.parsed.calls:
            entry = {"name": call.name, "arguments": call.arguments}
            response = next(answered, _NOT_RUN)
            if response is not _NOT_RUN:
                entry["response"] = response
            calls.append(entry)
        errors = [b.error.message for b in turn.parsed.blocks if b.error is not None]
        turns.append({"text": turn.text, "calls": calls, "call_errors": errors})
    return turns


_NOT_RUN = object()
"""A parsed call the loop never ran (its turn was cut off): no response to show."""


def _score_in_domain(
    summary_scorer: SummaryScorer,
    params: EvaluateParams,
    tasks: list[TaskRecord],
    too_long: list[TaskRecord],
    rollouts: Any,
):
    from slca.eval.in_domain import in_domain_metrics
    from slca.rewards.score import score_batch
    from slca.simulator import Simulator

    done, breakdowns = [], []
    if tasks:
        with Simulator(seed=params.seed) as simulator:
            done = rollouts("in_domain", tasks, simulator, params.max_turns)
        breakdowns = score_batch(done, tasks, params.rewards, summary_scorer=summary_scorer)
    lines = [
        {
            "task_id": t.id,
            "process": b.tool,
            "summary": b.summary_raw,
            "calls": b.n_calls,
            "redundant": b.redundant_calls,
            "finish": r.finish_reason,
            "answer": r.summary[:500],
            "turns": transcript(r),
        }
        for t, r, b in zip(tasks, done, breakdowns)
    ] + [_too_long_line(t) for t in too_long]
    # the scorer's own counters (a judge's calls and failures), as training logs them
    counters = {f"in_domain/{k}": v for k, v in summary_scorer.metrics().items()}
    return {**in_domain_metrics(breakdowns, too_long=len(too_long)), **counters}, lines


def _score_bfcl(
    params: EvaluateParams, tasks: list[TaskRecord], too_long: list[TaskRecord], rollouts: Any
):
    """BFCL's single-turn categories judge the first turn's calls: one policy turn.
    multi_turn_base runs every user turn on BFCL's live APIs, then its checker replays."""
    from slca.eval import bfcl, bfcl_multi_turn
    from slca.simulator import Simulator

    single = [t for t in tasks if t.domain != MULTI_TURN]
    multi = [t for t in tasks if t.domain == MULTI_TURN]
    verdicts, single_done, multi_done = [], [], []
    if single:
        with Simulator(seed=params.seed) as simulator:
            single_done = rollouts("bfcl", single, simulator, 1)
        verdicts += [bfcl.check_rollout(t, r) for t, r in zip(single, single_done)]
    if multi:
        later = {t.id: bfcl_multi_turn.follow_ups(t.id) for t in multi}
        with bfcl_multi_turn.MultiTurnExecutor() as executor:
            done = rollouts(
                "bfcl multi_turn", multi, executor, params.bfcl.max_steps_per_turn, later
            )
        verdicts += [bfcl_multi_turn.check_rollout(t, r) for t, r in zip(multi, done)]
        multi_done = done
    lines = [
        {"task_id": t.id, "valid": v.valid, "error_type": v.error_type, "turns": transcript(r)}
        for t, v, r in zip(single + multi, verdicts, single_done + multi_done)
    ]
    failed = [bfcl.Verdict(t.domain, False, TOO_LONG, task_id=t.id) for t in too_long]
    lines += [{**_too_long_line(t), "valid": False, "error_type": TOO_LONG} for t in too_long]
    return bfcl.accuracy(verdicts + failed), lines


def _score_tau2(
    params: EvaluateParams, tasks: list[TaskRecord], too_long: list[TaskRecord], rollouts: Any
):
    """Calls run on τ²'s real environments; τ²'s evaluators give the reward."""
    from slca.eval import tau2

    done = []
    if tasks:
        with tau2.Tau2Executor() as executor:
            done = rollouts("tau2", tasks, executor, params.tau2.max_turns)
    results = [
        tau2.score(
            t,
            [(c.name, c.arguments) for c in r.calls],
            r.summary,
            finished=r.finish_reason == "stop",
        )
        for t, r in zip(tasks, done)
    ]
    lines = [
        {
            "task_id": t.id,
            "reward": res.reward,
            "calls": len(r.calls),
            "finish": r.finish_reason,
            "turns": transcript(r),
        }
        for t, r, res in zip(tasks, done, results)
    ]
    failed = tau2.Tau2Result(reward=0.0, db_match=None, actions_match=None, communicate=None)
    lines += [{**_too_long_line(t), "reward": 0.0} for t in too_long]
    scored = [(t.id, res) for t, res in zip(tasks, results)] + [(t.id, failed) for t in too_long]
    return tau2.accuracy(scored), lines


TOO_LONG = "too_long"
"""The finish reason and error type of a task whose prompt does not fit the context."""


def _too_long_line(task: TaskRecord) -> dict[str, Any]:
    """The per-task line of a task that never ran: its prompt does not fit."""
    return {"task_id": task.id, "finish": TOO_LONG, "turns": []}


def _fitting(tasks: list[TaskRecord], tokenizer: Any, budget: int) -> list[TaskRecord]:
    try:
        return fitting_tasks(tasks, tokenizer, budget)
    except ValueError:  # none fits: the set is reported as all too long
        return []


def main(argv: list[str] | None = None) -> int:
    import logging

    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    shown = logging.getLogger("slca.tracking.registry")  # a version found, an alias moved
    shown.setLevel(logging.INFO)
    shown.addHandler(logging.StreamHandler())
    parser = stage_parser(
        "python -m slca.eval.stages",
        "evaluate.model_dir=models/sft",
        description=__doc__.splitlines()[0],
    )
    args = parser.parse_args(argv)
    try:
        params = load_stage_section(args, "evaluate", EvaluateParams)
        metrics = evaluate(params, progress=tqdm_progress())
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"evaluate failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(metrics, indent=1, sort_keys=True))
    return 0


def tqdm_progress(logger: Any = None) -> Progress:
    """Progress per evaluation set (:class:`slca.progress.Progress`): a bar on a
    terminal, elsewhere a line every 30 s through ``logger`` (tasks done/total, rate,
    time left)."""
    from slca.progress import Progress as Shown

    def start(name: str, total: int) -> Callable[[int], Any]:
        shown = Shown(f"evaluate {name}", total, unit="task", logger=logger)

        def advance(n: int) -> None:
            shown.add(n)
            if shown.done >= total:
                shown.close()

        return advance

    return start


if __name__ == "__main__":
    raise SystemExit(main())
