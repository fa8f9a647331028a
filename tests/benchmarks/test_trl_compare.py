"""benchmarks/trl_compare.py reads slca's phases from its step metrics and builds TRL's
rewards with slca's own single-turn loop; what it times cannot silently read 0."""

import argparse
import json

import pytest

from benchmarks import trl_compare as bench


def args(**over):
    values = dict(
        steps=1,
        warmup=0,
        est_steps=1,
        tasks_per_step=2,
        group_size=2,
        max_new_tokens=16,
        threads=1,
        seed=0,
        lr=1e-5,
        n_tasks=24,
        no_recompute=False,
        child="slca",
    )
    return argparse.Namespace(**{**values, **over})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl-bench")
    bench.build_workspace(args(), root)
    return root


def test_the_slca_side_times_every_phase_from_the_step_metrics(workspace):
    out = bench.child_slca(args(), workspace)
    phases = out["phases_s"]
    assert set(phases) == set(bench.PHASES)
    for phase in ("generate", "score", "old_logprobs", "forward_loss", "backward", "optimizer"):
        assert phases[phase] > 0, phase
    assert out["steps"] == 1 and out["tokens_per_step"] > 0


def test_a_phase_slca_no_longer_reports_is_an_error_not_a_zero():
    from slca.training.rl import PHASES

    metrics = {f"perf/{p}_s": 1.0 for p in PHASES}
    assert bench.slca_phases(metrics)["forward_loss"] == pytest.approx(-1.0)
    del metrics["perf/score_s"]
    with pytest.raises(KeyError, match="perf/score_s"):
        bench.slca_phases(metrics)


def test_a_wrapped_method_that_is_gone_or_never_runs_stops_the_run():
    timer = bench.PhaseTimer()

    class Library:
        def compute_loss(self):
            return 1

    library = Library()
    with pytest.raises(AttributeError):
        timer.wrap_method(library, "old_name", "score")
    timer.wrap_method(library, "compute_loss", "forward_loss")
    timer.on = True
    assert library.compute_loss() == 1
    with pytest.raises(SystemExit, match=r"\['score'\]"):
        timer.check(["forward_loss", "score"])


def test_trl_completions_become_slca_single_turn_rollouts(workspace):
    from transformers import AutoTokenizer

    from slca.rollout.chat import END_OF_TURN
    from slca.simulator import Simulator

    tokenizer = AutoTokenizer.from_pretrained(workspace / "model")
    tasks = [t for t in bench.load_tasks(workspace) if t.gold and len(t.gold[0]) == 1][:1]
    (task,) = tasks
    gold = task.gold[0][0]
    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    call = json.dumps({"name": gold.name, "arguments": gold.arguments})
    texts = [f"<tool_call>\n{call}\n</tool_call>", "It is done."]
    completions = [tokenizer.encode(t, add_special_tokens=False) + [eot] for t in texts]
    completions.append(tokenizer.encode("cut off", add_special_tokens=False))  # no stop
    completions.append(completions[0])
    by_id = {task.id: task}
    rollouts = bench.single_turn_rollouts(
        completions, [task.id] * 4, by_id, tokenizer, Simulator(), group=2
    )
    assert [r.finish_reason for r in rollouts] == ["max_turns", "stop", "max_tokens", "max_turns"]
    assert [r.group for r in rollouts] == [0, 0, 1, 1]
    assert rollouts[0].calls[0].name == gold.name and "error" not in rollouts[0].calls[0].response
    # the same call gets the same simulated answer
    assert rollouts[3].calls[0].response == rollouts[0].calls[0].response
    with pytest.raises(RuntimeError, match="consecutive"):
        bench.single_turn_rollouts(completions, [task.id, "x", task.id, "x"], by_id, None, None, 2)
