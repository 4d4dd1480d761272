"""`callgate doctor`'s checks of a running deployment through Redis, one line each.

* **Each login** this machine has (``REDIS_URL`` and the bundle's ``SUBMITTERS_REDIS_URL``,
  ``APPROVERS_REDIS_URL``, ``SLACK_REDIS_URL``): it logs in, and its ACL does what README's
  Security table says — probed with commands that change nothing whether Redis allows them
  or not (a read of a key that does not exist, a DEL of one, CONFIG GET).  And a client with
  no user at all is refused.
* **Live workers**: every worker kind has a process that said it is alive within
  `LIVE_IDLE_MS` (`callgate.streams.upkeep.announce`, which the stream workers and the arq
  ingress run).
* **Clocks**: Redis's TIME and this machine's agree within `CLOCK_SKEW_S` (signatures' ``iat``
  and ``exp``, deadlines and approval expiry compare the two).
* **Stranded calls**: no call of a live run sits past its timeouts in a state only a worker
  moves it on from (`callgate.ops.stranded`): one line each, naming the run, call, tool, state
  and age.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from callgate.config import Settings
from callgate.connect import RedisClient, cluster_address, redis_client, sentinel_address
from callgate.keys import Keys
from callgate.ledger.reads import Reads
from callgate.logs import mask_url_password
from callgate.ops import exits
from callgate.ops.stack import WORKERS
from callgate.ops.stranded import find_stranded

Check = tuple[bool, str]
REDIS_TIMEOUT_S = 2.0
LIVE_IDLE_MS = 10_000
"""A consumer silent this long is taken as gone (a live one speaks every two seconds)."""
CLOCK_SKEW_S = 2.0
PROBE = "doctor-probe"
"""The run id the probes name: no run has it, so nothing they touch exists."""
ACL_FIX = (
    "render deploy/redis/users.acl with deploy/redis/acl.sh and restart Redis with it "
    "(README: Deploy)"
)


@dataclass(frozen=True)
class Probe:
    """One command a login's ACL must allow (``allowed``) or refuse, and what it shows."""

    says: str
    command: Callable[[Keys], tuple[str, ...]]
    allowed: bool


PROBES: dict[str, tuple[Probe, ...]] = {
    "workers": (
        Probe("reads runs", lambda k: ("HGETALL", k.run(PROBE)), True),
        Probe("cannot administer Redis", lambda k: ("CONFIG", "GET", "maxmemory"), False),
    ),
    "submitters": (
        Probe("reads runs", lambda k: ("HGETALL", k.run(PROBE)), True),
        Probe("cannot remove a queued job", lambda k: ("DEL", f"arq:job:{PROBE}"), False),
        Probe("cannot write a callgate key", lambda k: ("DEL", k.run(PROBE)), False),
    ),
    "approvers": (
        Probe("reads runs", lambda k: ("HGETALL", k.run(PROBE)), True),
        Probe("cannot write a callgate key", lambda k: ("DEL", k.run(PROBE)), False),
    ),
    "slack": (
        Probe("reads approvals", lambda k: ("HGETALL", k.approval(PROBE, PROBE)), True),
        Probe("cannot read run records", lambda k: ("HGETALL", k.run(PROBE)), False),
    ),
}
"""What README's Security table says of each login, as harmless commands."""


def client_of(url: str) -> RedisClient:
    """A client of ``url`` (a node, a Sentinel master or a cluster), quick to give up."""
    if cluster_address(url) is not None or sentinel_address(url) is not None:
        return redis_client(url)
    client: aioredis.Redis = aioredis.Redis.from_url(
        url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )
    return client


def _login_of(url: str) -> str | None:
    """The user ``url`` logs in as (None: the default user)."""
    address = cluster_address(url) or sentinel_address(url)
    return address.username if address is not None else urlsplit(url).username


async def _allowed(client: RedisClient, command: tuple[str, ...]) -> bool:
    try:
        await client.execute_command(*command)
    except NoPermissionError:
        return False
    return True


async def check_login(url: str, keys: Keys) -> Check:
    """Whether ``url``'s user logs in and its ACL does what the Security table says."""
    user = _login_of(url) or "default"
    shown = mask_url_password(url)
    client = client_of(url)
    try:
        await client.ping()
        wrong = [
            f"{'cannot' if probe.allowed else 'can'} {' '.join(probe.command(keys)[:2])}"
            for probe in PROBES.get(user, ())
            if await _allowed(client, probe.command(keys)) != probe.allowed
        ]
    except Exception as exc:  # any failure to log in is this check's answer
        failed = exits.failure(exc)
        why = failed[0] if failed else exits.one_line(str(exc))
        return False, f"Redis login {user} ({shown}): {why}"
    finally:
        await client.aclose()
    if wrong:
        return False, f"Redis user {user}: {', '.join(wrong)} — {ACL_FIX}"
    says = "; ".join(probe.says for probe in PROBES.get(user, ()))
    return True, f"Redis login {user} at {shown} works" + (f": {says}" if says else "")


async def check_no_anonymous(url: str) -> Check:
    """Whether Redis refuses a client that names no user (the default user is off); on a
    cluster, its first node."""
    cluster = cluster_address(url)
    if cluster is not None:
        url = "redis://{}:{}".format(*cluster.nodes[0])
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"[{host}]" if ":" in host else host
    anonymous = urlunsplit(parts._replace(netloc=f"{netloc}:{parts.port or 6379}"))
    client = client_of(anonymous)
    try:
        await client.ping()
    except (AuthenticationError, ResponseError):
        return True, "Redis refuses a client without a user and password"
    except Exception as exc:  # unreachable: the login lines say so
        return False, f"Redis at {mask_url_password(anonymous)}: {exits.one_line(str(exc))}"
    finally:
        await client.aclose()
    return False, (
        f"Redis lets in a client without a user and password (the default user is on) — {ACL_FIX}"
    )


async def _live_consumers(client: RedisClient, keys: Keys, group: str) -> int:
    """How many processes of ``group`` said they were alive within `LIVE_IDLE_MS`."""
    since_ms = time.time() * 1000 - LIVE_IDLE_MS
    return len(await client.zrangebyscore(keys.consumers(group), since_ms, "+inf"))


async def check_workers(settings: Settings) -> list[Check]:
    """One line per worker kind: whether a process of it is alive."""
    keys = Keys(settings.key_prefix, settings.partitions)
    client = client_of(settings.redis_url)
    lines: list[Check] = []
    try:
        for kind in WORKERS:
            live = await _live_consumers(client, keys, kind)
            what = f"live process{'es' if live != 1 else ''}"
            ok = live > 0
            lines.append(
                (
                    ok,
                    f"{kind}: {live} {what}"
                    if ok
                    else f"{kind}: no live worker — start it (Procfile: honcho -e DIR/.env "
                    f"start {kind}; compose: docker compose up -d {kind})",
                )
            )
    except NoPermissionError:
        lines.append(
            (
                False,
                "workers not checked: this login may not see consumer groups "
                "(run doctor with the workers' REDIS_URL)",
            )
        )
    finally:
        await client.aclose()
    return lines


async def check_clock(settings: Settings) -> Check:
    """Whether Redis's clock and this machine's agree (INFO, which the workers' login has)."""
    client = client_of(settings.redis_url)
    try:
        usec = (await client.info("server")).get("server_time_usec")
        if usec is None:  # older than Redis 7.0
            seconds, micros = await client.time()
            usec = seconds * 1_000_000 + micros
    finally:
        await client.aclose()
    skew = time.time() - int(usec) / 1e6
    if abs(skew) > CLOCK_SKEW_S:
        return False, (
            f"this machine's clock is {skew:+.1f} s off Redis's: sync both (NTP) — "
            "signatures, deadlines and approval expiry compare them"
        )
    return True, f"clock agrees with Redis's ({skew:+.2f} s)"


async def check_stranded(settings: Settings) -> list[Check]:
    """One line per stranded call, or one saying there is none."""
    client = client_of(settings.redis_url)
    reads = Reads(client, Keys(settings.key_prefix, settings.partitions), settings)
    try:
        scan = await find_stranded(reads)
    finally:
        await reads.aclose()
        await client.aclose()
    if not scan.calls:
        runs = f"{scan.live_runs} live run{'s' if scan.live_runs != 1 else ''}"
        return [(True, f"no stranded calls ({runs})")]
    return [(False, stranded.line()) for stranded in scan.calls]


async def guarded(check: Awaitable[Check | list[Check]], what: str) -> list[Check]:
    """A check's lines, or one line saying why it could not run."""
    try:
        result = await check
    except Exception as exc:  # any failure is this check's answer
        failed = exits.failure(exc)
        return [(False, f"{what}: {failed[0] if failed else exits.one_line(str(exc))}")]
    return result if isinstance(result, list) else [result]
