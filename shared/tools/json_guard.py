"""Checks on untrusted JSON text that must not trust a parser: depth and duplicate keys.

Both run on the raw text the model produced.  The depth scan comes before any parser
(orjson refuses documents deeper than 1024, recursive walkers overflow the stack); the
duplicate-key check runs only on text already known to be shallow.
"""

from __future__ import annotations

import json
import re
from typing import Any

_KEY_END = re.compile(r'"\s*:')
"""Where an object key can end: every key's closing quote is followed by this, so the
text holds at most as many keys as matches (more only if a string value contains it)."""


def exceeds_depth(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays/objects deeper than ``limit``, by one linear scan.

    Brackets inside strings (including escaped quotes) do not count.  No parser and no
    recursion, so a 10,000-deep document costs one pass and cannot overflow anything.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # cannot nest deeper than it opens: spares the scan for most text
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


def duplicate_key(raw: str, parsed: Any = None) -> str | None:
    """The first repeated object key, if any.  Parsers disagree on which duplicate wins, so
    a repeated key is refused rather than silently resolved.  (The stdlib parser recurses,
    but the depth was bounded before this runs.)

    ``parsed``: ``raw`` as a parser read it, keeping one of each repeated key.  If its keys
    number as many as the places a key can end in ``raw``, none was repeated, and the
    slow parse that names the repeated key is skipped."""
    if parsed is not None and _count_keys(parsed) == len(_KEY_END.findall(raw)):
        return None
    try:
        json.loads(raw, object_pairs_hook=_reject_duplicates)
    except _DuplicateKey as dup:
        return dup.key
    return None


def _count_keys(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_count_keys(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_keys(v) for v in value)
    return 0
