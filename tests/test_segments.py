import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from slca.segments import (
    DEFAULT_ROUTING,
    ENV,
    KIND_CODE,
    SEGMENT_KINDS,
    encode_kinds,
    head_masks,
    label_tokens,
    label_turn,
    label_turn_tokens,
    token_offsets,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'


def assert_covering(spans, text):
    assert all(kind in SEGMENT_KINDS for kind, _, _ in spans)
    assert all(start < end for _, start, end in spans)  # non-empty
    position = 0
    for _, start, end in spans:  # ordered, non-overlapping, no gaps
        assert start == position
        position = end
    assert position == len(text)


# ---------------------------------------------------------------- label_turn


def test_known_spans_of_a_calling_turn():
    text = "<think>plan</think>Checking.\n" + CALL
    spans = label_turn(text, final=False)
    assert [(k, text[s:e]) for k, s, e in spans] == [
        ("reasoning", "<think>plan</think>"),
        ("preamble", "Checking.\n"),
        ("tool_call", CALL),
    ]


def test_final_turn_without_calls_is_summary_but_a_final_turn_with_a_call_is_preamble():
    assert label_turn("It is sunny.", final=True) == [("summary", 0, 12)]
    assert label_turn("It is sunny.", final=False) == [("preamble", 0, 12)]
    text = "Calling " + CALL
    assert [k for k, _, _ in label_turn(text, final=True)] == ["preamble", "tool_call"]


def test_malformed_and_unclosed_calls_still_count_as_calls():
    text = 'Hmm <tool_call>{not json</tool_call> then <tool_call>{"name": "a"'
    spans = label_turn(text, final=True)
    assert [k for k, _, _ in spans] == ["preamble", "tool_call", "preamble", "tool_call"]
    assert spans[-1][2] == len(text)


def test_adjacent_call_blocks_stay_separate_spans():
    spans = label_turn(CALL + CALL, final=False)
    assert spans == [("tool_call", 0, len(CALL)), ("tool_call", len(CALL), 2 * len(CALL))]


def test_tags_inside_json_strings_and_duplicated_tags():
    text = '<tool_call>{"name": "say", "arguments": {"t": "<think></tool_call>"}}</tool_call>ok'
    spans = label_turn(text, final=False)
    assert [k for k, _, _ in spans] == ["tool_call", "preamble"]
    assert text[spans[1][1] :] == "ok"
    dup = "<think><think>a</think></think>answer"
    assert [k for k, _, _ in label_turn(dup, final=True)] == ["reasoning", "summary"]


FRAGMENTS = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        '{"name": "a"',
        '"',
        "\\",
        "{",
        "}",
        "[",
        "]",
        "\n",
        " ",
        "x",
        "é",
        "🙂",
        "</tool_",
        "<tool",
        "\ud800",
    ]
)


@given(text=st.text(), final=st.booleans())
def test_any_string_is_covered_exactly(text, final):
    assert_covering(label_turn(text, final=final), text)


@given(parts=st.lists(FRAGMENTS, max_size=40), final=st.booleans())
def test_adversarial_tag_soup_is_covered_exactly(parts, final):
    text = "".join(parts)
    spans = label_turn(text, final=final)
    assert_covering(spans, text)
    if any(kind == "tool_call" for kind, _, _ in spans):
        assert all(kind != "summary" for kind, _, _ in spans)


@pytest.mark.parametrize(
    "text",
    [
        "a" * 2_000_000,
        "<tool_call>" * 200_000,
        '<tool_call>{"s": "' + "x" * 1_000_000 + '"}</tool_call>',
        "<think>" + "</tool_call>" * 100_000,
        '"' * 1_000_000 + "<tool_call>" + '"</tool_call>' * 1000,
        '<tool_call>"</tool_call>"' * 40_000,  # was quadratic: each block rescanned the rest
    ],
)
def test_megabyte_inputs_are_covered(text):
    assert_covering(label_turn(text, final=True), text)


# ---------------------------------------------------------------- tokens


@pytest.fixture(scope="module")
def tokenizer():
    """A real byte-level BPE tokenizer (the Qwen2/GPT-2 family), trained here."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [CALL, "<think>plan the call</think>", "It is sunny in Zürich today. 🙂"] * 20
    tok.train_from_iterator(corpus, trainer)
    # Like Qwen, the tags are single added (non-special) tokens.
    tok.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t in ("<tool_call>", "</tool_call>", "<think>", "</think>")
        ]
    )
    return tok


def decoder(tok):
    return lambda ids: tok.decode(list(ids), skip_special_tokens=False)


@pytest.mark.parametrize(
    "text",
    [
        "<think>plan</think>Checking.\n" + CALL,
        "Done: it is 21°C in Zürich 🙂 — enjoy.<|im_end|>",
        "👩‍👩‍👧 ünïcødé " * 5,
    ],
)
def test_offsets_partition_the_decoded_text(tokenizer, text):
    ids = tokenizer.encode(text).ids
    decoded, offsets = token_offsets(decoder(tokenizer), ids)
    assert decoded == tokenizer.decode(ids, skip_special_tokens=False) == text
    assert len(offsets) == len(ids)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(decoded)
    for (s0, e0), (s1, e1) in zip(offsets, offsets[1:]):
        # Consecutive tokens either share one span (a split character) or abut.
        assert (s1, e1) == (s0, e0) or e0 == s1
    for token_id, (start, end) in zip(ids, offsets):
        piece = tokenizer.decode([token_id], skip_special_tokens=False)
        if "\ufffd" not in piece:  # whole characters: the span is exactly this token's text
            assert decoded[start:end] == piece


def test_tokens_of_one_multibyte_character_share_its_span(tokenizer):
    ids = tokenizer.encode("a🦜b").ids  # unseen in training: the parrot spans byte tokens
    assert len(ids) >= 4
    text, offsets = token_offsets(decoder(tokenizer), ids)
    assert text == "a🦜b"
    assert offsets == [(0, 1)] + [(1, 2)] * (len(ids) - 2) + [(2, 3)]


def test_runs_of_invalid_bytes_decode_in_linear_time_with_one_span_per_token(tokenizer):
    # Byte-level BPE maps byte 0x80 (a lone continuation byte) to chr(290).
    continuation = tokenizer.token_to_id(chr(290))
    ids = [tokenizer.token_to_id("a")] + [continuation] * 5000 + [tokenizer.token_to_id("b")]
    text, offsets = token_offsets(decoder(tokenizer), ids)
    assert len(offsets) == len(ids)
    assert text.startswith("a\ufffd") and text.endswith("b")
    start, end = offsets[-1]
    assert end == len(text) and text[start:end].endswith("b")
    assert all(b == a or a[1] == b[0] for a, b in zip(offsets, offsets[1:]))


def test_labels_come_from_offsets_of_the_sampled_ids_not_from_retokenising(tokenizer):
    # The policy sampled "Checking." character by character, a split the tokenizer
    # would never produce; re-tokenising would give fewer tokens and shift labels.
    pieces = ["<think>", "p", "l", "a", "n", "</think>", *"Checking.\n"]
    ids = [
        tokenizer.token_to_id(p)
        if tokenizer.token_to_id(p) is not None
        else tokenizer.encode(p).ids[0]
        for p in pieces
    ] + tokenizer.encode(CALL).ids
    assert tokenizer.encode(tokenizer.decode(ids)).ids != ids
    labels = label_turn_tokens(decoder(tokenizer), ids, final=False)
    assert len(labels.kinds) == len(ids)
    assert labels.kinds[:6] == ["reasoning"] * 6
    assert labels.kinds[6:16] == ["preamble"] * 10
    assert set(labels.kinds[16:]) == {"tool_call"}
    assert labels.call_index == [0] * len(ids)


def test_every_character_kind_reaches_the_tokens_over_it(tokenizer):
    text = "<think>x</think>Look: " + CALL + "\n" + CALL.replace("Zürich", "Bern")
    ids = tokenizer.encode(text).ids
    labels = label_turn_tokens(decoder(tokenizer), ids, final=True)
    for kind, (start, end) in zip(labels.kinds, labels.offsets):
        span_kinds = {k for k, s, e in labels.spans if s < end and start < e}
        assert kind in span_kinds
    # Two calls: tokens of the second block and the newline before it map to call 1.
    second = labels.spans[-1][1]
    assert all(ci == 1 for ci, (s, _) in zip(labels.call_index, labels.offsets) if s >= second)
    assert labels.call_index[0] == 0


def test_empty_width_tokens_take_the_previous_kind_then_the_default():
    spans = [("reasoning", 0, 3), ("summary", 3, 6)]
    kinds = label_tokens([(0, 3), (3, 3), (3, 6), (6, 6)], spans, empty_kind="summary")
    assert kinds == ["reasoning", "reasoning", "summary", "summary"]
    assert label_tokens([(0, 0)], [], empty_kind="preamble") == ["preamble"]


def test_a_token_straddling_spans_takes_the_larger_overlap():
    spans = [("reasoning", 0, 4), ("summary", 4, 10)]
    assert label_tokens([(2, 9)], spans, empty_kind="summary") == ["summary"]
    assert label_tokens([(1, 5)], spans, empty_kind="summary") == ["reasoning"]


def test_call_index_of_summary_and_callless_turns_is_minus_one(tokenizer):
    ids = tokenizer.encode("<think>plan</think>It is sunny.").ids
    labels = label_turn_tokens(decoder(tokenizer), ids, final=True)
    assert set(labels.call_index) == {-1}
    assert labels.kinds[-1] == "summary"


# ---------------------------------------------------------------- head masks


def test_default_routing_gives_disjoint_masks_whose_union_is_the_policy_tokens():
    kinds = [None, "reasoning", "tool_call", "preamble", "summary", None]
    codes = torch.tensor([encode_kinds(kinds)])
    masks = head_masks(codes)
    assert masks["tool"].tolist() == [[False, True, True, True, False, False]]
    assert masks["summary"].tolist() == [[False, False, False, False, True, False]]
    assert not (masks["tool"] & masks["summary"]).any()
    assert ((masks["tool"] | masks["summary"]) == (codes != ENV)).all()


def test_routing_can_drop_a_kind_and_rejects_unknown_kinds():
    codes = torch.tensor([[KIND_CODE["reasoning"], KIND_CODE["tool_call"]]])
    routing = dict(DEFAULT_ROUTING, reasoning=None)
    assert head_masks(codes, routing)["tool"].tolist() == [[False, True]]
    with pytest.raises(ValueError, match=r"unknown: \['thought'\]"):
        head_masks(codes, dict(DEFAULT_ROUTING, thought="tool"))
    with pytest.raises(ValueError, match=r"missing: \['summary'\]"):
        head_masks(codes, {k: v for k, v in DEFAULT_ROUTING.items() if k != "summary"})
    with pytest.raises(ValueError, match="head name or null"):
        head_masks(codes, dict(DEFAULT_ROUTING, summary=3))


def test_union_mask_is_every_head_token_and_needs_a_head():
    from slca.segments import union_mask

    masks = head_masks(torch.tensor([encode_kinds([None, "tool_call", "summary", None])]))
    assert union_mask(masks).tolist() == [[False, True, True, False]]
    with pytest.raises(ValueError, match="routes no kind to a head"):
        union_mask({})


# ---------------------------------------------------------------- mask runs (reference)


def _runs(row):
    """Maximal runs of True as (start, end) pairs."""
    runs, start = [], None
    for t, on in enumerate([*row, False]):
        if on and start is None:
            start = t
        elif not on and start is not None:
            runs.append((start, t))
            start = None
    return runs


@given(
    st.lists(
        st.lists(st.booleans(), min_size=0, max_size=12).map(tuple), min_size=1, max_size=6
    ).filter(lambda rows: len({len(r) for r in rows}) == 1)
)
def test_mask_runs_last_run_is_summary_earlier_runs_are_tool(rows):
    from slca.segments import mask_run_masks

    mask = torch.tensor(rows, dtype=torch.bool).reshape(len(rows), len(rows[0]))
    masks = mask_run_masks(mask)
    assert not (masks["tool"] & masks["summary"]).any()
    assert torch.equal(masks["tool"] | masks["summary"], mask)
    for i, row in enumerate(rows):
        runs = _runs(row)
        summary = [False] * len(row)
        for t in range(*runs[-1]) if runs else ():
            summary[t] = True
        assert masks["summary"][i].tolist() == summary
        assert masks["tool"][i].any().item() == (len(runs) >= 2)


def _codes(parts):
    """Per-character kind codes of a trajectory: ``("env", text)`` or ``("turn", text)``
    (a policy turn labelled from its text, final when it has no call)."""
    decode = lambda ids: "".join(map(chr, ids))  # noqa: E731 - one character per token
    codes = []
    for kind, text in parts:
        if kind == "env":
            codes += [ENV] * len(text)
        else:
            labels = label_turn_tokens(decode, [ord(c) for c in text])
            codes += encode_kinds(labels.kinds)
    return torch.tensor([codes])


THINK = "<think>Zürich is in the question.</think>"


@pytest.mark.parametrize(
    "parts, grammar_tool, runs_tool",
    [
        # cut off after a call: grammar trains the call on the tool head, mask runs on
        # the summary head
        ([("env", "prompt "), ("turn", CALL)], True, False),
        # <think> in the final turn, after a call: grammar puts the reasoning on the tool
        # head; mask runs put the whole final turn on the summary head
        ([("env", "p "), ("turn", CALL), ("env", " resp "), ("turn", THINK + "It is 21.")], 2, 1),
        # a direct answer opening with <think>: grammar has a tool head, mask runs none
        ([("env", "prompt "), ("turn", THINK + "It is 21 degrees.")], True, False),
    ],
    ids=["cut_off_after_call", "think_in_final_turn", "direct_answer_with_think"],
)
def test_the_three_rollouts_where_grammar_and_mask_runs_disagree(parts, grammar_tool, runs_tool):
    codes = _codes(parts)
    grammar = head_masks(codes)
    runs = head_masks(codes, mode="mask_runs")
    assert torch.equal(grammar["tool"] | grammar["summary"], codes != ENV)
    assert torch.equal(runs["tool"] | runs["summary"], codes != ENV)
    assert not torch.equal(grammar["summary"], runs["summary"])
    if isinstance(grammar_tool, bool):
        assert grammar["tool"].any().item() is grammar_tool
        assert runs["tool"].any().item() is runs_tool
    else:  # count the tool-head runs
        assert len(_runs(grammar["tool"][0].tolist())) == grammar_tool
        assert len(_runs(runs["tool"][0].tolist())) == runs_tool


def test_mask_runs_need_the_default_routing_and_modes_are_checked():
    codes = torch.tensor([encode_kinds([None, "reasoning", "summary"])])
    with pytest.raises(ValueError, match="needs the default routing"):
        head_masks(codes, dict(DEFAULT_ROUTING, reasoning=None), mode="mask_runs")
    with pytest.raises(ValueError, match=r"segment mode must be one of \['grammar', 'mask_runs'\]"):
        head_masks(codes, mode="turns")
