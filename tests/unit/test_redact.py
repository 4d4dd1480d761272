"""A secret inside a longer string is replaced where it stands; the words around it stay."""

from __future__ import annotations

from callgate.redact import MAX_EVENT_STRING, REDACTED, redact, redact_error

KEY = "sk-abcdefghijklmnop1234"


def test_an_embedded_key_is_replaced_and_the_rest_kept() -> None:
    clean = redact({"note": f"use key {KEY} now", "items": [f"({KEY})", f"a={KEY}"]})
    assert clean == {"note": f"use key {REDACTED} now", "items": [f"({REDACTED})", f"a={REDACTED}"]}


def test_every_kind_of_secret_is_found_mid_text() -> None:
    text = ("x Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig y Basic dXNlcjpwYXNz z "
            "sk-ant-api03-AAAA w xoxb-1234-abcd v SK-ABCDEFGHIJKLMNOP end")  # fmt: skip
    clean = redact(text)
    assert clean == f"x {REDACTED} y {REDACTED} z {REDACTED} w {REDACTED} v {REDACTED} end"


def test_prose_and_lookalikes_stay() -> None:
    prose = [
        "a basic example", "bearers of news", "task-abcdefghijklmnopqrstu",
        "ask-abcdefghijklmnopqrstu", "sk-short", "the Basic plan", "skies xoxo",
    ]  # fmt: skip
    assert redact(prose) == prose


def test_a_secret_straddling_the_cut_of_a_long_string_is_not_half_shown() -> None:
    text = "x" * (MAX_EVENT_STRING - 10) + f" {KEY} " + "y" * 1000
    clean = redact(text)
    assert "sk-abc" not in clean and clean.startswith("x" * (MAX_EVENT_STRING - 10) + " [redac")


def test_an_error_message_is_redacted_the_same_way() -> None:
    assert redact_error(ValueError(f"bad key {KEY}!")) == f"ValueError: bad key {REDACTED}!"


def test_the_shortest_secrets_are_found_though_short_strings_skip_the_scan() -> None:
    """Strings shorter than any secret skip the pattern; the shortest a secret can be still
    goes through it, alone and as a field of an event."""
    for secret in ("xoxb-1", "xoxp-Z", "Bearer x", "sk-ant-x"):
        assert redact(secret) == REDACTED
        assert redact({"note": secret, "items": [secret]}) == {
            "note": REDACTED,
            "items": [REDACTED],
        }
    assert redact(["xoxb-", "sk-", "t1.0"]) == ["xoxb-", "sk-", "t1.0"]
