"""Checks on untrusted JSON text that must not trust a parser: depth and duplicate keys.

Both run on the raw text the model produced.  The depth scan comes before any parser
(orjson refuses documents deeper than 1024, recursive walkers overflow the stack); the
duplicate-key check runs only on text already known to be shallow.
"""

from __future__ import annotations

import json
from typing import Any


def exceeds_depth(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays/objects deeper than ``limit``, by one linear scan.

    Brackets inside strings (including escaped quotes) do not count.  No parser and no
    recursion, so a 10,000-deep document costs one pass and cannot overflow anything.
    """
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def duplicate_key(raw: str) -> str | None:
    """The first repeated object key, if any.  Parsers disagree on which duplicate wins, so
    a repeated key is refused rather than silently resolved.  (The stdlib parser recurses,
    but the depth was bounded before this runs.)"""
    try:
        json.loads(raw, object_pairs_hook=_reject_duplicates)
    except _DuplicateKey as dup:
        return dup.key
    return None
