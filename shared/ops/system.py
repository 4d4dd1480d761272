"""One whole callgate deployment on this machine, as real processes, started and stopped as one.

Redis (the one at ``REDIS_URL`` if it answers, else an embedded one with a generated password;
or always a private one, with AOF when it must survive a restart), the demo services (travel,
booking), the scripted model server, and any number of replicas of every worker — all under
one `Supervisor`, which restarts what dies.  `callgate demo`, conformance, chaos, benchmarks and
the end-to-end tests start the system through this one place, so they all run the same thing
users run.

The environment passes through to every child unchanged, except that the scripted model's URL
becomes ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` only when it is started (i.e. when no real
provider key is set, or when asked to).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from callgate.auth.keyring import DEFAULT_PEOPLE, LocalKeyring, default_home
from callgate.config import Settings
from callgate.envelopes import new_id
from callgate.logs import mask_url_password
from callgate.ops.embedded_redis import (
    EmbeddedRedis,
    RedisNotInstalledError,
    free_port,
    redis_answers,
)
from callgate.ops.stack import (
    OPTIONAL_WORKERS,
    WORKERS,
    available_workers,
    base_env,
    default_redis_url,
    worker_argv,
)
from callgate.ops.supervisor import Supervisor, quiet_sink
from callgate.standins.demo import TOOL_MODULES as DEMO_TOOL_MODULES

LISTENING = r"listening on (http://\S+)"
START_TIMEOUT_S = 20.0

SERVICES: dict[str, tuple[str, str]] = {
    "travel": ("callgate.standins.demo.travel_service", "CALLGATE_TRAVEL_URL"),
    "booking": ("callgate.standins.demo.booking_service", "CALLGATE_BOOKING_URL"),
}
"""Demo service → (module, the setting its tools read the URL from)."""

START_ERRORS = (RuntimeError, TimeoutError, OSError)
"""What starting the system raises when this machine's setup is wrong (`LocalSystem.explain`)."""

RedisMode = Literal["reuse", "private", "private_aof"]
Progress = Callable[[str], None]


def _silent(message: str) -> None:
    """Progress nobody asked to see."""


def has_provider_key(env: Mapping[str, str]) -> bool:
    return bool(env.get("OPENAI_API_KEY") or env.get("ANTHROPIC_API_KEY"))


@dataclass(frozen=True)
class SystemSpec:
    """What to start.  Every field has the default a demo wants."""

    services: tuple[str, ...] = ("travel", "booking")
    scripted_model: bool | None = None
    """Start the scripted model server: None = only when no provider key is set; True = always,
    and point both SDKs at it whatever the environment says."""
    replicas: Mapping[str, int] = field(default_factory=dict)
    """Replicas per worker kind (default 1 each; 0 leaves a kind out)."""
    redis: RedisMode = "reuse"
    """``reuse`` REDIS_URL if it answers (else an embedded one); ``private``: always our own;
    ``private_aof``: our own with the append-only file on, so a restart loses nothing."""
    redis_url: str | None = None
    """Use exactly this Redis (overrides ``redis``)."""
    key_prefix: str | None = None
    """None: a fresh prefix, so this system never mixes with another on the same Redis."""
    people: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(DEFAULT_PEOPLE))
    """Who gets a key and roles in the local keyring when no trust file is configured."""
    delegates: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Service keys that may sign for people (e.g. ``{"slack": ["carol"]}``), likewise."""
    tool_modules: tuple[str, ...] | None = None
    """The tool registry every worker loads (``CALLGATE_TOOL_MODULES``); None: the environment's,
    else the demo's tools."""
    scenarios: tuple[Path, ...] = ()
    """Folders of scripted-model scenarios searched before the built-in ones."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for every child (settings such as CALLGATE_APPROVERS)."""
    worker_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Extra environment per worker kind (e.g. crash points for one kind only)."""
    python: str | None = None
    """The interpreter the workers run under (None: this one).  The upgrade test gives an
    earlier release's venv, to leave that release's workers and runs on the same Redis."""
    grace_s: float = 5.0


class LocalSystem:
    """A running `SystemSpec`: its environment, URLs, supervisor and (maybe) its own Redis."""

    def __init__(
        self,
        spec: SystemSpec | None = None,
        *,
        progress: Progress = _silent,
        sink: Callable[[str, str], None] = quiet_sink,
    ) -> None:
        self.spec = spec or SystemSpec()
        self.progress = progress
        self.supervisor = Supervisor(sink, grace_s=self.spec.grace_s)
        self.redis: EmbeddedRedis | None = None
        self.urls: dict[str, str] = {}
        self.workers: dict[str, list[str]] = {}
        """Worker kind → the supervisor's child names of its replicas."""
        self.env = base_env()
        self.env.update(self.spec.env)
        self._trust()
        if self.spec.tool_modules is not None:
            self.env["CALLGATE_TOOL_MODULES"] = ",".join(self.spec.tool_modules)
        self.env.setdefault("CALLGATE_TOOL_MODULES", ",".join(DEMO_TOOL_MODULES))
        prefix = self.spec.key_prefix or self.env.get("CALLGATE_KEY_PREFIX") or f"cg{new_id()[:8]}"
        self.env["CALLGATE_KEY_PREFIX"] = prefix

    def _trust(self) -> None:
        """Secure by default, in one command: with no trust file configured, the local
        keyring (its submitter, ``people`` and ``delegates``) is what every child trusts, and
        what a CLI on this machine signs with."""
        home = Path(self.env.get("CALLGATE_HOME") or default_home())
        self.env["CALLGATE_HOME"] = str(home)
        if "CALLGATE_TRUST_FILE" not in self.env:
            keyring = LocalKeyring(home)
            keyring.ensure(self.spec.people, self.spec.delegates)
            self.env["CALLGATE_TRUST_FILE"] = str(keyring.trust_file)

    @property
    def settings(self) -> Settings:
        """The settings the children read (Redis URL, key prefix and partitions are what matter
        here, and the write durability: a client submitting under ``replica`` waits for a
        replica to hold each job, as the deployment's own submitters do)."""
        return Settings(
            redis_url=self.env["REDIS_URL"],
            key_prefix=self.env["CALLGATE_KEY_PREFIX"],
            partitions=int(self.env.get("CALLGATE_PARTITIONS", "1")),
            tool_modules=tuple(self.env["CALLGATE_TOOL_MODULES"].split(",")),
            home=Path(self.env["CALLGATE_HOME"]),
            trust_file=Path(self.env["CALLGATE_TRUST_FILE"]),
            write_durability=self.env.get("CALLGATE_WRITE_DURABILITY", "none"),  # pydantic checks
        )

    @property
    def scripted(self) -> bool:
        return "model" in self.urls

    def start(self) -> LocalSystem:
        try:
            self._start_redis()
            for name in self.spec.services:
                self.start_service(name)
            wanted = self.spec.scripted_model
            if wanted or (wanted is None and not has_provider_key(self.env)):
                self._start_scripted_model()
            self.start_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_redis(self) -> None:
        url = self.spec.redis_url
        if url is None and self.spec.redis == "reuse":
            candidate = self.env.get("REDIS_URL") or default_redis_url()
            url = candidate if redis_answers(candidate) else None
            if url is None:
                shown = mask_url_password(candidate)
                self.progress(f"{shown} does not answer; starting an embedded Redis")
        if url is None:
            # A generated password: on a shared host, no other local user gets the workers'
            # power.  Only the children's environment and a 0600 state file hold it.
            self.redis = EmbeddedRedis(
                appendonly=self.spec.redis != "private", password=secrets.token_hex(24)
            ).start()
            url = self.redis.url
        self.env["REDIS_URL"] = url
        # The URL may carry a user's password: say where Redis is, never how to get in.
        shown = mask_url_password(url)
        self.progress(f"Redis at {shown}, key prefix {self.env['CALLGATE_KEY_PREFIX']}")

    def start_service(self, name: str) -> str:
        """Start demo service ``name`` on a fixed free port; export its URL to the tools."""
        module, setting = SERVICES[name]
        # A fixed port, so a restarted service keeps the URL the workers were given.
        url = self.start_listener(name, [sys.executable, "-m", module, "--port", str(free_port())])
        self.env[setting] = url
        self.progress(f"{name} service at {url}")
        return url

    def _start_scripted_model(self) -> None:
        argv = [sys.executable, "-m", "callgate.standins.scripted_model"]
        argv += ["--port", str(free_port())]
        for folder in self.spec.scenarios:
            argv += ["--scenarios", str(folder)]
        url = self.start_listener("model", argv)
        for name, value in (("OPENAI_BASE_URL", f"{url}/v1"), ("ANTHROPIC_BASE_URL", url)):
            if self.spec.scripted_model:
                # Asked for explicitly (conformance, chaos, tests): never a real endpoint.
                self.env[name] = value
            else:
                # Started because no key is set: a base URL the user chose still wins.
                self.env.setdefault(name, value)
        # The SDKs refuse to start without a key; the loopback server ignores it.
        self.env.setdefault("OPENAI_API_KEY", "scripted-local")
        self.env.setdefault("ANTHROPIC_API_KEY", "scripted-local")
        self.progress(f"scripted model server at {url}")

    def start_listener(
        self, name: str, argv: list[str], env: Mapping[str, str] | None = None
    ) -> str:
        """Start a child that prints ``listening on URL`` (with extra ``env``); return the URL."""
        self.supervisor.start(name, argv, {**self.env, **(env or {})})
        url = self.supervisor.wait_for_line(name, LISTENING, START_TIMEOUT_S).group(1)
        self.urls[name] = url
        return url

    def start_slack(
        self, token: str, secret: str, channel: str, approvers: Mapping[str, Any]
    ) -> tuple[str, str]:
        """Start the fake Slack Web API and the approvals bot posting to it (``approvers``:
        Slack user id → ``{"user", "roles"}``); their URLs, API first."""
        api = self.start_listener("slack", [
            sys.executable, "-m", "callgate.standins.fake_slack", "--port", str(free_port()),
            "--token", token,
        ])  # fmt: skip
        bot = self.start_listener(
            "slack_approvals",
            [sys.executable, "-m", "callgate.services.slack_approvals", "--port", str(free_port())],
            {
                "CALLGATE_SLACK_API_URL": f"{api}/api/",
                "CALLGATE_SLACK_BOT_TOKEN": token,
                "CALLGATE_SLACK_SIGNING_SECRET": secret,
                "CALLGATE_SLACK_CHANNEL": channel,
                "CALLGATE_SLACK_APPROVERS": orjson.dumps(approvers).decode(),
            },
        )
        return api, bot

    def start_workers(self) -> dict[str, list[str]]:
        """Start the replicas of every worker kind (an optional kind only when its replicas
        are given); a kind already started is left alone."""
        for kind in available_workers((*WORKERS, *OPTIONAL_WORKERS)):
            count = self.spec.replicas.get(kind, 0 if kind in OPTIONAL_WORKERS else 1)
            if kind in self.workers or count <= 0:
                continue
            names = [kind] if count == 1 else [f"{kind}-{i}" for i in range(1, count + 1)]
            env = {**self.env, **self.spec.worker_env.get(kind, {})}
            argv = worker_argv(kind)
            if self.spec.python is not None:
                argv[0] = self.spec.python
            for name in names:
                self.supervisor.start(name, argv, env)
            self.workers[kind] = names
        self.progress(f"workers: {', '.join(n for ns in self.workers.values() for n in ns)}")
        return self.workers

    def tails(self, lines: int = 10) -> list[str]:
        """The last lines every child printed, prefixed with its name (for failure reports)."""
        return [
            f"{name} | {line}"
            for name in list(self.supervisor.children)
            for line in self.supervisor.tail(name)[-lines:]
        ]

    def explain(self, exc: BaseException, say: Progress, what: str = "could not start") -> None:
        """Say in one line why the system failed (a user's setup, not a traceback), then
        the children's last lines unless nothing could be installed to start."""
        if isinstance(exc, RedisNotInstalledError):
            say(str(exc))
            return
        say(f"{what}: {exc}")
        for line in self.tails():
            say(line)

    def stop(self) -> None:
        """Stop every child, then our own Redis; safe to call twice."""
        self.supervisor.stop_all()
        if self.redis is not None:
            self.redis.__exit__(None, None, None)
            self.redis = None

    def __enter__(self) -> LocalSystem:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
