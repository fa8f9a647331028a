"""Loose value equality and call matching."""

from __future__ import annotations

import pytest

from slca.rewards.match import canonical, loose_equal, resolve_path


@pytest.mark.parametrize(
    "a, b",
    [
        (10, "10"),
        (10, 10.0),
        ("10", 10.0),
        (" 10.50 ", 10.5),
        ("1e3", 1000),
        (True, "true"),
        (True, "True"),
        (False, " FALSE "),
        ("Paris", " paris"),
        (None, None),
        ([1, "A"], ["1", "a"]),
        ({"x": [1, {"y": "Z"}]}, {"x": ["1", {"y": "z"}]}),
        (10**30, 10**30),
    ],
)
def test_loosely_equal(a, b):
    assert loose_equal(a, b) and loose_equal(b, a)


@pytest.mark.parametrize(
    "a, b",
    [
        (True, 1),
        (False, 0),
        ("true", 1),
        (None, ""),
        (None, "null"),
        ([1, 2], [2, 1]),
        ([1], 1),
        ({"x": 1}, {"x": 1, "y": 2}),
        ({"X": 1}, {"x": 1}),
        ("nan", float("nan")),
        (10**400, 1e308),
        ("10 km", 10),
        (10, 10.001),
    ],
)
def test_not_loosely_equal(a, b):
    assert not loose_equal(a, b) and not loose_equal(b, a)


def test_deep_values_are_not_equal_and_do_not_recurse_forever():
    deep: list = []
    cursor = deep
    for _ in range(10_000):
        cursor.append([])
        cursor = cursor[0]
    assert not loose_equal(deep, deep)
    assert canonical(deep).startswith("<unserialisable")


def test_resolve_path():
    value = {"a": {"b": [{"c": 3}]}}
    assert resolve_path(value, "a.b.0.c") == (True, 3)
    assert resolve_path(value, "a.b[0].c") == (True, 3)
    assert resolve_path(value, "") == (True, value)
    assert resolve_path(value, "a.x") == (False, None)
    assert resolve_path(value, "a.b.5") == (False, None)
