"""Redis as a deployment runs it, for the lockdown tests (test_redis_acl, test_redis_tls).

The server starts from the deployment's own files, never from a copy: deploy/redis/redis.conf,
and deploy/redis/users.acl rendered by deploy/redis/acl.sh with fresh passwords — exactly what
docker-compose.yml's redis service does.  One user is added for the tests alone, ``operator``,
so a test can read ``ACL LOG`` (what Redis refused, and to whom); no client of the system uses it.
TLS certificates (a CA and a server certificate for 127.0.0.1 and localhost) are made here.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.embedded_redis import EmbeddedRedis, RedisTls
from callgate.ops.system import LocalSystem, SystemSpec

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "redis"
USERS = ("workers", "submitters", "approvers", "slack", "api")
TENANTS = ("acme", "globex")
"""The tenants the deployment renders users for (docker-compose.yml's CALLGATE_TENANTS)."""
TENANT_USERS = tuple(f"{base}_{t}" for t in TENANTS for base in ("submitters", "approvers"))
OPERATOR = "operator"
PREFIX = "cg"
"""The key prefix users.acl is written for."""

TRAVEL_RUN = {
    "api": "openai-responses",
    "model": "travel-parallel",
    "input": "Train G1234 and Hangzhou weather?",
    "identity": {"user": "alice"},
    "allowed_tools": ["get_train_status", "get_weather"],
    "max_turns": 6,
}
"""The travel demo run of tests/e2e/test_travel_pipeline.py: two reads, then an answer."""


def password_env(passwords: Mapping[str, str]) -> dict[str, str]:
    """The environment acl.sh (and docker-compose.yml) take the passwords from."""
    return {f"REDIS_{user.upper()}_PASSWORD": pw for user, pw in passwords.items()}


def render_acl(
    passwords: Mapping[str, str], rules: Path = DEPLOY / "users.acl", tenants: tuple[str, ...] = ()
) -> str:
    """``sh acl.sh rules`` with these passwords (and users for these tenants); raises
    CalledProcessError when it refuses."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **password_env(passwords),
        "CALLGATE_TENANTS": " ".join(tenants),
    }
    done = subprocess.run(
        ["sh", str(DEPLOY / "acl.sh"), str(rules)],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


@dataclass
class LockedRedis:
    """A running locked-down server and the passwords of its users."""

    server: EmbeddedRedis
    passwords: dict[str, str]

    def url(self, user: str) -> str:
        return self.server.url_for(user, self.passwords[user])

    def settings(self, user: str) -> Settings:
        return Settings(redis_url=self.url(user), key_prefix=PREFIX, read_block_ms=50)

    def client(self, user: str) -> redis.Redis:
        """A plain (synchronous) client logged in as ``user``."""
        return redis.Redis.from_url(self.url(user), socket_timeout=5)

    def refusals(self, user: str) -> list[dict[str, Any]]:
        """What ``ACL LOG`` holds for ``user``.  CLIENT SETINFO is left out: redis-py sends it
        on connecting and ignores the answer, and the rules need not allow it (Redis < 7.2 has
        no such command)."""
        with self.client(OPERATOR) as admin:
            raw: list[dict[Any, Any]] = admin.acl_log(count=1000)  # type: ignore[assignment]
        entries = [{_text(k): _text(v) for k, v in e.items()} for e in raw]
        return [e for e in entries if e["username"] == user and e["object"] != "client|setinfo"]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def locked_redis(
    directory: Path, tls: RedisTls | None = None, rules: Path = DEPLOY / "users.acl"
) -> Iterator[LockedRedis]:
    """redis-server with the deployment's redis.conf and users, the tenant users of `TENANTS`
    among them (and TLS only, if given)."""
    passwords = {user: secrets.token_hex(16) for user in (*USERS, *TENANT_USERS, OPERATOR)}
    deployed = {user: passwords[user] for user in (*USERS, *TENANT_USERS)}
    operator = f"user {OPERATOR} on >{passwords[OPERATOR]} ~* &* +@all\n"
    aclfile = directory / "users.acl"
    aclfile.write_text(render_acl(deployed, rules, TENANTS) + operator)
    aclfile.chmod(0o600)
    server = EmbeddedRedis(
        config_file=DEPLOY / "redis.conf",
        aclfile=aclfile,
        login=("workers", passwords["workers"]),
        tls=tls,
    )
    with server:
        yield LockedRedis(server, passwords)


def travel_system(redis_url: str, progress: list[str]) -> LocalSystem:
    """The whole pipeline (every worker, the travel service, the scripted model) on
    ``redis_url``, with the key prefix the ACL is written for; progress lines kept."""
    spec = SystemSpec(
        services=("travel",),
        scripted_model=True,
        redis_url=redis_url,
        key_prefix=PREFIX,
        grace_s=3.0,
    )
    return LocalSystem(spec, progress=progress.append).start()


async def run_travel(settings: Settings) -> dict[str, Any]:
    """Submit the travel demo run as `CallgateClient` users do; its view once it settled."""
    async with CallgateClient(settings) as client:
        run_id = await client.submit(TRAVEL_RUN)
        await client.wait(run_id, 30)
        return await client.view(run_id)


def assert_travel_completed(view: dict[str, Any]) -> None:
    """Completed, with both tools' results in the answer."""
    assert view["status"] == "completed", view
    calls = {c["tool"]: c for c in view["calls"]}
    assert sorted(calls) == ["get_train_status", "get_weather"], view
    for call in calls.values():
        assert call["state"] == "succeeded", call
        assert call["result"]["status"] == "ok", call
    assert "on_time" in view["final_text"] and "light rain" in view["final_text"], view


# -- TLS --------------------------------------------------------------------------------------


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _certificate(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    """A certificate for ``key`` valid from five minutes ago for a day, to be extended and
    signed by ``issuer``."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )


def make_ca(directory: Path, name: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Name]:
    """A self-signed CA: its certificate's path, its key, its name."""
    key, subject = _key(), _name(name)
    cert = (
        _certificate(subject, subject, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, subject


def make_tls(directory: Path) -> RedisTls:
    """A CA and the server certificate it signed, for 127.0.0.1 and localhost."""
    ca_file, ca_key, ca_name = make_ca(directory, "callgate-test-ca")
    key = _key()
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        _certificate(_name("localhost"), ca_name, key)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = directory / "redis.crt", directory / "redis.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_file, key)
    return RedisTls(cert_file=cert_file, key_file=key_file, ca_file=ca_file)
