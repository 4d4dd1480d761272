"""Canonical JSON: the same arguments give the same bytes and hash in any key order."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from callgate.tools.canonical import args_hash, canonical_bytes, canonical_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False,
    allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)  # fmt: skip


def _shuffled(value: Any, rng: random.Random) -> Any:
    """The same value with every dict's insertion order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def test_sorted_compact_at_every_level() -> None:
    value = {"b": 1, "a": {"d": [2, {"z": 1, "y": 0}], "c": "é"}}
    assert canonical_bytes(value) == '{"a":{"c":"é","d":[2,{"y":0,"z":1}]},"b":1}'.encode()
    assert canonical_json(value) == canonical_bytes(value).decode()


def test_hash_is_sha256_of_canonical_bytes() -> None:
    value = {"train_number": "G1234", "date": "2026-12-20"}
    expected = hashlib.sha256(b'{"date":"2026-12-20","train_number":"G1234"}').hexdigest()
    assert args_hash(value) == expected
    assert args_hash({"date": "2026-12-20", "train_number": "G1234"}) == expected


def test_different_values_hash_differently() -> None:
    assert args_hash({"a": 1}) != args_hash({"a": 2})
    assert args_hash({"a": 1}) != args_hash({"a": "1"})
    assert args_hash({"a": [1, 2]}) != args_hash({"a": [2, 1]})  # list order is meaningful


@given(json_values, st.integers(0, 2**32))
def test_hash_stable_under_key_order_and_round_trip(value: Any, seed: int) -> None:
    shuffled = _shuffled(value, random.Random(seed))
    assert canonical_bytes(shuffled) == canonical_bytes(value)
    assert args_hash(orjson.loads(canonical_bytes(value))) == args_hash(value)
