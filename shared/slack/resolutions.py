"""A verified Applied / Not applied / Recheck click → a signed resolution of an unknown outcome,
exactly what `callgate resolve` posts (DESIGN §8, §10).

By the time a click gets here Bolt has checked Slack's signature and timestamp.  The bot then
maps the Slack user to a person (the approvers map) and reads the call record: the call must
still be ``unresolved``, under the operation id the button showed.  A refused click posts
nothing; the clicker is told why, ephemerally.  Otherwise the bot signs the resolution with its
own delegate key for that person, bound to the call's operation id, and posts it on the run's
decisions stream.  Whether it applies (who may resolve: the tool's approver role for this call,
or the operator role; once) is the validator's call, which it records as ``call.resolved`` or
``resolve.refused`` in the run's events.  The bot watches for that verdict off the request path
(Slack wants its answer within three seconds): applied → the message says who resolved it and
loses its buttons (a recheck keeps them: the system may still not tell); refused → the clicker
is told why and the buttons stay for someone else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from slack_sdk.web.async_client import AsyncWebClient

from callgate.auth.tokens import Signer, sign_decision
from callgate.connect import RedisClient
from callgate.decisions.claims import ResolveOutcome, resolve_claims
from callgate.decisions.desk import last_event_id, wait_outcome
from callgate.envelopes import SignedDecision, new_id
from callgate.errors import RedisUnavailableError
from callgate.keys import Keys
from callgate.logs import log_fields
from callgate.records import CallRecord
from callgate.slack.messages import (
    RESOLVE_ACTIONS,
    ResolveValue,
    escape,
    resolved_blocks,
    resolved_text,
)
from callgate.slack.records import MalformedRecordError, load_call
from callgate.slack.replies import Origin, tell, update
from callgate.slack.settings import Approver
from callgate.states import CallState
from callgate.streams.commands import post

log = logging.getLogger("callgate.slack.resolutions")

STORE_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisUnavailableError)
UNAVAILABLE = "callgate is unavailable right now; try again shortly"


@dataclass(frozen=True, slots=True)
class ResolveClick:
    """One click on an unknown-outcome message: where it came from and what it says."""

    origin: Origin
    outcome: ResolveOutcome | None
    """None when the action id is not one of ours."""
    value: ResolveValue | None
    """None when the button's value is not one of ours."""


def parse_resolve_click(body: Mapping[str, Any], action: Mapping[str, Any]) -> ResolveClick:
    return ResolveClick(
        origin=Origin.of(body),
        outcome=RESOLVE_ACTIONS.get(str(action.get("action_id", ""))),
        value=ResolveValue.from_value(str(action.get("value", ""))),
    )


def authorize_resolve(
    click: ResolveClick, person: Approver | None, call: CallRecord | None, *, team_id: str | None
) -> str | None:
    """Why the click is refused, or None when it may be posted.  Pure; the resolver role is
    the validator's to check (it knows the tool's rule for this call)."""
    if team_id is not None and click.origin.team_id != team_id:
        return "this Slack workspace may not resolve callgate calls"
    if click.value is None or click.outcome is None:
        return "this button is not a callgate resolution"
    if person is None:
        return "you are not mapped to a callgate person"
    if call is None:
        return "no such call"
    if (call.run_id, call.call_id) != (click.value.run_id, click.value.call_id):
        return "this button does not match the call record"
    if call.operation_id != click.value.op:
        return "the call's operation id is not the one this message shows"
    if call.state != CallState.UNRESOLVED:
        return f"this call is {call.state.value}, not unresolved"
    return None


class ResolveHandler:
    """Maps a verified click to a resolution and shows the validator's verdict; one per bot."""

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        people: Mapping[str, Approver],
        signer: Signer,
        *,
        team_id: str | None = None,
        verdict_timeout_s: float = 30.0,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._people = people
        self._signer = signer
        self._team_id = team_id
        self._verdict_timeout_s = verdict_timeout_s
        self._watching: set[asyncio.Task[None]] = set()

    async def handle(
        self, body: Mapping[str, Any], action: Mapping[str, Any], client: AsyncWebClient
    ) -> SignedDecision | None:
        """Post the resolution (None when refused) and start watching for its verdict."""
        click = parse_resolve_click(body, action)
        person = self._people.get(click.origin.user_id)
        call, refusal = await self._check(click, person)
        if refusal is not None:
            await self._refuse(client, click, refusal)
            return None
        assert person is not None and call is not None and click.value is not None
        assert click.outcome is not None
        try:
            after = await last_event_id(self._redis, self._keys, call.run_id)
            decision = await self._post(call, click.value.op, click.outcome, person.user)
        except STORE_ERRORS:
            log.exception("cannot post the resolution")
            await self._refuse(client, click, UNAVAILABLE)
            return None
        log.info(
            "resolution posted",
            extra=log_fields(
                run_id=call.run_id,
                call_id=call.call_id,
                outcome=click.outcome,
                person=person.user,
                slack_user=click.origin.user_id,
            ),
        )
        task = asyncio.create_task(
            self._show_verdict(client, click, person.user, decision, after),
            name=f"slack-verdict-{decision.msg_id}",
        )
        self._watching.add(task)
        task.add_done_callback(self._watching.discard)
        return decision

    async def _check(
        self, click: ResolveClick, person: Approver | None
    ) -> tuple[CallRecord | None, str | None]:
        """The call record and the refusal (None: the click may be posted)."""
        call: CallRecord | None = None
        try:
            if click.value is not None and person is not None:
                call = await load_call(
                    self._redis, self._keys, click.value.run_id, click.value.call_id
                )
        except MalformedRecordError:
            log.exception("call record does not parse")
            return None, "the call record is malformed; use `callgate resolve`"
        except STORE_ERRORS:
            log.exception("cannot read the call record")
            return None, UNAVAILABLE
        return call, authorize_resolve(click, person, call, team_id=self._team_id)

    async def _post(
        self, call: CallRecord, op: str, outcome: ResolveOutcome, person: str
    ) -> SignedDecision:
        # Signed by the bot's own key for the person it verified Slack says clicked, bound to
        # the operation id the person was shown.  No result (a button carries none: the model
        # is told an empty one) and no reason: the model must not see Slack user ids.
        jti = new_id()
        claims = resolve_claims(
            run=call.run_id,
            call=call.call_id,
            op=op,
            outcome=outcome,
            result=None,
            reason=None,
            jti=jti,
        )
        token = sign_decision(self._signer, person=person, claims=claims)
        decision = SignedDecision(msg_id=jti, run_id=call.run_id, turn=call.turn, token=token)
        await post(self._redis, self._keys.run_stream("decisions", call.run_id), decision)
        return decision

    async def _show_verdict(
        self,
        client: AsyncWebClient,
        click: ResolveClick,
        person: str,
        decision: SignedDecision,
        after: str,
    ) -> None:
        """Wait for the validator's verdict on ``decision`` and show it."""
        origin = click.origin
        try:
            verdict = await wait_outcome(
                self._redis, self._keys, decision, after, self._verdict_timeout_s
            )
        except STORE_ERRORS:
            log.exception("cannot read the verdict")
            verdict = None
        if verdict is None:
            await tell(
                client,
                origin.channel_id,
                origin.user_id,
                f"Sent, but callgate gave no verdict within {self._verdict_timeout_s:g} s; "
                "see `callgate inbox`.",
            )
        elif not verdict.applied:
            # The validator's reason names people and roles: shown, never parsed as mrkdwn.
            reason = escape(verdict.reason or "no reason given")
            await self._refuse(client, click, f"callgate refused it: {reason}")
        else:
            assert click.outcome is not None
            await update(
                client,
                origin.channel_id,
                origin.message_ts,
                resolved_text(click.outcome, person),
                resolved_blocks(origin.blocks, click.outcome, person, origin.user_id),
            )

    async def _refuse(self, client: AsyncWebClient, click: ResolveClick, reason: str) -> None:
        origin = click.origin
        log.warning(
            "resolve click refused",
            extra=log_fields(
                slack_user=origin.user_id,
                reason=reason,
                call_id=click.value.call_id if click.value else None,
            ),
        )
        await tell(client, origin.channel_id, origin.user_id, f"Not recorded: {reason}")

    async def stop(self) -> None:
        """Stop watching for verdicts (the resolutions are posted already); safe twice."""
        watching, self._watching = list(self._watching), set()
        for task in watching:
            task.cancel()
        await asyncio.gather(*watching, return_exceptions=True)
