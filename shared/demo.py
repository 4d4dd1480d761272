"""`callgate demo travel`: the whole system on one machine, one run, its trace, its answer.

Starts the whole system (`shared.system.LocalSystem`: an embedded Redis if ``REDIS_URL`` does
not answer, the demo travel service, the scripted model server unless a real provider key is
set, and every worker); submits alice's question; waits; prints the trace and the answer on
stdout (progress goes to stderr); and stops everything.  Its key prefix is fresh per
invocation, so it never mixes with another deployment on the same Redis.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.client import CallgateClient
from shared.errors import CallgateError
from shared.stack import Progress, progress_to_stderr
from shared.supervisor import prefix_sink, quiet_sink
from shared.system import LocalSystem, SystemSpec
from shared.trace import render

QUESTION = "Is my train G1234 on 2026-12-20 on time, and what's the weather in Hangzhou?"
SCENARIO = "travel-demo"
"""The scripted-model scenario (services/scenarios/travel-demo.json) the demo runs."""
REAL_MODELS = {
    "openai-responses": "gpt-4.1-mini",
    "openai-chat": "gpt-4.1-mini",
    "anthropic-messages": "claude-sonnet-4-5",
}


@dataclass(frozen=True)
class DemoOptions:
    api: str | None = None
    input: str = QUESTION
    model: str | None = None
    timeout_s: float = 60.0
    verbose: bool = False


def choose_api(env: Mapping[str, str], requested: str | None) -> str:
    """The requested API; else Anthropic when only its key is set; else OpenAI Responses."""
    if requested:
        return requested
    if env.get("ANTHROPIC_API_KEY") and not env.get("OPENAI_API_KEY"):
        return "anthropic-messages"
    return "openai-responses"


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


async def submit_and_wait(system: LocalSystem, spec: dict[str, Any], timeout_s: float,
                          progress: Progress) -> tuple[dict[str, Any], str]:
    """Submit the run, wait for it, and return (its view, its rendered trace)."""
    async with CallgateClient(system.settings) as client:
        run_id = await client.submit(spec)
        progress(f"submitted run {run_id}; waiting (up to {timeout_s:.0f}s)")
        await client.wait(run_id, timeout_s)
        return await client.view(run_id), render(await client.events(run_id))


def run_demo(options: DemoOptions, progress: Progress = progress_to_stderr) -> int:
    """The demo, start to clean stop; 0 if the run completed."""
    sink = prefix_sink(sys.stderr) if options.verbose else quiet_sink
    system = LocalSystem(SystemSpec(services=("travel",)), progress=progress, sink=sink)
    try:
        system.start()
        api = choose_api(system.env, options.api)
        model = options.model or (SCENARIO if system.scripted else REAL_MODELS[api])
        progress(f"api {api}, model {model}")
        spec = travel_spec(options, api, model)
        view, trace = asyncio.run(submit_and_wait(system, spec, options.timeout_s, progress))
    except (TimeoutError, RuntimeError, OSError, CallgateError) as exc:
        progress(f"demo failed: {exc}")
        for line in system.tails():
            progress(line)
        return 1
    finally:
        progress("stopping")
        system.stop()
    print(trace)
    print()
    print(f"status: {view['status']}" + (f" ({view['reason']})" if view["reason"] else ""))
    print(f"answer: {view['final_text'] or '(none)'}")
    return 0 if view["status"] == "completed" else 1
