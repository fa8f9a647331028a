"""The plan of a GPU call: what each part is estimated to take and by when it must end,
how many RL runs fit the GPU's memory (issue 35). Pure functions of numbers, so that
``tools/gpu_credit.py --dry-run`` prints and checks a plan on a CPU, before any device
time is spent.

Every estimate is in :data:`MEASURED` (with the run and part it was measured in) or in
:data:`ASSUMED` (what no run measured yet; the next run's reports measure it: each part's
``wall_s`` and each worker's ``started_s``). One device call may run for 10 minutes,
start-up included, so a plan must end within ``budget_s`` (540 s by default) of the
orchestrator's start.

Time is one budget. The orchestrator fixes one absolute deadline (epoch seconds) when it
starts and writes it with every part's limit into ``plan.json``; every worker reads it
there, so no process counts its time from its own start. Limits are derived backwards
from the deadline: the greedy test evaluation must end :data:`MARGIN_S` before it, the
sampled evaluation before the greedy one needs its time, training before the sampled one
needs its time. So a run that trains too slowly stops training, not evaluating.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Figure:
    """One estimate and where it comes from."""

    value: float
    source: str


CREDIT_RUN = "H200 credit run 2026-12-04 (docs/results/gpu-credit/h200-2026-12-04-credit.json)"
GPU_CHECK = "H200 GPU check 2026-12-04 (docs/results/gpu-check/h200-2026-12-04.json)"

MEASURED: dict[str, Figure] = {
    "prepare_s": Figure(2.4, f"{CREDIT_RUN}, part prepare (800 synth tasks)"),
    "base_model_s": Figure(44.6, f"{CREDIT_RUN}, part base_model (29-31 s in the other calls)"),
    "sft_s": Figure(35.6, f"{CREDIT_RUN}, part sft (24-26 s in the other calls)"),
    "rl_step_alone_s": Figure(
        14.3, f"{GPU_CHECK}, train/grpo/hf step_s, one run alone (slca: 8.4)"
    ),
    "rl_step_ten_s": Figure(
        33.0,
        f"{CREDIT_RUN}: ten runs side by side reached steps 12-14 in 456 s, model load "
        "and validation included (docs/benchmarks.md, 'Ten RL runs sharing one GPU')",
    ),
    "train_overhead_s": Figure(
        6.5, f"{GPU_CHECK}, train/grpo/hf wall_s 155.8 minus its steps' 149.3 (load, save)"
    ),
    "pass_s": Figure(
        9.4,
        f"{CREDIT_RUN}, eval/sft: 74 test tasks greedy in one generate call a turn "
        "(batch 128, up to 3 turns of 96 tokens), model load included; 6.0 s in the "
        "second call, 5.5-8.7 s for 20 tasks at batch 32 in the GPU check",
    ),
    "rl_peak_gib": Figure(
        22.5, f"{GPU_CHECK}, train/*/hf peak_gpu_reserved_gib (micro-batch 8, one run alone)"
    ),
    "eval_peak_gib": Figure(7.0, f"{CREDIT_RUN}, eval/sft peak_gpu_reserved_gib (batch 128)"),
    # the GPU check's own parts (tools/gpu_check.py main)
    "check_train_hf_s": Figure(155.8, f"{GPU_CHECK}, train/grpo/hf wall_s (10 steps)"),
    "check_deepspeed_s": Figure(69.9, f"{GPU_CHECK}, train/slca/deepspeed-zero2 wall_s"),
    "check_eval_s": Figure(8.7, f"{GPU_CHECK}, eval/slca-hf wall_s (20 tasks)"),
}
"""Figures measured on the last GPU runs (an H200; no H100 run has been measured)."""

ASSUMED: dict[str, Figure] = {
    "worker_start_s": Figure(
        20.0,
        "not measured apart: a fresh process's imports (torch, transformers, slca) and "
        "CUDA context; each worker now reports its started_s",
    ),
    "pass_scaling": Figure(
        1.0,
        "a generate pass of up to 128 sequences takes pass_s (passes were nearly flat "
        "from 20 to 74 sequences), of more pass_s x sequences/128 (none was timed; "
        "generation is latency-bound, so this errs long)",
    ),
    "eval_memory_scaling": Figure(
        1.0,
        "an evaluation's peak grows in proportion to its sequences above the 74 it was "
        "measured with (KV cache and the returned logits grow with them, the weights do "
        "not: errs high)",
    ),
    "sharing": Figure(
        1.0,
        "with n processes on the GPU each one runs slower by a factor linear in n, "
        "1 alone and rl_step_ten_s/rl_step_alone_s at ten (only those two points "
        "are measured); the same factor for generation in evaluations",
    ),
}
"""Estimates no run has measured yet, and the rule each stands for."""

MARGIN_S = 10.0
"""Before the deadline: the orchestrator kills what is left, then summarises."""
MEMORY_MARGIN = 0.10
"""Each process's share of GPU memory is its measured peak plus this fraction."""
BATCH_MEASURED = 128
"""The generate batch :data:`MEASURED` ``pass_s`` was taken at."""
SEQUENCES_MEASURED = 74
"""The sequences in that batch (74 test tasks): ``eval_peak_gib`` is theirs."""


def figure(key: str) -> float:
    return (MEASURED.get(key) or ASSUMED[key]).value


# --- time ------------------------------------------------------------------------------


def slowdown(processes: int) -> float:
    """How much slower one process runs with ``processes`` sharing the GPU (ASSUMED
    ``sharing``: linear between one alone and ten side by side)."""
    ten = figure("rl_step_ten_s") / figure("rl_step_alone_s")
    return 1.0 + (max(processes, 1) - 1) * (ten - 1.0) / 9.0


def rl_step_s(processes: int) -> float:
    """One RL step (8 tasks x G 4) with ``processes`` sharing the GPU."""
    return figure("rl_step_alone_s") * slowdown(processes)


def pass_s(sequences: int) -> float:
    """One generate pass (every turn) over ``sequences`` sequences, one process alone."""
    return figure("pass_s") * max(1.0, sequences / BATCH_MEASURED)


def generation_s(rollouts: int, batch: int, processes: int) -> float:
    """``rollouts`` rollouts in passes of ``batch`` with ``processes`` on the GPU."""
    full, rest = divmod(rollouts, batch)
    alone = full * pass_s(batch) + (pass_s(rest) if rest else 0.0)
    return alone * slowdown(processes)


def chunk_tasks(batch: int, samples: int) -> int:
    """Tasks per generate pass of the sampled evaluation (each task's ``samples``
    rollouts in one pass)."""
    return max(1, batch // samples)


def sampled_s(tasks: int, samples: int, batch: int, processes: int) -> float:
    """The sampled evaluation: ``samples`` rollouts of each of ``tasks`` tasks, in
    chunks of :func:`chunk_tasks` tasks."""
    per = chunk_tasks(batch, samples)
    full, rest = divmod(tasks, per)
    alone = full * pass_s(per * samples) + (pass_s(rest * samples) if rest else 0.0)
    return alone * slowdown(processes)


# --- memory ----------------------------------------------------------------------------


def share_gib(peak_gib: float, margin: float = MEMORY_MARGIN) -> float:
    """A process's share of GPU memory: its measured peak plus the margin."""
    return peak_gib * (1.0 + margin)


def eval_peak_gib(sequences: int) -> float:
    """An evaluation's peak with ``sequences`` in one generate call (ASSUMED
    ``eval_memory_scaling``)."""
    return figure("eval_peak_gib") * max(1.0, sequences / SEQUENCES_MEASURED)


def rl_runs_that_fit(free_gib: float, rl_gib: float, other_gib: float) -> int:
    """How many RL processes of ``rl_gib`` each fit ``free_gib`` beside processes that
    need ``other_gib`` together (never negative)."""
    if rl_gib <= 0:
        raise ValueError(f"rl_runs_that_fit: rl_gib must be > 0; got {rl_gib}")
    return max(0, math.floor((free_gib - other_gib) / rl_gib + 1e-9))


def vllm_shares_fit(shares: list[float], margin: float = MEMORY_MARGIN) -> str | None:
    """None when vLLM engines that each take ``share`` of the GPU's memory fit together
    (their sum at most ``1 - margin``), else why not, in one line."""
    total = sum(shares)
    if total <= 1.0 - margin + 1e-9:
        return None
    return (
        f"{len(shares)} vLLM engines take {total:.2f} of the GPU's memory "
        f"(memory_share {' + '.join(f'{s:g}' for s in shares)}); at most {1 - margin:.2f} fits"
    )


# --- the credit experiment's plan -------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One part of the plan: seconds from the orchestrator's start."""

    name: str
    who: str
    estimate_s: float
    start_s: float
    end_by_s: float
    """Its limit: the part must end by then (it does not start when its estimate says
    it would not)."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.estimate_s


@dataclass
class Plan:
    budget_s: float
    free_gib: float | None
    arms: list[str]
    seeds: int
    steps: int
    rl_runs: int
    rl_fit: int
    processes: int
    rl_gib: float
    eval_gib: float
    sampled: dict
    parts: list[Part] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refusal: str | None = None

    @property
    def end_s(self) -> float:
        return max((p.end_s for p in self.parts), default=0.0) + MARGIN_S

    def limits(self) -> dict[str, float]:
        """Each part's limit in seconds from the start, by name."""
        return {p.name: round(p.end_by_s, 1) for p in self.parts}

    def to_json(self) -> dict:
        out = asdict(self)
        out["parts"] = [{**asdict(p), "end_s": round(p.end_s, 1)} for p in self.parts]
        out["end_s"] = round(self.end_s, 1)
        out["limits_s"] = self.limits()
        return out


def plan_credit(
    *,
    budget_s: float,
    free_gib: float | None,
    arms: list[str],
    seeds: int,
    steps: int,
    sampled: dict,
    greedy_tasks: int,
    greedy_batch: int,
    synth_tasks: int,
    parallel: int | None = None,
) -> Plan:
    """The credit experiment's plan: the SFT chain in the orchestrator, then one
    evaluation worker for the SFT policy beside ``seeds`` x ``arms`` RL workers, all at
    once (a second wave never fits one call). ``sampled``: ``k``, ``batch``,
    ``tasks`` (val + test together). ``parallel``: RL runs asked for (None: as many as
    fit). ``free_gib``: the GPU memory free (None: not planned). The plan is refused
    (``refusal``, one line) when memory or time does not fit.
    """
    # an evaluation's largest generate call: a sampled chunk or the greedy test tasks
    evaluation = eval_peak_gib(max(sampled["batch"], min(greedy_tasks, greedy_batch)))
    rl_gib = share_gib(max(figure("rl_peak_gib"), evaluation))
    eval_gib = share_gib(evaluation)
    if free_gib is None:  # no GPU figures apply (the CPU smoke's tiny model)
        fit = parallel if parallel is not None else seeds * len(arms)
        memory = "memory not planned (no GPU)"
    else:
        fit = rl_runs_that_fit(free_gib, rl_gib, eval_gib)
        memory = (
            f"{free_gib:.1f} GiB free: an RL run takes {rl_gib:.1f} GiB, the SFT evaluation "
            f"{eval_gib:.1f} GiB (measured peaks + {MEMORY_MARGIN:.0%}); {fit} RL runs fit"
        )
    plan = Plan(budget_s, free_gib, list(arms), 0, steps, 0, fit, 0, rl_gib, eval_gib, sampled)
    if parallel is not None and parallel > fit:
        plan.refusal = f"--parallel {parallel} does not fit: {memory}"
        return plan
    room = fit if parallel is None else parallel
    plan.seeds = min(seeds, room // len(arms))
    if plan.seeds < 1:
        plan.refusal = (
            f"the GPU is too small for one run per arm beside the SFT evaluation: {memory}"
        )
        return plan
    plan.rl_runs = plan.seeds * len(arms)
    plan.processes = plan.rl_runs + 1
    plan.notes.append(memory)
    if plan.seeds < seeds:
        plan.notes.append(
            f"{plan.seeds} seed{'' if plan.seeds == 1 else 's'} per arm, not {seeds}: "
            f"{seeds * len(arms)} RL runs and the "
            f"SFT evaluation need {seeds * len(arms) * rl_gib + eval_gib:.1f} GiB"
        )
    n = plan.processes
    plan.notes.append(
        f"{n} processes side by side: each runs {slowdown(n):.2f}x slower than alone "
        f"(an RL step {rl_step_s(n):.1f} s)"
    )
    _schedule(plan, greedy_tasks, greedy_batch, synth_tasks)
    if plan.end_s > budget_s + 1e-9:
        plan.refusal = (
            f"the plan does not fit: it ends at {plan.end_s:.0f} s of the {budget_s:.0f} s "
            f"budget ({steps} RL steps of {rl_step_s(n):.1f} s; try fewer --steps)"
        )
    return plan


def _schedule(plan: Plan, greedy_tasks: int, greedy_batch: int, synth_tasks: int) -> None:
    """The parts with their estimates, planned starts and limits (backwards from the
    deadline: each part must end in time for the ones after it)."""
    n, s = plan.processes, plan.sampled
    prepare = figure("prepare_s") * synth_tasks / 800  # measured at 800 tasks
    greedy = generation_s(greedy_tasks, greedy_batch, n)
    sampled = sampled_s(s["tasks"], s["k"], s["batch"], n)
    start = figure("worker_start_s")
    train = figure("train_overhead_s") * slowdown(n) + plan.steps * rl_step_s(n)
    greedy_by = plan.budget_s - MARGIN_S
    sampled_by = greedy_by - greedy
    train_by = sampled_by - sampled
    launch_by = train_by - train - start  # the planned steps still fit
    sft_by = launch_by
    base_by = sft_by - figure("sft_s")
    prepare_by = base_by - figure("base_model_s")
    t = 0.0
    parts = []
    for name, estimate, by in (
        ("prepare", prepare, prepare_by),
        ("base_model", figure("base_model_s"), base_by),
        ("sft", figure("sft_s"), sft_by),
    ):
        parts.append(Part(name, "orchestrator", estimate, t, by))
        t += estimate
    parts.append(Part("worker start", f"{n} workers", start, t, launch_by + start))
    t += start
    rl = f"{plan.rl_runs} RL workers"
    parts.append(Part(f"train ({plan.steps} steps)", rl, train, t, train_by))
    label = f"sampled val+test ({s['tasks']} tasks x {s['k']})"
    parts.append(Part(f"SFT: {label}", "SFT worker", sampled, t, sampled_by))
    parts.append(Part("SFT: greedy test", "SFT worker", greedy, t + sampled, greedy_by))
    t += train
    parts.append(Part(label, rl, sampled, t, sampled_by))
    parts.append(Part("greedy test", rl, greedy, t + sampled, greedy_by))
    plan.parts = parts


def format_plan(plan: Plan) -> str:
    """The plan as a table: each part, who runs it, its estimate, planned start and end,
    and its limit (seconds from the start)."""
    lines = [
        f"gpu_credit plan: budget {plan.budget_s:.0f} s; {plan.seeds} "
        f"seed{'' if plan.seeds == 1 else 's'} x {'/'.join(plan.arms)} "
        f"({plan.rl_runs} RL runs) + 1 SFT evaluation worker",
        *(f"  {note}" for note in plan.notes),
        f"  {'part':<42} {'who':<15} {'estimate':>8} {'planned':>13} {'limit':>7}",
    ]
    for p in plan.parts:
        span = f"{p.start_s:5.0f}-{p.end_s:5.0f}"
        lines.append(
            f"  {p.name:<42} {p.who:<15} {p.estimate_s:7.1f}s {span:>13} {p.end_by_s:6.0f}s"
        )
    verdict = "fits" if plan.refusal is None else "does NOT fit"
    lines.append(
        f"  end {plan.end_s:.0f} s (last part + {MARGIN_S:.0f} s margin) of {plan.budget_s:.0f}"
        f" s: {verdict}"
    )
    return "\n".join(lines)


def sources() -> str:
    """Where every estimate comes from, one line each."""
    rows = [f"  {k} = {f.value:g}: {f.source}" for k, f in MEASURED.items()]
    rows += [f"  {k} (assumed): {f.source}" for k, f in ASSUMED.items()]
    return "estimates:\n" + "\n".join(rows)
