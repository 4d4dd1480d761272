"""`callgate resolve`: a person's answer for a write whose outcome stayed unknown.

    callgate resolve RUN_ID CALL_ID --applied [--result JSON] --as carol
    callgate resolve RUN_ID CALL_ID --not-applied --as carol
    callgate resolve RUN_ID CALL_ID --recheck --as carol

The answer is signed with the person's key and bound to the call and its operation id, posted
on the run's decisions stream like an approval, and applied by the validator only if the call
is still ``unresolved`` and the person holds a resolver role (the tool's approver role, or the
deployment's operator role).  Nothing is ever replayed: "applied" records the result the person
confirmed, "not applied" tells the model the write did not happen, "recheck" asks the
authoritative system again.  Exit codes: 0 applied, 1 refused or no verdict in time, 2 usage,
3 no such call or not unresolved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from callgate.auth.tokens import Signer
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.decisions.claims import ResolveOutcome
from callgate.decisions.desk import ApprovalDesk
from callgate.ops.approvals_cli import person_signer
from callgate.states import CallState

EXIT_REFUSED, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3


async def resolve(
    client: CallgateClient,
    run_id: str,
    call_id: str,
    outcome: ResolveOutcome,
    signer: Signer,
    *,
    result: dict[str, object] | None = None,
    reason: str | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, str]:
    """Sign and post one resolution and wait for the validator: (exit code, what to say)."""
    call = await client.ledger.get_call(run_id, call_id)
    if call is None:
        return EXIT_NOT_FOUND, f"no call {call_id} in run {run_id}"
    if call.state != CallState.UNRESOLVED:
        return EXIT_NOT_FOUND, f"call {call_id} is {call.state.value}, not unresolved"
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    after = await desk.last_event_id(run_id)
    message = await desk.resolve(call, outcome, signer, result=result, reason=reason)
    verdict = await desk.wait_outcome(message, after, timeout_s)
    if verdict is None:
        return EXIT_REFUSED, f"posted, but no verdict within {timeout_s:g}s: is the validator up?"
    if not verdict.applied:
        return EXIT_REFUSED, f"refused: {verdict.reason}"
    said = outcome.replace("_", " ")
    return 0, f"resolved {call_id} ({call.tool}, run {run_id}): {said}"


def _outcome(args: argparse.Namespace) -> ResolveOutcome:
    if args.applied:
        return "applied"
    return "not_applied" if args.not_applied else "recheck"


def _result(text: str | None) -> dict[str, object] | None:
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"--result is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("--result must be a JSON object, e.g. '{\"reservation_id\": \"r-1\"}'")
    return value


async def cmd_resolve(args: argparse.Namespace) -> int:
    outcome = _outcome(args)
    try:
        if args.result is not None and outcome != "applied":
            raise ValueError("--result goes with --applied only")
        result = _result(args.result)
    except ValueError as exc:
        print(f"callgate resolve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    settings = Settings()
    signer = person_signer(settings, args.person, args.key)
    async with CallgateClient(settings) as client:
        code, text = await resolve(client, args.run_id, args.call_id, outcome, signer,
                                   result=result, reason=args.reason, timeout_s=args.timeout)
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


def add_command(sub: Any) -> None:
    cmd = sub.add_parser("resolve", help="resolve a write whose outcome stayed unknown")
    cmd.add_argument("run_id")
    cmd.add_argument("call_id")
    answer = cmd.add_mutually_exclusive_group(required=True)
    answer.add_argument("--applied", action="store_true",
                        help="the write happened (the model is told --result)")
    answer.add_argument("--not-applied", action="store_true",
                        help="the write did not happen (the model is told so)")
    answer.add_argument("--recheck", action="store_true",
                        help="ask the authoritative system again")
    cmd.add_argument("--result", help="with --applied: the write's result, a JSON object")
    cmd.add_argument("--as", dest="person", required=True, help="who answers (e.g. carol)")
    cmd.add_argument("--key", type=Path,
                     help="their private key (default: HOME/keys/<as>.pem, the local keyring)")
    cmd.add_argument("--reason", help="why, kept in the run's trace")
    cmd.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a verdict")
    cmd.set_defaults(handler=cmd_resolve)
