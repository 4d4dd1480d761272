"""A person's decision that must not apply: logged, and said in the run's trace.

One place for every kind (approval, resolution, cancel or resume), so each refusal reads the
same in the log and the trace: the event names the kind, the reason, who (if verified) and the
decision's id.  A forged decision naming no run must not leave an event stream behind that
nothing would ever expire, so the event is written only if the run exists.
"""

from __future__ import annotations

import logging

from callgate.ledger.store import Ledger
from callgate.logs import log_fields

log = logging.getLogger("callgate.decisions")


async def refuse(
    ledger: Ledger, event: str, run_id: str, msg_id: str, reason: str, person: str | None
) -> None:
    """Record that the decision ``msg_id`` on ``run_id`` was refused, and why."""
    log.warning(
        "decision refused",
        extra=log_fields(event=event, run_id=run_id, msg_id=msg_id, person=person, reason=reason),
    )
    tx = ledger.refuse_decision(
        run_id, only_if_run_exists=True, event=event, person=person, reason=reason, msg_id=msg_id
    )
    await ledger.apply(tx)
