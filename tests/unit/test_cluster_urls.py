"""Redis Cluster addresses: ``redis+cluster://`` URLs, or a node's ``redis://`` URL with
``CALLGATE_REDIS_CLUSTER=1``; read once, a bad one is one line without the password; the
client made of one is redis-py's cluster client, which the hiredis fast path never takes; and
on a cluster each arq queue's job ids carry the queue's hash tag, a tenant's prefix first."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from callgate.config import Settings, bad_settings
from callgate.connect import ClusterAddress, ClusterClient, cluster_address, redis_client
from callgate.jobs import queue_name
from callgate.keys import slot_of
from callgate.ledger.wire import wire_address
from callgate.streams.arq_cluster import cluster_job_id, health_check_key, plain_job_id

SECRET = "s3cr3t-Pw_9f"
URL = f"redis+cluster://work%40ers:{SECRET}@n1:7000,n2,[::1]:7002"


def test_a_cluster_url_names_the_nodes_to_learn_the_cluster_from_and_the_login() -> None:
    assert cluster_address(URL) == ClusterAddress(
        nodes=(("n1", 7000), ("n2", 6379), ("::1", 7002)), username="work@ers", password=SECRET
    )
    assert cluster_address("redis+cluster://n1:7000/0") == ClusterAddress((("n1", 7000),))
    assert cluster_address("redis://n1:7000/0") is None


def test_the_cluster_setting_makes_a_node_url_the_cluster_url() -> None:
    settings = Settings(redis_url="redis://:pw@n1:7000", redis_cluster=True)
    assert settings.redis_url == "redis+cluster://:pw@n1:7000"
    with pytest.raises(ValidationError) as invalid:
        Settings(redis_url="unix:///run/redis.sock", redis_cluster=True)
    line = bad_settings(invalid.value)
    assert line is not None and "takes a redis:// URL, not unix://" in line


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        ("n1:x", "has a bad port"),
        ("n1:7000,", "a node host is empty"),
        ("n1:7000/2", "a cluster has database 0 only"),
        ("n1:7000?ssl_ca_certs=/ca.crt", "no query, fragment or database"),
    ],
)
def test_a_bad_cluster_url_is_one_line_without_the_password(tail: str, reason: str) -> None:
    url = f"redis+cluster://u:{SECRET}@{tail}"
    with pytest.raises(ValidationError) as invalid:
        Settings(redis_url=url)
    line = bad_settings(invalid.value)
    assert line is not None and reason in line and "\n" not in line
    assert SECRET not in line


async def test_the_client_is_a_cluster_client_which_the_fast_path_does_not_take() -> None:
    client = redis_client(URL)
    try:
        assert isinstance(client, ClusterClient)
        assert client.login == {"username": "work@ers", "password": SECRET}
        assert wire_address(client) is None
    finally:
        await client.aclose()


def test_on_a_cluster_a_queues_job_ids_and_health_key_share_the_queues_slot() -> None:
    cluster = Settings(redis_url="redis+cluster://n1:7000", key_prefix="cg")
    one = Settings(redis_url="redis://n1:7000", key_prefix="cg")
    queue = queue_name(cluster)
    job_id = cluster_job_id(cluster, queue, "acme.run-1")
    assert job_id == "acme.run-1{cg:arq}"  # a tenant's ACL globs (arq:job:acme.*) still open it
    assert slot_of(f"arq:job:{job_id}") == slot_of(f"arq:in-progress:{job_id}") == slot_of(queue)
    health = health_check_key(cluster, queue)
    assert health is not None and slot_of(health) == slot_of(queue)
    assert plain_job_id(job_id) == "acme.run-1"
    assert cluster_job_id(one, queue, "run-1") == plain_job_id("run-1") == "run-1"
    assert health_check_key(one, queue) is None
