"""`Ledger`: the durable ledger on Redis — every read and every named step, in one object.

    LedgerBase (base.py)            the vocabulary: transitions, events, outbox, retention
    └── Reads (reads.py)            applying steps, reading records and facts (I/O)
        └── ApprovalSteps           request, apply and refuse approvals
            └── CallSteps             a call's steps: decide a turn's, take, settle
                (call_steps.py)
                └── LoopSteps           a run's steps: start, record a response, end or
                    (steps.py)            advance a turn
                    └── ReconcileSteps    a write whose outcome is unknown: orphaned,
                        (reconcile_steps.py)  reconciled, or left for a person
                        └── ResolveSteps      a person resolves an unknown outcome
                            (resolve_steps.py)
                            └── ControlSteps  a person cancels or resumes a run
                                (control_steps.py)
        TokenSteps (token_steps.py)   an identity token starts one run (beside the above)

Services call a named step to build a guarded `Tx` and `apply` it (with their message's ack,
`Delivery.ack_with`) in one atomic step; they never write a key themselves.
"""

from __future__ import annotations

from callgate.ledger.control_steps import ControlSteps
from callgate.ledger.reads import redis_errors, require_calls
from callgate.ledger.token_steps import TokenSteps
from callgate.ledger.tx import Guard, Tx, TxResult

__all__ = ["Guard", "Ledger", "Tx", "TxResult", "redis_errors", "require_calls"]


class Ledger(ControlSteps, TokenSteps):
    """Reads and named steps of runs, calls, approvals, history and events."""
