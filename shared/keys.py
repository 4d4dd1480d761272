"""Every Redis key and stream name, built in one place.

A run lives in partition ``p = crc32(run_id) mod N``; all of its keys and the streams its
messages travel on carry the hash tag ``{p<k>}``, so each atomic step touches one slot, as
Redis Cluster requires.  (Cluster itself is not supported: the clients speak to one node, and
a worker reads every partition's stream in one XREADGROUP.)
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from redis.crc import key_slot

TENANT_PATTERN = r"[a-z][a-z0-9_]{0,31}"
"""A tenant's name (`callgate.auth.tenancy`): safe inside a Redis user name, an environment
variable's name (upper-cased) and an ACL glob (no ``*?[]\\``), and free of the ``.`` that ends
it in a run id."""

STREAM_KINDS = ("turns", "validate", "exec", "results", "reconcile", "decisions")
"""The hot-path streams, one per partition each (README: Architecture)."""


IndexOf = Callable[[int, str | None], str]
"""A partition index by partition and tenant: `Keys.runs_index`, `pending_approvals`,
`unresolved_calls`."""


def tenant_index(index: str, tenant: str | None) -> str:
    """A partition index (runs, pending approvals, unresolved calls), or with ``tenant`` its
    copy holding that tenant's runs' entries only, named like its runs' keys
    (``…:<tenant>.``): deploy/redis/acl.sh lets the tenant's Redis users read that copy and
    no other's."""
    return index if tenant is None else f"{index}:{tenant}."


@functools.lru_cache(maxsize=1024)
def _tag_slot(tag: str) -> int:
    return int(key_slot(tag.encode()))


def slot_of(key: str) -> int:
    """``key``'s cluster slot, as `redis.crc.key_slot` computes it, cached by hash tag: every
    key of a run carries its partition's tag, and a step builds several."""
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:
            return _tag_slot(key[start + 1 : end])
    return int(key_slot(key.encode()))


@functools.lru_cache(maxsize=1024)
def _tag(prefix: str, partition: int) -> str:
    return f"{prefix}:{{p{partition}}}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder bound to a prefix and a partition count."""

    prefix: str = "cg"
    partitions: int = 1

    def partition(self, run_id: str) -> int:
        if self.partitions == 1:
            return 0  # the default: every key of every step is built through here
        return zlib.crc32(run_id.encode()) % self.partitions

    def tag(self, partition: int) -> str:
        return _tag(self.prefix, partition)

    def _run_tag(self, run_id: str) -> str:
        return _tag(self.prefix, self.partition(run_id))  # every key of every step: cached

    # Per-run records.
    def run(self, run_id: str) -> str:
        return f"{self._run_tag(run_id)}:run:{run_id}"

    def history(self, run_id: str) -> str:
        return f"{self._run_tag(run_id)}:hist:{run_id}"

    def raw_responses(self, run_id: str) -> str:
        return f"{self._run_tag(run_id)}:raw:{run_id}"

    def call(self, run_id: str, call_id: str) -> str:
        return f"{self._run_tag(run_id)}:call:{run_id}:{call_id}"

    def run_index(self, run_id: str) -> str:
        """Hash of what a run made, so that one read finds every key it must expire and a
        step refuses a reused provider call id (`callgate.ledger.run_index`)."""
        return f"{self._run_tag(run_id)}:index:{run_id}"

    def events(self, run_id: str) -> str:
        return f"{self._run_tag(run_id)}:events:{run_id}"

    def approval(self, run_id: str, approval_id: str) -> str:
        return f"{self._run_tag(run_id)}:appr:{run_id}:{approval_id}"

    def decisions_seen(self, run_id: str) -> str:
        """Hash of the ids of the decision tokens applied to a run: each applies once."""
        return f"{self._run_tag(run_id)}:dseen:{run_id}"

    def identity_token_use(self, token_id: str) -> str:
        """The run an end user's identity token started (each starts one).  Keyed by the token,
        in no run's partition: every run's start must see the same key."""
        return f"{self.prefix}:idtoken:{token_id}"

    def pending_approvals(self, partition: int, tenant: str | None = None) -> str:
        """Sorted set (by expiry) of ``"<run_id> <approval_id>"`` still waiting for a human;
        with ``tenant``, its runs' only (`tenant_index`)."""
        return tenant_index(f"{self.tag(partition)}:approvals:pending", tenant)

    def unresolved_calls(self, partition: int, tenant: str | None = None) -> str:
        """Sorted set (by when) of ``"<run_id> <call_id>"`` whose write outcome a person must
        resolve (the inbox); with ``tenant``, its runs' only (`tenant_index`)."""
        return tenant_index(f"{self.tag(partition)}:calls:unresolved", tenant)

    def deadlines(self, partition: int) -> str:
        """Sorted set of the partition's live run ids by ``deadline_ms`` (ingress's sweep)."""
        return f"{self.tag(partition)}:deadlines"

    def runs_index(self, partition: int, tenant: str | None = None) -> str:
        """Sorted set of the partition's run ids by creation time, in the partition's slot;
        with ``tenant``, of that tenant's runs only (`tenant_index`)."""
        return tenant_index(f"{self.tag(partition)}:runs", tenant)

    # Streams.
    def stream(self, kind: str, partition: int) -> str:
        return f"{self.tag(partition)}:{kind}"

    def run_stream(self, kind: str, run_id: str) -> str:
        return self.stream(kind, self.partition(run_id))

    def streams(self, kind: str) -> list[str]:
        return [self.stream(kind, p) for p in range(self.partitions)]

    def consumers(self, group: str) -> str:
        """The processes of worker kind ``group`` that say they are alive: consumer name →
        when it last said so (ms), for `callgate doctor`.  One key, no partition: it names
        processes, not runs."""
        return f"{self.prefix}:consumers:{group}"

    def ledger_schema(self) -> str:
        """The newest ledger schema a worker of this deployment has started with
        (`callgate.ledger.schema`).  One key, no partition: it is the deployment's."""
        return f"{self.prefix}:ledger_schema"

    def dead_letter(self, partition: int) -> str:
        return f"{self.tag(partition)}:dead"

    def dead_letter_for(self, stream: str) -> str:
        """The dead-letter stream in the same slot as ``stream``."""
        tag_end = stream.index("}") + 1
        return f"{stream[:tag_end]}:dead"

    def webhooks(self, partition: int, name: str) -> str:
        """The webhooks worker's bookkeeping in the partition's slot (`callgate.webhooks`):
        ``watch`` (runs it follows, by creation time), ``since`` (how far into the runs index
        it has looked), ``counts`` (the event counters `callgate.metrics` reads) and
        ``lease``."""
        return f"{self.tag(partition)}:webhooks:{name}"

    def webhook_cursor(self, run_id: str) -> str:
        """How far the webhooks worker read a run's event log (``<entry id> <run status>``);
        it expires like the run."""
        return f"{self._run_tag(run_id)}:whcur:{run_id}"

    def webhook_asked(self, run_id: str) -> str:
        """Hash of the run's approvals still undecided when the webhooks worker last read its
        log → when each was requested (the approval wait metric); it expires like the run."""
        return f"{self._run_tag(run_id)}:whask:{run_id}"

    def webhook_delivered(self, delivery_id: str) -> str:
        """Set once a webhook delivery was accepted by its endpoint (no partition: it names an
        endpoint's copy of an event)."""
        return f"{self.prefix}:webhooks:done:{delivery_id}"

    def webhook_stats(self) -> str:
        """Hash of webhook delivery counts by ``<endpoint>|<outcome>`` (`callgate.metrics`)."""
        return f"{self.prefix}:webhooks:stats"

    def bench(self, name: str) -> str:
        """Benchmark bookkeeping (`callgate.ops.bench`): timings, the floor relay's streams and
        state, all in partition 0's slot so one relay step never crosses slots."""
        return f"{self.tag(0)}:bench:{name}"
