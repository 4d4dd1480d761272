"""Redis URLs: a password never reaches a log line or a progress line, and arq reads a URL
exactly as redis-py does (TLS options and encoded credentials included)."""

from __future__ import annotations

import logging

import orjson
import pytest

from callgate.config import Settings
from callgate.jobs import redis_settings
from callgate.logs import MASK, JsonFormatter, mask_url_password, secret_values
from callgate.ops.stack import WORKERS
from callgate.ops.system import LocalSystem, SystemSpec

SECRET = "s3cr3t-Pw_9f"


@pytest.mark.parametrize(
    "text",
    [
        "redis://workers:PW@redis:6379/0",
        "rediss://:PW@h:6380/0?ssl_ca_certs=/tls/ca.crt&ssl_check_hostname=true",
        "Redis at redis://u:PW@h:1/0, key prefix cg",
        '{"url":"redis://u:PW@h:1","x":"a@b"}',
        "redis://h:1/0?password=PW&db=1",
        "one http://a:PW@x two ws://b:PW@y/",
        "redis://127.0.0.1:6379/0",
        "redis://workers@redis:6379/0",
        "mail bob@example.com at 10:30",
        "repr 'redis://u:PW@h:1', 'x@y'",
    ],
)
def test_mask_url_password_keeps_user_and_host(text: str) -> None:
    assert mask_url_password(text.replace("PW", SECRET)) == text.replace("PW", MASK)


@pytest.mark.parametrize("password", ["p@ss", "p%40ss", "a:b", "x%2Fy%3Fz", "-_.~!$&'()*+,;="])
def test_a_password_with_url_syntax_in_it_is_masked_whole(password: str) -> None:
    """Whatever a URL may hold in its password (RFC 3986; "/?#" only percent-encoded)."""
    assert mask_url_password(f"redis://u:{password}@h:1/0") == f"redis://u:{MASK}@h:1/0"


def test_log_lines_never_hold_the_redis_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://workers:p%40ss-w0rd-7@redis:6379/0")
    assert {"p%40ss-w0rd-7", "p@ss-w0rd-7"} <= set(secret_values())
    record = logging.LogRecord(
        "t", logging.ERROR, __file__, 1, "lost %s; password p@ss-w0rd-7 and rediss://a:b-c-d@h",
        ("redis://workers:p%40ss-w0rd-7@redis:6379/0",), None,
    )  # fmt: skip
    line = JsonFormatter("test").format(record)
    assert "w0rd" not in line and "b-c-d" not in line
    assert orjson.loads(line)["msg"].startswith(f"lost redis://workers:{MASK}@redis:6379/0;")


def test_callgate_up_prints_where_redis_is_not_its_password() -> None:
    spec = SystemSpec(
        services=(),
        scripted_model=False,
        replicas=dict.fromkeys(WORKERS, 0),
        redis_url=f"redis://workers:{SECRET}@127.0.0.1:6379/0",
    )
    lines: list[str] = []
    with LocalSystem(spec, progress=lines.append) as system:
        assert system.env["REDIS_URL"].endswith(f"{SECRET}@127.0.0.1:6379/0")  # children get it
    assert lines[0].startswith(f"Redis at redis://workers:{MASK}@127.0.0.1:6379/0, key prefix")
    assert not [line for line in lines if SECRET in line]


def test_arq_reads_a_tls_url_as_redis_py_does() -> None:
    url = (
        "rediss://sub%40mitters:p%40ss@redis.internal:6380/2"
        "?ssl_ca_certs=/tls/ca.crt&ssl_cert_reqs=required&ssl_check_hostname=true"
        "&ssl_certfile=/tls/client.crt&ssl_keyfile=/tls/client.key"
    )
    arq = redis_settings(Settings(redis_url=url))
    assert (arq.host, arq.port, arq.database) == ("redis.internal", 6380, 2)
    assert (arq.username, arq.password) == ("sub@mitters", "p@ss")
    assert arq.ssl and arq.ssl_cert_reqs == "required" and arq.ssl_check_hostname is True
    assert (arq.ssl_ca_certs, arq.ssl_certfile, arq.ssl_keyfile) == (
        "/tls/ca.crt",
        "/tls/client.crt",
        "/tls/client.key",
    )


def test_arq_settings_of_plain_and_unix_urls() -> None:
    plain = redis_settings(Settings(redis_url="redis://workers:pw@redis:6379/0"))
    assert not plain.ssl
    assert (plain.host, plain.username, plain.password) == ("redis", "workers", "pw")
    unix = redis_settings(Settings(redis_url="unix:///run/redis.sock?db=3"))
    assert (unix.unix_socket_path, unix.database, unix.ssl) == ("/run/redis.sock", 3, False)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("redis://redis:6379/0?ssl_ca_certs=/tls/ca.crt", "on a plain URL: use rediss://"),
        ("rediss://redis:6379/0?ssl_ciphers=HIGH", "arq cannot carry the TLS options"),
        ("rediss://redis:6379/0?ssl_min_version=TLSv1_3", "arq cannot carry the TLS options"),
    ],
)
def test_a_tls_option_arq_would_drop_is_refused(url: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        redis_settings(Settings(redis_url=url))
