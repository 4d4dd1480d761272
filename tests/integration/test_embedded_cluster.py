"""The local Redis Cluster the cluster tests and chaos start: three masters with a replica
each, and a replica promoted with the data it had when its master is SIGKILLed."""

from __future__ import annotations

import time

from redis.cluster import RedisCluster

from callgate.ops.embedded_cluster import EmbeddedCluster

PROMOTED_WITHIN_S = 15.0


def test_a_killed_master_is_replaced_by_its_replica_holding_what_was_replicated() -> None:
    with EmbeddedCluster() as cluster:
        assert sorted(cluster.role_of(n) for n in cluster.nodes) == ["master"] * 3 + ["slave"] * 3
        client = RedisCluster.from_url(cluster.url)
        try:
            keys = {f"k{i}" for i in range(30)}
            for key in keys:
                client.set(key, key)
            owners = {cluster.master_of_slot(client.keyslot(k)).port for k in keys}
            assert len(owners) == 3  # the keys spread over every master

            slot = client.keyslot("k1")
            master = cluster.master_of_slot(slot)
            assert client.wait(1, 2000, target_nodes=client.get_node_from_key("k1")) == 1
            master.stop(kill=True)
            deadline = time.monotonic() + PROMOTED_WITHIN_S
            while cluster.master_of_slot(slot).port == master.port:
                assert time.monotonic() < deadline, "no replica was promoted"
                time.sleep(0.1)
            cluster.wait_until_ok(PROMOTED_WITHIN_S, replicated=False)
        finally:
            client.close()
        with RedisCluster.from_url(cluster.url) as after:
            assert after.get("k1") == b"k1"
