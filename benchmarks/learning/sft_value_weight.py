"""Pilot: params.yaml's SFT with argument-value tokens weighted W in the loss.

    .venv/bin/python benchmarks/learning/sft_value_weight.py BASE_DIR OUT_DIR SEED W

Same data, order, poor summaries, optimizer and steps as ``stages sft`` from BASE_DIR;
the one change is a per-token weight: tokens overlapping a string argument value inside
a gold ``<tool_call>`` turn get W, other assistant tokens 1; loss = sum(w * nll) / number
of assistant tokens. Not part of the pipeline (docs/results.md, "Two training-data
changes": measured and rejected).
"""

import json
import random
import sys

import torch

from slca.config.loader import load_section
from slca.config.steps import SFTParams
from slca.data import io
from slca.modeling import load_causal_lm
from slca.simulator import Simulator
from slca.training import sft as S
from slca.training.batch import first_position, token_logprobs
from slca.training.engines import build_engine
from slca.training.stages import _save

base, out, seed, W = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

SP = load_section("params.yaml", "sft", SFTParams, {"sft.seed": seed})
P = SP.model_dump()
model, tok = load_causal_lm(base, dtype="float32")
sim = Simulator()
tasks = [t for t in io.load_train_set("data/tasks") if t.source in P["sources"]]
examples, weights = [], []
for task in tasks:
    summary = S.summary_for(task, P["poor_summary_frac"], seed)
    ex = S.build_example(task, tok, sim, summary)
    w = [1.0 if m else 0.0 for m in ex.loss_mask]
    # locate each gold call turn's tokens and weight its value tokens
    spans = []
    for step in task.gold:
        text = "\n".join(S.render_tool_call(S.ToolCall(c.name, c.arguments)) for c in step)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        vals = []
        for c in step:
            for v in c.arguments.values():
                if isinstance(v, str):
                    needle = json.dumps(v)
                    start = 0
                    while (k := text.find(needle, start)) >= 0:
                        vals.append((k + 1, k + len(needle) - 1))
                        start = k + 1
        flags = [any(a < e and b > s for s, e in vals) for a, b in enc["offset_mapping"]]
        spans.append((ids, flags))
    pos = 0
    for ids, flags in spans:  # find the turn's ids in order inside the example
        L = len(ids)
        while pos + L <= len(ex.token_ids) and not (
            ex.loss_mask[pos] and ex.token_ids[pos : pos + L] == ids
        ):
            pos += 1
        assert pos + L <= len(ex.token_ids), task.id
        for j, f in enumerate(flags):
            if f:
                w[pos + j] = W
        pos += L
    examples.append(ex)
    weights.append(w)
    if len(examples) == P["max_tasks"]:
        break
nval = sum(sum(1 for x in w if x == W) for w in weights)
nm = sum(sum(e.loss_mask) for e in examples)
print(f"examples {len(examples)} value tokens {nval} of {nm} assistant tokens", flush=True)
engine = build_engine(model, SP.engine)
model.train()
order = list(range(len(examples)))
lengths = [len(e.token_ids) for e in examples]
step = 0
for epoch in range(P["epochs"]):
    rng = random.Random(f"{seed}:{epoch}")
    rng.shuffle(order)
    for batch in S.micro_batches(order, lengths, P["micro_batch_size"], rng, False):
        chunk = [examples[i] for i in batch]
        width = max(len(e.token_ids) for e in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(chunk), width), dtype=torch.bool)
        mask = torch.zeros((len(chunk), width), dtype=torch.bool)
        wt = torch.zeros((len(chunk), width))
        for r, i in enumerate(batch):
            n = len(examples[i].token_ids)
            ids[r, :n] = torch.tensor(examples[i].token_ids)
            att[r, :n] = True
            mask[r, :n] = torch.tensor(examples[i].loss_mask)
            wt[r, :n] = torch.tensor(weights[i])
        engine.zero_grad()
        with engine.micro_batch():
            logp, _ = token_logprobs(model, ids, att, start=first_position(mask))
            loss = -(logp * wt).sum() / mask.sum().clamp(min=1)
            engine.backward(loss)
        engine.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
_save(model, tok, out)
print("saved", out)
