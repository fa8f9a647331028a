"""LLM simulator backend on CPU: calls/s with SmolLM2-135M-Instruct.

    .venv/bin/python benchmarks/simulator_llm.py                 # the table in docs/benchmarks.md
    .venv/bin/python benchmarks/simulator_llm.py --calls 4       # a quick look
    .venv/bin/python benchmarks/simulator_llm.py --model DIR     # a converted checkpoint

Each call is one ``LLMBackend.propose`` (prompt rendering, tokenisation, constrained
generation, decoding) for a typical small tool: a weather lookup whose response has
four fields (a string, a bounded integer, an enum, a bounded number). Every call
has different arguments and seed, so nothing is cached; the simulator core's cache
and validation are not part of this figure. Also reported: model load times (GGUF
vs the converted safetensors checkpoint), tokens per call, the share of time
spent computing grammar masks, and how many proposals validate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import jsonschema
import torch

from slca.modeling import convert_gguf_to_hf, load_causal_lm
from slca.simulator import llm as llm_module
from slca.simulator.backends import CallRequest
from slca.simulator.llm import LLMBackend, LLMBackendError

CITIES = ["Paris", "Lyon", "Berlin", "Oslo", "Lima", "Kyoto", "Accra", "Quito", "Perth", "Cork"]

TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "units": {"type": "string", "enum": ["metric", "imperial"]},
        },
        "required": ["city"],
    },
    "response": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "temperature": {"type": "integer", "minimum": -60, "maximum": 60},
            "condition": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow", "fog"]},
            "humidity": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["city", "temperature", "condition", "humidity"],
    },
}


class MaskTimer:
    """Wraps the grammar-mask logits processor to time it."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._original = llm_module._GrammarMask.__call__

    def __enter__(self):
        timer = self

        def timed(mask, input_ids, scores):
            start = time.perf_counter()
            try:
                return timer._original(mask, input_ids, scores)
            finally:
                timer.seconds += time.perf_counter() - start
                timer.calls += 1

        llm_module._GrammarMask.__call__ = timed
        return self

    def __exit__(self, *exc):
        llm_module._GrammarMask.__call__ = self._original


def run(backend: LLMBackend, calls: int, threads: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    schema = TOOL["response"]
    warm = CallRequest(TOOL, {"city": "Warmup"}, seed=10_000)
    backend.propose(warm)  # first call pays one-off costs (allocator, kernels)
    tokens0 = backend.stats.generated_tokens
    latencies, valid, failed = [], 0, 0
    with MaskTimer() as masks:
        start = time.perf_counter()
        for i in range(calls):
            request = CallRequest(
                TOOL, {"city": CITIES[i % len(CITIES)], "units": "metric"}, seed=i
            )
            t0 = time.perf_counter()
            try:
                text = backend.propose(request)
            except LLMBackendError:
                failed += 1
            else:
                try:
                    jsonschema.validate(json.loads(text), schema)
                    valid += 1
                except (ValueError, jsonschema.ValidationError):
                    pass
            latencies.append(time.perf_counter() - t0)
        wall = time.perf_counter() - start
    tokens = backend.stats.generated_tokens - tokens0
    return {
        "threads": threads,
        "calls": calls,
        "calls_per_s": calls / wall,
        "median_s": statistics.median(latencies),
        "tokens_per_call": tokens / calls,
        "tokens_per_s": tokens / wall,
        "mask_share": masks.seconds / wall,
        "valid": valid,
        "failed": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: convert SmolLM2's GGUF)")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            start = time.perf_counter()
            model_dir = convert_gguf_to_hf("smollm2", f"{tmp}/smollm2")
            print(f"GGUF load + dequantise + save: {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        model, tokenizer = load_causal_lm(model_dir)
        print(f"load converted checkpoint: {time.perf_counter() - start:.2f} s")
        backend = LLMBackend(model=model, tokenizer=tokenizer, max_new_tokens=args.max_new_tokens)
        print(f"torch {torch.__version__}, {args.calls} calls per row, schema: {TOOL['name']}")
        print()
        print("| threads | calls/s | median s/call | tokens/call | tokens/s | mask share | valid |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for threads in args.threads:
            r = run(backend, args.calls, threads)
            print(
                f"| {r['threads']} | {r['calls_per_s']:.2f} | {r['median_s']:.2f} "
                f"| {r['tokens_per_call']:.1f} | {r['tokens_per_s']:.1f} "
                f"| {100 * r['mask_share']:.1f}% | {r['valid']}/{r['calls']} |"
            )


if __name__ == "__main__":
    main()
