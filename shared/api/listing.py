"""`GET /runs`: the runs index read newest first, filtered, one keyset page at a time.

The cursor is the last run a page showed (its creation time and id), so a page never repeats
or skips a run when new ones arrive meanwhile.  Creation time bounds come from the index's
scores; status, user and tool need the record.  A page reads at most `MAX_SCANNED` index
entries per partition, so a filter that matches little cannot make one request unbounded.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass

from callgate.ledger.reads import Reads
from callgate.records import RunRecord
from callgate.states import RunState

SCAN_PAGE = 200
MAX_SCANNED = 10_000

Key = tuple[int, str]
"""A run's place in the listing: (created_ms, run id), newest first."""


@dataclass(frozen=True, slots=True)
class RunFilter:
    """What a caller asked to see."""

    statuses: frozenset[RunState] | None = None
    tool: str | None = None
    user: str | None = None
    since_ms: int = 0
    until_ms: int | None = None
    readable: Callable[[RunRecord], bool] | None = None
    """Whether the caller may see a run at all."""

    def keeps(self, run: RunRecord) -> bool:
        return (
            (self.readable is None or self.readable(run))
            and (self.statuses is None or run.status in self.statuses)
            and (self.tool is None or self.tool in run.allowed_tools)
            and (self.user is None or run.identity.get("user") == self.user)
        )


def encode_cursor(key: Key) -> str:
    return base64.urlsafe_b64encode(f"{key[0]}:{key[1]}".encode()).decode().rstrip("=")


def decode_cursor(text: str) -> Key:
    """The key a cursor names; ValueError for one this server did not make."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        created, _, run_id = raw.partition(":")
        if not run_id:
            raise ValueError
        return int(created), run_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("cursor is not one this API returned; start from the first page") from None


async def page(
    reads: Reads,
    partitions: int,
    wanted: RunFilter,
    after: Key | None,
    limit: int,
    tenant: str | None = None,
) -> tuple[list[RunRecord], Key | None]:
    """Up to ``limit`` runs after ``after`` that ``wanted`` keeps, newest first, and the
    cursor of the next page (None at the end)."""
    found: list[RunRecord] = []
    for partition in range(partitions):
        found += await _partition_page(reads, partition, wanted, after, limit + 1, tenant)
    found.sort(key=lambda run: (run.created_ms, run.run_id), reverse=True)
    shown = found[:limit]
    more = len(found) > limit
    return shown, (shown[-1].created_ms, shown[-1].run_id) if more and shown else None


async def _partition_page(
    reads: Reads,
    partition: int,
    wanted: RunFilter,
    after: Key | None,
    count: int,
    tenant: str | None,
) -> list[RunRecord]:
    mine: list[RunRecord] = []
    offset = 0
    while len(mine) < count and offset < MAX_SCANNED:
        entries = await reads.runs_since(partition, wanted.since_ms, offset, SCAN_PAGE, tenant)
        if not entries:
            break
        offset += len(entries)
        ids = [
            run_id
            for run_id, created in entries
            if (after is None or (created, run_id) < after)
            and (wanted.until_ms is None or created <= wanted.until_ms)
        ]
        records = await reads.get_runs(ids)
        mine += [run for run in records if run is not None and wanted.keeps(run)]
    return mine[:count]
