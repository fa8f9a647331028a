import itertools
import json

import pytest
import torch
from helpers import ScriptedEngine

from slca.generation.engines import HFEngine, SamplingParams, sequence_logprobs
from slca.rollout.loop import RolloutLimits, run_rollouts
from slca.segments import ENV, KIND_CODE
from slca.simulator import Simulator
from slca.training.tiny import tiny_model


def weather_task(tasks):
    return next(
        t for t in tasks if t.domain == "weather" and len(t.gold) == 1 and len(t.gold[0]) == 1
    )


def call_text(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def run(tasks, tokenizer, script, group_size=1, limits=None, **kw):
    engine = ScriptedEngine(tokenizer, script, **kw)
    rollouts = run_rollouts(
        tasks,
        engine=engine,
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=group_size,
        sampling=SamplingParams(max_new_tokens=200),
        limits=limits,
    )
    return rollouts, engine


def test_a_call_then_a_summary_is_recorded_token_by_token(tasks, tokenizer):
    task = weather_task(tasks)
    city = task.gold[0][0].arguments["city"]
    script = [
        "Let me check.\n" + call_text("get_weather", city=city),
        f"It is {task.facts[f'{city}.temperature']} degrees in {city}.",
    ]
    (r,), _ = run([task], tokenizer, script)
    assert r.finish_reason == "stop" and [t.final for t in r.turns] == [False, True]
    assert r.summary == script[1]
    (call,) = r.calls
    assert (call.name, call.arguments, call.block, call.step) == (
        "get_weather",
        {"city": city},
        0,
        0,
    )
    assert call.response["temperature"] == task.facts[f"{city}.temperature"]
    # Per-token arrays line up; policy tokens decode back to the turn texts.
    n = len(r.token_ids)
    assert len(r.policy_mask) == len(r.logprobs) == len(r.kind_codes) == len(r.call_index) == n
    for turn in r.turns:
        ids = r.token_ids[turn.token_start : turn.token_end]
        assert all(r.policy_mask[turn.token_start : turn.token_end])
        assert tokenizer.decode(ids) == turn.text + "<|im_end|>"
    policy = torch.tensor(r.policy_mask)
    kinds = torch.tensor(r.kind_codes)
    assert (kinds[~policy] == ENV).all() and (kinds[policy] != ENV).all()
    first, second = r.turns
    assert {KIND_CODE["preamble"], KIND_CODE["tool_call"]} == set(
        r.kind_codes[first.token_start : first.token_end]
    )
    assert set(r.kind_codes[second.token_start : second.token_end]) == {KIND_CODE["summary"]}
    assert set(r.call_index[first.token_start : first.token_end]) == {0}
    assert set(r.call_index[second.token_start :]) == {-1}
    # Environment tokens between the turns carry the simulator's response.
    env = tokenizer.decode(r.token_ids[first.token_end : second.token_start])
    assert "<tool_response>" in env and json.dumps(call.response) in env
    assert env.endswith("<|im_start|>assistant\n")
    assert r.token_ids[: r.prompt_length] == r.token_ids[: r.prompt_length]
    assert not any(r.policy_mask[: r.prompt_length])


def test_parallel_calls_invalid_blocks_and_unknown_tools(tasks, tokenizer):
    task = weather_task(tasks)
    parallel = (
        '<tool_call>[{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
        '{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_call>'
    )
    script = [
        parallel + "\n<tool_call>{oops</tool_call>\n" + call_text("teleport", to="x"),
        "Done.",
    ]
    (r,), engine = run([task], tokenizer, script)
    assert [c.name for c in r.calls] == ["get_weather", "get_weather", "teleport"]
    assert [c.block for c in r.calls] == [0, 0, 2]
    assert r.calls[2].response["error"]["code"] == "unknown_tool"
    second_prompt = tokenizer.decode(engine.prompts[-1])
    assert second_prompt.count("<tool_response>") == 4  # two answers, one parse error, one 4xx
    assert '"invalid_call"' in second_prompt
    first = r.turns[0]
    assert set(r.call_index[first.token_start : first.token_end]) == {0, 1, 2}


def test_identical_calls_in_a_group_get_identical_responses(tasks, tokenizer):
    task = next(t for t in tasks if t.domain == "flights")
    script = [call_text("book_flight", flight_id="XX1", passenger="Ann"), "Booked."]
    rollouts, _ = run([task], tokenizer, script, group_size=4)
    responses = [r.calls[0].response for r in rollouts]
    assert all(resp == responses[0] for resp in responses)
    assert [r.sample for r in rollouts] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "limits, script, reason, n_calls",
    [
        (RolloutLimits(max_turns=2), [call_text("get_weather", city="Oslo")], "max_turns", 2),
        (
            RolloutLimits(max_total_tokens=950),
            [call_text("get_weather", city="Oslo")],
            "max_tokens",
            None,
        ),
        (
            RolloutLimits(max_turn_bytes=20),
            ["x" * 30 + call_text("get_weather", city="Oslo")],
            "max_bytes",
            0,
        ),
    ],
)
def test_limits_end_rollouts_with_their_reason(tasks, tokenizer, limits, script, reason, n_calls):
    (r,), _ = run([weather_task(tasks)], tokenizer, script, limits=limits)
    assert r.finish_reason == reason
    assert len(r.token_ids) <= limits.max_total_tokens
    if n_calls is not None:
        assert len(r.calls) == n_calls


def test_a_turn_cut_off_mid_call_is_not_executed(tasks, tokenizer):
    (r,), _ = run(
        [weather_task(tasks)], tokenizer, [call_text("get_weather", city="Oslo")], stop=False
    )
    assert r.finish_reason == "max_tokens" and r.calls == []
    assert r.turns[0].parsed.blocks[0].ok  # parsed (for the format reward), never run


def test_empty_and_garbage_turns_never_crash(tasks, tokenizer):
    for script in ([""], ["<tool_call>" * 50], ["<think>" + "{[" * 5000]):
        (r,), _ = run([weather_task(tasks)], tokenizer, script, limits=RolloutLimits(max_turns=2))
        assert r.turns and len(r.kind_codes) == len(r.token_ids)


def test_tiny_model_rollouts_end_to_end(tasks, tokenizer):
    model = tiny_model(tokenizer, seed=1)
    engine = HFEngine(model, tokenizer, batch_size=8)
    rollouts = run_rollouts(
        tasks[:4],
        engine=engine,
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=2,
        sampling=SamplingParams(max_new_tokens=48, seed=3),
        limits=RolloutLimits(max_turns=2, max_total_tokens=1600),
    )
    assert len(rollouts) == 8 and [r.group for r in rollouts] == [0, 0, 1, 1, 2, 2, 3, 3]
    for r in rollouts:
        policy = torch.tensor(r.policy_mask)
        kinds = torch.tensor(r.kind_codes)
        assert policy.any() and (kinds[policy] >= 0).all() and (kinds[~policy] == ENV).all()
        for turn in r.turns:
            text = tokenizer.decode(r.token_ids[turn.token_start : turn.token_end])
            assert text.startswith(turn.text)
        recomputed = sequence_logprobs(model, r.token_ids)
        torch.testing.assert_close(
            recomputed[policy], torch.tensor(r.logprobs)[policy], atol=1e-4, rtol=1e-4
        )
    again = run_rollouts(
        tasks[:4],
        engine=engine,
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=2,
        sampling=SamplingParams(max_new_tokens=48, seed=3),
        limits=RolloutLimits(max_turns=2, max_total_tokens=1600),
    )
    assert [r.token_ids for r in again] == [r.token_ids for r in rollouts]  # seeded


def test_progress_reports_finished_rollouts(tasks, tokenizer):
    seen = []
    engine = ScriptedEngine(tokenizer, ["Fine."])
    run_rollouts(
        tasks[:3],
        engine=engine,
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=2,
        sampling=SamplingParams(),
        progress=seen.append,
    )
    assert sum(seen) == 6 and list(itertools.accumulate(seen))[-1] == 6


def test_loop_rollouts_score_through_the_reward_layer(tasks, tokenizer):
    from slca.rewards.score import per_block_rewards, score_batch

    task = weather_task(tasks)
    city = task.gold[0][0].arguments["city"]
    temperature = task.facts[f"{city}.temperature"]
    condition = task.facts[f"{city}.condition"]
    good = [
        "Checking.\n" + call_text("get_weather", city=city),
        f"It is {temperature} degrees and {condition} in {city}.",
    ]
    wrong = [
        "<tool_call>{bad json</tool_call>\n" + call_text("get_weather", city="Atlantis"),
        f"It is {temperature} degrees and {condition} in {city}.",
    ]
    (r_good,), _ = run([task], tokenizer, good)
    (r_wrong,), _ = run([task], tokenizer, wrong)
    s_good, s_wrong = score_batch([r_good, r_wrong], [task, task])
    assert s_good.tool == 1.0 and s_good.summary == 1.0
    # HierR: 0.10·format(1 of 2 blocks) + 0.25·name + 0.15·key + 0.20·value(wrong city)
    # + 0.30·parallel (one call in the first step, as gold).
    assert s_wrong.tool == pytest.approx(0.10 * 0.5 + 0.25 + 0.15 + 0.0 + 0.30)
    assert per_block_rewards(r_good, s_good) == [1.0]
    bad_block, wrong_city = per_block_rewards(r_wrong, s_wrong)
    assert bad_block == 0.0 and 0.0 < wrong_city < 1.0  # right tool, wrong city
    # Block indices in the token labels are the ones the rewards are listed by.
    first = r_wrong.turns[0]
    assert set(r_wrong.call_index[first.token_start : first.token_end]) == {0, 1}


def test_follow_up_user_turns_continue_the_rollout(tasks, tokenizer):
    task = weather_task(tasks)
    city = task.gold[0][0].arguments["city"]
    later = [[{"role": "user", "content": "And tomorrow?"}], [{"role": "user", "content": "Bye."}]]
    script = [call_text("get_weather", city=city), "Sunny.", call_text("get_weather", city=city)]
    script += ["Still sunny.", "Goodbye."]
    rollouts = run_rollouts(
        [task],
        engine=ScriptedEngine(tokenizer, script),
        tokenizer=tokenizer,
        simulator=Simulator(),
        group_size=2,
        sampling=SamplingParams(max_new_tokens=200),
        limits=RolloutLimits(max_turns=2),  # per user turn: 5 turns in all fit
        follow_ups={task.id: later},
    )
    for r in rollouts:
        assert r.finish_reason == "stop" and r.summary == "Goodbye."
        assert [t.user_turn for t in r.turns] == [0, 0, 1, 1, 2]
        assert [t.final for t in r.turns] == [False, True, False, True, True]
        assert [c.turn for c in r.calls] == [0, 2] and [c.step for c in r.calls] == [0, 1]
        text = tokenizer.decode(r.token_ids)
        assert text.index("Sunny.") < text.index("And tomorrow?") < text.index("Still sunny.")
        assert not any(r.policy_mask[r.turns[1].token_end : r.turns[2].token_start])
