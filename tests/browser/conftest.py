"""The browser tests' deployment: every worker, the scripted model (with the planted-markup
scenario of ``scenarios/``), the travel and booking services, and `callgate serve` with its web
console signing carol in by the one-time link, and an identity provider in the trust file —
driven by Debian's headless chromium through Playwright (``executable_path``; `.ci/run` installs
the package)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Dialog, Page, async_playwright

from callgate.client import CallgateClient
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from tests.e2e.api_server import API_ENV, MORE_TRUST, api_deployment, token
from tests.e2e.people import connected

CHROMIUM = "/usr/bin/chromium"
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
WAIT_MS = 15_000
"""The longest any page waits for what it expects."""


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis, callgate_home: Path) -> Iterator[LocalSystem]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    env = {**API_ENV, "CALLGATE_CONSOLE_OPERATOR": "carol"}
    yield from api_deployment(
        redis_server, callgate_home, ("travel", "booking"), env, MORE_TRUST, scenarios=(SCENARIOS,)
    )


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    async with connected(system, reset=("booking",)) as c:
        yield c


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            await launched.close()


@dataclass
class Person:
    """A browser profile signed in as someone, and every dialog its pages opened."""

    context: BrowserContext
    page: Page
    dialogs: list[str] = field(default_factory=list)


async def person(
    browser: Browser, system: LocalSystem, name: str, bearer: str | None = None
) -> Person:
    """A fresh browser profile signed in as ``name`` through the login form, with ``bearer``
    (default: a token of their own key); a dialog any page opens is recorded and dismissed."""
    context = await browser.new_context(base_url=system.urls["api"])
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    who = Person(context, page)

    async def on_dialog(dialog: Dialog) -> None:
        who.dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    await page.goto("/console/login")
    await page.fill("input[name=token]", bearer or token(system, name))
    await page.click("#sign-in")
    await page.wait_for_url("**/")
    return who
