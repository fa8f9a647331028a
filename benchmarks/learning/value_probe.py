"""Teacher-forced value probe: how often a policy's next-token argmax is the gold token
inside each argument value it must write, given the gold trajectory so far.

    .venv/bin/python benchmarks/learning/value_probe.py MODEL_DIR [--split test]

Each synth task of the split is rendered exactly as SFT renders it (reference summary),
the model runs once over it, and every assistant token that overlaps a string argument
value of a gold call is scored. Rows: ``tool.argument`` with the value's first token,
its later tokens, and the whole value (every token right). A policy that reads a value
from the request gets its first token right; one that completes a word it has started
gets the later ones. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from typing import Any

import torch

from slca.data import io
from slca.data.record import TaskRecord
from slca.modeling import load_causal_lm
from slca.simulator import Simulator
from slca.training.sft import SFTExample, build_example, reference_summary


def value_tokens(
    task: TaskRecord, example: SFTExample, tokenizer: Any
) -> list[tuple[str, list[int]]]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--data", default="data/tasks")
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    model, tokenizer = load_causal_lm(args.model_dir, dtype="float32")
    model.eval()
    simulator = Simulator()
    tasks = [t for t in io.read_records(f"{args.data}/{args.split}.parquet") if t.source == "synth"]
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # row -> [tokens, right]
    for task in tasks:
        example = build_example(task, tokenizer, simulator, reference_summary)
        with torch.no_grad():
            predicted = model(torch.tensor([example.token_ids])).logits[0].argmax(-1).tolist()
        for row, tokens in value_tokens(task, example, tokenizer):
            right = [predicted[k - 1] == example.token_ids[k] for k in tokens]
            for part, marks in (
                ("first", right[:1]),
                ("later", right[1:]),
                ("whole", [all(right)]),
            ):
                hits[f"{row} | {part}"][0] += len(marks)
                hits[f"{row} | {part}"][1] += sum(marks)
    print("| argument | tokens | n | argmax right |\n|---|---|---|---|")
    for row in sorted(hits):
        n, right = hits[row]
        if n:
            print(f"| {row} | {n} | {right / n:.2f} |")


if __name__ == "__main__":
    main()
