"""The ledger schema a deployment runs, joined by every worker as it starts.

During a rolling upgrade old and new workers serve side by side.  Within one schema that is
safe: a record's or message's fields an older worker does not know, it ignores.  A release that
raises `LEDGER_SCHEMA` writes what an older worker would misread, so the first newer worker
records the newer schema here, and an older worker started after that refuses to start, in one
line, rather than meeting newer records one message at a time (each of which it would refuse
anyway: `callgate.records.refuse_newer`).
"""

from __future__ import annotations

from callgate.connect import RedisClient
from callgate.errors import NewerSchemaError
from callgate.keys import Keys
from callgate.records import LEDGER_SCHEMA


async def join_ledger_schema(redis: RedisClient, keys: Keys) -> None:
    """Record this worker's schema as the deployment's, or refuse to start under a newer one."""
    key = keys.ledger_schema()
    stored = await redis.get(key)
    text = None if stored is None else stored.decode() if isinstance(stored, bytes) else stored
    if text is not None and (not text.isdigit() or int(text) > LEDGER_SCHEMA):
        then = "it did not start"
        raise NewerSchemaError("this deployment's ledger", text, LEDGER_SCHEMA, then)
    if text is None or int(text) < LEDGER_SCHEMA:
        await redis.set(key, LEDGER_SCHEMA)
