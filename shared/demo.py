"""`callgate demo travel`: the whole system on one machine, one run, its trace, its answer.

Starts (under one `Supervisor`) an embedded Redis if ``REDIS_URL`` does not answer, the demo
travel service, the scripted model server unless a real provider key is set, and every
worker; submits alice's question; waits; prints the trace and the answer on stdout (progress
goes to stderr); and stops everything.  Its key prefix is fresh per invocation, so it never
mixes with another deployment on the same Redis.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from shared.client import CallgateClient
from shared.embedded_redis import free_port
from shared.envelopes import new_id
from shared.errors import CallgateError
from shared.stack import (
    Progress,
    base_env,
    ensure_redis,
    progress_to_stderr,
    settings_from,
    start_workers,
)
from shared.supervisor import Supervisor, prefix_sink, quiet_sink
from shared.trace import render

QUESTION = "Is my train G1234 on 2026-12-20 on time, and what's the weather in Hangzhou?"
SCENARIO = "travel-demo"
"""The scripted-model scenario (services/scenarios/travel-demo.json) the demo runs."""
REAL_MODELS = {
    "openai-responses": "gpt-4.1-mini",
    "openai-chat": "gpt-4.1-mini",
    "anthropic-messages": "claude-sonnet-4-5",
}
LISTENING = r"listening on (http://\S+)"
START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class DemoOptions:
    api: str | None = None
    input: str = QUESTION
    model: str | None = None
    timeout_s: float = 60.0
    verbose: bool = False


def _has_key(env: MutableMapping[str, str]) -> bool:
    return bool(env.get("OPENAI_API_KEY") or env.get("ANTHROPIC_API_KEY"))


def choose_api(env: MutableMapping[str, str], requested: str | None) -> str:
    """The requested API; else Anthropic when only its key is set; else OpenAI Responses."""
    if requested:
        return requested
    if env.get("ANTHROPIC_API_KEY") and not env.get("OPENAI_API_KEY"):
        return "anthropic-messages"
    return "openai-responses"


def _start_service(sup: Supervisor, name: str, argv: list[str], env: dict[str, str]) -> str:
    sup.start(name, argv, env)
    url = sup.wait_for_line(name, LISTENING, START_TIMEOUT_S).group(1)
    return url


def start_scripted_model(sup: Supervisor, env: dict[str, str], progress: Progress) -> None:
    """Serve the scripted model; point the SDKs at it only where the user pointed them nowhere."""
    port = str(free_port())  # fixed, so a restarted server keeps the URL the workers use
    argv = [sys.executable, "-m", "services.scripted_model", "--port", port]
    url = _start_service(sup, "model", argv, dict(env))
    env.setdefault("OPENAI_BASE_URL", f"{url}/v1")
    env.setdefault("ANTHROPIC_BASE_URL", url)
    # The SDKs refuse to start without a key; the loopback server ignores it.
    env.setdefault("OPENAI_API_KEY", "scripted-local")
    env.setdefault("ANTHROPIC_API_KEY", "scripted-local")
    progress(f"no provider key set: scripted model server at {url}")


def travel_spec(options: DemoOptions, api: str, model: str) -> dict[str, Any]:
    return {
        "api": api,
        "model": model,
        "input": options.input,
        "instructions": "You are a travel assistant. Use the tools; answer briefly.",
        "identity": {"user": "alice"},
        "tool_modules": ["services.demo.travel"],
        "max_turns": 6,
        "deadline_s": options.timeout_s,
    }


async def submit_and_wait(env: dict[str, str], spec: dict[str, Any], timeout_s: float,
                          progress: Progress) -> tuple[dict[str, Any], str]:
    """Submit the run, wait for it, and return (its view, its rendered trace)."""
    async with CallgateClient(settings_from(env)) as client:
        run_id = await client.submit(spec)
        progress(f"submitted run {run_id}; waiting (up to {timeout_s:.0f}s)")
        await client.wait(run_id, timeout_s)
        return await client.view(run_id), render(await client.events(run_id))


def run_demo(options: DemoOptions, progress: Progress = progress_to_stderr) -> int:
    """The demo, start to clean stop; 0 if the run completed."""
    env = base_env()
    env.setdefault("CALLGATE_KEY_PREFIX", f"demo{new_id()[:8]}")
    redis = ensure_redis(env, progress)
    sup = Supervisor(prefix_sink(sys.stderr) if options.verbose else quiet_sink, grace_s=5.0)
    try:
        travel = [sys.executable, "-m", "services.demo.travel_service", "--port", str(free_port())]
        env["CALLGATE_TRAVEL_URL"] = _start_service(sup, "travel", travel, dict(env))
        progress(f"travel service at {env['CALLGATE_TRAVEL_URL']}")
        api = choose_api(env, options.api)
        scripted = not _has_key(env)
        if scripted:
            start_scripted_model(sup, env, progress)
        model = options.model or (SCENARIO if scripted else REAL_MODELS[api])
        workers = start_workers(sup, env)
        progress(f"started workers: {', '.join(workers)}; api {api}, model {model}")
        spec = travel_spec(options, api, model)
        view, trace = asyncio.run(submit_and_wait(env, spec, options.timeout_s, progress))
    except (TimeoutError, RuntimeError, OSError, CallgateError) as exc:
        progress(f"demo failed: {exc}")
        _dump_tails(sup, progress)
        return 1
    finally:
        progress("stopping")
        sup.stop_all()
        if redis is not None:
            redis.__exit__(None, None, None)
    print(trace)
    print()
    print(f"status: {view['status']}" + (f" ({view['reason']})" if view["reason"] else ""))
    print(f"answer: {view['final_text'] or '(none)'}")
    return 0 if view["status"] == "completed" else 1


def _dump_tails(sup: Supervisor, progress: Progress) -> None:
    for name in list(sup.children):
        for line in sup.tail(name)[-10:]:
            progress(f"{name} | {line}")
