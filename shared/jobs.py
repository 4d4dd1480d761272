"""The arq job contract shared by the ingress worker and every client that enqueues.

Jobs are JSON (orjson), never pickle, so a service in any language can start a run by writing
arq's job itself (`callgate.client.CallgateClient.submit` writes the same through
`callgate.streams.public_queue.enqueue_once`; ``tests/integration/test_raw_enqueue.py`` does it
with redis-py and PyJWT alone):

1. **Run id** — 1 to 128 characters matching ``^[A-Za-z0-9][A-Za-z0-9_.:-]*$``; it is the arq
   job id and the spec's ``run_id``.
2. **Spec** — a JSON object of `callgate.runspec.RunSpec` fields: ``run_id``, ``api``
   (``openai-responses``, ``openai-chat`` or ``anthropic-messages``), ``model``, ``input``,
   ``identity`` (``{"user": …, "roles": […]}``), optionally ``allowed_tools``, ``max_turns``,
   ``instructions``, ``deadline_s``… (unknown fields are refused).
3. **Digest** — lowercase hex SHA-256 of the spec's canonical JSON, over the ``spec`` object
   exactly as it sits in the job: object keys sorted by code point at every level, no
   whitespace (separators ``,`` and ``:``), UTF-8 with non-ASCII characters written as they are
   (not ``\\u`` escapes), floats in their shortest round-trip form (integers are safest).  In
   Python: ``json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``;
   here: `callgate.auth.tokens.spec_digest`.
4. **Token** — a compact JWT signed ``EdDSA`` (Ed25519) with the submitter's private key (PEM
   PKCS8; the local keyring's submitter is ``$CALLGATE_HOME/keys/local.pem``), header
   ``{"alg": "EdDSA", "kid": NAME}`` where NAME is the submitter's entry in the trust file, and
   claims ``{"sub": NAME, "run": RUN_ID, "spec": DIGEST, "typ": "callgate.submission",
   "iat": NOW, "exp": NOW + TTL, "jti": RANDOM}`` (seconds; TTL at most one day, 300 usual).
   The spec's ``identity`` must lie within the roles (and users) the trust file lets NAME grant.
5. **Job value** — ``{"t": 1, "f": "start_run", "a": [{"spec": SPEC, "token": TOKEN}],
   "k": {}, "et": ENQUEUE_MS}`` as JSON (`StartJob` is the one argument).  A run that acts for
   an end user carries that user's identity provider JWT in ``identity_token`` *beside*
   ``token`` (the submitter still signs): it needs ``iat`` and ``exp``, may live at most
   ``CALLGATE_IDENTITY_TOKEN_MAX_AGE_S`` (default 10 minutes), and starts one run only.
6. **Enqueue** — create-only, in one MULTI/EXEC: ``SETNX arq:job:RUN_ID VALUE`` and
   ``ZADD PREFIX:arq ENQUEUE_MS RUN_ID``, where PREFIX is the deployment's
   ``CALLGATE_KEY_PREFIX`` (default ``cg``; `queue_name`).  SETNX answering 0 means a job under
   this run id is queued or running already.  Before it, if ``arq:result:RUN_ID`` exists the
   run id was used: compare your spec with the kept one (``a[0].spec``) instead of enqueueing.
   The job key has no expiry (the ingress deletes it when the job ends).  Submitters may not
   SET, PSETEX, PEXPIRE or DEL (deploy/redis/users.acl): a queued job is never overwritten,
   shortened or removed, and an entry re-scored into the future is put back by the ingress.
   Where the deployment runs ``CALLGATE_WRITE_DURABILITY=replica``, follow EXEC with ``WAIT 1
   MS`` *on the same connection*: 0 means no replica holds the job yet, and a failover could
   lose it — submit again (the same run id is harmless).  On a Redis Cluster the job's id is
   ``RUN_ID{PREFIX:arq}`` (the queue's name as a hash tag, so all of the job's keys share the
   queue's slot: `callgate.streams.arq_cluster`): write ``arq:job:RUN_ID{PREFIX:arq}`` and
   ZADD that id, in one MULTI/EXEC on a connection to the master of that slot.

A job with no submitter's signature, a broken signature, a spec changed after signing, or an
identity token used before, creates no run.  The job's result (``arq:result:RUN_ID``) says how it
went; a failed job's holds ``{"error": type, "message": text}`` instead of a pickled exception.
A kept result holds the job's arguments without ``token`` and ``identity_token``: submitters
read results, and nothing they read may hold another's credential.  The run record names who
vouched for it (``vouched_by``) and the hash of its spec and identity (``spec_hash``):
`callgate.client.CallgateClient.wait` compares both with what it submitted.

Submitters may write only that public queue.  The workers' own delayed work (approval expiry,
periodic sweeps) runs on a queue of their own (`internal_queue_name`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import orjson
from arq.connections import ArqRedis, RedisSettings, create_pool
from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio.connection import SSLConnection, parse_url

from callgate.config import Settings
from callgate.connect import sentinel_address
from callgate.streams.arq_cluster import on_cluster, queue_pool

START_RUN = "start_run"
"""The ingress job that creates a run (job id = run id)."""


class StartJob(BaseModel):
    """The one argument of a ``start_run`` job: a run spec and who vouches for it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    spec: dict[str, Any]
    """The `RunSpec` as JSON; its ``run_id`` is the job id."""
    token: str | None = Field(default=None, max_length=16_384)
    """A submitting service's signature over this spec and run id
    (`callgate.auth.tokens.sign_submission`), always required; without an identity token the
    identity is theirs to assert, within the roles the deployment lets them grant."""
    identity_token: str | None = Field(default=None, max_length=16_384)
    """A short-lived JWT from an issuer the deployment trusts, used once: the run acts for its
    subject, with the roles the deployment maps its claim to."""


REPLY_RUN = "reply_run"
"""The ingress job that continues a completed run with a follow-up input (job id = reply id)."""


class ReplyJob(BaseModel):
    """The one argument of a ``reply_run`` job: a follow-up input for a run, and who sends it
    — a submitting service's signature over exactly this reply (`ReplyJob.signed_part`), which
    the deployment must let act for the run's identity."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    run_id: str = Field(min_length=1, max_length=128)
    reply_id: str = Field(min_length=1, max_length=128)
    """Unique per reply: it is admitted at most once, however often the job runs."""
    input: str = Field(min_length=1, max_length=1_000_000)
    policy: Literal["reject", "enqueue"] = "reject"
    """While the run is busy: refuse the reply (a conflict), or wait and admit it when the run
    next completes."""
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    """A larger turn budget for the conversation; default: the run's own."""
    token: str = Field(min_length=1, max_length=16_384)

    def signed_part(self) -> dict[str, Any]:
        """What the token signs (with the run id): every field but the token."""
        return self.model_dump(exclude={"token", "run_id"}, exclude_none=True)


CREDENTIALS = ("token", "identity_token")
"""Job argument fields a kept result never holds (submitters read results)."""
QUEUE_SKEW_MS = 5_000
"""How far in the future a public queue entry may be scored: arq's own retries defer by a
second or two; anything later is a re-score by someone else and is put back to now."""


def queue_name(settings: Settings) -> str:
    """The public arq queue (``start_run`` only), namespaced by the key prefix so deployments
    sharing a Redis never mix."""
    return f"{settings.key_prefix}:arq"


def internal_queue_name(settings: Settings) -> str:
    """The workers' own arq queue: delayed work and sweeps, which no submitter may enqueue."""
    return f"{settings.key_prefix}:arq:internal"


class JobQueue:
    """One arq queue of this deployment, its pool opened on first use."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.name = name
        self._pool: ArqRedis | None = None

    async def pool(self) -> ArqRedis:
        if self._pool is None and on_cluster(self.settings):
            self._pool = queue_pool(self.settings, self.name, **SERIALIZERS)
        if self._pool is None:
            self._pool = await create_pool(
                redis_settings(self.settings), default_queue_name=self.name, **SERIALIZERS
            )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None


TLS_OPTIONS = (
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
)
"""The TLS options of a ``rediss://`` URL's query that arq's `RedisSettings` carries."""


def redis_settings(settings: Settings) -> RedisSettings:
    """arq's connection settings from the one ``REDIS_URL``, read exactly as redis-py reads it.

    arq's own ``RedisSettings.from_dsn`` drops the query and does not decode the user and
    password: a ``rediss://…?ssl_ca_certs=…&ssl_check_hostname=true`` URL would connect with
    the system's CAs and no host name check, and ``p%40ss`` would be sent as is.  A TLS option
    arq cannot carry, or one on a plain ``redis://`` URL, is refused rather than dropped.  A
    ``redis+sentinel://`` URL becomes arq's own Sentinel mode, which asks the sentinels for the
    master on every connect as `callgate.connect.redis_client` does.
    """
    sentinel = sentinel_address(settings.redis_url)
    if sentinel is not None:
        return RedisSettings(
            host=list(sentinel.sentinels),
            sentinel=True,
            sentinel_master=sentinel.master,
            database=sentinel.db,
            username=sentinel.username,
            password=sentinel.password,
        )
    url: dict[str, Any] = dict(parse_url(settings.redis_url))
    tls = url.pop("connection_class", None) is SSLConnection
    options = {name: value for name, value in url.items() if name.startswith("ssl_")}
    if options and not tls:
        raise ValueError(f"TLS options {sorted(options)} on a plain URL: use rediss://")
    if unknown := sorted(set(options) - set(TLS_OPTIONS)):
        raise ValueError(f"arq cannot carry the TLS options {unknown} of REDIS_URL")
    return RedisSettings(
        host=url.get("host", "localhost"),
        port=url.get("port", 6379),
        unix_socket_path=url.get("path"),
        database=url.get("db", 0),
        username=url.get("username"),
        password=url.get("password"),
        ssl=tls,
        **options,
    )


def _jsonable(value: Any) -> Any:
    """orjson's fallback: exceptions (a failed job's result) and stray types become JSON."""
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": str(value)}
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _without_credentials(arg: Any) -> Any:
    if not isinstance(arg, dict):
        return arg
    return {name: value for name, value in arg.items() if name not in CREDENTIALS}


def job_serializer(value: Any) -> bytes:
    """JSON; a result (arq's has ``r``, a job's has not) keeps no token of its arguments."""
    if isinstance(value, dict) and "r" in value and isinstance(value.get("a"), list | tuple):
        value = {**value, "a": [_without_credentials(arg) for arg in value["a"]]}
    return orjson.dumps(value, default=_jsonable)


def job_deserializer(data: bytes) -> Any:
    return orjson.loads(data)


SERIALIZERS: dict[str, Any] = {
    "job_serializer": job_serializer,
    "job_deserializer": job_deserializer,
}
"""What every arq client and worker of callgate's queues encodes jobs with."""
