"""A local fake of the few Slack Web API methods the approvals bot calls, over real HTTP.

``python -m callgate.standins.fake_slack --port P [--token T]`` prints ``listening on
http://127.0.0.1:P``; point ``CALLGATE_SLACK_API_URL`` at ``http://127.0.0.1:P/api/``.
Every call is recorded (method, arguments, whether the bearer token was right) and listed by
``GET /_calls``; ``DELETE /_calls`` clears them.  ``POST /_fail`` with
``{"method": "chat.postMessage", "error": "ratelimited", "times": 1}`` makes the next calls
of that method answer ``{"ok": false, "error": …}``, to exercise retries.  Answers follow
Slack's shapes closely enough for slack_sdk: ``ok``, ``channel``, ``ts``, ``message``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from typing import Any

import orjson
from aiohttp import web


class FakeSlack:
    """The fake server; usable in-process (`start`/`stop`) or as a process (`main`)."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.calls: list[dict[str, Any]] = []
        self.failures: dict[str, list[str]] = {}
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/_calls", self._list)
        app.router.add_delete("/_calls", self._clear)
        app.router.add_post("/_fail", self._fail)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve; return the Web API base URL (ends in ``/api/``)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}/api/"
        return self.url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["method"] == method]

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await _arguments(request)
        bearer = request.headers.get("Authorization", "")
        token_ok = self.token is None or bearer == f"Bearer {self.token}"
        self.calls.append({"method": method, "args": args, "token_ok": token_ok, "at": time.time()})
        if not token_ok:
            return _json({"ok": False, "error": "invalid_auth"})
        queued = self.failures.get(method)
        if queued:
            return _json({"ok": False, "error": queued.pop(0)})
        return _json(self._answer(method, args))

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel", "C0FAKE")
        match method:
            case "auth.test":
                return {
                    "ok": True,
                    "url": "https://fake.slack.test/",
                    "team": "Fake",
                    "user": "callgate",
                    "team_id": "T0FAKE",
                    "user_id": "U0BOT",
                    "bot_id": "B0BOT",
                    "is_enterprise_install": False,
                }
            case "chat.postMessage":
                ts = f"{int(time.time())}.{next(self._ts):06d}"
                message = {
                    "type": "message",
                    "ts": ts,
                    "text": args.get("text", ""),
                    "blocks": args.get("blocks", []),
                    "bot_id": "B0BOT",
                }
                return {"ok": True, "channel": channel, "ts": ts, "message": message}
            case "chat.update":
                return {
                    "ok": True,
                    "channel": channel,
                    "ts": args.get("ts"),
                    "text": args.get("text", ""),
                    "message": {"text": args.get("text", ""), "blocks": args.get("blocks", [])},
                }
            case "chat.postEphemeral":
                return {"ok": True, "message_ts": f"{int(time.time())}.{next(self._ts):06d}"}
            case _:
                return {"ok": False, "error": "unknown_method"}

    async def _list(self, _: web.Request) -> web.Response:
        return _json({"calls": self.calls})

    async def _clear(self, _: web.Request) -> web.Response:
        self.calls.clear()
        return _json({"ok": True})

    async def _fail(self, request: web.Request) -> web.Response:
        spec = await request.json()
        self.failures.setdefault(spec["method"], []).extend(
            [spec.get("error", "internal_error")] * int(spec.get("times", 1))
        )
        return _json({"ok": True})


async def _arguments(request: web.Request) -> dict[str, Any]:
    """slack_sdk sends JSON for chat.*, a form (or nothing) for auth.test."""
    args: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.read()
        if body:
            args.update(orjson.loads(body))
    elif request.can_read_body:
        form = await request.post()
        args.update({k: v for k, v in form.items() if isinstance(v, str)})
        for key in ("blocks", "attachments"):
            if isinstance(args.get(key), str):
                with contextlib.suppress(orjson.JSONDecodeError):
                    args[key] = orjson.loads(args[key])
    return args


def _json(data: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


async def _serve(host: str, port: int, token: str | None) -> None:
    fake = FakeSlack(token)
    url = await fake.start(host, port)
    print(f"listening on {url.removesuffix('/api/')}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m callgate.standins.fake_slack")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None, help="the only bot token accepted")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, args.token))


if __name__ == "__main__":
    main()
