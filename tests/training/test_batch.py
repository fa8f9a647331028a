import pytest
import torch

from slca.rollout.types import Rollout
from slca.segments import ENV
from slca.training.batch import collate, first_position, is_right_padded, token_logprobs
from slca.training.tiny import tiny_model, train_tokenizer


def rollout(ids, policy, group=0, kinds=None, calls=None):
    n = len(ids)
    return Rollout(
        task_id="t",
        group=group,
        sample=0,
        prompt_length=1,
        token_ids=ids,
        policy_mask=policy,
        logprobs=[-0.5 if p else 0.0 for p in policy],
        kind_codes=kinds or [0 if p else ENV for p in policy],
        call_index=calls or [-1] * n,
    )


def test_collate_pads_right_and_keeps_every_per_token_array_aligned():
    b = collate(
        [rollout([5, 6, 7], [False, True, True], group=3), rollout([5, 6], [False, True], group=4)],
        pad_id=0,
    )
    assert b.input_ids.tolist() == [[5, 6, 7], [5, 6, 0]]
    assert b.attention_mask.tolist() == [[True, True, True], [True, True, False]]
    assert b.policy_mask.tolist() == [[False, True, True], [False, True, False]]
    assert b.old_logprobs.tolist() == [[0.0, -0.5, -0.5], [0.0, -0.5, 0.0]]
    assert b.kind_codes[1, 2].item() == ENV and b.call_index[1, 2].item() == -1
    assert b.group_index.tolist() == [3, 4] and b.n_tokens == 5
    sub = b.select([1])
    assert sub.input_ids.tolist() == [[5, 6]] and sub.group_index.tolist() == [4]


def test_collate_refuses_misaligned_or_prompt_less_rollouts():
    bad = rollout([5, 6], [False, True])
    bad.logprobs = [0.0]
    with pytest.raises(ValueError, match=r"rollout 0 \(task t\): per-token arrays"):
        collate([bad], pad_id=0)
    with pytest.raises(ValueError, match="prompt must come first"):
        collate([rollout([5, 6], [True, True])], pad_id=0)
    with pytest.raises(ValueError, match="no rollouts"):
        collate([], pad_id=0)


def test_token_logprobs_with_padding_match_unpadded_rows():
    tok = train_tokenizer(["some words to train a tokenizer on, twice"] * 5, vocab_size=300)
    model = tiny_model(tok, seed=0)
    rows = [[5, 9, 11, 13, 2], [7, 8, 2]]
    b = collate([rollout(r, [False] + [True] * (len(r) - 1)) for r in rows], pad_id=0)
    logp, entropy = token_logprobs(model, b.input_ids, b.attention_mask, with_entropy=True)
    for i, row in enumerate(rows):
        alone, _ = token_logprobs(model, torch.tensor([row]), torch.ones(1, len(row), dtype=bool))
        torch.testing.assert_close(logp[i, : len(row)], alone[0], atol=1e-5, rtol=1e-5)
    assert logp[:, 0].abs().max() == 0 and (entropy[:, 1:] > 0).all()
    assert logp.requires_grad and not entropy.requires_grad


def test_logprobs_from_a_start_position_match_the_full_computation():
    tok = train_tokenizer(["some words to train a tokenizer on, twice"] * 5, vocab_size=300)
    model = tiny_model(tok, seed=0)
    ids = torch.tensor([[5, 9, 11, 13, 2, 7], [7, 8, 2, 9, 9, 9]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    full, full_entropy = token_logprobs(model, ids, mask, with_entropy=True)
    part, part_entropy = token_logprobs(model, ids, mask, with_entropy=True, start=3)
    torch.testing.assert_close(part[:, 3:], full[:, 3:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(part_entropy[:, 3:], full_entropy[:, 3:], atol=1e-5, rtol=1e-5)
    assert (part[:, :3] == 0).all()
    assert first_position(torch.tensor([[0, 0, 1], [0, 1, 0]], dtype=torch.bool)) == 1
    assert first_position(torch.zeros(2, 4, dtype=torch.bool)) == 4


def test_right_padding_drops_the_padding_mask_and_any_other_keeps_it():
    tok = train_tokenizer(["some words to train a tokenizer on, twice"] * 5, vocab_size=300)
    model = tiny_model(tok, seed=0)
    seen = []

    def spy(module, args, kwargs):
        seen.append(kwargs["attention_mask"])

    model.register_forward_pre_hook(spy, with_kwargs=True)
    ids = torch.tensor([[5, 9, 11, 13], [7, 8, 2, 0]])
    right = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    left = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.bool)
    token_logprobs(model, ids, right)
    token_logprobs(model, ids, left)
    assert seen[0] is None
    assert seen[1].tolist() == left.long().tolist()
    assert is_right_padded(right) and is_right_padded(torch.zeros(2, 3, dtype=torch.bool))
    assert not is_right_padded(left)
    assert not is_right_padded(torch.tensor([[1, 0, 1]], dtype=torch.bool))
