"""Pilot: params.yaml's SFT with argument-value tokens weighted W in the loss.

    .venv/bin/python benchmarks/learning/sft_value_weight.py BASE_DIR OUT_DIR SEED W

Same data, order, poor summaries, optimizer and steps as ``stages sft`` from BASE_DIR;
the one change is a per-token weight: the tokens that write a string argument value of
a gold call (:func:`slca.eval.value_probe.value_tokens`) get W, other assistant tokens 1; loss =
sum(w * nll) / number of assistant tokens. Not part of the pipeline (docs/results.md,
"Two training-data changes": measured and rejected).
"""

import random
import sys

from slca.config.loader import load_section
from slca.config.steps import SFTParams
from slca.data import io
from slca.eval.value_probe import value_tokens
from slca.modeling import load_causal_lm
from slca.rollout import gold
from slca.simulator import Simulator
from slca.training import sft as S
from slca.training.batch import first_position, token_logprobs
from slca.training.engines import build_engine
from slca.training.tiny import save_checkpoint


def main() -> None:
    base, out, seed, weight = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    params = load_section("params.yaml", "sft", SFTParams, {"sft.seed": seed})
    model, tokenizer = load_causal_lm(base, dtype="float32")
    simulator = Simulator()
    tasks = [t for t in io.load_train_set("data/tasks") if t.source in params.sources]
    examples, value_positions = [], []
    for task in tasks[: params.max_tasks]:
        summary = gold.summary_for(task, params.poor_summary_frac, seed)
        example = gold.build_example(task, tokenizer, simulator, summary)
        examples.append(example)
        value_positions.append([k for _, ks in value_tokens(task, example, tokenizer) for k in ks])
    n_values = sum(map(len, value_positions))
    n_assistant = sum(sum(e.loss_mask) for e in examples)
    print(f"examples {len(examples)} value tokens {n_values} of {n_assistant} assistant tokens")
    engine = build_engine(model, params.engine)
    model.train()
    order = list(range(len(examples)))
    lengths = [len(e.token_ids) for e in examples]
    for epoch in range(params.epochs):
        rng = random.Random(f"{seed}:{epoch}")
        rng.shuffle(order)
        for batch in S.micro_batches(order, lengths, params.micro_batch_size, rng, False):
            ids, attention, mask = S.pad_batch([examples[i] for i in batch], tokenizer.pad_token_id)
            weights = mask.float()
            for row, i in enumerate(batch):
                weights[row, value_positions[i]] = weight
            engine.zero_grad()
            with engine.micro_batch():
                logp, _ = token_logprobs(model, ids, attention, start=first_position(mask))
                loss = -(logp * weights).sum() / mask.sum().clamp(min=1)
                engine.backward(loss)
            engine.step()
            if engine.steps % 50 == 0:
                print(f"step {engine.steps} loss {loss.item():.3f}", flush=True)
    save_checkpoint(model, tokenizer, out)
    print("saved", out)


if __name__ == "__main__":
    main()
