"""Progress of a long loop (SFT steps, RL steps, an evaluation set's tasks): a tqdm bar
on a terminal; elsewhere (a log file, a Prefect worker, CI) a log line at a bounded
rate — every :data:`DEFAULT_EVERY_S` seconds at most, and at the end — with done/total,
the rate and the time left, through a logger so it reaches the Prefect UI.

``SLCA_PROGRESS_EVERY_S`` sets the interval of the log lines (seconds, > 0);
``SLCA_PROGRESS=log`` or ``bar`` forces a kind whatever the terminal.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

DEFAULT_EVERY_S = 30.0
"""Seconds between two log lines at most (``SLCA_PROGRESS_EVERY_S`` overrides): a line
at least once a minute, and no more than two."""


def every_s() -> float:
    """The interval of the log lines: ``SLCA_PROGRESS_EVERY_S``, else the default."""
    raw = os.environ.get("SLCA_PROGRESS_EVERY_S")
    try:
        value = float(raw) if raw else DEFAULT_EVERY_S
    except ValueError:
        value = DEFAULT_EVERY_S
    return value if value > 0 else DEFAULT_EVERY_S


def duration(seconds: float) -> str:
    """``1h02m``, ``7m38s``, ``12s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Reports ``done`` of ``total`` units of a loop: call :meth:`update` with the count
    done so far (and figures to show), :meth:`close` at the end.

    On a terminal (``stream.isatty()``) a tqdm bar; otherwise a line through ``logger``
    (default ``slca.progress``; straight to ``stream`` when that logger has no handler,
    so a stage run as a plain command still shows it) at most every ``every`` seconds,
    the first at the first update, the last at :meth:`close`. ``hidden``: nothing (a
    rank other than 0 of a data-parallel launch).
    """

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        unit: str = "step",
        logger: Any = None,
        every: float | None = None,
        stream: TextIO | None = None,
        hidden: bool | None = None,
        bar: bool | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.every = every if every is not None else every_s()
        self.hidden = os.environ.get("RANK", "0") != "0" if hidden is None else hidden
        forced = os.environ.get("SLCA_PROGRESS", "")
        if bar is None:
            bar = forced == "bar" or (forced != "log" and _isatty(self.stream))
        self.bar_kind = bar
        self.logger = logger
        self.clock = clock
        self.done = 0
        self.figures: dict[str, str] = {}
        self._bar: Any = None
        self._start: float | None = None
        self._first = 0
        self._last_line: float | None = None
        self._lines_at = -1

    def update(self, done: int, figures: Mapping[str, Any] | None = None) -> None:
        """``done`` units finished so far; ``figures``: shown beside the count (numbers
        to three decimals)."""
        if self.hidden:
            return
        now = self.clock()
        if self._start is None:  # the rate counts from here: what the first update says
            self._start, self._first = now, done  # was done before is not this process's
        self.done = done
        if figures:
            self.figures = {
                k: (f"{v:.3f}" if isinstance(v, float) else str(v)) for k, v in figures.items()
            }
        if self.bar_kind:
            self._draw()
            return
        if self._last_line is None or now - self._last_line >= self.every:
            self._line(now)

    def add(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.update(self.done + n)

    def close(self) -> None:
        """The last line (when the count moved since the previous one), or the bar closed."""
        if self.hidden:
            return
        if self._bar is not None:
            self._bar.close()
        elif not self.bar_kind and self._start is not None and self._lines_at != self.done:
            self._line(self.clock())

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _draw(self) -> None:
        if self._bar is None:  # drawn at the first update: a refused run prints one line
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, file=self.stream)
        if self.figures:
            self._bar.set_postfix(self.figures, refresh=False)
        self._bar.update(self.done - self._bar.n)

    def line(self, now: float | None = None) -> str:
        """The log line: ``sft: 40/200 steps (20%), 0.35 steps/s, ETA 7m38s, loss=0.532``."""
        now = self.clock() if now is None else now
        elapsed = now - (self._start if self._start is not None else now)
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        text = f"{self.desc}: {count} {self.unit}s"
        if self.total:
            text += f" ({100 * self.done / self.total:.0f}%)"
        rate = (self.done - self._first) / elapsed if elapsed > 0 else None
        if rate:
            text += (
                f", {rate:.3g} {self.unit}s/s" if rate >= 1 else f", {1 / rate:.3g} s/{self.unit}"
            )
            if self.total and self.done < self.total:
                text += f", ETA {duration((self.total - self.done) / rate)}"
        text += f", {duration(elapsed)} elapsed"
        if self.figures:
            text += ", " + ", ".join(f"{k}={v}" for k, v in self.figures.items())
        return text

    def _line(self, now: float) -> None:
        self._last_line = now
        self._lines_at = self.done
        text = self.line(now)
        logger = self.logger or logging.getLogger("slca.progress")
        if self.logger is None and not (logger.hasHandlers() and logger.isEnabledFor(20)):
            print(text, file=self.stream, flush=True)
        else:
            logger.info(text)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
