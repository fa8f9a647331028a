"""Step caching (Prefect's cache, StepCache): a step is skipped only while its params,
code, input contents, extras and outputs are as its recorded run left them; a failed
step records nothing and leaves the previous outputs and records as they were."""

import os
from pathlib import Path

import pytest
from prefect import flow
from pydantic import BaseModel

from slca_pipeline.tasks import steps
from slca_pipeline.tasks.steps import Step, run_step, step_task

pytestmark = pytest.mark.slow

CALLS: list[int] = []
PACKAGE = {"version": "1.0", "fail": False}


class Params(BaseModel):
    root: str
    n: int = 1


def double_step(params: Params) -> Step:
    root = Path(params.root)
    return Step(
        "double",
        params,
        inputs=(str(root / "in.txt"),),
        outputs=(str(root / "out"),),
        extra=(("pkg", PACKAGE["version"]),),
    )


@step_task(double_step, name="double")
def double(params: Params) -> dict:
    CALLS.append(params.n)
    if PACKAGE["fail"]:
        raise RuntimeError("disk full")
    out = Path(params.root) / "out"
    out.mkdir(exist_ok=True)
    (out / "value.txt").write_text((Path(params.root) / "in.txt").read_text() * 2)
    return {"calls": len(CALLS)}


@flow
def once(params: Params, state_dir: str) -> dict:
    return run_step(double, params, state_dir)


@pytest.fixture
def root(tmp_path, prefect_harness, monkeypatch):
    CALLS.clear()
    monkeypatch.setitem(PACKAGE, "version", "1.0")
    monkeypatch.setitem(PACKAGE, "fail", False)
    (tmp_path / "in.txt").write_text("a")
    return tmp_path


def run(root, **params):
    return once(Params(root=str(root), **params), str(root / "state"))


def test_a_completed_step_is_skipped_and_returns_its_recorded_result(root):
    assert run(root) == {"calls": 1}
    assert run(root) == {"calls": 1}
    assert len(CALLS) == 1


def test_changed_params_inputs_code_extras_or_outputs_run_the_step_again(root, monkeypatch):
    value = root / "out/value.txt"
    run(root)
    run(root, n=2)
    assert len(CALLS) == 2
    (root / "in.txt").write_text("bb")
    run(root, n=2)
    assert len(CALLS) == 3 and value.read_text() == "bbbb"
    monkeypatch.setitem(PACKAGE, "version", "2.0")
    run(root, n=2)
    assert len(CALLS) == 4
    with monkeypatch.context() as m:
        m.setattr(steps, "code_fingerprint", lambda: "other code")
        run(root, n=2)
        assert len(CALLS) == 5
    # back to the code before: its record stands, but the other code's run rewrote the
    # outputs since, so the step runs again
    run(root, n=2)
    assert len(CALLS) == 6
    os.utime(value, ns=(0, 0))  # rewritten by something else
    run(root, n=2)
    assert len(CALLS) == 7
    run(root, n=2)  # the refreshed record holds: it does not run every time from now on
    assert len(CALLS) == 7
    value.unlink()
    (root / "out").rmdir()
    run(root, n=2)
    assert len(CALLS) == 8 and value.read_text() == "bbbb"
    run(root, n=2)
    assert len(CALLS) == 8


def test_same_input_content_is_the_same_key_rewritten_or_not(root):
    run(root)
    (root / "in.txt").write_text("a")  # a new mtime, the same bytes (a `dvc checkout`)
    run(root)
    assert len(CALLS) == 1


def test_a_failed_step_records_nothing_and_keeps_earlier_outputs_and_records(root, monkeypatch):
    value = root / "out/value.txt"
    run(root)
    kept = value.stat().st_mtime_ns
    state = root / "state"
    records = {p.name: p.read_bytes() for p in state.iterdir()}
    failing = double_step(Params(root=str(root), n=3)).cache_key()
    monkeypatch.setitem(PACKAGE, "fail", True)
    with pytest.raises(RuntimeError, match="disk full"):
        run(root, n=3)
    assert value.stat().st_mtime_ns == kept and value.read_text() == "aa"
    assert not (state / failing).exists()  # (Prefect keeps the exception under its own id)
    assert {n: (state / n).read_bytes() for n in records} == records
    monkeypatch.setitem(PACKAGE, "fail", False)
    assert run(root) == {"calls": 1}  # the earlier record still skips its step
    assert len(CALLS) == 2  # 1 run + 1 failed attempt
    run(root, n=3)  # the failed step runs again, and is recorded this time
    assert CALLS == [1, 3, 3] and (state / failing).exists()


def test_fingerprints_of_contents_and_of_file_state(tmp_path):
    out = tmp_path / "out"
    assert steps.content_fingerprint(out) == steps.state_fingerprint(out) == "absent"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "a.txt").write_text("a")
    content, state = steps.content_fingerprint(out), steps.state_fingerprint(out)
    os.utime(out / "sub" / "a.txt", ns=(1, 1))  # same bytes, other mtime
    assert steps.content_fingerprint(out) == content
    assert steps.state_fingerprint(out) != state
    state = steps.state_fingerprint(out)
    (out / "sub" / "a.txt").rename(out / "b.txt")  # same bytes and mtime, other name
    assert steps.content_fingerprint(out) != content
    assert steps.state_fingerprint(out) != state
    assert steps.content_fingerprint(out / "b.txt") != steps.content_fingerprint(out)
