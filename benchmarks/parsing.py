"""Parsing cost of adversarial model output (issue 16): 1 MB turns through the grammar.

    .venv/bin/python benchmarks/parsing.py            # the table in docs/benchmarks.md
    .venv/bin/python benchmarks/parsing.py --quick    # 256 KB, fewer repeats

Each shape is a unit repeated to ``--size`` characters: the two that made the old
lexer quadratic (an unclosed JSON string of escaped quotes after ``<tool_call>``, and a
closed block of them), their neighbours, and plain prose as the baseline. For each,
``parse_turn`` (lexing, block parsing) and ``label_turn`` (the segment labels the
rollout loop computes) are timed, best of ``--repeats``.

Side by side, at sizes the old code can still finish, the old lexer (the one-regex
``finditer`` over JSON strings it used, kept here as the reference definition) and the
new one find the same closing tag; the ratio of their times is printed.
"""

from __future__ import annotations

import argparse
import re
import time

from slca.grammar import CALL_CLOSE, _find_call_close, parse_turn
from slca.segments import label_turn

SHAPES = {
    "prose": ("", "The weather in Paris is 21 degrees and sunny. "),
    "unclosed escaped quotes": ('<tool_call>"', '\\"'),
    "closed block, escaped quotes": ('<tool_call>"', '\\"'),
    "quote + closing tag": ("<tool_call>", '"</tool_call>'),
    "many tiny blocks": ("", '<tool_call>{"name":"a","arguments":{}}</tool_call>'),
    "open brackets": ("<tool_call>", "[{"),
    "strings of backslashes": ("<tool_call>", '"\\\\\\'),
    "blocks, closing tag in a string": ("", '<tool_call>"</tool_call>"'),
}

_OLD_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_OLD_CLOSE = re.compile(_OLD_STRING + "|" + re.escape(CALL_CLOSE))


def old_find_call_close(text: str, start: int) -> int:
    """The lexer before issue 16: correct, but quadratic on unclosed strings."""
    skipped = 0
    for m in _OLD_CLOSE.finditer(text, start):
        if m.group() == CALL_CLOSE:
            return m.start()
        skipped += m.group().count(CALL_CLOSE)
        if skipped >= 8:
            break
    return text.find(CALL_CLOSE, start)


def turn(shape: str, size: int) -> str:
    prefix, unit = SHAPES[shape]
    body = prefix + unit * ((size - len(prefix)) // len(unit))
    return body + CALL_CLOSE if shape.startswith("closed") else body


def best(repeats: int, work, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        started = clock()
        work()
        times.append(clock() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="characters per turn")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    size, repeats = (1 << 18, 3) if args.quick else (args.size, args.repeats)
    print(f"turns of {size} characters, best of {repeats}")
    print("wall: best elapsed time; cpu: best CPU time of this thread (a busy machine's")
    print("other processes do not count in it)")
    head = ("parse_turn wall", "parse_turn cpu", "label_turn wall", "blocks")
    print(f"{'shape':30} " + " ".join(f"{h:>15}" for h in head))
    for shape in SHAPES:
        text = turn(shape, size)
        parsed = parse_turn(text)
        parse_s = best(repeats, lambda t=text: parse_turn(t))
        parse_cpu = best(repeats, lambda t=text: parse_turn(t), time.thread_time)
        label_s = best(repeats, lambda t=text: label_turn(t, final=True))
        figures = (f"{parse_s:.4f}", f"{parse_cpu:.4f}", f"{label_s:.4f}", len(parsed.blocks))
        print(f"{shape:30} " + " ".join(f"{f:>15}" for f in figures))
    print()
    print("old vs new lexer, unclosed escaped quotes (the same answer, side by side)")
    print(f"{'chars':>8} {'old s':>9} {'new s':>9} {'old/new':>9}")
    start = len("<tool_call>")
    for chars in (5_000, 20_000, 40_000) if not args.quick else (5_000, 20_000):
        text = turn("unclosed escaped quotes", chars)
        assert old_find_call_close(text, start) == _find_call_close(text, start)
        old = best(1, lambda t=text: old_find_call_close(t, start))
        new = best(repeats, lambda t=text: _find_call_close(t, start))
        print(f"{chars:8d} {old:9.4f} {new:9.5f} {old / new:9.0f}")


if __name__ == "__main__":
    main()
