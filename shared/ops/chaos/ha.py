"""The highly available Redis a chaos session kills a master of: under Sentinel, or a Cluster.

`callgate chaos --failover` runs on a master with two replicas under three sentinels;
``--cluster`` on a local Redis Cluster (three masters, a replica each, the runs' partitions
spread over them).  Either way the fault is one master's SIGKILL while runs flow, and the
session waits for its replica to be promoted (`FailsOver`).  On a cluster the master killed
is the one serving the most of what the session uses: the partitions' slots and the arq
queues' (`ClusterMaster`), so the ingress and the runs of its partitions lose their master.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from callgate.config import Settings
from callgate.jobs import internal_queue_name, queue_name
from callgate.keys import Keys, slot_of
from callgate.ops.embedded_cluster import EmbeddedCluster
from callgate.ops.embedded_redis import EmbeddedRedis


class FailsOver(Protocol):
    def master(self) -> EmbeddedRedis:
        """The master the fault kills."""
        ...

    def wait_for_failover(self, old: EmbeddedRedis, timeout_s: float = 20.0) -> EmbeddedRedis:
        """The replica promoted in ``old``'s place, once it serves."""
        ...

    def rejoin(self, old: EmbeddedRedis, timeout_s: float = 30.0) -> None:
        """Start the killed master again, as its orchestrator would, until it serves as a
        replica of the promoted one: until then a cluster's promoted master has no replica,
        and ``replica`` durability confirms none of its writes."""
        ...


@dataclass(frozen=True)
class ClusterMaster:
    """`FailsOver` on a cluster: the master holding the most of the deployment's slots."""

    cluster: EmbeddedCluster
    settings: Settings

    def slots(self) -> list[int]:
        keys = Keys(self.settings.key_prefix, self.settings.partitions)
        tags = [keys.tag(p) for p in range(self.settings.partitions)]
        queues = [queue_name(self.settings), internal_queue_name(self.settings)]
        return [slot_of(name) for name in [*tags, *queues]]

    def master(self) -> EmbeddedRedis:
        serving = Counter(self.cluster.master_of_slot(slot).port for slot in self.slots())
        busiest = serving.most_common(1)[0][0]
        return next(n for n in self.cluster.nodes if n.port == busiest)

    def wait_for_failover(self, old: EmbeddedRedis, timeout_s: float = 20.0) -> EmbeddedRedis:
        return self.cluster.wait_for_failover(old, timeout_s)

    def rejoin(self, old: EmbeddedRedis, timeout_s: float = 30.0) -> None:
        old.start()  # its nodes.conf kept: it learns it was failed over, and replicates
        self.cluster.wait_until_ok(timeout_s)
