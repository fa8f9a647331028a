"""Teacher-forced value probe: how often a policy's next-token argmax is the gold token
inside each argument value it must write, given the gold trajectory so far.

Each synth task is rendered exactly as SFT renders it (reference summary), the model
runs once over it, and every assistant token that overlaps a string argument value of
a gold call is scored. A policy that reads a value from the request gets its first
token right; one that only completes a word it has started gets the later ones.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from slca.config.evaluate import EvaluateParams
from slca.data import io
from slca.data.record import TaskRecord
from slca.data.splits import draw


def value_tokens(task: TaskRecord, example: Any, tokenizer: Any) -> list[tuple[str, list[int]]]:
    """Each string argument of each gold call as ``tool.argument`` with the positions in
    ``example`` of the assistant tokens that write its value: the first occurrence the
    policy writes that no earlier call claimed (two parallel calls with the same value
    each get their own); a token counts if it overlaps the value's characters."""
    pieces = [tokenizer.decode([i]) for i in example.token_ids]
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    text = "".join(pieces)
    found, claimed = [], set()
    for call in (c for step in task.gold for c in step):
        for arg, value in call.arguments.items():
            if not isinstance(value, str):
                continue
            literal = json.dumps(value)[1:-1]
            for match in re.finditer(re.escape(f'"{arg}": "{literal}'), text):
                begin = match.end() - len(literal)
                tokens = [
                    k
                    for k in range(1, len(pieces))
                    if example.loss_mask[k] and starts[k] < match.end() and starts[k + 1] > begin
                ]
                # no tokens: the value inside a tool answer, not written by the policy
                if tokens and match.start() not in claimed:
                    claimed.add(match.start())
                    found.append((f"{call.name}.{arg}", tokens))
                    break
    return found


def value_probe(model: Any, tokenizer: Any, tasks: Iterable[TaskRecord]) -> dict[str, Any]:
    """The probe over ``tasks`` (synth tasks; others are skipped).

    Returns ``value_accuracy`` (share of string values with every token right),
    ``first_token_accuracy``, ``later_token_accuracy``, ``values`` (how many were
    scored) and ``rows``: ``{"tool.argument": {"first": [n, right], "later": [...],
    "whole": [...]}}``.
    """
    import torch

    from slca.rollout.gold import build_example, reference_summary
    from slca.simulator import Simulator

    simulator = Simulator()
    rows: dict[str, dict[str, list[int]]] = defaultdict(
        lambda: {"first": [0, 0], "later": [0, 0], "whole": [0, 0]}
    )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device  # evaluation may hold the model on a GPU
    for task in tasks:
        if task.source != "synth":
            continue
        example = build_example(task, tokenizer, simulator, reference_summary)
        with torch.no_grad():
            logits = model(torch.tensor([example.token_ids], device=device)).logits[0]
        predicted = logits.argmax(-1).tolist()
        for row, positions in value_tokens(task, example, tokenizer):
            right = [predicted[k - 1] == example.token_ids[k] for k in positions]
            for part, marks in (
                ("first", right[:1]),
                ("later", right[1:]),
                ("whole", [all(right)]),
            ):
                rows[row][part][0] += len(marks)
                rows[row][part][1] += sum(marks)
    model.train(was_training)

    def share(part: str) -> float:
        n = sum(r[part][0] for r in rows.values())
        return sum(r[part][1] for r in rows.values()) / n if n else 0.0

    return {
        "value_accuracy": share("whole"),
        "first_token_accuracy": share("first"),
        "later_token_accuracy": share("later"),
        "values": sum(r["whole"][0] for r in rows.values()),
        "rows": {k: rows[k] for k in sorted(rows)},
    }


def probe_table(probe: dict[str, Any]) -> str:
    """The probe's rows as a Markdown table."""
    lines = ["| argument | tokens | n | argmax right |", "|---|---|---|---|"]
    for row, parts in probe["rows"].items():
        for part in ("first", "later", "whole"):
            n, right = parts[part]
            if n:
                lines.append(f"| {row} | {part} | {n} | {right / n:.2f} |")
    return "\n".join(lines)


VALUE_PROBE_SPLIT = "val"
"""The split the value probe reads: held out from training, and not the test split the
rollouts are scored on, so the probe's figure is not tuned on the reported tasks."""

VALUE_PROBE_FIGURES = (
    "value_accuracy",
    "first_token_accuracy",
    "later_token_accuracy",
    "values",
)
"""What :func:`slca.eval.value_probe.value_probe` returns that evaluation reports."""


def value_probe_tasks(params: EvaluateParams) -> list[TaskRecord]:
    """The synth tasks of the val split the probe scores: a seeded subset of
    ``value_probe_tasks`` (every one when null, none when 0 or the split has none)."""
    if params.value_probe_tasks == 0:
        return []
    pool = io.read_dataset(params.in_dir, [VALUE_PROBE_SPLIT])
    # the probe scores synth tasks only (their gold values are in the request)
    return draw([t for t in pool if t.source == "synth"], params.value_probe_tasks, params.seed)


def value_probe_metrics(
    params: EvaluateParams, model: Any, tokenizer: Any, device: Any
) -> dict[str, float]:
    """The value probe of ``params.model_dir`` as ``value_probe/<figure>``: how often the
    policy, teacher-forced along the gold trajectory, writes each argument value token
    for token (a cheap read of what SFT taught, no sampling). Empty when there is no
    task or no string value to score. ``model`` None (the vLLM engine holds the weights
    in its own process): a copy is loaded for the probe and dropped after it."""
    from slca.modeling import eval_autocast, load_causal_lm

    tasks = value_probe_tasks(params)
    if not tasks:
        return {}
    if model is None:  # fp32, as the HF engine's copy: eval_autocast sets the precision
        model = load_causal_lm(params.model_dir, dtype="float32", device=device)[0]
    with eval_autocast(device):  # the measurement precision, as the rollouts'
        probe = value_probe(model, tokenizer, tasks)
    if not probe["values"]:  # shares of nothing would read as 0 % right
        return {}
    return {f"value_probe/{k}": float(probe[k]) for k in VALUE_PROBE_FIGURES}
