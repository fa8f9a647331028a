import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slca.grammar import (
    Limits,
    ToolCall,
    json_depth,
    lex_turn,
    parse_turn,
    render_tool_call,
    render_tool_response,
)

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_single_call_with_reasoning_and_preamble():
    turn = parse_turn("<think>need weather</think>Let me check.\n" + WEATHER)
    assert turn.calls == (ToolCall("get_weather", {"city": "Paris"}),)
    assert turn.reasoning == ("need weather",)
    assert turn.content == "Let me check."
    assert [b.ok for b in turn.blocks] == [True]


def test_a_json_list_in_one_block_is_parallel_calls():
    text = (
        '<tool_call>[{"name": "a", "arguments": {"x": 1}}, '
        '{"name": "b", "arguments": {}}]</tool_call>'
    )
    turn = parse_turn(text)
    assert [c.name for c in turn.calls] == ["a", "b"]
    assert len(turn.blocks) == 1


def test_several_blocks_keep_their_spans_and_order():
    text = WEATHER + "\n" + WEATHER.replace("Paris", "Rome")
    turn = parse_turn(text)
    assert [c.arguments["city"] for c in turn.calls] == ["Paris", "Rome"]
    first, second = turn.blocks
    assert text[first.start : first.end] == WEATHER
    assert first.end < second.start


def test_plain_text_has_no_calls():
    turn = parse_turn("  It is 21°C in Paris.  ")
    assert turn.calls == () and not turn.has_call_block
    assert turn.content == "It is 21°C in Paris."


@pytest.mark.parametrize(
    "payload, code",
    [
        ('{"name": "a", "arguments": {', "invalid_json"),
        ('{"name": "a"} {"name": "b"}', "invalid_json"),
        ('{"name": "a", "arguments": {"x": NaN}}', "invalid_json"),
        ('"get_weather"', "bad_shape"),
        ("[]", "bad_shape"),
        ('{"arguments": {}}', "bad_shape"),
        ('{"name": "", "arguments": {}}', "bad_shape"),
        ('{"name": "a", "arguments": [1, 2]}', "bad_shape"),
        ('[{"name": "a", "arguments": {}}, 3]', "bad_shape"),
        ('{"name": "a", "arguments": "not json"}', "bad_shape"),
    ],
)
def test_malformed_blocks_are_values_with_error_codes(payload, code):
    turn = parse_turn(f"<tool_call>{payload}</tool_call>")
    (block,) = turn.blocks
    assert not block.ok and block.error.code == code
    assert turn.calls == ()


def test_openai_style_string_arguments_are_accepted_when_they_hold_an_object():
    turn = parse_turn('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert turn.calls == (ToolCall("a", {"x": 1}),)


def test_missing_arguments_mean_no_arguments():
    assert parse_turn('<tool_call>{"name": "now"}</tool_call>').calls == (ToolCall("now", {}),)


def test_unclosed_block_is_an_error_running_to_the_end():
    turn = parse_turn('Sure. <tool_call>{"name": "a", "arguments": {}}')
    (block,) = turn.blocks
    assert block.error.code == "unclosed" and block.end == len(turn.text)
    assert turn.content == "Sure."


def test_closing_tag_inside_a_json_string_does_not_end_the_block():
    text = '<tool_call>{"name": "echo", "arguments": {"s": "</tool_call> ok"}}</tool_call>'
    turn = parse_turn(text)
    assert turn.calls == (ToolCall("echo", {"s": "</tool_call> ok"}),)
    assert turn.blocks[0].end == len(text)


def test_nested_tags_make_one_failed_block_and_stray_text():
    text = '<tool_call><tool_call>{"name": "a", "arguments": {}}</tool_call></tool_call>'
    turn = parse_turn(text)
    assert [b.error.code for b in turn.blocks] == ["invalid_json"]
    assert turn.content == "</tool_call>"


def test_calls_inside_reasoning_are_not_calls():
    turn = parse_turn("<think>I could emit " + WEATHER + "</think>Done.")
    assert turn.calls == () and turn.content == "Done."


def test_deep_json_is_rejected_before_decoding():
    deep = '{"name": "a", "arguments": {"x": ' + "[" * 10_000 + "]" * 10_000 + "}}"
    (block,) = parse_turn(f"<tool_call>{deep}</tool_call>").blocks
    assert block.error.code == "too_deep"
    nested_string = json.dumps({"name": "a", "arguments": "[" * 10_000 + "]" * 10_000})
    (block,) = parse_turn(f"<tool_call>{nested_string}</tool_call>").blocks
    assert block.error.code == "bad_shape" and "deeper" in block.error.message


def test_oversize_blocks_and_call_lists_are_rejected_unparsed():
    limits = Limits(max_block_chars=100, max_calls_per_block=2)
    big = json.dumps({"name": "a", "arguments": {"s": "x" * 200}})
    assert parse_turn(f"<tool_call>{big}</tool_call>", limits=limits).blocks[0].error.code == (
        "oversize"
    )
    many = json.dumps([{"name": "a", "arguments": {}}] * 3)
    assert parse_turn(f"<tool_call>{many}</tool_call>", limits=limits).blocks[0].error.code == (
        "oversize"
    )


def test_json_depth_ignores_brackets_in_strings():
    assert json_depth('{"a": "[[[{{{", "b": [1, [2]]}') == 3
    assert json_depth("]]]") == 0
    assert json_depth('"\\"[[["') == 0


def test_megabyte_turns_parse():
    text = ("word " * 200_000) + WEATHER + ("<tool_call>" * 1000)
    turn = parse_turn(text)
    assert turn.calls == (ToolCall("get_weather", {"city": "Paris"}),)
    assert turn.blocks[-1].error.code == "unclosed"


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    name=st.text(min_size=1, max_size=30).filter(lambda s: s.strip() == s and s),
    arguments=st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=4),
)
def test_rendered_calls_parse_back(name, arguments):
    call = ToolCall(name, arguments)
    turn = parse_turn("prefix " + render_tool_call(call))
    assert turn.calls == (call,)


@given(st.text())
def test_parse_never_raises_and_lexing_covers_the_text(text):
    turn = parse_turn(text)
    regions = lex_turn(text)
    assert sum(r.end - r.start for r in regions) == len(text)
    assert all(a.end == b.start for a, b in zip(regions, regions[1:]))
    assert len(turn.blocks) == sum(r.kind == "tool_call" for r in regions)


def test_render_tool_response():
    assert render_tool_response({"t": 21}) == '<tool_response>\n{"t": 21}\n</tool_response>'
    assert render_tool_response("raw") == "<tool_response>\nraw\n</tool_response>"


def _unbounded_find_call_close(text, start):
    """The lexer's close search before its run was bounded (issue 16's version): the
    reference the bounded one must agree with."""
    from slca.grammar import _CALL_RUN, _MAX_CLOSES_IN_STRINGS, _STRING_BODY, CALL_CLOSE

    pos, n, in_strings = start, len(text), 0
    while True:
        stop = _CALL_RUN.match(text, pos).end()
        in_strings += text.count(CALL_CLOSE, pos, stop)
        if in_strings >= _MAX_CLOSES_IN_STRINGS or stop == n:
            break
        if text.startswith(CALL_CLOSE, stop):
            return stop
        fails_at = _STRING_BODY.match(text, stop).end()
        inside = text.find(CALL_CLOSE, stop + 1, fails_at)
        if inside >= 0:
            return inside
        pos = fails_at
    return text.find(CALL_CLOSE, start)


FRAGMENTS = ["<tool_call>", "</tool_call>", '"', "\\", "\n", "a", "<", "<think>", "</think>"]


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join))
def test_the_bounded_close_search_finds_what_the_unbounded_one_did(text):
    from slca.grammar import _find_call_close

    for start in range(len(text) + 1):
        assert _find_call_close(text, start) == _unbounded_find_call_close(text, start)


def test_blocks_with_closing_tags_in_strings_lex_one_region_each():
    # 0.5 MB of the shape that rescanned the rest of the turn for every block: each
    # block is one region, found without reading past its own few closing tags.
    text = '<tool_call>"</tool_call>"' * 20_000
    regions = lex_turn(text)
    assert len(regions) == 40_000
    assert regions[0].kind == "tool_call" and regions[0].end == len('<tool_call>"</tool_call>')
