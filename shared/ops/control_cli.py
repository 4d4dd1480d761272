"""`callgate resolve` / `cancel` / `resume`: the ways out of a pause that a person takes.

    callgate resolve RUN_ID CALL_ID --applied [--result JSON] --as carol
    callgate resolve RUN_ID CALL_ID --not-applied | --recheck --as carol
    callgate cancel RUN_ID --as alice [--reason TEXT]
    callgate resume RUN_ID --as operator [--max-turns N] [--deadline-s S] [--max-total-tokens T]

Each is signed with the person's key, posted on the run's decisions stream like an approval,
and applied by the validator only if the signature, the person's authority and the run's
state allow it (`callgate.decisions`); the command prints the verdict.  A resolution is bound
to the call and its operation id and needs a resolver role (the tool's approver role, or the
deployment's operator role); nothing is ever replayed: "applied" records the result the person
confirmed, "not applied" tells the model the write did not happen, "recheck" asks the
authoritative system again.  Cancel and resume are for the run's own user or an operator.
Exit codes: 0 applied, 1 refused or no verdict in time, 2 usage, 3 no such run or call, or not
in a state for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Literal

import orjson

from callgate.auth.tokens import Signer
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.decisions.claims import ResolveOutcome
from callgate.decisions.desk import ApprovalDesk
from callgate.envelopes import SignedDecision
from callgate.errors import JobFailedError
from callgate.ops import exits
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
    said = outcome.replace("_", " ")
    return await verdict(
        desk, message, after, timeout_s, f"resolved {call_id} ({call.tool}, run {run_id}): {said}"
    )


async def verdict(
    desk: ApprovalDesk, message: SignedDecision, after: str, timeout_s: float, done: str
) -> tuple[int, str]:
    """The validator's verdict on a posted decision, as (exit code, what to say)."""
    outcome = await desk.wait_outcome(message, after, timeout_s)
    if outcome is None:
        return EXIT_REFUSED, f"posted, but no verdict within {timeout_s:g}s: is the validator up?"
    if not outcome.applied:
        return EXIT_REFUSED, f"refused: {outcome.reason}"
    return 0, done


async def control(
    client: CallgateClient,
    run_id: str,
    act: Literal["cancel", "resume"],
    signer: Signer,
    timeout_s: float = 10.0,
    **budget: float | str | None,
) -> tuple[int, str]:
    """Sign and post a cancel or resume and wait for the validator: (exit code, what to say).
    ``budget``: reason, max_turns, deadline_s, max_total_tokens (`ControlClaims`)."""
    run = await client.ledger.get_run(run_id)
    if run is None:
        return EXIT_NOT_FOUND, f"no run {run_id}"
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    after = await desk.last_event_id(run_id)
    message = await desk.control(run, act, signer, budget=budget)
    verb = "cancelled" if act == "cancel" else "resumed"
    return await verdict(desk, message, after, timeout_s, f"{verb} {run_id}")


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
        raise ValueError('--result must be a JSON object, e.g. \'{"reservation_id": "r-1"}\'')
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
        code, text = await resolve(
            client,
            args.run_id,
            args.call_id,
            outcome,
            signer,
            result=result,
            reason=args.reason,
            timeout_s=args.timeout,
        )
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


async def cmd_control(args: argparse.Namespace) -> int:
    settings = Settings()
    signer = person_signer(settings, args.person, args.key)
    budget = {
        name: getattr(args, name, None)
        for name in ("reason", "max_turns", "deadline_s", "max_total_tokens")
    }
    async with CallgateClient(settings) as client:
        code, text = await control(
            client, args.run_id, args.command, signer, args.timeout, **budget
        )
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


async def cmd_reply(args: argparse.Namespace) -> int:
    """A follow-up input for a completed run, signed with this machine's submitter key."""
    async with CallgateClient(Settings()) as client:
        reply_id = await client.reply(
            args.run_id, args.input, policy=args.policy, max_turns=args.max_turns
        )
        try:
            result = await client.reply_result(reply_id, args.timeout)
        except JobFailedError as exc:
            print(f"callgate reply: {exc}", file=sys.stderr)
            return EXIT_NOT_FOUND if "completed" in str(exc) or "no run" in str(exc) else 1
        except TimeoutError:
            print(
                f"callgate reply: queued as {reply_id}; no verdict within {args.timeout:g}s "
                "(is the ingress running? with --policy enqueue it waits for the run)",
                file=sys.stderr,
            )
            return EXIT_REFUSED
    turn = result.get("turn")
    print(f"reply admitted to {args.run_id}" + (f" as turn {turn}" if turn else " (already)"))
    return 0


def _person(cmd: Any, who: str) -> None:
    cmd.add_argument(
        "--as", dest="person", required=True, type=exits.person_name, help=f"who decides ({who})"
    )
    cmd.add_argument(
        "--key",
        type=Path,
        help="their private key (default: HOME/keys/<as>.pem, the local keyring)",
    )
    cmd.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a verdict")


def add_command(sub: Any) -> None:
    reply = sub.add_parser("reply", help="continue a completed run with a follow-up input")
    reply.add_argument("run_id")
    reply.add_argument("--input", required=True, help="the follow-up message")
    reply.add_argument(
        "--policy",
        choices=("reject", "enqueue"),
        default="reject",
        help="if the run is busy: refuse (default), or admit when it completes",
    )
    reply.add_argument("--max-turns", type=int, help="a larger turn budget for the run")
    reply.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for it")
    reply.set_defaults(handler=cmd_reply)
    cancel = sub.add_parser("cancel", help="cancel a run (calls in flight settle truly)")
    cancel.add_argument("run_id")
    cancel.add_argument("--reason", help="why, kept in the run's trace")
    _person(cancel, "the run's user or an operator")
    cancel.set_defaults(handler=cmd_control)
    resume = sub.add_parser("resume", help="resume a run paused incomplete or handed off")
    resume.add_argument("run_id")
    resume.add_argument("--max-turns", type=int, help="the new turn budget")
    resume.add_argument("--deadline-s", type=float, help="a new deadline, seconds from now")
    resume.add_argument("--max-total-tokens", type=int, help="the new token budget")
    _person(resume, "the run's user or an operator")
    resume.set_defaults(handler=cmd_control)
    cmd = sub.add_parser("resolve", help="resolve a write whose outcome stayed unknown")
    cmd.add_argument("run_id")
    cmd.add_argument("call_id")
    answer = cmd.add_mutually_exclusive_group(required=True)
    answer.add_argument(
        "--applied", action="store_true", help="the write happened (the model is told --result)"
    )
    answer.add_argument(
        "--not-applied", action="store_true", help="the write did not happen (the model is told so)"
    )
    answer.add_argument("--recheck", action="store_true", help="ask the authoritative system again")
    cmd.add_argument("--result", help="with --applied: the write's result, a JSON object")
    cmd.add_argument("--reason", help="why, kept in the run's trace")
    _person(cmd, "a resolver: the tool's approver role, or an operator")
    cmd.set_defaults(handler=cmd_resolve)
