"""Importing users' data: time and peak memory of ``slca data import``, side by side.

    .venv/bin/python benchmarks/data_import.py --rows 100000

Generates ``--rows`` OpenAI/TRL rows (a mix of single, parallel, two-step, multi-turn and
no-call conversations over six tools, arguments half as JSON strings, half as objects,
one row in a hundred malformed), writes them as JSONL and as parquet, then imports each
in a fresh process (``import_to_dir``, what the command runs) and reports wall time,
rows/s, peak RSS of that process and the counts. The last line compares the two
containers (parquet time / JSONL time). Issue 33's target: 100,000 JSONL rows in under
60 s with a peak RSS under 1.5 GB on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CITIES = ["Oslo", "Lima", "Quito", "Rome", "Madrid", "Paris", "Austin", "Kyoto", "Cairo"]
CURRENCIES = ["EUR", "USD", "JPY", "GBP", "CHF"]


def _tool(name, properties, required):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name.replace('_', ' ')} API.",
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS = [
    _tool("get_weather", {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}}, ["city"]),
    _tool(
        "convert",
        {"amount": {"type": "number"}, "src": {"type": "string"}, "dst": {"type": "string"}},
        ["amount", "src", "dst"],
    ),
    _tool("get_time", {"city": {"type": "string"}}, ["city"]),
    _tool("search_flights", {"src": {"type": "string"}, "dst": {"type": "string"}}, ["src", "dst"]),
    _tool("book", {"flight_id": {"type": "string"}}, ["flight_id"]),
    _tool("news", {"topic": {"type": "string"}, "limit": {"type": "integer"}}, ["topic"]),
]


def _call(rng, i, name, args):
    arguments = json.dumps(args) if rng.random() < 0.5 else args
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _row(rng: random.Random, n: int) -> dict:
    city, other = rng.sample(CITIES, 2)
    kind = rng.random()
    user = {"role": "user", "content": f"Request {n}: what about {city}?"}
    messages = [{"role": "system", "content": "You are a helpful assistant."}, user]
    if kind < 0.35:
        messages += [
            {"role": "assistant", "tool_calls": [_call(rng, 1, "get_weather", {"city": city})]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"temp_c": n % 30})},
            {"role": "assistant", "content": f"It is {n % 30} °C in {city}."},
        ]
    elif kind < 0.6:
        calls = [
            _call(rng, 1, "get_time", {"city": city}),
            _call(rng, 2, "get_time", {"city": other}),
        ]
        messages += [
            {"role": "assistant", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": '{"time": "10:00"}'},
            {"role": "tool", "tool_call_id": "c2", "content": '{"time": "11:00"}'},
            {"role": "assistant", "content": "10:00 and 11:00."},
        ]
    elif kind < 0.8:
        src, dst = rng.sample(CURRENCIES, 2)
        messages += [
            {
                "role": "assistant",
                "tool_calls": [_call(rng, 1, "convert", {"amount": n, "src": src, "dst": dst})],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"result": 1.5}'},
            {
                "role": "assistant",
                "tool_calls": [_call(rng, 2, "news", {"topic": dst, "limit": 3})],
            },
            {"role": "tool", "tool_call_id": "c2", "content": '{"items": []}'},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You're welcome."},
        ]
    else:
        messages += [{"role": "assistant", "content": "Nothing to look up."}]
    row = {"messages": messages, "tools": rng.sample(TOOLS, len(TOOLS))}
    if n % 100 == 99:
        row["messages"] = "[{broken"
    return row


def write_inputs(rows: int, directory: Path, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    jsonl, parquet = directory / "rows.jsonl", directory / "rows.parquet"
    writer = None
    with open(jsonl, "w") as f:
        for start in range(0, rows, 5000):
            batch = [_row(rng, n) for n in range(start, min(rows, start + 5000))]
            f.writelines(json.dumps(r) + "\n" for r in batch)
            flat = [
                {
                    "messages": json.dumps(r["messages"])
                    if not isinstance(r["messages"], str)
                    else r["messages"],
                    "tools": json.dumps(r["tools"]),
                }
                for r in batch
            ]
            table = pa.Table.from_pylist(flat)
            writer = writer or pq.ParquetWriter(parquet, table.schema)
            writer.write_table(table)
    writer.close()
    return jsonl, parquet


def _child(path: str, out: str) -> None:
    from slca.data.importers import import_to_dir

    start = time.perf_counter()
    result = import_to_dir(path, "auto", out)
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak_mib, **result.report()}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        inputs = write_inputs(args.rows, tmp)
        sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.0f} MiB" for p in inputs)
        print(f"generated {args.rows} rows in {time.perf_counter() - start:.1f} s ({sizes})")
        results = {}
        for path in inputs:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    str(path),
                    str(tmp / f"out-{path.suffix[1:]}"),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[path.suffix] = r
            print(
                f"{path.name:>13}: {r['seconds']:6.1f} s, {r['rows'] / r['seconds']:7.0f} rows/s, "
                f"peak RSS {r['peak_rss_mib']:5.0f} MiB; rows {r['rows']}, "
                f"imported {r['imported']}, rejected {r['rejected']} "
                f"{r['rejected_by_reason']}, tasks {r['tasks']}"
            )
        ratio = results[".parquet"]["seconds"] / results[".jsonl"]["seconds"]
        print(f"parquet / JSONL time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
