"""`callgate approvals` / `approve` / `deny`: the terminal's equivalent of the Slack buttons.

    callgate approvals [--json]                          # approvals waiting for a human
    callgate inbox [--json]                              # approvals and unresolved outcomes
    callgate approve APPROVAL_ID --as USER               # sign, post, report the verdict
    callgate deny APPROVAL_ID --as USER --reason TEXT

A decision is signed with USER's key (HOME/keys/USER.pem, or ``--key FILE``) and goes onto the
run's decisions stream exactly like a Slack click; the validator verifies the signature and
checks it (live, role, same arguments, not the requester's own, first decision) and the command
prints its verdict.  Exit codes: 0 applied, 1 refused / not found / no verdict in time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from callgate.auth.deployment import signer_of
from callgate.auth.keys import read_private_key
from callgate.auth.tokens import Signer
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.decisions.desk import ApprovalDesk, DecisionKind
from callgate.decisions.record import ApprovalRecord
from callgate.ops import exits
from callgate.records import CallRecord

ARGUMENTS_SHOWN = 120


def person_signer(settings: Settings, person: str, key: Path | None = None) -> Signer:
    """``person``'s signing key: ``key`` if given, else theirs in the local keyring."""
    if key is not None:
        return Signer(person, read_private_key(key))
    return signer_of(settings, person)


def desk(client: CallgateClient) -> ApprovalDesk:
    return ApprovalDesk(client.redis, client.keys, client.ledger, client.settings.tenant)


def describe(record: ApprovalRecord, now_ms: int | None = None) -> str:
    """One approval as the lines a person decides on."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    left_s = max(0, (record.expires_ms - now) // 1000)
    return "\n".join(
        [
            f"approval {record.approval_id}: {record.tool} v{record.tool_version}",
            f"  arguments     {record.arguments[:ARGUMENTS_SHOWN]}",
            f"  requested by  {record.requested_by} (run {record.run_id}, call {record.call_id})",
            f"  approver role {record.approver_role}; expires in {left_s}s",
        ]
    )


def as_json(record: ApprovalRecord) -> dict[str, Any]:
    data = record.model_dump(mode="json")
    data["arguments"] = orjson.loads(record.arguments)
    return data


async def cmd_approvals(args: argparse.Namespace) -> int:
    async with CallgateClient(Settings()) as client:
        records = await desk(client).pending(args.limit)
    if args.json:
        sys.stdout.write(orjson.dumps([as_json(r) for r in records]).decode() + "\n")
    elif not records:
        print("no approvals pending")
    else:
        print("\n\n".join(describe(r) for r in records))
    return 0


def describe_unresolved(call: CallRecord) -> str:
    """One unresolved call as the lines a person resolves it from."""
    return "\n".join(
        [
            f"unresolved {call.call_id}: {call.tool} (run {call.run_id})",
            f"  operation id  {call.operation_id}",
            f"  reason        {call.reason}",
            f"  resolve with  callgate resolve {call.run_id} {call.call_id} "
            "--applied|--not-applied|--recheck --as YOU",
        ]
    )


async def cmd_inbox(args: argparse.Namespace) -> int:
    """What waits for a person: pending approvals and unresolved write outcomes."""
    async with CallgateClient(Settings()) as client:
        approvals = await desk(client).pending(args.limit)
        unresolved = await desk(client).unresolved(args.limit)
    if args.json:
        data = {
            "approvals": [as_json(r) for r in approvals],
            "unresolved": [c.model_dump(mode="json") for c in unresolved],
        }
        sys.stdout.write(orjson.dumps(data).decode() + "\n")
    elif not approvals and not unresolved:
        print("nothing waits for a person")
    else:
        print(
            "\n\n".join(
                [*(describe(r) for r in approvals), *(describe_unresolved(c) for c in unresolved)]
            )
        )
    return 0


async def decide(
    client: CallgateClient,
    approval_id: str,
    decision: DecisionKind,
    signer: Signer,
    reason: str | None,
    timeout_s: float,
) -> tuple[int, str]:
    """Sign and post one decision and wait for the validator: (exit code, what to tell the
    person)."""
    approvals = desk(client)
    record = await approvals.find(approval_id)
    if record is None:
        return 1, f"no pending approval {approval_id} (decided, expired or unknown)"
    after = await approvals.last_event_id(record.run_id)
    message = await approvals.post(record, decision, signer, reason=reason)
    outcome = await approvals.wait_outcome(message, after, timeout_s)
    if outcome is None:
        return 1, f"posted, but no verdict within {timeout_s:g}s: is the validator running?"
    if not outcome.applied:
        return 1, f"refused: {outcome.reason}"
    verb = "approved" if decision == "approve" else "denied"
    return 0, f"{verb} {approval_id} ({record.tool}, run {record.run_id}, call {record.call_id})"


async def cmd_decide(args: argparse.Namespace) -> int:
    decision: DecisionKind = "approve" if args.command == "approve" else "deny"
    settings = Settings()
    signer = person_signer(settings, args.approver, args.key)
    async with CallgateClient(settings) as client:
        code, text = await decide(
            client, args.approval_id, decision, signer, args.reason, args.timeout
        )
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


def add_command(sub: Any) -> None:
    listing = sub.add_parser("approvals", help="list the approvals waiting for a human")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(handler=cmd_approvals)
    inbox = sub.add_parser(
        "inbox", help="list what waits for a person: approvals and unresolved write outcomes"
    )
    inbox.add_argument("--json", action="store_true")
    inbox.add_argument("--limit", type=int, default=100)
    inbox.set_defaults(handler=cmd_inbox)
    for name, text in (("approve", "approve a pending call"), ("deny", "deny a pending call")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("approval_id")
        cmd.add_argument(
            "--as",
            dest="approver",
            required=True,
            type=exits.person_name,
            help="who decides (e.g. carol)",
        )
        cmd.add_argument(
            "--key",
            type=Path,
            help="their private key (default: HOME/keys/<as>.pem, the local keyring)",
        )
        cmd.add_argument("--reason", required=name == "deny", help="told to the model on deny")
        cmd.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for it")
        cmd.set_defaults(handler=cmd_decide)
