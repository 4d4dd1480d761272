"""One message's fate: decode, run the handler, then ack, leave pending or dead-letter.

Split from `shared/streams/worker.py` (which owns reading, reclaiming, heartbeats and shutdown) so
each decision about a single delivery sits in one short, readable place:

* no ``d`` field, or a ``d`` that does not decode → dead letter now, with the reason;
* a message of a kind its stream does not carry (`callgate.envelopes.CARRIED_ON`) → dead
  letter now, with the reason, as one that does not decode: no handler or hook acts on it;
* delivered more than ``max_deliveries`` times without settling (its consumers kept dying
  or being stopped) → dead letter without running it again;
* handler returned → ack (queued at once: the effect is durable, a cancellation cannot lose it),
  unless its last step carried the ack already (`Delivery.ack_with`);
* handler raised a non-retryable `CallgateError` → dead letter now with its message;
* anything else → left pending (logged with the traceback) for reclaim to redeliver, and
  dead-lettered once it has failed ``max_deliveries`` times.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate.config import Settings
from callgate.crashpoints import crash_point
from callgate.envelopes import Envelope, EnvelopeBase, decode
from callgate.errors import CallgateError, EnvelopeError, NewerSchemaError
from callgate.keys import Keys, slot_of
from callgate.ledger.tx import Tx
from callgate.logs import log_fields
from callgate.streams.commands import REDIS_ERRORS, Acker, Scripts

log = logging.getLogger("callgate.streams")


@dataclass(slots=True)
class Delivery:
    """Where a message came from and how often it has been handed to a consumer (1 = first)."""

    stream: str
    message_id: str
    delivery_count: int
    group: str = ""
    _settled_by: Tx | None = field(default=None, repr=False)

    def ack_with(self, tx: Tx) -> Tx:
        """Settle this message inside ``tx``, the handler's last step: the XACK is written
        with the effects, so once they are durable the message is done and the runner spends
        no round trip on it.  Nothing durable may follow that step.  If ``tx`` does not apply
        (a guard failed) the runner acks as usual once the handler returns."""
        if self.group and tx.slot in (None, slot_of(self.stream)):
            tx.vouch(self.stream).xack(self.stream, self.group, self.message_id)
            self._settled_by = tx
        return tx

    @property
    def settled(self) -> bool:
        """Acked by the handler's own step (see `ack_with`)."""
        return self._settled_by is not None and bool(self._settled_by.applied)


Handler = Callable[[Envelope, Delivery], Awaitable[None]]
Accepts = Mapping[str, tuple[type[EnvelopeBase], ...]]
"""Per stream name, the envelope kinds it carries (a stream not named carries any)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message given up on, and the stream it came on; ``envelope`` is None when it did
    not decode, or is of a kind that stream does not carry (a forged or misrouted message:
    a hook acts on none of those)."""

    stream: str
    message_id: str
    reason: str
    delivery_count: int
    raw: bytes
    envelope: Envelope | None


@dataclass(slots=True)
class WorkerStats:
    """Counters since the worker was built (for tests and metrics)."""

    handled: int = 0
    dead_lettered: int = 0
    failed: int = 0
    reclaimed: int = 0
    ack_round_trips: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """One delivered stream entry, as the loop hands it over."""

    stream: str
    message_id: str
    raw: bytes | None
    """The ``d`` field, None if the entry has none."""
    count: int
    """XPENDING's delivery count, this delivery included."""

    @classmethod
    def of(cls, stream: str, message_id: str, fields: dict[Any, Any], count: int) -> Message:
        value = fields.get(b"d", fields.get("d"))
        if value is not None and not isinstance(value, bytes):
            value = str(value).encode()
        return cls(stream, message_id, value, count)

    def fields(self, **more: Any) -> dict[str, Any]:
        return log_fields(stream=self.stream, message_id=self.message_id, **more)


class MessageRunner:
    """Settles single deliveries for one consumer group."""

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        *,
        group: str,
        handler: Handler,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None,
        stats: WorkerStats,
        accepts: Accepts | None = None,
    ) -> None:
        self._settings = settings
        self._accepts = accepts or {}
        self._scripts = scripts
        self._keys = Keys(settings.key_prefix, settings.partitions)
        self._group = group
        self._handler = handler
        self._on_dead_letter = on_dead_letter
        self.stats = stats
        self.settling: set[tuple[str, str]] = set()
        """(stream, id) of messages handled and being acked: no longer ours to heartbeat."""
        self._before_ack = f"{group}.before_ack"

    async def process(self, msg: Message, acker: Acker) -> None:
        """Settle one delivery; returns when it is acked, dead-lettered or left pending."""
        if msg.raw is None:
            await self.dead(msg, None, "message has no 'd' field")
            return
        try:
            envelope = decode(msg.raw)
        except EnvelopeError as exc:
            await self.dead(msg, None, exc.message)
            return
        carried = self._accepts.get(msg.stream)
        if carried is not None and not isinstance(envelope, carried):
            await self.dead(msg, None, f"{envelope.kind!r} is not carried on {msg.stream}")
            return
        limit = self._settings.max_deliveries
        if msg.count > limit:
            # Delivered `limit` times and never settled: its consumers died or were stopped.
            reason = f"not settled after {limit} deliveries (consumer died or was stopped)"
            await self.dead(msg, envelope, reason, count=msg.count - 1)
            return
        delivery = Delivery(msg.stream, msg.message_id, msg.count, self._group)
        try:
            await self._handler(envelope, delivery)
        except Exception as exc:
            await self._failed(msg, envelope, exc)
            return
        crash_point(self._before_ack)
        if delivery.settled:
            self.stats.handled += 1
            return
        # The ack is queued before this await: cancelling the wait cannot lose it.
        key = (msg.stream, msg.message_id)
        self.settling.add(key)
        try:
            await acker.ack(msg.stream, msg.message_id)
        finally:
            self.settling.discard(key)
        self.stats.handled += 1

    async def _failed(self, msg: Message, envelope: Envelope, exc: Exception) -> None:
        """Non-retryable: dead letter now; else leave pending until max_deliveries."""
        self.stats.failed += 1
        if isinstance(exc, NewerSchemaError):
            # For a newer worker: no hook sees it, so nothing acts on the run it names.
            await self.dead(msg, None, exc.message)
            return
        if isinstance(exc, CallgateError) and not exc.retryable:
            await self.dead(msg, envelope, f"{type(exc).__name__}: {exc.message}")
            return
        extra = msg.fields(delivery_count=msg.count)
        if msg.count < self._settings.max_deliveries:
            log.warning("handler failed; left pending for redelivery", exc_info=exc, extra=extra)
            return
        log.error("handler failed on its last delivery", exc_info=exc, extra=extra)
        reason = f"failed {msg.count} deliveries; last error {type(exc).__name__}: {exc}"
        await self.dead(msg, envelope, reason)

    async def dead(
        self,
        msg: Message,
        envelope: Envelope | None,
        reason: str,
        *,
        count: int | None = None,
        gone: bool = False,
    ) -> None:
        """Tell the pipeline first (at least once), then dead-letter + ack in one step.

        ``gone``: XAUTOCLAIM reported the entry deleted, Redis already dropped it from the
        PEL; the dead letter is still written so nothing disappears silently."""
        count = msg.count if count is None else count
        raw = msg.raw or b""
        log.error("dead-lettering message", extra=msg.fields(reason=reason, delivery_count=count))
        if self._on_dead_letter is not None:
            try:
                await self._on_dead_letter(
                    DeadLetter(msg.stream, msg.message_id, reason, count, raw, envelope)
                )
            except Exception:
                log.exception("on_dead_letter failed", extra=msg.fields())
        write = self._scripts.dead_letter(
            stream=msg.stream,
            dead_stream=self._keys.dead_letter_for(msg.stream),
            group=self._group,
            message_id=msg.message_id,
            reason=reason,
            delivery_count=count,
            raw=raw,
            cap=self._settings.dead_letter_max_entries,
            already_removed=gone,
        )
        try:
            await asyncio.shield(write)
        except REDIS_ERRORS as exc:
            log.warning("dead letter not written; left pending", extra=msg.fields(error=repr(exc)))
            return
        self.stats.dead_lettered += 1
