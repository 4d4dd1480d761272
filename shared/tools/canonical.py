"""Canonical JSON and its hash: the identity of a tool call's arguments.

An approval is bound to the hash of the exact arguments the approver saw, and the executor
re-checks that hash before dispatch, so the same arguments must always give the same bytes:
keys sorted at every level, no insignificant whitespace, UTF-8.  orjson's
``OPT_SORT_KEYS`` gives exactly that; floats use its shortest round-trip form, so a value
that went through one JSON round trip hashes the same as before it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

_OPTIONS = orjson.OPT_SORT_KEYS


def canonical_bytes(value: Any) -> bytes:
    """Sorted-key compact JSON of ``value`` (must be JSON-able with string keys)."""
    return orjson.dumps(value, option=_OPTIONS)


def canonical_json(value: Any) -> str:
    """`canonical_bytes` as text, for records that store strings."""
    return canonical_bytes(value).decode()


def hash_bytes(data: bytes) -> str:
    """sha256 hex of already-canonical bytes."""
    return hashlib.sha256(data).hexdigest()


def args_hash(value: Any) -> str:
    """sha256 hex of the canonical JSON of ``value``; equal for equal values in any key order."""
    return hash_bytes(canonical_bytes(value))
