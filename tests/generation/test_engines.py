import pytest
import torch

from slca.config.rewards import JudgeConfig
from slca.generation.engines import HFEngine, SamplingParams, sequence_logprobs
from slca.training.tiny import tiny_model


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer, seed=2)


def prompts(tokenizer):
    return [tokenizer.encode(t) for t in ("Weather in Rome?", "Hi", "Book a flight to Oslo now")]


def test_generations_stop_at_a_stop_token_or_the_token_budget(model, tokenizer):
    every_token = range(len(tokenizer))
    stopping = HFEngine(model, tokenizer, stop_token_ids=every_token)
    for g in stopping.generate(prompts(tokenizer), SamplingParams(max_new_tokens=5)):
        assert g.stopped and len(g.token_ids) == len(g.logprobs) == 1
    never = HFEngine(model, tokenizer, stop_token_ids=[len(tokenizer) + 10])
    for g in never.generate(prompts(tokenizer), SamplingParams(max_new_tokens=7)):
        assert not g.stopped and len(g.token_ids) == 7


def test_sampling_is_reproducible_by_seed_and_logprobs_match_the_model(model, tokenizer):
    engine = HFEngine(model, tokenizer, batch_size=2)  # two chunks: seeds per chunk
    params = SamplingParams(max_new_tokens=12, temperature=0.8, seed=5)
    first = engine.generate(prompts(tokenizer), params)
    assert first == engine.generate(prompts(tokenizer), params)
    other = engine.generate(
        prompts(tokenizer), SamplingParams(max_new_tokens=12, temperature=0.8, seed=6)
    )
    assert [g.token_ids for g in other] != [g.token_ids for g in first]
    for prompt, g in zip(prompts(tokenizer), first):
        recomputed = sequence_logprobs(model, prompt + g.token_ids, temperature=0.8)
        torch.testing.assert_close(
            recomputed[len(prompt) :], torch.tensor(g.logprobs), atol=1e-4, rtol=1e-4
        )


@pytest.mark.gpu
def test_a_model_on_cuda_generates_with_logprobs_on_the_cpu(tokenizer):
    """The logits are on the model's device: the sampled tokens index them there (a CPU
    index into CUDA logits failed the first GPU check)."""
    model = tiny_model(tokenizer, seed=2).to("cuda")
    engine = HFEngine(model, tokenizer, batch_size=2)
    params = SamplingParams(max_new_tokens=6, temperature=0.8, seed=1)
    for prompt, g in zip(prompts(tokenizer), engine.generate(prompts(tokenizer), params)):
        recomputed = sequence_logprobs(model, prompt + g.token_ids, temperature=0.8).cpu()
        torch.testing.assert_close(
            recomputed[len(prompt) :], torch.tensor(g.logprobs), atol=1e-3, rtol=1e-3
        )


def test_greedy_picks_the_argmax(model, tokenizer):
    (g,) = HFEngine(model, tokenizer).generate(
        prompts(tokenizer)[:1], SamplingParams(max_new_tokens=1, temperature=0)
    )
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts(tokenizer)[0]])).logits[0, -1]
    assert g.token_ids == [int(logits.argmax())]


def test_greedy_chunks_take_prompts_by_length_and_answer_in_the_given_order(
    model, tokenizer, monkeypatch
):
    texts = ("Book a flight to Oslo now", "Hi", "Weather in Rome?", "Ok", "Cancel order 12")
    given = [tokenizer.encode(t) for t in texts]
    engine = HFEngine(model, tokenizer, batch_size=2)
    chunks = []
    generate_chunk = engine._generate_chunk
    monkeypatch.setattr(
        engine,
        "_generate_chunk",
        lambda chunk, *a: chunks.append(chunk) or generate_chunk(chunk, *a),
    )
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    batched = engine.generate(given, greedy)
    assert [len(p) for chunk in chunks for p in chunk] == sorted(len(p) for p in given)
    alone = [HFEngine(model, tokenizer).generate([p], greedy)[0] for p in given]
    assert [g.token_ids for g in batched] == [g.token_ids for g in alone]
    for b, a in zip(batched, alone):
        torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs))

    chunks.clear()  # sampling: a chunk's draws depend on its rows, so the order stays
    engine.generate(given, SamplingParams(max_new_tokens=6, temperature=0.8, seed=3))
    assert [p for chunk in chunks for p in chunk] == given


def test_engine_needs_a_pad_token(model, tokenizer):
    class NoPad:
        pad_token_id = None
        eos_token_id = 1

    with pytest.raises(ValueError, match="no pad token"):
        HFEngine(model, NoPad())


def test_the_judge_runs_on_a_real_engine_and_counts_unparseable_ratings(model, tokenizer, tasks):
    from slca.generation.engines import text_generator
    from slca.rewards.preference import JudgeScorer, SummaryInput

    replies = []

    def generate(prompts):
        out = text_generator(
            HFEngine(model, tokenizer), tokenizer, SamplingParams(max_new_tokens=6, seed=1)
        )(prompts)
        replies.extend(out)
        return out

    judge = JudgeScorer(generate=generate, config=JudgeConfig())
    items = [SummaryInput("It is 20 degrees.", tasks[0])] * 3
    scores = judge.score_batch(items)
    assert len(replies) == 3 and all(isinstance(r, str) for r in replies)
    assert "<|im_end|>" not in "".join(replies)
    # A random tiny model cannot rate: every reply falls back to the configured score.
    assert scores == [judge.config.failure_score] * 3 and judge.failures == 3
