"""Cost of candidate default policies, side by side in one process (issue 15).

For each candidate (tokenizer vocabulary, width, layers; or SmolLM2-135M) it times
the two things the demo repeats: an SFT step (forward + backward + AdamW on 8 synth
trajectories, loss on the assistant tokens, as ``slca.training.sft`` runs it) and one
generation turn (32 synth prompts, 96 new tokens, sampled, as the rollout loop calls
the engine). Candidates are timed round-robin, ``--repeats`` times each, so a busy
machine slows them alike; the table gives medians and the ratio to the first one.

    .venv/bin/python benchmarks/model_size.py            # docs/benchmarks.md's table
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = {
    "tiny v2048 h128 l2": (2048, 128, 2),
    "tiny v8192 h128 l2": (8192, 128, 2),
    "tiny v8192 h192 l3": (8192, 192, 3),
    "tiny v8192 h256 l4": (8192, 256, 4),
}


def build(name: str, texts: list[str], smollm2_dir: Path):
    from slca.modeling import convert_gguf_to_hf, load_causal_lm
    from slca.training.tiny import tiny_model, train_tokenizer

    if name == "smollm2-135m":
        if not (smollm2_dir / "config.json").exists():
            convert_gguf_to_hf("smollm2", smollm2_dir)
        return load_causal_lm(smollm2_dir, dtype="float32")
    vocab, hidden, layers = CANDIDATES[name]
    tokenizer = train_tokenizer(texts, vocab)
    model = tiny_model(
        tokenizer, hidden_size=hidden, num_hidden_layers=layers, intermediate_size=3 * hidden
    )
    return model, tokenizer


def main() -> int:
    from slca.data import io
    from slca.generation.engines import HFEngine, SamplingParams
    from slca.rollout.chat import ChatRenderer
    from slca.rollout.gold import build_example
    from slca.simulator import Simulator
    from slca.training.batch import first_position, token_logprobs
    from slca.training.tiny import tokenizer_texts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-dir", type=Path, default=REPO / "data/tasks")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M-Instruct")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks/learning/work/smollm2")
    args = parser.parse_args()
    torch.manual_seed(0)
    tasks = io.load_train_set(args.in_dir)
    synth = [t for t in tasks if t.source == "synth"][:32]
    texts = tokenizer_texts(tasks)
    names = list(CANDIDATES) + (["smollm2-135m"] if args.smollm2 else [])
    built = {name: build(name, texts, args.work) for name in names}
    simulator = Simulator()
    times: dict[str, dict[str, list[float]]] = {n: {"sft": [], "gen": []} for n in names}
    lengths = {}
    for _ in range(args.repeats):
        for name, (model, tokenizer) in built.items():
            examples = [build_example(t, tokenizer, simulator) for t in synth[:8]]
            lengths[name] = statistics.mean(len(e.token_ids) for e in examples)
            width = max(len(e.token_ids) for e in examples)
            ids = torch.full((8, width), tokenizer.pad_token_id)
            mask = torch.zeros((8, width), dtype=torch.bool)
            attention = torch.zeros((8, width), dtype=torch.bool)
            for row, e in enumerate(examples):
                ids[row, : len(e.token_ids)] = torch.tensor(e.token_ids)
                mask[row, : len(e.token_ids)] = torch.tensor(e.loss_mask)
                attention[row, : len(e.token_ids)] = True
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
            model.train()
            start = time.perf_counter()
            logp, _ = token_logprobs(model, ids, attention, start=first_position(mask))
            (-(logp * mask).sum() / mask.sum()).backward()
            optimizer.step()
            optimizer.zero_grad()
            times[name]["sft"].append(time.perf_counter() - start)
            prompts = [
                ChatRenderer(tokenizer, [x.model_dump() for x in t.tools]).prompt_ids(
                    [{"role": m.role, "content": m.content} for m in t.messages]
                )
                for t in synth
            ]
            engine = HFEngine(model, tokenizer, batch_size=32)
            start = time.perf_counter()
            engine.generate(prompts, SamplingParams(max_new_tokens=96, temperature=1.0))
            times[name]["gen"].append(time.perf_counter() - start)
    first = names[0]
    base = {k: statistics.median(times[first][k]) for k in ("sft", "gen")}
    print("| policy | parameters | tokens/trajectory | SFT step (s) | × | gen. turn (s) | × |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        model, _ = built[name]
        params = sum(p.numel() for p in model.parameters())
        sft = statistics.median(times[name]["sft"])
        gen = statistics.median(times[name]["gen"])
        print(
            f"| {name} | {params / 1e6:.2f} M | {lengths[name]:.0f} | {sft:.2f} | "
            f"{sft / base['sft']:.1f} | {gen:.2f} | {gen / base['gen']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
