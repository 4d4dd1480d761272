"""Redact a case exactly as the trace is redacted, without cutting what replay must resend.

The trace's pass (`callgate.redact.redact`) masks fields whose names are credentials or that a
tool marks sensitive, and API keys and bearer tokens inside any text; so does this one.  It
differs in two places only: a string is never cut (a recorded argument must replay whole), and
a JSON document inside a string (a tool call's ``arguments`` text, a tool result the history
holds as text) is redacted as the document it is, so a sensitive field cannot hide in it.  Any
sensitive value the model may have repeated in its own text is scrubbed too.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from callgate.logs import secret_values
from callgate.redact import REDACTED, is_secret_key, mask_secrets, scrub, sensitive_values


class CaseRedactor:
    """One run's redaction: its tools' sensitive fields, and the values found under them."""

    def __init__(self, sensitive: Collection[str], *documents: Any) -> None:
        self.sensitive = frozenset(sensitive)
        echoed = set().union(*(sensitive_values(d, self.sensitive) for d in documents))
        self.echoed = sorted(v for v in (*secret_values(), *echoed) if v)

    def __call__(self, data: Any) -> Any:
        if isinstance(data, dict):
            return {
                key: REDACTED if self._secret(key) else self(value) for key, value in data.items()
            }
        if isinstance(data, list | tuple):
            return [self(item) for item in data]
        if isinstance(data, str):
            return self._text(data)
        return data

    def _secret(self, key: object) -> bool:
        return isinstance(key, str) and (key in self.sensitive or is_secret_key(key))

    def _text(self, text: str) -> str:
        if text[:1] in ("{", "["):
            try:
                document = orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
            else:
                return orjson.dumps(self(document)).decode()
        masked = mask_secrets(text)
        return scrub(masked, self.echoed) if self.echoed else masked
