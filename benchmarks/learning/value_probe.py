"""Teacher-forced value probe: how often a policy's next-token argmax is the gold token
inside each argument value it must write, given the gold trajectory so far.

    .venv/bin/python benchmarks/learning/value_probe.py MODEL_DIR [--split test]

The probe is the library's (:mod:`slca.eval.value_probe`, which the pretrain stage also
runs for the base's card): each synth task of the split is rendered exactly as SFT
renders it (reference summary), the model runs once over it, and every assistant token
that overlaps a string argument value of a gold call is scored. Rows: ``tool.argument``
with the value's first token, its later tokens, and the whole value (every token
right). A policy that reads a value from the request gets its first token right; one
that completes a word it has started gets the later ones. Prints a Markdown table.
"""

from __future__ import annotations

import argparse

from slca.data import io
from slca.eval.value_probe import probe_table, value_probe, value_tokens
from slca.modeling import load_causal_lm

__all__ = ["main", "value_tokens"]  # value_tokens: sft_value_weight.py imports it from here


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--data", default="data/tasks")
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    model, tokenizer = load_causal_lm(args.model_dir, dtype="float32")
    tasks = io.read_records(f"{args.data}/{args.split}.parquet")
    print(probe_table(value_probe(model, tokenizer, tasks)))


if __name__ == "__main__":
    main()
