"""Step records: a step is skipped only while params, inputs, extras and outputs match."""

import os

from pydantic import BaseModel

from slca_pipeline.tasks.steps import Step, run_step


class Params(BaseModel):
    n: int = 1


def make_step(tmp_path, **over):
    settings = {
        "name": "double",
        "params": Params(),
        "inputs": (str(tmp_path / "in.txt"),),
        "outputs": (str(tmp_path / "out"),),
        "state_dir": str(tmp_path / "state"),
    }
    return Step(**(settings | over))


def runner(tmp_path):
    calls = []

    def work():
        calls.append(1)
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        (out / "value.txt").write_text((tmp_path / "in.txt").read_text() * 2)
        return {"calls": len(calls)}

    return calls, work


def test_a_completed_step_is_skipped_and_returns_its_recorded_result(tmp_path):
    (tmp_path / "in.txt").write_text("a")
    calls, work = runner(tmp_path)
    assert run_step(make_step(tmp_path), work, print) == {"calls": 1}
    assert run_step(make_step(tmp_path), work, print) == {"calls": 1}
    assert len(calls) == 1


def test_changed_params_inputs_extras_or_outputs_run_the_step_again(tmp_path):
    (tmp_path / "in.txt").write_text("a")
    calls, work = runner(tmp_path)
    run_step(make_step(tmp_path), work, print)
    run_step(make_step(tmp_path, params=Params(n=2)), work, print)
    assert len(calls) == 2
    (tmp_path / "in.txt").write_text("bb")
    run_step(make_step(tmp_path, params=Params(n=2)), work, print)
    assert len(calls) == 3
    run_step(make_step(tmp_path, params=Params(n=2), extra=(("pkg", "2.0"),)), work, print)
    assert len(calls) == 4
    step = make_step(tmp_path, params=Params(n=2), extra=(("pkg", "2.0"),))
    value = tmp_path / "out/value.txt"
    os.utime(value, ns=(0, 0))  # rewritten by something else
    run_step(step, work, print)
    assert len(calls) == 5
    value.unlink()
    (tmp_path / "out").rmdir()
    run_step(step, work, print)
    assert len(calls) == 6 and value.read_text() == "bbbb"


def test_a_step_that_fails_is_run_again_next_time(tmp_path):
    (tmp_path / "in.txt").write_text("a")
    calls, work = runner(tmp_path)
    run_step(make_step(tmp_path), work, print)

    def boom():
        raise RuntimeError("disk full")

    step = make_step(tmp_path, params=Params(n=3))
    try:
        run_step(step, boom, print)
    except RuntimeError:
        pass
    assert step.read()["status"] == "started" and (tmp_path / "out/value.txt").exists()
    run_step(step, work, print)
    assert len(calls) == 2 and step.up_to_date() is not None
