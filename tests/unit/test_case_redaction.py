"""A case file is redacted as the trace is, and whole: credentials and a tool's sensitive
fields are masked wherever they sit — a field, a JSON document inside a string (a call's
``arguments`` text, a tool result in the history), or repeated in the model's own text — while
nothing is cut, since replay must resend every argument as it was."""

from __future__ import annotations

import orjson

from callgate.ops.cases.redaction import CaseRedactor
from callgate.redact import REDACTED

LONG = "x" * 5000


def test_secrets_inside_arguments_text_are_masked_and_nothing_is_cut() -> None:
    arguments = {"event_id": "ws-200", "api_key": "k-123", "card": "4111111111111111", "note": LONG}
    redact = CaseRedactor({"card"}, arguments)
    raw = {
        "output": [{"type": "function_call", "arguments": orjson.dumps(arguments).decode()}],
        "text": "I used card 4111111111111111 with Bearer abc.def.ghi",
    }

    clean = redact(raw)

    sent = orjson.loads(clean["output"][0]["arguments"])
    assert sent == {"event_id": "ws-200", "api_key": REDACTED, "card": REDACTED, "note": LONG}
    assert "4111111111111111" not in orjson.dumps(clean).decode()
    assert "abc.def.ghi" not in clean["text"] and clean["text"].startswith("I used card ")


def test_a_text_that_only_looks_like_json_is_kept() -> None:
    assert CaseRedactor(())("[not json") == "[not json"
