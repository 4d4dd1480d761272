"""Webhook signatures: what `verify` accepts and the attacks it refuses, and the README's
few-line check, run as written against a real signature."""

from __future__ import annotations

import re
import time
from pathlib import Path

from callgate.webhooks.signing import sign, verify

SECRET = b"whsec-0123456789abcdef-test"
BODY = b'{"id":"r1/1-0","type":"run.finished","run_id":"r1","created_ms":1,"data":{}}'
NOW = 1_780_000_000
README = Path(__file__).resolve().parents[2] / "README.md"


def test_a_signed_body_verifies() -> None:
    assert verify(SECRET, sign(SECRET, BODY, NOW), BODY, now_s=NOW + 3)


def test_a_tampered_body_fails() -> None:
    header = sign(SECRET, BODY, NOW)
    assert not verify(SECRET, header, BODY.replace(b"run.finished", b"run.paused"), now_s=NOW)
    assert not verify(SECRET, header, BODY + b" ", now_s=NOW)


def test_a_forged_signature_fails() -> None:
    forged = sign(b"mallory-guessed-this-secret", BODY, NOW)
    assert not verify(SECRET, forged, BODY, now_s=NOW)
    assert not verify(SECRET, f"t={NOW},v1={'0' * 64}", BODY, now_s=NOW)


def test_a_moved_timestamp_fails() -> None:
    """The timestamp is signed: replaying the digest under a fresh time does not verify."""
    digest = sign(SECRET, BODY, NOW).split("v1=")[1]
    assert not verify(SECRET, f"t={NOW + 600},v1={digest}", BODY, now_s=NOW + 600)


def test_a_replay_outside_the_tolerance_fails() -> None:
    header = sign(SECRET, BODY, NOW)
    assert not verify(SECRET, header, BODY, now_s=NOW + 301)
    assert not verify(SECRET, header, BODY, now_s=NOW - 301)


def test_malformed_headers_fail() -> None:
    for header in ("", "v1=abc", f"t={NOW}", "t=x,v1=abc", "garbage", f"t=-{NOW},v1=ab"):
        assert not verify(SECRET, header, BODY, now_s=NOW), header


def _readme_snippet() -> str:
    section = README.read_text().split("## Webhooks", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return next(b for b in blocks if "def verify_callgate" in b)


def test_the_readme_check_accepts_a_real_signature_and_refuses_a_tampered_one() -> None:
    scope: dict[str, object] = {}
    exec(_readme_snippet(), scope)  # the documented snippet, run as written
    check = scope["verify_callgate"]
    assert callable(check)
    header = sign(SECRET, BODY, int(time.time()))
    assert check(SECRET, header, BODY) is True
    assert check(SECRET, header, BODY + b"x") is False
    assert check(b"another-secret-entirely-00", header, BODY) is False
