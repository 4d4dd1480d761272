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

from callgate.keys import slot_of
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

    @property
    def cluster_url(self) -> str:
        """The cluster's ``redis+cluster://`` URL, naming every node (`callgate.connect`)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

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

    def wait_for_failover(self, old: EmbeddedRedis, timeout_s: float = 20.0) -> EmbeddedRedis:
        """The replica promoted in place of the dead master ``old``, once the cluster is ok
        again (every slot served)."""
        slots = [s for s in range(0, 16384, 64) if self.master_of_slot(s).port == old.port]
        if old.process is not None and old.process.poll() is None:
            raise RuntimeError(f"the master :{old.port} is still alive")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.wait_until_ok(max(0.1, deadline - time.monotonic()), replicated=False)
                promoted = self.master_of_slot(slots[0]) if slots else old
            except RuntimeError:
                promoted = old
            if promoted.port != old.port:
                return promoted
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no replica was promoted in place of :{old.port} within {timeout_s:g}s"
                )
            time.sleep(0.1)

    def move_slot(
        self, slot: int, to: EmbeddedRedis, *, batch: int = 10, pause_s: float = 0.0
    ) -> int:
        """Reshard ``slot`` onto the master ``to`` while clients use it, as ``redis-cli
        --cluster reshard`` does: mark it importing and migrating, MIGRATE its keys ``batch`` at
        a time (``pause_s`` apart, so clients meet a half-moved slot: ASK, TRYAGAIN), then
        give it to ``to`` on every master (MOVED for those who ask the old one).  How many
        keys moved."""
        source = self.master_of_slot(slot)
        moved, source_id, to_id = 0, _node_id(source), _node_id(to)
        with (
            redis.Redis.from_url(source.url, socket_timeout=5) as old,
            redis.Redis.from_url(to.url, socket_timeout=5) as new,
        ):
            new.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
            old.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", to_id)
            while keys := old.execute_command("CLUSTER GETKEYSINSLOT", slot, batch):
                old.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause_s)
            for node in self.live():
                if self.role_of(node) == "master":
                    with redis.Redis.from_url(node.url, socket_timeout=5) as master:
                        master.execute_command("CLUSTER SETSLOT", slot, "NODE", to_id)
        return moved

    def spread(self, partitions: int, timeout_s: float = 30.0) -> list[int]:
        """Give the slots of partitions ``0..partitions-1`` to the masters in turn (while
        empty, nothing migrates): ``redis-cli --cluster create`` splits the slots evenly, and
        the tags ``{p0}``, ``{p1}``, ``{p2}`` fall on two of three masters.  The port serving
        each partition, in order."""
        masters = [n for n in self.live() if self.role_of(n) == "master"]
        slots = [slot_of(f"{{p{p}}}") for p in range(partitions)]
        for index, slot in enumerate(slots):
            target = masters[index % len(masters)]
            if self.master_of_slot(slot).port != target.port:
                self.move_slot(slot, target)
        self.wait_until_ok(timeout_s)
        return [self.master_of_slot(slot).port for slot in slots]

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


def _node_id(node: EmbeddedRedis) -> str:
    with redis.Redis.from_url(node.url, socket_timeout=2) as client:
        return str(client.execute_command("CLUSTER MYID").decode())


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
