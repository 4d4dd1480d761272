"""A submitting service written without callgate: redis-py, json, hashlib and PyJWT only.

It follows the job contract as `callgate.jobs` documents it, step by step, as a service in any
other language would; `test_raw_enqueue.py` runs it in a process where ``import callgate``
fails, so nothing of callgate's can help it.

    python raw_submitter.py REDIS_URL PREFIX KEY_FILE SUBMITTER SPEC_JSON [SENT_JSON]

prints the run id.  SENT_JSON (a test's man in the middle) is enqueued in place of the spec
that was signed.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import time
from typing import Any

import jwt
import redis

TOKEN_TTL_S = 300


def spec_digest(spec: dict[str, Any]) -> str:
    """3. SHA-256 hex of the canonical JSON: sorted keys, no whitespace, UTF-8 as is."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def submission_token(spec: dict[str, Any], run_id: str, submitter: str, key_pem: str) -> str:
    """4. An EdDSA JWT naming the submitter (``kid``), the run and the spec's digest."""
    now = int(time.time())
    claims = {
        "sub": submitter,
        "run": run_id,
        "spec": spec_digest(spec),
        "typ": "callgate.submission",
        "iat": now,
        "exp": now + TOKEN_TTL_S,
        "jti": secrets.token_urlsafe(16),
    }
    return jwt.encode(claims, key_pem, algorithm="EdDSA", headers={"kid": submitter})


def enqueue(client: redis.Redis, prefix: str, spec: dict[str, Any], token: str) -> bool:
    """5–6. arq's job value and queue entry, create-only; False if this run id was used."""
    run_id = spec["run_id"]
    job_key, result_key = f"arq:job:{run_id}", f"arq:result:{run_id}"
    if client.exists(result_key):  # its job ran already: compare specs instead
        return False
    enqueue_ms = int(time.time() * 1000)
    value = {
        "t": 1,
        "f": "start_run",
        "a": [{"spec": spec, "token": token}],
        "k": {},
        "et": enqueue_ms,
    }
    with client.pipeline(transaction=True) as pipe:
        pipe.setnx(job_key, json.dumps(value, ensure_ascii=False).encode())
        pipe.zadd(f"{prefix}:arq", {run_id: enqueue_ms})
        created, _ = pipe.execute()
    return bool(created)


def main(argv: list[str]) -> int:
    redis_url, prefix, key_file, submitter, spec_text, *sent_text = argv
    spec = json.loads(spec_text)
    with open(key_file, encoding="ascii") as key:
        token = submission_token(spec, spec["run_id"], submitter, key.read())
    sent = json.loads(sent_text[0]) if sent_text else spec
    client = redis.Redis.from_url(redis_url)
    try:
        fresh = enqueue(client, prefix, sent, token)
    finally:
        client.close()
    print(spec["run_id"] if fresh else "already enqueued")
    return 0 if fresh else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
