"""Start a private Redis Sentinel deployment on loopback: a master, its replicas, three sentinels.

The failover tests need what an HA deployment without Cluster runs: sentinels that notice a dead
master and promote a replica, and clients that follow them (``redis+sentinel://`` URLs,
`callgate.connect`).  Every process is an `EmbeddedRedis` started from a small redis.conf; the
sentinels run the same binary with ``--sentinel`` and a quorum of two, and call a master down
after ``DOWN_AFTER_MS`` of silence.  The deployment is ready once every sentinel knows every
replica and the other sentinels: a replica a sentinel does not know is never promoted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from callgate.ops.embedded_redis import EmbeddedRedis, until

MASTER_NAME = "callgate"
"""The name the sentinels monitor the master under (the URL's path)."""
SENTINELS = 3
QUORUM = 2
DOWN_AFTER_MS = 1000
"""How long a master may be silent before a sentinel thinks it down (Redis's default: 30 s)."""
FAILOVER_TIMEOUT_MS = 5000


class SentinelProcess(EmbeddedRedis):
    """redis-server in Sentinel mode (it rewrites its config file, so each has its own)."""

    def arguments(self) -> list[str]:
        return [*super().arguments(), "--sentinel"]


@dataclass
class EmbeddedSentinel:
    """A master with ``replicas`` replicas, watched by three sentinels."""

    replicas: int = 1
    master_name: str = MASTER_NAME
    servers: list[EmbeddedRedis] = field(default_factory=list)
    """The data nodes, the first started as master (`master` says which is master now)."""
    sentinels: list[EmbeddedRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL naming every sentinel and the master's name."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.master_name}/0"

    def start(self, timeout_s: float = 30.0) -> EmbeddedSentinel:
        try:
            self._start_servers(timeout_s)
            for _ in range(SENTINELS):
                node = SentinelProcess()
                node.config_file = _sentinel_conf(node.directory, self.master_name, self._port)
                self.sentinels.append(node)
                node.start()
            self.wait_until_known(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def _port(self) -> int:
        return self.servers[0].port

    def _start_servers(self, timeout_s: float) -> None:
        for index in range(1 + self.replicas):
            node = EmbeddedRedis()
            follows = None if index == 0 else self._port
            node.config_file = _server_conf(node.directory, follows)
            self.servers.append(node)
            node.start()
        until(lambda: _replicas_online(self.servers[0]) >= self.replicas, timeout_s, "synced")

    def wait_until_known(self, timeout_s: float) -> None:
        """Until every live sentinel sees the master, its replicas and the other sentinels."""
        want = len(self.live()) - 1

        def known() -> bool:
            return all(
                _state(s, self.master_name, "num-slaves") >= want
                and _state(s, self.master_name, "num-other-sentinels") >= SENTINELS - 1
                for s in self.sentinels
            )

        until(known, timeout_s, "the sentinels knew the deployment")

    def master(self) -> EmbeddedRedis:
        """The data node the sentinels call master now."""
        for sentinel in self.sentinels:
            try:
                with redis.Redis(port=sentinel.port, socket_timeout=1) as client:
                    _, port = client.sentinel_get_master_addr_by_name(self.master_name)
            except (redis.RedisError, OSError, TypeError):
                continue
            return next(n for n in self.servers if n.port == int(port))
        raise RuntimeError("no sentinel answered")

    def wait_for_failover(self, old: EmbeddedRedis, timeout_s: float = 20.0) -> EmbeddedRedis:
        """The replica promoted in ``old``'s place, once it serves as master."""

        def promoted() -> bool:
            node = self.master()
            return node is not old and _role(node) == "master"

        until(promoted, timeout_s, f"a replica was promoted in place of :{old.port}")
        return self.master()

    def rejoin(self, old: EmbeddedRedis, timeout_s: float = 30.0) -> None:
        """Start the killed master ``old`` again as a replica of the promoted one, as a careful
        orchestrator does: started as a master, it would take the writes of a client that
        asked a sentinel before the failover ended, and lose them when made a replica."""
        old.config_file = _server_conf(old.directory, self.master().port)
        old.start()
        until(lambda: _role(old) == "slave", timeout_s, f":{old.port} back as a replica")
        until(lambda: _replicas_online(self.master()) >= self.replicas, timeout_s, "synced")

    def wait_until_replicated(self, timeout_s: float = 20.0) -> None:
        """Until the current master has a replica online (what WAIT needs)."""
        until(lambda: _replicas_online(self.master()) >= 1, timeout_s, "a replica online")

    def live(self) -> list[EmbeddedRedis]:
        return [n for n in self.servers if n.process is not None and n.process.poll() is None]

    def stop(self) -> None:
        for node in [*self.sentinels, *self.servers]:
            node.__exit__()

    def __enter__(self) -> EmbeddedSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server_conf(directory: Path, follows: int | None) -> Path:
    path = directory / "server.conf"
    lines = ['save ""', "appendonly no", "repl-diskless-sync-delay 0"]
    if follows is not None:
        lines.append(f"replicaof 127.0.0.1 {follows}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _sentinel_conf(directory: Path, name: str, port: int) -> Path:
    path = directory / "sentinel.conf"
    path.write_text(
        f"sentinel monitor {name} 127.0.0.1 {port} {QUORUM}\n"
        f"sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n"
        f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}\n"
        f"sentinel parallel-syncs {name} 1\n"
    )
    return path


def _state(sentinel: EmbeddedRedis, name: str, item: str) -> int:
    try:
        with redis.Redis(port=sentinel.port, socket_timeout=1) as client:
            return int(client.sentinel_master(name).get(item, 0))
    except (redis.RedisError, OSError):
        return -1


def _role(node: EmbeddedRedis) -> str:
    try:
        with redis.Redis.from_url(node.url, socket_timeout=1) as client:
            return str(client.execute_command("ROLE")[0].decode())
    except (redis.RedisError, OSError):
        return "down"


def _replicas_online(node: EmbeddedRedis) -> int:
    """How many replicas ``node`` (a master) streams to."""
    try:
        with redis.Redis.from_url(node.url, socket_timeout=1) as client:
            info = client.info("replication")
    except (redis.RedisError, OSError):
        return 0
    return sum(1 for k, v in info.items() if k.startswith("slave") and _online(v))


def _online(value: Any) -> bool:
    return isinstance(value, dict) and value.get("state") == "online"
