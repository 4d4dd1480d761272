"""The usual `reconcile`: ask the system of record what it made under the operation id.

A write sends its operation id as an idempotency key; a service that keeps what it made under
each key can answer "did it happen?" with one GET.  `reconcile_by_lookup` is that GET, with
the one rule that matters for recovery: only a definite answer settles the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from callgate.tools.contract import Reconciliation, ToolContext

LOOKUP_ERRORS = (aiohttp.ClientError, TimeoutError, OSError, ValueError)
"""No answer, or no JSON: the service could not say."""


async def reconcile_by_lookup(
    ctx: ToolContext,
    url: str,
    *,
    matches: Callable[[dict[str, Any]], bool],
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> Reconciliation:
    """GET ``url`` (the record made under the operation id).

    200 with a JSON object that ``matches`` the call's arguments → applied, with that object
    as the result the model is told; 404 → not applied; anything else (5xx, timeout,
    unreachable, a record for other arguments, which only a person can sort out) → unknown,
    so the reconciler asks again and in the end a person decides.
    """
    try:
        async with ctx.session.get(
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status == 404:
                return Reconciliation("not_applied")
            if resp.status != 200:
                return Reconciliation("unknown")
            record = await resp.json()
    except LOOKUP_ERRORS:
        return Reconciliation("unknown")
    if not isinstance(record, dict) or not matches(record):
        return Reconciliation("unknown")
    return Reconciliation("applied", record)
