"""A verified Approve/Deny click → identity mapping → an ApprovalDecision on the run's stream.

By the time a click gets here Bolt has checked Slack's signature and timestamp.  What is
left is the Slack side of authorization: the Slack user must be in the approvers map, hold
the role the approval record names, and click a button that still matches a pending,
unexpired record.  A refused click posts nothing to the stream; the clicker gets an
ephemeral message with the reason and the request keeps its buttons for real approvers.
Whether a posted decision *applies* (live, role, hash, first) is the validator's call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import RedisError
from slack_sdk.web.async_client import AsyncWebClient

from callgate.auth.tokens import Signer, sign_decision
from callgate.connect import RedisClient
from callgate.decisions.claims import approval_claims
from callgate.decisions.record import shown_state
from callgate.envelopes import SignedDecision, new_id
from callgate.keys import Keys
from callgate.logs import log_fields
from callgate.slack.messages import APPROVE_ACTION, ButtonValue, decided_blocks, outcome_text
from callgate.slack.records import ApprovalView, MalformedRecordError, load_approval
from callgate.slack.replies import Origin, tell, update
from callgate.slack.settings import Approver
from callgate.streams.commands import post

log = logging.getLogger("callgate.slack.clicks")


@dataclass(frozen=True, slots=True)
class Click:
    """The parts of a block_actions payload the bot uses."""

    user_id: str
    team_id: str | None
    decision: Literal["approve", "deny"]
    value: ButtonValue | None
    channel_id: str | None
    message_ts: str | None
    blocks: list[dict[str, Any]] | None


def parse_click(body: Mapping[str, Any], action: Mapping[str, Any]) -> Click:
    origin = Origin.of(body)
    return Click(
        user_id=origin.user_id,
        team_id=origin.team_id,
        decision="approve" if action.get("action_id") == APPROVE_ACTION else "deny",
        value=ButtonValue.from_value(str(action.get("value", ""))),
        channel_id=origin.channel_id,
        message_ts=origin.message_ts,
        blocks=origin.blocks,
    )


def authorize(
    click: Click,
    approver: Approver | None,
    record: ApprovalView | None,
    *,
    team_id: str | None,
    now_ms: int,
) -> str | None:
    """Why the click is refused, or None when it may be posted.  Pure."""
    if team_id is not None and click.team_id != team_id:
        return "this Slack workspace may not decide callgate approvals"
    if click.value is None:
        return "this button is not a callgate approval"
    if approver is None:
        return "you are not a callgate approver"
    if record is None:
        return "no such approval (unknown, or expired and removed)"
    value = click.value
    if (record.run_id, record.call_id) != (value.run_id, value.call_id):
        return "this button does not match the approval record"
    if record.args_hash != value.args_hash:
        return "the arguments changed since this request was posted; a new approval is needed"
    if record.approver_role and record.approver_role not in approver.roles:
        return f"approving this needs the role {record.approver_role!r}, which you do not hold"
    if record.state != "pending":
        return f"this approval is already {shown_state(record.state)}"
    if record.expired(now_ms):
        return "this approval has expired"
    return None


class ClickHandler:
    """Maps a verified click to a decision; one per bot process."""

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        approvers: Mapping[str, Approver],
        signer: Signer,
        *,
        team_id: str | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._approvers = approvers
        self._team_id = team_id
        self._signer = signer

    async def handle(
        self, body: Mapping[str, Any], action: Mapping[str, Any], client: AsyncWebClient
    ) -> SignedDecision | None:
        """Post the decision and update the message; return it (None when refused)."""
        click = parse_click(body, action)
        approver = self._approvers.get(click.user_id)
        record: ApprovalView | None = None
        try:
            if click.value is not None and approver is not None:
                value = click.value
                record = await load_approval(
                    self._redis, self._keys, value.run_id, value.approval_id
                )
            refusal = authorize(
                click, approver, record, team_id=self._team_id, now_ms=int(time.time() * 1000)
            )
        except MalformedRecordError:
            log.exception("approval record does not parse")
            refusal = "the approval record is malformed; use `callgate approve`"
        except RedisError:
            log.exception("cannot read the approval record")
            refusal = "callgate is unavailable right now; try again shortly"
        if refusal is not None:
            await self._refuse(client, click, refusal)
            return None
        assert approver is not None and record is not None and click.value is not None
        decision = self._signed(click, click.value, approver, record)
        try:
            stream = self._keys.run_stream("decisions", record.run_id)
            await post(self._redis, stream, decision)
        except RedisError:
            log.exception("cannot post the decision")
            await self._refuse(client, click, "callgate is unavailable right now; try again")
            return None
        log.info(
            "decision posted",
            extra=log_fields(
                run_id=record.run_id,
                approval_id=record.approval_id,
                decision=click.decision,
                approver=approver.user,
                slack_user=click.user_id,
            ),
        )
        await self._mark_decided(client, click, outcome_text(click.decision, approver.user, None))
        return decision

    def _signed(
        self, click: Click, value: ButtonValue, approver: Approver, record: ApprovalView
    ) -> SignedDecision:
        """The decision, signed by the bot's own key for the person it verified Slack says
        clicked; no reason: a button carries none, and the model must not see Slack user ids."""
        jti = new_id()
        claims = approval_claims(
            click.decision,
            run=record.run_id,
            apr=record.approval_id,
            call=record.call_id,
            hash=value.args_hash,
            reason=None,
            jti=jti,
        )
        token = sign_decision(self._signer, person=approver.user, claims=claims)
        return SignedDecision(msg_id=jti, run_id=record.run_id, turn=record.turn, token=token)

    async def _mark_decided(self, client: AsyncWebClient, click: Click, outcome: str) -> None:
        await update(
            client,
            click.channel_id,
            click.message_ts,
            outcome,
            decided_blocks(click.blocks, outcome, click.user_id),
        )

    async def _refuse(self, client: AsyncWebClient, click: Click, reason: str) -> None:
        log.warning(
            "click refused",
            extra=log_fields(
                slack_user=click.user_id,
                reason=reason,
                approval_id=click.value.approval_id if click.value else None,
            ),
        )
        await tell(client, click.channel_id, click.user_id, f"Not recorded: {reason}")
