"""The human side of `callgate demo workshop`: decide the pending approval, report the booking.

alice asks for a seat at ws-101; `reserve_seat` needs the approval of an ``events-lead``.  The
demo asks in the terminal (approve or deny, and as whom; Ctrl-D means no), or decides as
``--approve-as USER`` without asking; with neither a terminal nor ``--approve-as`` it says so
in one line before starting anything.  Either way the decision goes through the same approvals
stream and the same validator checks as a Slack click or `callgate approve`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import Awaitable, Callable

from callgate.client import CallgateClient
from callgate.decisions.desk import DecisionKind
from callgate.decisions.record import ApprovalRecord
from callgate.ops.approvals_cli import decide, describe, desk, person_signer
from callgate.ops.stack import Progress

WORKSHOP_INPUT = "Please book me (participant p-alice) a seat at workshop ws-101."
VERDICT_TIMEOUT_S = 15.0

Ask = Callable[[ApprovalRecord], Awaitable[tuple[DecisionKind, str, str | None]]]


NO_TERMINAL = (
    "callgate demo workshop asks a person to approve the booking, and there is no terminal to "
    "ask in: pass --approve-as USER (e.g. --approve-as carol) to decide without asking"
)


def needs_terminal(approve_as: str | None) -> str | None:
    """Why the workshop cannot run here (said before anything starts), or None."""
    return NO_TERMINAL if approve_as is None and not sys.stdin.isatty() else None


async def _answer(prompt: str, default: str) -> str:
    """The typed answer, or ``default`` when it is empty or the input ends (Ctrl-D): an
    unanswered prompt takes the safe default rather than ending the demo with an error."""
    try:
        typed = await asyncio.to_thread(input, prompt)
    except EOFError:
        print(file=sys.stderr)
        return default
    return typed.strip() or default


async def ask_in_terminal(record: ApprovalRecord) -> tuple[DecisionKind, str, str | None]:
    """Show the pending call and ask: approve or deny (EOF or no answer: deny), and as whom."""
    if not sys.stdin.isatty():
        raise EOFError(NO_TERMINAL)
    print(describe(record), file=sys.stderr)
    answer = (await _answer("Approve this call? [y/N] ", "n")).lower()
    decision: DecisionKind = "approve" if answer in {"y", "yes"} else "deny"
    user = await _answer("Decide as [carol]: ", "carol")
    reason = None
    if decision == "deny":
        reason = await _answer("Reason: ", "denied in the demo")
    return decision, user, reason


async def decide_pending(
    client: CallgateClient,
    run_id: str,
    approve_as: str | None,
    progress: Progress,
    ask: Ask = ask_in_terminal,
) -> int:
    """Decide every pending approval of ``run_id``; return how many decisions applied."""
    applied = 0
    for record in [r for r in await desk(client).pending() if r.run_id == run_id]:
        progress(f"approval needed: {record.tool} {record.arguments} (role {record.approver_role})")
        decision: DecisionKind = "approve"
        user, reason = approve_as, None
        if user is None:
            decision, user, reason = await ask(record)
        signer = person_signer(client.settings, user)
        code, text = await decide(
            client, record.approval_id, decision, signer, reason, VERDICT_TIMEOUT_S
        )
        progress(text)
        applied += code == 0
    return applied


def booking_summary(booking_url: str) -> str:
    """What the authoritative system holds: the reservations, by participant."""
    with urllib.request.urlopen(f"{booking_url}/_stats", timeout=5) as reply:
        stats = json.load(reply)
    held = stats["reservations_by_participant"]
    listed = ", ".join(f"{k} ×{v}" for k, v in held.items()) or "none"
    return f"{stats['reservations']} reservation(s): {listed}"
