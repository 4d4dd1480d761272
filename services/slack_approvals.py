"""The Slack approvals bot process (DESIGN §7).

    python -m callgate.services.slack_approvals --port P


It posts every approval request from the notify streams to a Slack channel with Approve and
Deny buttons, verifies each click (Slack's signature via Bolt, then the approver map and the
role the approval record needs) and posts a signed decision to the run's decisions stream.
An unknown write outcome is posted with Applied / Not applied / Recheck buttons, which post a
signed resolution exactly as `callgate resolve` does.  The validator alone decides whether a
decision applies.  Configuration:
`callgate.slack.settings.SlackSettings` (CALLGATE_SLACK_*) and `callgate.config.Settings`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from callgate.config import Settings
from callgate.logs import setup_logging
from callgate.slack.bot import EVENTS_PATH, SlackBot
from callgate.slack.settings import SlackSettings

__all__ = ["EVENTS_PATH", "SlackBot", "SlackSettings", "main"]

log = logging.getLogger("callgate.slack")


async def serve(settings: Settings, slack: SlackSettings, host: str, port: int) -> None:
    """Run until SIGTERM/SIGINT, then stop consuming and close the server."""
    bot = SlackBot(settings, slack)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        bound = await bot.start(host, port)
        print(f"listening on http://{host}:{bound}", flush=True)
        await stop.wait()
        log.info("shutting down")
    finally:
        await bot.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m callgate.services.slack_approvals")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000, help="0 picks a free port")
    args = parser.parse_args(argv)
    setup_logging("slack_approvals")
    # The SDK logs request headers (the bot token) at DEBUG; never let it go below INFO.
    for name in ("slack_sdk", "slack_bolt", "callgate.slack.sdk", "callgate.slack.bolt"):
        logging.getLogger(name).setLevel(max(logging.INFO, logging.getLogger().level))
    try:
        settings, slack = Settings(), SlackSettings()
        slack.check()
    except ValueError as exc:  # pydantic's ValidationError is one too
        print(f"slack_approvals: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    asyncio.run(serve(settings, slack, args.host, args.port))


if __name__ == "__main__":
    main()
