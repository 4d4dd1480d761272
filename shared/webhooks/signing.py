"""Webhook signatures: HMAC-SHA256 over ``<timestamp>.<body>``, in one header with the timestamp.

The header is ``Callgate-Signature: t=<unix seconds>,v1=<hex digest>`` (the shape Stripe's
receivers know).  Signing the timestamp with the body lets a receiver refuse a delivery
replayed later (`TOLERANCE_S`); comparing in constant time keeps the digest from leaking a byte
at a time.  Pure: no clock unless the caller passes none, no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Callgate-Signature"
EVENT_ID_HEADER = "Callgate-Event-Id"
EVENT_TYPE_HEADER = "Callgate-Event"
TOLERANCE_S = 300
"""How old a signed timestamp a receiver accepts by default."""


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``<timestamp>.<body>`` under ``secret``."""
    return hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """The ``Callgate-Signature`` header value for ``body`` sent at ``timestamp``."""
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(
    secret: bytes,
    header: str,
    body: bytes,
    *,
    now_s: float | None = None,
    tolerance_s: float = TOLERANCE_S,
) -> bool:
    """Whether ``header`` signs exactly ``body`` under ``secret`` within ``tolerance_s`` of now.

    A receiver calls this with the raw request body, before parsing it."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    stamp = parts.get("t", "")
    if not stamp.isdigit() or "v1" not in parts:
        return False
    now = time.time() if now_s is None else now_s
    if abs(now - int(stamp)) > tolerance_s:
        return False
    return hmac.compare_digest(parts["v1"], signature(secret, int(stamp), body))
