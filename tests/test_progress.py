"""slca.progress: a tqdm bar on a terminal, bounded log lines elsewhere."""

import io
import logging

from slca.eval.stages import tqdm_progress
from slca.progress import Progress, duration
from slca.training.stages import progress_bar


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_off_a_terminal_a_line_every_n_seconds_with_count_rate_and_eta(caplog):
    clock, log = Clock(), logging.getLogger("test.progress")
    shown = Progress("sft", 100, logger=log, every=30, clock=clock, bar=False, hidden=False)
    with caplog.at_level(logging.INFO, logger="test.progress"):
        for step in range(1, 101):
            clock.now = float(step)  # one step a second
            shown.update(step, {"loss": 0.5})
        shown.close()
    lines = [r.getMessage() for r in caplog.records]
    # the first update, then at most one line per 30 s, and the end
    assert [line.split(" steps")[0] for line in lines] == [
        "sft: 1/100",
        "sft: 31/100",
        "sft: 61/100",
        "sft: 91/100",
        "sft: 100/100",
    ]
    assert lines[2] == "sft: 61/100 steps (61%), 1 steps/s, ETA 39s, 1m00s elapsed, loss=0.500"
    assert "ETA" not in lines[-1] and "(100%)" in lines[-1]


def test_a_slow_loop_reports_seconds_per_unit_and_without_a_logger_prints():
    clock, stream = Clock(), io.StringIO()
    shown = Progress("evaluate tau2", 10, unit="task", every=30, clock=clock, stream=stream)
    shown.bar_kind = False
    shown.hidden = False
    clock.now = 0.0
    shown.update(0)
    clock.now = 40.0
    shown.add(2)
    assert stream.getvalue().splitlines()[-1] == (
        "evaluate tau2: 2/10 tasks (20%), 20 s/task, ETA 2m40s, 40s elapsed"
    )


def test_on_a_terminal_a_tqdm_bar_and_no_log_line(caplog):
    terminal = Terminal()
    with caplog.at_level(logging.INFO):
        shown = Progress("train grpo", 4, stream=terminal, hidden=False)
        for step in range(1, 5):
            shown.update(step, {"tool": 0.25})
        shown.close()
    assert "train grpo" in terminal.getvalue() and "4/4" in terminal.getvalue()
    assert not caplog.records


def test_hidden_on_ranks_other_than_0(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    stream = io.StringIO()
    shown = Progress("train", 2, stream=stream, bar=False)
    shown.update(1)
    shown.close()
    assert stream.getvalue() == ""


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SLCA_PROGRESS_EVERY_S", "5")
    assert Progress("x").every == 5.0
    monkeypatch.setenv("SLCA_PROGRESS_EVERY_S", "nonsense")
    assert Progress("x").every == 30.0
    monkeypatch.setenv("SLCA_PROGRESS", "log")
    assert Progress("x", stream=Terminal()).bar_kind is False


def test_the_hooks_of_sft_rl_and_evaluation_use_it(monkeypatch, capsys):
    monkeypatch.setenv("SLCA_PROGRESS", "log")
    monkeypatch.delenv("RANK", raising=False)
    sft = progress_bar("sft")
    sft.start(3)  # SFT knows its step count once its examples are built
    for step in range(1, 4):
        sft(step, 0.125)
    rl = progress_bar("train slca", total=2)
    rl(1, {"reward/tool": 0.5, "reward/sum": 0.25, "actor/kl": 0.0})
    advance = tqdm_progress()("in_domain", 2)
    advance(2)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("sft: 1/3 steps (33%)") and err[0].endswith("loss=0.125")
    assert err[1].startswith("sft: 3/3 steps (100%)")  # the end, whatever the interval
    assert err[2].startswith("train slca: 1/2 steps") and err[2].endswith("tool=0.500, sum=0.250")
    assert err[3].startswith("evaluate in_domain: 2/2 tasks (100%)")


def test_durations_read_as_hours_minutes_seconds():
    assert [duration(s) for s in (0, 12.4, 458, 3720)] == ["0s", "12s", "7m38s", "1h02m"]
