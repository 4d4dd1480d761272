"""Start a private Redis Cluster on loopback: three masters, each with a replica.

Tests and `callgate chaos` need a real cluster to prove what a deployment on one does:
partitions spread over masters, MOVED after a resharding, a replica promoted when its master
dies.  Each node is an `EmbeddedRedis` started from a small cluster redis.conf; the cluster is
formed by ``redis-cli --cluster create`` from the same installation as the server (the two
must agree on the protocol), and is ready once every node reports ``cluster_state:ok`` and
knows every other.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from callgate.ops.embedded_redis import EmbeddedRedis, find_redis_server, port_free

NODE_TIMEOUT_MS = 1000
"""How long a master may be silent before its replica is promoted (Redis's default is 15 s)."""


def find_redis_cli() -> str:
    """The redis-cli beside the redis-server that `find_redis_server` picks."""
    beside = Path(find_redis_server()).with_name("redis-cli")
    found = str(beside) if beside.exists() else shutil.which("redis-cli")
    if found is None:
        raise RuntimeError(f"no redis-cli beside {find_redis_server()} or on PATH")
    return found


def cluster_port() -> int:
    """A free port whose cluster bus port (10000 higher) is free too: a node needs both."""
    while True:
        port = random.randint(20_000, 45_000)
        if port_free(port) and port_free(port + 10_000):
            return port


@dataclass
class EmbeddedCluster:
    """Six `EmbeddedRedis` nodes formed into one cluster (``masters`` with a replica each)."""

    masters: int = 3
    nodes: list[EmbeddedRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A URL naming one live node: a cluster client finds the rest from it."""
        return self.live()[0].url

    def start(self, timeout_s: float = 30.0) -> EmbeddedCluster:
        try:
            for _ in range(self.masters * 2):
                node = EmbeddedRedis(port=cluster_port())
                node.config_file = _cluster_conf(node.directory)
                self.nodes.append(node)
                node.start()
            self._create()
            self.wait_until_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        command = [find_redis_cli(), "--cluster", "create", *addresses]
        command += ["--cluster-replicas", "1", "--cluster-yes"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-500:]}")

    def wait_until_ok(self, timeout_s: float, *, replicated: bool = True) -> None:
        """Until every live node says the cluster is ok and knows all of them, and (unless not
        ``replicated``) every master has a replica in sync: one that never synced is never
        promoted."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            live = self.live()
            if all(_sees_whole(n, len(self.nodes)) for n in live) and (
                not replicated or all(_replicated(n) for n in live)
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the cluster was not ok within {timeout_s:g}s")

    def live(self) -> list[EmbeddedRedis]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def role_of(self, node: EmbeddedRedis) -> str:
        """``master`` or ``slave``, as the node says of itself."""
        with redis.Redis.from_url(node.url, socket_timeout=2) as client:
            return str(client.execute_command("ROLE")[0].decode())

    def master_of_slot(self, slot: int) -> EmbeddedRedis:
        """The live node serving ``slot`` now."""
        for node in self.live():
            with redis.Redis.from_url(node.url, socket_timeout=2) as client:
                for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        port = int(primary[1])
                        return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no live node serves slot {slot}")

    def stop(self) -> None:
        for node in self.nodes:
            node.__exit__()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cluster_conf(directory: Path) -> Path:
    path = directory / "cluster.conf"
    path.write_text(
        "cluster-enabled yes\n"
        "cluster-config-file nodes.conf\n"
        f"cluster-node-timeout {NODE_TIMEOUT_MS}\n"
        'save ""\n'
        "appendonly no\n"
        "repl-diskless-sync-delay 0\n"
    )
    return path


def _replicated(node: EmbeddedRedis) -> bool:
    """A replica, or a master that a replica is connected to."""
    try:
        with redis.Redis.from_url(node.url, socket_timeout=1) as client:
            role = client.execute_command("ROLE")
    except (redis.RedisError, OSError):
        return False
    return role[0] != b"master" or bool(role[2])


def _sees_whole(node: EmbeddedRedis, count: int) -> bool:
    try:
        with redis.Redis.from_url(node.url, socket_timeout=1) as client:
            info = client.cluster("INFO")
            known = int(info.get("cluster_known_nodes", 0))
            return info.get("cluster_state") == "ok" and known >= count
    except (redis.RedisError, OSError):
        return False
