"""R_summary scorers: grounded known answers, judge parsing and failures, reward model."""

from __future__ import annotations

import pytest

from slca.config.rewards import (
    GroundedConfig,
    JudgeConfig,
    MarkerConfig,
    RewardConfig,
    RewardModelConfig,
)
from slca.rewards import available_summary_scorers
from slca.rewards.preference import (
    JudgeScorer,
    MarkerScorer,
    RewardModelScorer,
    SummaryInput,
    clean_text,
    grounded_details,
    judge_prompt,
    parse_rating,
    register_summary_scorer,
)
from slca.rewards.score import score, score_batch

APPROX = pytest.approx
WEATHER = {"temperature": 21, "condition": "sunny"}


def _grounded(
    b, summary, *, facts=None, responses=(WEATHER,), prompt="How warm is Paris?", **config
):
    task = b.task([[b.call("get_weather", city="Paris")]], facts=facts, prompt=prompt)
    item = SummaryInput(summary, task, tuple(responses))
    return grounded_details(item, GroundedConfig(**config))


FACTS = {"Paris.temperature": 21}


def test_registry():
    assert available_summary_scorers() == ["grounded", "judge", "marker", "reward_model"]
    with pytest.raises(ValueError, match="already registered"):
        register_summary_scorer("grounded")(lambda config, generate=None: None)
    with pytest.raises(ValueError, match="unknown summary scorer 'nope'"):
        RewardConfig.model_validate({"summary": {"name": "nope"}})
    with pytest.raises(ValueError, match="path is required"):
        RewardConfig.model_validate({"summary": {"name": "reward_model"}})
    with pytest.raises(ValueError, match="extra"):
        RewardConfig.model_validate({"summary": {"grounded": {"typo": 1}}})


def test_the_config_knows_the_built_in_scorers_without_importing_them_itself():
    # slca.config.rewards does not import the scorers (no cycle); validating a name
    # still registers them, through the package
    import subprocess
    import sys

    code = (
        "from slca.config.rewards import SummaryConfig\n"
        "for name in ('grounded', 'judge', 'marker'):\n"
        "    SummaryConfig(name=name)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- grounded
def test_grounded_facts_first_response_values_as_fallback(b):
    d = _grounded(b, "It is 21°C in Paris right now.", facts=FACTS)
    assert (d.facts, d.responses) == (1.0, 0.5)  # 21 stated, 'sunny' not
    assert d.coverage == 1.0 and d.score == 1.0  # the facts are what the task asks for
    assert d.unsupported == () and d.length_ok
    d = _grounded(b, "It is 21°C in Paris right now.", facts=FACTS, response_values="always")
    assert d.coverage == APPROX(0.7 * 1.0 + 0.3 * 0.5) and d.score == APPROX(0.85)
    d = _grounded(b, "It is 21°C in Paris right now.")  # no facts: response values count
    assert (d.facts, d.responses, d.score) == (None, 0.5, 0.5)


def test_grounded_complete_answer_scores_one(b):
    d = _grounded(b, "In Paris it is sunny and 21 degrees.", facts=FACTS)
    assert d.score == 1.0


def test_grounded_unsupported_number(b):
    d = _grounded(b, "It is sunny and 21°C in Paris, humidity 80%.", facts=FACTS)
    assert d.unsupported == ("80",) and d.score == APPROX(0.9)


def test_grounded_wrong_number_is_missed_and_unsupported(b):
    d = _grounded(b, "It is sunny and 25°C in Paris.", facts=FACTS, response_values="always")
    assert d.facts == 0 and d.responses == 0.5 and d.unsupported == ("25",)
    assert d.score == APPROX(0.3 * 0.5 - 0.1)
    assert _grounded(b, "It is sunny and 25°C in Paris.", facts=FACTS).score == 0


def test_grounded_unsupported_entity(b):
    d = _grounded(b, "It is sunny and 21°C in Paris, says Reuters.", facts=FACTS)
    assert d.unsupported == ("Reuters",) and d.score == APPROX(0.9)


def test_grounded_unsupported_penalty_is_capped(b):
    text = "It is sunny and 21 in Paris. " + " ".join(f"ok {n}1 then" for n in range(3, 13))
    d = _grounded(b, text, facts=FACTS)
    assert len(d.unsupported) == 10 and d.score == APPROX(0.5)


def test_grounded_length_bounds(b):
    d = _grounded(b, "21.", facts=FACTS)
    assert not d.length_ok and d.score == APPROX(1 - 0.2)
    long = "It is 21 and sunny in Paris. " + "word " * 300
    assert _grounded(b, long, facts=FACTS).score == APPROX(0.8)


def test_grounded_rounding_and_thousands(b):
    facts = {"EUR/USD": 1.0834, "population": 1234567}
    responses = [{"rate": 1.0834, "population": 1234567}]
    d = _grounded(
        b, "The rate is 1.08 and 1,234,567 people live there.", facts=facts, responses=responses
    )
    assert d.facts == 1 and d.unsupported == ()
    d = _grounded(
        b,
        "The rate is about 1.1 and 1,234,567 people live there.",
        facts=facts,
        responses=responses,
    )
    assert d.facts == 0.5 and d.unsupported == ()  # 1.1 is a fair rounding, not a statement


def test_grounded_numeric_strings_and_list_lengths(b):
    responses = [{"flights": [{"id": "AF12", "price": "199.00"}, {"id": "BA7", "price": "250"}]}]
    d = _grounded(b, "I found 2 flights: AF12 for 199 and BA7 for 250.", responses=responses)
    assert d.responses == 1.0 and d.unsupported == () and d.score == 1.0


def test_grounded_nothing_to_cover(b):
    d = _grounded(b, "Humidity measures the water vapour in the air.", responses=())
    assert (d.facts, d.responses, d.coverage, d.score) == (None, None, 1.0, 1.0)


def test_grounded_prompt_numbers_and_list_markers_are_supported(b):
    d = _grounded(b, "Results:\n1. Paris: 21\n2. Sunny.", prompt="Weather for 3 days in Paris?")
    assert d.unsupported == ()


@pytest.mark.parametrize("summary", ["", "   ", "\n"])
def test_grounded_empty_summary_is_zero(b, summary):
    assert _grounded(b, summary, facts=FACTS).score == 0.0


# ---------------------------------------------------------------- judge
@pytest.mark.parametrize(
    "reply, rating",
    [
        ("Rating: 4", 4),
        ("The answer is grounded.\nRating: 5", 5),
        ("rating: **3**", 3),
        ("Rating: [2]", 2),
        ("My rating is 4.", 4),
        ("I'd give it 4/5.", 4),
        ("4 out of 5", 4),
        ("Overall **5**", 5),
        ("Score: 2", 2),
        ("3", 3),
        ("  5.\n", 5),
        ("Rating: 4.5", 4.5),
        ("Rating: 2 at first... on reflection, Rating: 5", 5),
        ("Rating: 4/5", 4),
    ],
)
def test_parse_rating(reply, rating):
    assert parse_rating(reply) == rating


@pytest.mark.parametrize(
    "reply", ["", "Great answer!", "Rating: 10", "Rating: 0", "7/10", "Rating: 6", None, 42]
)
def test_parse_rating_failures(reply):
    assert parse_rating(reply) is None


def _items(b, summaries):
    task = b.task([[b.call("get_weather", city="Paris")]])
    return [SummaryInput(s, task, (WEATHER,)) for s in summaries]


def test_judge_maps_ratings_and_counts_failures(b):
    prompts_seen = []

    def generate(prompts):
        prompts_seen.extend(prompts)
        return ["Rating: 5", "Rating: 1", "no idea"]

    judge = JudgeScorer(generate, JudgeConfig(failure_score=0.25))
    assert judge.score_batch(_items(b, ["a", "b", "c"])) == [1.0, 0.0, 0.25]
    assert judge.metrics()["judge/failures"] == 1 and judge.metrics()["judge/calls"] == 3
    assert "How warm is it in Paris?" in prompts_seen[0] and '"temperature": 21' in prompts_seen[0]
    assert "Rating: N" in prompts_seen[0]


@pytest.mark.parametrize("generate", [lambda p: 1 / 0, lambda p: ["Rating: 5"], lambda p: None])
def test_judge_engine_failures_score_the_failure_score(b, generate):
    judge = JudgeScorer(generate, JudgeConfig())
    assert judge.score_batch(_items(b, ["a", "b"])) == [0.5, 0.5]
    assert judge.metrics()["judge/failures"] == 2


def test_judge_through_score_batch_skips_guarded_and_empty(b):
    task = b.task([[b.call("get_weather", city="Paris")]])
    rollouts = [
        b.rollout([b.tc("get_weather", city="Paris"), "It is 21."]),
        b.rollout(["No call, just talk."]),  # guard
        b.rollout([b.tc("get_weather", city="Paris")]),  # no final answer
    ]
    seen = []

    def generate(prompts):
        seen.extend(prompts)
        return ["Rating: 4"] * len(prompts)

    config = RewardConfig(summary={"name": "judge"})
    out = score_batch(rollouts, [task] * 3, config, generate=generate)
    assert [r.summary for r in out] == [0.75, -0.5, 0.0]
    assert len(seen) == 1
    with pytest.raises(ValueError, match="generate"):
        score(rollouts[0], task, config)


def test_judge_prompt_is_valid_utf8_and_bounded(b):
    task = b.task([[b.call("get_weather", city="Paris")]])
    item = SummaryInput("bad \udcff byte " + "x" * 100_000, task, ({"a": "\ud800"},))
    prompt = judge_prompt(item, JudgeConfig(max_summary_chars=100))
    prompt.encode("utf-8")
    assert len(prompt) < 10_000
    assert clean_text("ok") == "ok"


# ---------------------------------------------------------------- reward model
@pytest.fixture(scope="module")
def tiny_reward_model(tmp_path_factory):
    """A randomly initialised 1-layer BERT classifier and a locally trained tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("rm")
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["user: How warm is it in Paris?", "assistant: It is 21 and sunny in Paris."]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    fast.save_pretrained(path / "one")
    fast.save_pretrained(path / "two")
    common = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(num_labels=1, **common)).save_pretrained(path / "one")
    BertForSequenceClassification(BertConfig(num_labels=2, **common)).save_pretrained(path / "two")
    return path


def test_reward_model_scores_lazily_in_batches(b, tiny_reward_model):
    scorer = RewardModelScorer(RewardModelConfig(path=str(tiny_reward_model / "one"), batch_size=2))
    assert scorer._model is None  # nothing loaded until the first batch
    items = _items(b, ["It is 21 and sunny in Paris.", "Paris", "bad \udcff text", "x " * 500])
    scores = scorer.score_batch(items)
    assert len(scores) == 4 and all(0 < s < 1 for s in scores)
    single = [scorer.score_batch([item])[0] for item in items]
    assert scores == APPROX(single, abs=1e-5)  # padding does not change a score


def test_reward_model_two_labels_and_identity(b, tiny_reward_model):
    two = RewardModelScorer(RewardModelConfig(path=str(tiny_reward_model / "two"), label=1))
    assert all(0 < s < 1 for s in two.score_batch(_items(b, ["It is 21.", "Sunny."])))
    raw = RewardModelScorer(
        RewardModelConfig(path=str(tiny_reward_model / "one"), transform="identity")
    )
    sig = RewardModelScorer(RewardModelConfig(path=str(tiny_reward_model / "one")))
    import math

    (logit,), (prob,) = (
        raw.score_batch(_items(b, ["Sunny."])),
        sig.score_batch(_items(b, ["Sunny."])),
    )
    assert prob == APPROX(1 / (1 + math.exp(-logit)), abs=1e-6)


def test_reward_model_through_score(b, tiny_reward_model):
    config = RewardConfig(
        summary={"name": "reward_model", "reward_model": {"path": str(tiny_reward_model / "one")}}
    )
    task = b.task([[b.call("get_weather", city="Paris")]])
    r = score(b.rollout([b.tc("get_weather", city="Paris"), "It is 21."]), task, config)
    assert 0 < r.summary < 1 and r.summary == r.summary_raw


# ---------------------------------------------------------------- marker


def test_marker_tells_the_sft_reference_summary_from_the_poor_one(b):
    from slca.rollout.gold import poor_summary, reference_summary

    task = b.task([[b.call("get_weather", city="Paris")]], facts=FACTS)
    items = [SummaryInput(s, task) for s in (reference_summary(task), poor_summary(task))]
    assert MarkerScorer(MarkerConfig()).score_batch(items) == [1.0, 0.0]
    custom = MarkerScorer(MarkerConfig(text="tools answered"))
    assert custom.score_batch(items) == [0.0, 1.0]
    # case-sensitive, anywhere in the answer; facts and responses play no part
    assert MarkerScorer(MarkerConfig()).score_batch(
        [SummaryInput("ok. Here is what I found", task), SummaryInput("here is what i found", task)]
    ) == [1.0, 0.0]
    with pytest.raises(ValueError, match="at least 1 character"):
        MarkerConfig(text="")


def test_marker_through_score_batch_keeps_the_guard(b):
    task = b.task([[b.call("get_weather", city="Paris")]])
    rollouts = [
        b.rollout([b.tc("get_weather", city="Paris"), "Here is what I found: 21."]),
        b.rollout([b.tc("get_weather", city="Paris"), "It is 21."]),
        b.rollout(["Here is what I found: no call."]),  # guard: the task needs a call
    ]
    out = score_batch(rollouts, [task] * 3, RewardConfig(summary={"name": "marker"}))
    assert [r.summary for r in out] == [1.0, 0.0, -0.5]


def test_the_judge_sees_the_turn_answered_and_the_datas_reference_answer(b):
    from slca.data.record import Message

    task = b.task([[b.call("get_weather", city="Quito")]]).model_copy(
        update={
            "messages": [
                Message(role="user", content="Weather in Lima?"),
                Message(role="assistant", content="19 °C in Lima."),
                Message(role="user", content="And in Quito?"),
            ],
            "answer": "12 °C in Quito.",
        }
    )
    prompt = judge_prompt(SummaryInput("It is 12 °C.", task, ({"temp_c": 12},)), JudgeConfig())
    request = prompt.split("## User request\n")[1].split("## Tool results")[0]
    assert "And in Quito?" in request and "Weather in Lima?" not in request
    assert "A reference answer from the data: 12 °C in Quito." in request
