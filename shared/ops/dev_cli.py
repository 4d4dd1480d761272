"""`callgate dev`: a whole local deployment in one command, findable from any other terminal.

    callgate dev [--tools m1,m2] [--mcp FILE] [--webhooks FILE] [--scenarios DIR] [--slack]
                 [--api-port PORT]
                 [--log-format auto|pretty|json]

Starts what `callgate demo` starts and keeps it running (`LocalSystem`): Redis (REDIS_URL if
it answers, else an embedded one), every worker (the webhooks worker too, posting to
``--webhooks``'s endpoints), the scripted model server unless a provider
key is set (its URL becomes OPENAI_BASE_URL …/v1 and ANTHROPIC_BASE_URL, with dummy keys), the
demo services (CALLGATE_TRAVEL_URL, CALLGATE_BOOKING_URL), the HTTP API (`callgate serve` on
``--api-port``, signing decisions with the keyring's delegate key ``api``; its web console's
one-time login link, for carol, is in the banner) and, with
``--slack``, the fake Slack with the approvals bot.  Then it writes ``HOME/dev.json`` (0600:
the Redis URL may carry a password, which is never printed) with its pid, so `Settings` in
another terminal joins this deployment with nothing exported; the file goes when dev stops.
`callgate up` writes the same file: an embedded Redis has a generated password, which only this
file and the children hold.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from callgate.auth.keys import write_secret_file
from callgate.config import DEV_STATE_FILE, read_dev_state
from callgate.logs import mask_url_password
from callgate.ops.dev_logs import dev_sink, json_event
from callgate.ops.embedded_redis import port_free
from callgate.ops.stack import sigterm_as_interrupt, wait_for_stop_signal
from callgate.ops.system import SERVICES, START_ERRORS, LocalSystem, SystemSpec
from callgate.tools.mcp_servers import parse_servers
from callgate.webhooks.settings import WebhookConfigError, WebhookSettings

SLACK_CHANNEL = "C0CALLGATEDEV"
SLACK_APPROVERS = {"U0CAROL": {"user": "carol", "roles": ["events-lead"]}}
"""The fake Slack's one approver: Slack user U0CAROL acts as carol (an events-lead)."""
CONSOLE_OPERATOR = "carol"
"""Whom dev's web console signs in: the demo's approver (an events-lead), who decides the
workshop's booking."""
CONSOLE_LINK = r"one-time login link[^:]*: (http://\S+)"
SHOWN_ENV = (
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    *(s for _, s in SERVICES.values()),
    "CALLGATE_TOOL_MODULES",
)
"""The environment a user's own tools and scripts may want to copy; no secrets."""
TRY = (
    "callgate run --api openai-chat --model travel-parallel "
    '--tools get_train_status,get_weather --identity \'{"user": "alice"}\' '
    "--input 'Is G1234 on time?' --wait"
)


def add_command(sub: Any) -> None:
    dev = sub.add_parser("dev", help="everything for local development, until Ctrl-C")
    dev.add_argument(
        "--tools",
        help="tool modules the workers register, comma-separated "
        "(default: CALLGATE_TOOL_MODULES, else the demo's tools)",
    )
    dev.add_argument("--mcp", type=mcp_file, metavar="FILE", help=MCP_HELP)
    dev.add_argument(
        "--scenarios",
        type=Path,
        metavar="DIR",
        help="your scripted-model scenarios (DIR/<model>.json), before the built-ins",
    )
    dev.add_argument(
        "--slack", action="store_true", help="also the fake Slack and the approvals bot"
    )
    dev.add_argument("--webhooks", type=webhooks_file, metavar="FILE", help=WEBHOOKS_HELP)
    dev.add_argument(
        "--api-port",
        type=int,
        default=8080,
        metavar="PORT",
        help="the HTTP API's port (`callgate serve`; default 8080, 0: a free one)",
    )
    dev.add_argument(
        "--log-format",
        choices=("auto", "pretty", "json"),
        default="auto",
        help="auto: readable on a terminal, JSON lines otherwise",
    )
    dev.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    dev.set_defaults(handler=cmd_dev)


MCP_HELP = (
    "the deployment's MCP servers, a JSON list as CALLGATE_MCP_SERVERS takes it "
    "(README: Tools from MCP servers)"
)


def mcp_file(path: str) -> str:
    """``--mcp FILE``: the file's server list, checked now, as CALLGATE_MCP_SERVERS's value."""
    try:
        entries = orjson.loads(Path(path).read_bytes())
        if not isinstance(entries, list):
            raise ValueError("the file must hold a JSON list of servers")
        parse_servers(tuple(entries))
    except (OSError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise argparse.ArgumentTypeError(f"{path}: {exc}") from exc
    return orjson.dumps(entries).decode()


WEBHOOKS_HELP = (
    "the deployment's webhook endpoints, a JSON list as "
    "CALLGATE_WEBHOOK_ENDPOINTS_FILE takes it (README: Webhooks)"
)


def webhooks_file(path: str) -> str:
    """``--webhooks FILE``: the endpoints, checked now; the file's absolute path."""
    try:
        WebhookSettings(endpoints_file=Path(path)).load()
    except WebhookConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc
    return str(Path(path).resolve())


def worker_env(mcp: str | None, webhooks: str | None) -> dict[str, str]:
    """Every worker's environment for ``--mcp`` and ``--webhooks`` (each only when given, so
    an exported setting stands)."""
    env = mcp_env(mcp)
    if webhooks is not None:
        env["CALLGATE_WEBHOOK_ENDPOINTS_FILE"] = webhooks
    return env


def mcp_env(servers: str | None) -> dict[str, str]:
    """The environment that registers ``--mcp``'s servers with every worker (none: nothing, so
    an exported CALLGATE_MCP_SERVERS stands)."""
    return {} if servers is None else {"CALLGATE_MCP_SERVERS": servers}


def dev_spec(args: argparse.Namespace) -> SystemSpec:
    """What `callgate dev` starts: the demo's services, every worker, the local keyring."""
    modules = (
        None if args.tools is None else tuple(m.strip() for m in args.tools.split(",") if m.strip())
    )
    return SystemSpec(
        key_prefix=os.environ.get("CALLGATE_KEY_PREFIX", "cg"),
        tool_modules=modules,
        scenarios=() if args.scenarios is None else (args.scenarios.resolve(),),
        env=worker_env(args.mcp, args.webhooks),
        replicas={"webhooks": 1},
        delegates={"api": ["*"], **({"slack": ["carol"]} if args.slack else {})},
        grace_s=args.grace,
    )


def cmd_dev(args: argparse.Namespace) -> int:
    """Run the deployment until SIGINT/SIGTERM; 1 when it cannot start (said in one line)."""
    sigterm_as_interrupt()
    sink, console = dev_sink(args.log_format, sys.stderr)

    def say(message: str) -> None:
        sink("dev", message)

    if args.scenarios is not None and not args.scenarios.is_dir():
        say(f"--scenarios {args.scenarios}: not a folder")
        return 2
    system = LocalSystem(dev_spec(args), progress=say, sink=sink)
    state_file = state_file_of(system)
    if already_running(state_file, say):
        return 1
    try:
        return _serve(system, args, state_file, console, say)
    finally:
        system.stop()
        remove_state(state_file)


def state_file_of(system: LocalSystem) -> Path:
    """Where `dev` and `up` say how to reach the deployment they run (``HOME/dev.json``)."""
    return Path(system.env["CALLGATE_HOME"]) / DEV_STATE_FILE


def already_running(state_file: Path, say: Callable[[str], None]) -> bool:
    """Whether a live `dev` or `up` already runs under this home (then it is said why)."""
    running = read_dev_state(state_file.parent)
    if running is None:
        return False
    say(f"callgate dev or up already runs here (pid {running['pid']}, {state_file}); stop it first")
    return True


def write_state(system: LocalSystem, state_file: Path) -> dict[str, Any]:
    """Write ``state_file`` (0600: the Redis URL carries the embedded Redis's password)."""
    state = dev_state(system)
    write_secret_file(state_file, orjson.dumps(state, option=orjson.OPT_INDENT_2), overwrite=True)
    return state


def _serve(
    system: LocalSystem,
    args: argparse.Namespace,
    state_file: Path,
    console: Console | None,
    say: Callable[[str], None],
) -> int:
    try:
        system.start()
        start_api(system, args.api_port)
        if args.slack:
            start_slack(system)
    except START_ERRORS as exc:
        system.explain(exc, say)
        return 1
    show_banner(write_state(system, state_file), state_file, console, console_link(system))
    signum = wait_for_stop_signal()
    say(f"signal {signum}: stopping")
    return 0


def start_api(system: LocalSystem, port: int = 0) -> str:
    """The HTTP API (`callgate serve`) on loopback, its decisions signed with the keyring's
    delegate key ``api``, and its web console's login link for `CONSOLE_OPERATOR` (unless
    CALLGATE_CONSOLE_OPERATOR names another person); its URL.  A port already taken (another
    dev, another server) gives way to a free one, which the banner shows."""
    if port and not port_free(port):
        system.progress(f"port {port} is taken: the HTTP API listens on a free port instead")
        port = 0
    argv = [sys.executable, "-m", "callgate.ops.cli", "serve", "--port", str(port)]
    env = {
        "CALLGATE_CONSOLE_OPERATOR": system.env.get("CALLGATE_CONSOLE_OPERATOR", CONSOLE_OPERATOR)
    }
    return system.start_listener("api", argv, env)


def console_link(system: LocalSystem) -> str | None:
    """The one-time login link the API server printed, if it printed one."""
    try:
        return system.supervisor.wait_for_line("api", CONSOLE_LINK, 2.0).group(1)
    except (TimeoutError, RuntimeError):
        return None


def start_slack(system: LocalSystem) -> None:
    """The fake Slack Web API and the approvals bot posting to it, with fresh secrets."""
    token, secret = f"xoxb-dev-{secrets.token_hex(8)}", secrets.token_hex(16)
    system.start_slack(token, secret, SLACK_CHANNEL, SLACK_APPROVERS)


def dev_state(system: LocalSystem) -> dict[str, Any]:
    """What dev.json holds: how to reach this deployment (read by `callgate.config.Settings`)."""
    return {
        "pid": os.getpid(),
        "redis_url": system.env["REDIS_URL"],
        "key_prefix": system.env["CALLGATE_KEY_PREFIX"],
        "home": system.env["CALLGATE_HOME"],
        "urls": dict(system.urls),
        "env": {name: system.env[name] for name in SHOWN_ENV if name in system.env},
        "workers": [n for names in system.workers.values() for n in names],
        "scripted_model": system.scripted,
    }


def banner_rows(state: dict[str, Any], state_file: Path) -> list[tuple[str, str]]:
    """(what, where) for every part that runs; the Redis password masked."""
    redis = mask_url_password(state["redis_url"])
    rows = [("redis", f"{redis}  (key prefix {state['key_prefix']})")]
    urls: dict[str, str] = state["urls"]
    if "model" in urls:
        rows.append(("scripted model", f"{urls['model']}  (OPENAI_BASE_URL {urls['model']}/v1)"))
    else:
        rows.append(("model", "a real provider (an API key is set)"))
    rows += [(name, url) for name, url in urls.items() if name != "model"]
    rows.append(("workers", ", ".join(state["workers"])))
    rows.append(("state", f"{state_file}  (other terminals find this deployment here)"))
    return rows


def show_banner(
    state: dict[str, Any], state_file: Path, console: Console | None, link: str | None = None
) -> None:
    """What runs where (and the web console's one-time login ``link``, which dev's log would
    mask): a table on a terminal, one JSON line otherwise."""
    rows = banner_rows(state, state_file)
    if link is not None:
        rows.append(("web console", f"{link}  (one-time login link)"))
    if console is None:
        sys.stderr.write(json_event("ready", {"parts": dict(rows), "try": TRY}) + "\n")
        sys.stderr.flush()
        return
    table = Table(title="callgate dev", title_style="bold", show_header=False, box=None)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(overflow="fold")
    for what, where in rows:
        table.add_row(what, where)
    console.print(table)
    console.print("[dim]in another terminal, no exports needed:[/dim]")
    console.print(TRY, markup=False, highlight=False)
    console.print("[dim]Ctrl-C stops everything[/dim]")


def remove_state(state_file: Path) -> None:
    """Remove dev.json if it is ours (a second dev refused to start must not remove the
    first one's)."""
    with contextlib.suppress(OSError, orjson.JSONDecodeError):
        if orjson.loads(state_file.read_bytes()).get("pid") == os.getpid():
            state_file.unlink()
