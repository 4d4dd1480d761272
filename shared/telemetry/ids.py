"""A run's trace context: W3C ``traceparent`` text, and the ids a run's trace is built on.

Pure; no OpenTelemetry import.  A run's trace id and the span id of its ``invoke_agent`` span
are derived from the run id, so any worker — after a crash, a redelivery, or for a message
written by a process that does not trace (the CLI, the Slack bot) — names the same trace and
the same parent as the message that started the run.
"""

from __future__ import annotations

import hashlib
import re

TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-1]$"
"""Version 00 of W3C Trace Context with the two flags callgate writes (sampled or not)."""
_TRACEPARENT = re.compile(TRACEPARENT_PATTERN)


def run_ids(run_id: str) -> tuple[int, int]:
    """The run's trace id (128 bits) and its root span's id (64 bits), never zero."""
    digest = hashlib.sha256(b"callgate.trace\x00" + run_id.encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def parse_traceparent(text: str | None) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled), or None for anything but a valid value."""
    if text is None or not _TRACEPARENT.match(text):
        return None
    trace_id, span_id = int(text[3:35], 16), int(text[36:52], 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, text.endswith("1")
