"""`callgate demo travel|workshop`: the whole system on one machine, one run, its trace, its answer.

Starts the whole system (`callgate.ops.system.LocalSystem`: an embedded Redis if ``REDIS_URL`` does
not answer, the demo services, the scripted model server unless a real provider key is set,
and every worker); submits the demo's run; waits (the workshop run pauses for a human's
approval, asked in the terminal or given by ``--approve-as``); prints the trace and the answer
on stdout (progress goes to stderr); and stops everything.  Its key prefix is fresh per
invocation, so it never mixes with another deployment on the same Redis.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from callgate.client import CallgateClient
from callgate.errors import CallgateError
from callgate.ops.demo_workshop import (
    WORKSHOP_INPUT,
    booking_summary,
    decide_pending,
    needs_terminal,
)
from callgate.ops.stack import Progress, progress_to_stderr
from callgate.ops.supervisor import prefix_sink, quiet_sink
from callgate.ops.system import START_ERRORS, LocalSystem, SystemSpec
from callgate.ops.trace import render
from callgate.tools.registry import load_registry

REAL_MODELS = {
    "openai-responses": "gpt-4.1-mini",
    "openai-chat": "gpt-4.1-mini",
    "anthropic-messages": "claude-sonnet-4-5",
}


@dataclass(frozen=True)
class Demo:
    """One demo: the services its tools need, its question, and its scripted-model scenario."""

    service: str
    tool_module: str
    question: str
    instructions: str
    scenario: str
    """The scripted-model scenario (shared/standins/scenarios/<name>.json) it runs without a key."""
    env: Mapping[str, str] = field(default_factory=dict)


DEMOS = {
    "travel": Demo(
        service="travel",
        tool_module="callgate.standins.demo.travel",
        question="Is my train G1234 on 2026-12-20 on time, and what's the weather in Hangzhou?",
        instructions="You are a travel assistant. Use the tools; answer briefly.",
        scenario="travel-demo",
    ),
    "workshop": Demo(
        service="booking",
        tool_module="callgate.standins.demo.workshop",
        question=WORKSHOP_INPUT,
        instructions="You book workshop seats. Use the tools; answer briefly.",
        scenario="workshop-reserve",
    ),
}


@dataclass(frozen=True)
class DemoOptions:
    name: str = "travel"
    api: str | None = None
    input: str | None = None
    model: str | None = None
    timeout_s: float = 60.0
    verbose: bool = False
    approve_as: str | None = None
    """Workshop: decide the approval as this user instead of asking in the terminal."""


def choose_api(env: Mapping[str, str], requested: str | None) -> str:
    """The requested API; else Anthropic when only its key is set; else OpenAI Responses."""
    if requested:
        return requested
    if env.get("ANTHROPIC_API_KEY") and not env.get("OPENAI_API_KEY"):
        return "anthropic-messages"
    return "openai-responses"


def run_spec(demo: Demo, options: DemoOptions, api: str, model: str) -> dict[str, Any]:
    """alice's run.  No deadline: a human may take their time over an approval."""
    return {
        "api": api,
        "model": model,
        "input": options.input or demo.question,
        "instructions": demo.instructions,
        "identity": {"user": "alice"},
        "allowed_tools": list(load_registry([demo.tool_module]).names()),
        "max_turns": 6,
    }


async def drive(
    system: LocalSystem, spec: dict[str, Any], options: DemoOptions, progress: Progress
) -> tuple[dict[str, Any], str]:
    """Submit the run and see it through (deciding approvals); return (its view, its trace)."""
    timeout_s = options.timeout_s
    async with CallgateClient(system.settings) as client:
        run_id = await client.submit(spec)
        progress(f"submitted run {run_id}; waiting (up to {timeout_s:.0f}s)")
        status = await client.wait(run_id, timeout_s)
        # A decision that applies moves the run on in the same step; one that is refused leaves
        # it paused, and the demo stops there rather than asking forever.
        while status["status"] == "paused_approval" and await decide_pending(
            client, run_id, options.approve_as, progress
        ):
            status = await client.wait(run_id, timeout_s)
        return await client.view(run_id), render(await client.events(run_id))


def run_demo(options: DemoOptions, progress: Progress = progress_to_stderr) -> int:
    """The demo, start to clean stop; 0 if the run completed."""
    sink = prefix_sink(sys.stderr) if options.verbose else quiet_sink
    demo = DEMOS[options.name]
    why_not = needs_terminal(options.approve_as) if demo.service == "booking" else None
    if why_not is not None:
        progress(why_not)
        return 1
    system = LocalSystem(
        SystemSpec(services=(demo.service,), env=demo.env), progress=progress, sink=sink
    )
    try:
        system.start()
        api = choose_api(system.env, options.api)
        model = options.model or (demo.scenario if system.scripted else REAL_MODELS[api])
        progress(f"api {api}, model {model}")
        spec = run_spec(demo, options, api, model)
        view, trace = asyncio.run(drive(system, spec, options, progress))
        summary = booking_summary(system.urls["booking"]) if demo.service == "booking" else None
    except (*START_ERRORS, CallgateError, EOFError) as exc:
        system.explain(exc, progress, "demo failed")
        return 1
    finally:
        progress("stopping")
        system.stop()
    print(trace)
    print()
    print(f"status: {view['status']}" + (f" ({view['reason']})" if view["reason"] else ""))
    print(f"answer: {view['final_text'] or '(none)'}")
    if summary is not None:
        print(f"booking service: {summary}")
    return 0 if view["status"] == "completed" else 1
