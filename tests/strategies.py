"""Hypothesis strategies of anything a caller can pass a door, storable or not.

Every door (the client API, ``ctx.*``, the commands, the admin's forms, the
Tasks backend, the settings) is fuzzed with these: each draws values that
PostgreSQL stores and values it cannot (NUL, lone surrogates, integers past
``integer``, NaN and infinities, JSON too deep or too wide, far-off and naive
instants, names past ``MAX_NAME_CHARS``), so a door that lets a bad value
reach a statement shows up as an untyped error or a row that was written.

Example counts come from :func:`fuzz`: each test's own bounded count in CI,
or the ``long`` profile's with ``DURABLE_FUZZ=long`` (see CONTRIBUTING.md).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from durable_django.storable import MAX_JSON_DEPTH, MAX_NAME_CHARS, PG_INTEGER_MAX, PG_INTEGER_MIN

_LONG_EXAMPLES = 2000
_FUZZ_SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    database=None,
)


def fuzz(examples: int) -> settings:
    """The settings of a fuzz test: ``examples`` examples in CI, many more with ``DURABLE_FUZZ=long``."""
    long_run = os.environ.get("DURABLE_FUZZ") == "long"
    return settings(_FUZZ_SETTINGS, max_examples=_LONG_EXAMPLES if long_run else examples)


# Every code point, lone surrogates and NUL included.
any_char = st.characters(codec=None, exclude_categories=())
surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)

# Text: ordinary, hostile (a NUL or a lone surrogate somewhere), and long (around the name limit and far past it).
plain_text = st.text(min_size=1, max_size=20)
hostile_text = st.builds(
    lambda head, bad, tail: head + bad + tail,
    st.text(max_size=8),
    st.sampled_from(["\x00"]) | surrogate,
    st.text(max_size=8),
)
long_text = st.integers(MAX_NAME_CHARS - 1, 4 * MAX_NAME_CHARS).map(lambda size: "é" * size)
texts = st.one_of(plain_text, st.text(alphabet=any_char, max_size=20), hostile_text, long_text, st.just(""))

# Integers: small, at PostgreSQL's integer bounds and just past them, and huge.
integer_edges = st.sampled_from(
    [0, 1, -1, PG_INTEGER_MAX, PG_INTEGER_MAX + 1, PG_INTEGER_MIN, PG_INTEGER_MIN - 1, 2**41, 2**63, -(2**63), 10**30]
)
integers = st.one_of(st.integers(-5, 100), integer_edges, st.integers())

# Floats: anything IEEE 754 holds, NaN and both infinities included.
floats = st.one_of(st.floats(), st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1e308, 5e-324]))

# Instants: aware and naive, from year 1 to year 9999, in fixed offsets, UTC and named zones.
_offsets = st.integers(-23 * 60, 23 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
instants = st.one_of(
    st.datetimes(timezones=st.none() | st.just(UTC) | _offsets | st.timezones()),
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
)

# Durations: timedeltas and plain numbers of seconds, negative, huge and NaN among them.
durations = st.one_of(st.timedeltas(), integers, floats)


class _Shown:
    """A deep value that Hypothesis (and a failure message) shows by its shape, not by recursing into it."""

    shape = ""

    def __repr__(self) -> str:
        return self.shape

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.shape)


class NestedList(_Shown, list):
    pass


class NestedDict(_Shown, dict):
    pass


def nested(depth: int, kind: str = "list") -> Any:
    """A JSON value ``depth`` levels deep (lists or objects), built without recursion, shown by its shape."""
    value: Any = 0
    for _ in range(depth - 1):
        value = [value] if kind == "list" else {"k": value}
    outer: _Shown = NestedList([value]) if kind == "list" else NestedDict(k=value)
    outer.shape = f"nested({depth}, {kind!r})"
    return outer


# JSON values: nested lists and objects of hostile scalars and keys, very deep ones, and very wide ones.
json_scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)
json_trees = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
deep_json = st.builds(
    nested,
    st.sampled_from([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 5_000]),
    st.sampled_from(["list", "dict"]),
)
wide_json = st.integers(1_000, 5_000).map(lambda width: list(range(width)))
json_values = st.one_of(json_trees, deep_json, wide_json)

# What no JSON encoder takes: bytes, sets, objects.
not_json = st.one_of(st.binary(max_size=8), st.sets(st.integers(), max_size=3), st.builds(object))

# Anything at all a caller can pass where a value is expected.
anything = st.one_of(st.none(), st.booleans(), texts, integers, floats, instants, durations, json_values, not_json)

# Names and keys: mostly text, sometimes not text at all.
names = st.one_of(texts, texts, st.none(), integers, st.binary(max_size=8))
