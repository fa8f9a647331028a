"""Stop signals and the calls that must run whole (slca.processes.stop_signals_wait)."""

import signal
import threading

import pytest

from slca.processes import stop_signals_wait


class Stopped(Exception):
    pass


@pytest.fixture
def handled():
    """SIGTERM raises ``Stopped`` (as Prefect's handler raises TerminationSignal); the
    signals handled are listed. The test's own handler is put back afterwards."""
    seen: list[int] = []

    def stop(signum, frame):
        seen.append(signum)
        raise Stopped(signum)

    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop)
    yield seen
    signal.signal(signal.SIGTERM, previous)


def test_a_stop_inside_the_block_is_handled_by_the_handler_in_place_when_it_ends(handled):
    finished = []
    with pytest.raises(Stopped):
        with stop_signals_wait():
            signal.raise_signal(signal.SIGTERM)
            finished.append("the rest of the block")
    assert finished == ["the rest of the block"] and handled == [signal.SIGTERM]
    with pytest.raises(Stopped):  # the handler is back in place
        signal.raise_signal(signal.SIGTERM)


def test_a_second_stop_is_handled_at_once(handled):
    finished = []
    with pytest.raises(Stopped):
        with stop_signals_wait():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            finished.append("never")
    assert finished == [] and handled == [signal.SIGTERM]


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handler; a process started in the background (CI's) begins
    with SIGINT ignored, which Python then leaves as it is."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_waits_too_and_blocks_nest(ctrl_c):
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with stop_signals_wait():
            with stop_signals_wait():
                signal.raise_signal(signal.SIGINT)
                finished.append("inner")
            finished.append("outer")
    assert finished == ["inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with stop_signals_wait():
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_the_block_runs_as_it_is(ctrl_c):
    seen = []

    def body():
        with stop_signals_wait():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
