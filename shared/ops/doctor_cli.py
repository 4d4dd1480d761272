"""`callgate doctor`: what this machine's deployment settings would do, checked the way the
workers read them, one line per check.

    callgate doctor [--no-redis]

The trust file is loaded exactly as a worker loads it: a file a worker would refuse (not JSON,
an editor's half-written save, a key that does not parse) is named here with the reason, while
the workers keep the last version that loaded (`callgate.auth.deployment.TrustSource`).  Exit
codes: 0 every check passed, 1 one failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import redis.asyncio as aioredis

from callgate.auth.trust import load_trust
from callgate.config import Settings
from callgate.errors import TrustConfigError
from callgate.logs import mask_url_password
from callgate.ops import exits

REDIS_TIMEOUT_S = 2.0


def check_trust(settings: Settings) -> tuple[bool, str]:
    """Whether the trust file loads, and the line that says so."""
    path = settings.trust_path
    if not path.exists():
        return False, (f"no trust file at {path}: every submission and decision is refused "
                       "(create it, or set CALLGATE_TRUST_FILE)")
    try:
        trust = load_trust(path)
    except TrustConfigError as exc:
        return False, (f"{exits.one_line(str(exc))} — the workers keep the last version that "
                       "loaded until it is fixed")
    counts = ", ".join(f"{len(getattr(trust, section))} {section}"
                       for section in ("submitters", "people", "delegates", "issuers"))
    return True, f"trust file {path}: {counts}"


async def check_redis(settings: Settings) -> tuple[bool, str]:
    """Whether Redis answers with this machine's URL and credentials (never printed)."""
    client = aioredis.Redis.from_url(settings.redis_url, socket_connect_timeout=REDIS_TIMEOUT_S,
                                     socket_timeout=REDIS_TIMEOUT_S)
    shown = mask_url_password(settings.redis_url)
    try:
        await client.ping()
    except Exception as exc:  # any failure is this check's answer
        failed = exits.failure(exc)
        return False, failed[0] if failed else f"Redis at {shown}: {exits.one_line(str(exc))}"
    finally:
        await client.aclose()
    return True, f"Redis at {shown} answers"


async def cmd_doctor(args: argparse.Namespace) -> int:
    settings = Settings()
    checks = [check_trust(settings)]
    if not args.no_redis:
        checks.append(await check_redis(settings))
    for ok, line in checks:
        print(f"{'ok ' if ok else 'BAD'} {line}", file=sys.stdout if ok else sys.stderr)
    return exits.OK if all(ok for ok, _ in checks) else exits.ENDED


def add_command(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check this machine's trust file and Redis")
    doctor.add_argument("--no-redis", action="store_true", help="check the trust file only")
    doctor.set_defaults(handler=cmd_doctor)
