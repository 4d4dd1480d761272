"""Every setting callgate reads from the environment, in one typed place.

Services build one `Settings` at start-up and pass it down; nothing else reads
`os.environ` for configuration.  The one other source is a running `callgate dev`: when
neither argument nor environment names a Redis, its state file (``HOME/dev.json``) does, so a
command in another terminal finds that deployment with nothing exported.

Provider endpoints and keys are deliberately *not* here: the official SDKs read
`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` themselves,
and callgate never overrides them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from callgate.connect import as_cluster_url, cluster_address, sentinel_address
from callgate.keys import TENANT_PATTERN

DEV_STATE_FILE = "dev.json"
"""Under ``home``: where a running `callgate dev` says which Redis and key prefix it uses."""

CommaList = Annotated[tuple[str, ...], NoDecode]
"""A tuple setting written in the environment as ``a,b,c`` (or a JSON array)."""


class Settings(BaseSettings):
    """Runtime settings; every field can be set as `CALLGATE_<NAME>` (REDIS_URL as is)."""

    model_config = SettingsConfigDict(env_prefix="CALLGATE_", frozen=True, extra="ignore")

    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias="REDIS_URL",
        description="Where the ledger and the streams live: redis://, rediss:// (TLS), unix:// "
        "or redis+sentinel://[user:password@]host:port[,host:port…]/master-name[/db].",
    )
    redis_cluster: bool = Field(
        default=False,
        description="REDIS_URL names one node of a Redis Cluster (redis://host:port): the same "
        "as writing it redis+cluster://host:port.",
    )
    key_prefix: str = Field(default="cg", description="Namespace of every key and stream.")
    tenant: str | None = Field(
        default=None,
        pattern=f"^{TENANT_PATTERN}$",
        description="The tenant whose login the CLI uses (Redis user submitters_<tenant> or "
        "approvers_<tenant>): `callgate runs` and the inbox list that tenant's runs only.",
    )
    partitions: int = Field(default=1, ge=1, le=1024, description="N in hash(run_id) mod N.")
    tool_modules: CommaList = Field(
        default=(),
        description="The deployment's tool registry: modules whose TOOLS (and ACCEPTANCE) lists "
        "every worker loads at start-up.  A run selects among these tools by name; nothing a "
        "run or a message says is ever imported.",
    )

    mcp_servers: Annotated[tuple[dict[str, Any], ...], NoDecode] = Field(
        default=(),
        description="The deployment's MCP servers, a JSON list of {name, url | command, trusted, "
        "prefix, timeout_s, tools: {NAME: local policy}}: their tools join the registry at "
        "worker start and follow the server's tools/list_changed (README: Tools from MCP "
        "servers).  A run selects their tools by name, never a server or a function.",
    )

    # How the hot path moves facts and commands (both documented in README "Performance").
    carry: bool = Field(
        default=True,
        description="Messages carry the facts their reader decides on (checked against the "
        "ledger in the reader's guarded step); off: every reader loads them from the ledger.",
    )
    wire: Literal["hiredis", "redis-py"] = Field(
        default="hiredis",
        description="Transport of the ledger's hot commands: a bare hiredis connection, or "
        "plain redis-py.  TLS and Unix sockets always use redis-py.",
    )
    group_steps: bool = Field(
        default=True,
        description="Group commit: the ledger steps a worker issues together go to Redis as "
        "one script call (each still applied or refused alone); off: a script call a step.",
    )

    # Tracing (shared/telemetry, README "Tracing"); the rest is the standard OTEL_* variables.
    tracing: bool = Field(
        default=False,
        description="OpenTelemetry spans of every run, exported as OTLP/HTTP per OTEL_*; "
        "off: no span is made and no message carries a traceparent.",
    )
    trace_content: bool = Field(
        default=False,
        description="Tool arguments and results as span attributes, redacted as the event "
        "log is; off: never.",
    )

    # Consumer-group behaviour (shared/streams/worker.py).
    # Four heartbeats per claim window: a live consumer survives ~0.9 s of stalled event loop,
    # and a dead one's messages are taken over ~1.2-1.5 s after it died.
    claim_idle_ms: int = Field(
        default=1200,
        ge=10,
        description="A pending message idle this long belongs to a dead consumer.",
    )
    heartbeat_ms: int = Field(
        default=300, ge=5, description="How often a live consumer refreshes its in-flight messages."
    )
    max_deliveries: int = Field(
        default=5,
        ge=1,
        description="Deliveries after which a message goes to the dead-letter stream.",
    )
    read_count: int = Field(default=64, ge=1, description="XREADGROUP COUNT per read.")
    read_block_ms: int = Field(default=200, ge=1, description="XREADGROUP BLOCK per read.")
    concurrency: int = Field(
        default=256, ge=1, description="In-flight messages per worker process."
    )
    shutdown_grace_s: float = Field(
        default=5.0, ge=0, description="How long a stopping worker lets in-flight work finish."
    )
    stream_trim_s: float = Field(
        default=5.0,
        ge=0,
        description="How often a worker drops the entries every group settled from the streams "
        "it reads (0 = never).",
    )

    # Limits on what the model may send us.
    max_argument_bytes: int = Field(default=16_384, ge=64)
    max_argument_depth: int = Field(default=8, ge=1)
    max_calls_per_turn: int = Field(default=16, ge=1)

    # Model requests (shared/providers, services/model_turn.py).
    model_timeout_s: float = Field(default=60.0, gt=0, description="Per model request.")
    model_max_retries: int = Field(
        default=3,
        ge=0,
        description="Retries of 429/529/5xx/transport errors per turn (SDK retries are off).",
    )
    max_output_tokens: int | None = Field(default=1024, ge=1)
    adapter_factory: str | None = Field(
        default=None,
        description="'module:function' returning the adapter for an api, instead of the SDK "
        "adapters (the benchmark's in-process provider); None = the official SDKs.",
    )

    # Tool execution (services/executor.py).
    tool_timeout_s: float = Field(default=10.0, gt=0, description="Default when a tool sets none.")
    write_durability: Literal["none", "replica", "fsync"] = Field(
        default="none",
        description="What must hold a write's `executing` intent before its request goes out "
        "(README: Durability of write intent): none (Redis's own persistence), replica (WAIT "
        "for one replica after the take; unconfirmed, nothing is sent and the call is retried) "
        "or fsync (executors start only on a Redis with appendonly yes, appendfsync always).",
    )
    durability_wait_ms: int = Field(
        default=500,
        ge=1,
        le=60_000,
        description="With write_durability=replica: how long WAIT lets a replica take to "
        "confirm the intent (never 0: WAIT 0 waits forever).",
    )

    # Reconciliation of writes with an unknown outcome (services/reconciler.py).
    reconcile_schedule_s: tuple[float, ...] = Field(
        default=(0.0, 0.5, 1.0, 2.0, 4.0),
        description="Delay before each check; still unknown after the last → pause and notify.",
    )

    # Approvals.
    approval_ttl_s: float = Field(default=3600.0, gt=0, description="A pending approval expires.")

    # Who is trusted (callgate.auth): the deployment's trust file, and this process's own key.
    home: Path = Field(
        default_factory=lambda: Path.home() / ".callgate",
        description="Local state: the local keyring (keys/, trust.json) and `callgate dev`'s "
        "state file.",
    )
    trust_file: Path | None = Field(
        default=None,
        description="The deployment's trust configuration (submitters, people, delegates, "
        "issuers); default: HOME/trust.json.",
    )
    deploy_dir: Path | None = Field(
        default=None,
        description="The bundle `callgate deploy init DIR` wrote (trust.json, secrets/, .env): "
        "`callgate doctor` checks its keys against the trust file.",
    )
    submitter: str = Field(
        default="local", description="The key id this process signs the runs it submits with."
    )
    signing_key: Path | None = Field(
        default=None,
        description="The private key of ``submitter``; default: HOME/keys/<submitter>.pem.",
    )
    identity_token_max_age_s: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="Longest lifetime (exp - iat) of an end user's identity token a run may "
        "start with; each such token starts one run.",
    )

    # Bounds on what one model response may make us keep.
    max_response_bytes: int = Field(
        default=1_000_000,
        ge=1024,
        description="A response larger than this is unusable (paused incomplete, kept small).",
    )
    notify_max_entries: int = Field(
        default=10_000,
        ge=100,
        description="Notify streams keep about this many entries even if nobody reads them.",
    )
    dead_letter_max_entries: int = Field(
        default=10_000, ge=100, description="Dead-letter streams keep about this many entries."
    )

    @property
    def trust_path(self) -> Path:
        return self.trust_file or self.home / "trust.json"

    # Retention of finished runs.
    retention_s: int = Field(default=7 * 24 * 3600, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _join_dev(cls, data: Any) -> Any:
        """No Redis given: join the `callgate dev` running under ``home``, if one is alive.
        Only a missing REDIS_URL falls back, so an exported one always wins, and the prefix
        comes along with the URL it belongs to."""
        if not isinstance(data, dict) or "REDIS_URL" in data or "redis_url" in data:
            return data
        home = data.get("home") or Path.home() / ".callgate"
        state = read_dev_state(Path(home).expanduser())
        if state is None:
            return data
        joined = {"REDIS_URL": state["redis_url"], "key_prefix": state["key_prefix"]}
        return {**joined, **data}

    @field_validator("tool_modules", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return tuple(orjson.loads(text))
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str | bytes):
            return tuple(orjson.loads(value)) if value.strip() else ()
        return value

    @field_validator("redis_url")
    @classmethod
    def _sentinel_url(cls, value: str) -> str:
        """A malformed ``redis+sentinel://`` or ``redis+cluster://`` URL is a bad setting at
        start, not a failure at the first command (other schemes redis-py reads as it
        connects)."""
        sentinel_address(value)
        cluster_address(value)
        return value

    @model_validator(mode="after")
    def _cluster_url(self) -> Settings:
        """``CALLGATE_REDIS_CLUSTER=1`` is the cluster scheme on the URL: every client is made
        from the URL alone (`callgate.connect.redis_client`)."""
        if self.redis_cluster:
            object.__setattr__(self, "redis_url", as_cluster_url(self.redis_url))
        return self


def bad_settings(exc: ValidationError) -> str | None:
    """The one line that says which settings do not validate, and why; None for an error of
    another model than `Settings`."""
    if exc.title != Settings.__name__:
        return None
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return f"bad setting: {problems}"


def read_dev_state(home: Path) -> dict[str, Any] | None:
    """The state of the `callgate dev` running under ``home``; None when there is no file, it
    is unreadable, or the process that wrote it is gone (a crash leaves the file behind)."""
    try:
        state = orjson.loads((home / DEV_STATE_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(state, dict) or not _alive(state.get("pid")):
        return None
    if not isinstance(state.get("redis_url"), str) or not isinstance(state.get("key_prefix"), str):
        return None
    return state


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user
        return True
    return True
