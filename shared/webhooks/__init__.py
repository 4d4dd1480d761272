"""Signed webhooks for ``run.paused``, ``run.finished``, ``approval.requested`` and
``outcome.unknown`` (README: Webhooks), sourced from what the ledger already writes and
delivered by their own worker (``python -m callgate.services.webhooks``)."""
