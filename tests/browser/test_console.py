"""The web console in a real headless Chromium, in front of a whole deployment: a workshop run
pauses and the inbox shows it live with its exact arguments; carol approves in the browser
(through the confirmation page) and the run's page shows the reservation succeeded; an unknown
outcome is resolved from the browser; bob, without the role, sees the refusal the API gives;
planted markup shows as text; a write without the CSRF token is refused; the login link works
once and the session cookie is HttpOnly and SameSite=Strict; the runs list follows each run's
status without a reload.

Screenshots of the inbox and a run page go to ``CALLGATE_SCREENSHOTS_DIR`` when it is set
(README's are made so: ``CALLGATE_SCREENSHOTS_DIR=docs/screenshots``), else to a temporary
folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page

from callgate.client import CallgateClient
from callgate.ops.dev_cli import CONSOLE_LINK
from callgate.ops.system import LocalSystem
from tests.browser.conftest import WAIT_MS, person
from tests.e2e.api_server import IDP, IDP_KEY, auth, idp_token
from tests.e2e.people import http, status, until

LOST_AND_INCONCLUSIVE = {
    "reserve": {"mode": "commit_then_drop", "count": 1},
    "lookup": {"mode": "lookup_unknown"},
}


def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CALLGATE_SCREENSHOTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def start(system: LocalSystem, model: str, tools: list[str]) -> str:
    """A run for alice, submitted through the API by the local submitting service."""
    body = {
        "api": "openai-chat",
        "model": model,
        "input": "go",
        "identity": {"user": "alice"},
        "allowed_tools": tools,
    }
    async with httpx.AsyncClient(base_url=system.urls["api"], timeout=20) as api:
        answer = await api.post("/runs", json=body, headers=auth(system, "local"))
    assert answer.status_code == 202, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


async def pending_approval(client: CallgateClient, run_id: str) -> str:
    await until(client, run_id, status("paused_approval"))
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.approval_id is not None
    return call.approval_id


async def shown_json(page: Page, selector: str) -> Any:
    return json.loads(await page.locator(selector).inner_text())


@pytest.mark.slow
async def test_a_paused_run_shows_up_live_and_is_approved_in_the_browser(
    system: LocalSystem, client: CallgateClient, browser: Browser, tmp_path: Path
) -> None:
    carol = await person(browser, system, "carol")
    page = carol.page
    await page.goto("/console/inbox")
    await page.locator("body.live").wait_for(state="attached")
    await page.evaluate("window.notReloaded = true")
    run_id = await start(system, "workshop-reserve", ["reserve_seat"])
    card = page.locator(f"section.approval[data-run='{run_id}']")
    await card.wait_for()
    assert await page.evaluate("window.notReloaded === true"), "the inbox was not reloaded"
    approval_id = await pending_approval(client, run_id)
    record = await client.ledger.get_approval(run_id, approval_id)
    assert record is not None
    assert await shown_json(page, f"{card_of(run_id)} pre.args") == json.loads(record.arguments)
    assert json.loads(record.arguments) == {"event_id": "ws-101", "participant_id": "p-alice"}
    assert await card.locator(".role").inner_text() == "events-lead"
    assert record.args_hash in await card.inner_text()
    await page.screenshot(path=str(shots(tmp_path) / "inbox.png"), full_page=True)
    await card.locator("a.approve").click()
    await page.wait_for_url(f"**/console/approvals/{approval_id}/approve")
    assert await shown_json(page, "pre.args") == json.loads(record.arguments)
    assert (await client.view(run_id))["status"] == "paused_approval", "nothing before confirm"
    await page.click("#confirm")
    await page.locator(".verdict.applied").wait_for()
    assert "approval.approved" in await page.locator(".verdict").inner_text()
    await page.click(f"a[href='/console/runs/{run_id}']")
    await page.locator("#run-status", has_text="completed").wait_for()
    reserve = page.locator("tr.call[data-tool='reserve_seat'] .state")
    assert await reserve.inner_text() == "succeeded"
    await page.screenshot(path=str(shots(tmp_path) / "run.png"), full_page=True)
    decided = await client.ledger.get_approval(run_id, approval_id)
    assert decided is not None and (decided.decided_by, decided.signed_by) == ("carol", "api")


def card_of(run_id: str) -> str:
    return f"section.approval[data-run='{run_id}']"


async def test_an_unknown_outcome_is_resolved_from_the_browser(
    system: LocalSystem, client: CallgateClient, browser: Browser
) -> None:
    await http(system, "booking", "POST", "/_faults", LOST_AND_INCONCLUSIVE)
    run_id = await start(system, "conf-reserve", ["reserve_seat"])
    approval_id = await pending_approval(client, run_id)
    async with httpx.AsyncClient(base_url=system.urls["api"], timeout=20) as api:
        approved = await api.post(
            f"/approvals/{approval_id}/approve", headers=auth(system, "carol")
        )
    assert approved.status_code == 200, approved.text
    await until(client, run_id, status("paused_unknown_outcome"))
    page = (await person(browser, system, "carol")).page
    await page.goto("/console/inbox")
    card = page.locator(f"section.unresolved[data-run='{run_id}']")
    await card.locator("a.applied").click()
    await page.fill("textarea[name=result]", '{"reservation_id": "r-browser"}')
    await page.click("#confirm")
    await page.locator(".verdict.applied", has_text="call.resolved").wait_for()
    view = await until(client, run_id, status("completed"))
    assert "r-browser" in view["final_text"]
    stats = await http(system, "booking", "GET", "/_stats")
    assert stats["reserve"]["requests"] == 1, "nothing replayed"


async def test_a_person_without_the_role_sees_the_refusal(
    system: LocalSystem, client: CallgateClient, browser: Browser
) -> None:
    run_id = await start(system, "conf-reserve", ["reserve_seat"])
    approval_id = await pending_approval(client, run_id)
    page = (await person(browser, system, "bob")).page
    await page.goto("/console/inbox")
    await page.locator("p.empty", has_text="No approvals wait for you").wait_for()
    assert await page.locator(card_of(run_id)).count() == 0
    answer = await page.goto(f"/console/approvals/{approval_id}/approve")
    assert answer is not None and answer.ok
    async with page.expect_response(lambda r: r.request.method == "POST") as info:
        await page.click("#confirm")
    assert (await info.value).status == 403
    alert = await page.locator(".problem").inner_text()
    assert "403 forbidden" in alert and "bob does not hold the role events-lead" in alert
    assert await client.ledger.get_approval(run_id, approval_id) is not None
    assert (await client.view(run_id))["status"] == "paused_approval"
    assert "api.forbidden" in [e.type for e in await client.events(run_id)]


async def test_planted_markup_in_arguments_and_model_text_renders_as_text(
    system: LocalSystem, client: CallgateClient, browser: Browser
) -> None:
    run_id = await start(system, "console-planted", ["get_weather"])
    await until(client, run_id, status("completed", "failed", "handed_off"))
    carol = await person(browser, system, "carol")
    answer = await carol.page.goto(f"/console/runs/{run_id}")
    assert answer is not None and answer.ok
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    page = carol.page
    final = await page.locator("#final-text").inner_text()
    assert final.startswith("<script>window.planted=2;alert('model')</script><img src=x")
    args = await shown_json(page, "tr.call[data-tool='get_weather'] pre.args")
    assert args == {"city": "<script>window.planted=1;alert('arg')</script>"}
    await page.locator("body.live").wait_for(state="attached")
    assert await page.evaluate("typeof window.planted") == "undefined"
    assert await page.locator("main script, main img").count() == 0
    assert carol.dialogs == [], "no planted script ran"


async def test_a_write_without_the_csrf_token_is_refused(
    system: LocalSystem, client: CallgateClient, browser: Browser
) -> None:
    run_id = await start(system, "conf-reserve", ["reserve_seat"])
    approval_id = await pending_approval(client, run_id)
    carol = await person(browser, system, "carol")
    request = carol.page.request  # carries the session cookie, as a forged request would
    for path, form in (
        (f"/console/approvals/{approval_id}/approve", {"reason": "forged"}),
        (f"/approvals/{approval_id}/approve", None),
    ):
        answer = await request.post(path, form=form)
        assert answer.status == 403 and "CSRF token" in await answer.text(), path
    assert (await client.view(run_id))["status"] == "paused_approval"
    await carol.page.goto(f"/console/approvals/{approval_id}/approve")
    csrf = await carol.page.locator("input[name=csrf]").first.get_attribute("value")
    assert csrf
    inbox = await request.get("/inbox")  # the session also reads the API
    assert inbox.status == 200 and approval_id in await inbox.text()
    answer = await request.post(
        f"/approvals/{approval_id}/approve",
        headers={"X-CSRF-Token": csrf},
        data={"reason": "with it"},
    )
    assert answer.status == 200 and (await answer.json())["event"] == "approval.approved"


async def test_the_login_link_works_once_and_the_cookie_is_strict(
    system: LocalSystem, browser: Browser
) -> None:
    link = system.supervisor.wait_for_line("api", CONSOLE_LINK, 5).group(1)
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    await page.goto(link)
    assert page.url == f"{system.urls['api']}/"
    assert "carol" in await page.locator("header .who").inner_text()
    [cookie] = [c for c in await context.cookies() if c["name"] == "callgate_session"]
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert "callgate_session" not in await page.evaluate("document.cookie")
    stranger = await (await browser.new_context()).new_page()
    again = await stranger.goto(link)
    assert again is not None and again.status == 401
    assert "used already" in await stranger.locator(".problem").inner_text()
    assert "/console/login" in stranger.url


async def test_the_runs_list_follows_each_runs_status_live(
    system: LocalSystem, client: CallgateClient, browser: Browser
) -> None:
    page = (await person(browser, system, "carol")).page
    await page.locator("body.live").wait_for(state="attached")
    await page.evaluate("window.notReloaded = true")
    run_id = await start(system, "conf-reserve", ["reserve_seat"])
    row = page.locator(f"tr[data-run='{run_id}'] .status")
    await page.locator(f"tr[data-run='{run_id}'] .status", has_text="paused_approval").wait_for()
    async with httpx.AsyncClient(base_url=system.urls["api"], timeout=20) as api:
        approval_id = await pending_approval(client, run_id)
        await api.post(f"/approvals/{approval_id}/approve", headers=auth(system, "carol"))
    await page.locator(f"tr[data-run='{run_id}'] .status", has_text="completed").wait_for()
    assert await row.inner_text() == "completed"
    assert await page.evaluate("window.notReloaded === true"), "the list was not reloaded"


async def test_an_identity_providers_token_signs_in_a_person_with_the_trust_files_roles(
    system: LocalSystem, browser: Browser
) -> None:
    """README's identity-provider sign-in: the JWT's own ``roles`` claim (admin) never counts."""
    jwt = idp_token(IDP_KEY, IDP, "carol")
    page = (await person(browser, system, "carol", bearer=jwt)).page
    assert await page.locator("header .who span").inner_text() == "carol (events-lead)"
    stranger = await (await browser.new_context(base_url=system.urls["api"])).new_page()
    await stranger.goto("/console/login")
    await stranger.fill("input[name=token]", idp_token(IDP_KEY, IDP, "mallory"))
    async with stranger.expect_response(lambda r: r.request.method == "POST") as info:
        await stranger.click("#sign-in")
    assert (await info.value).status == 403
    assert (
        "not a person of the deployment's trust file"
        in await stranger.locator(".problem").inner_text()
    )
    assert [c for c in await stranger.context.cookies() if c["name"] == "callgate_session"] == []


async def test_an_operator_cancels_a_run_from_its_page(
    system: LocalSystem, client: CallgateClient, browser: Browser
) -> None:
    run_id = await start(system, "conf-reserve", ["reserve_seat"])
    await pending_approval(client, run_id)
    page = (await person(browser, system, "operator")).page
    await page.goto(f"/console/runs/{run_id}")
    assert await page.locator("a.resume").count() == 0, "only a paused-incomplete run resumes"
    await page.locator("a.cancel").click()
    await page.fill("input[name=reason]", "not needed")
    await page.click("#confirm")
    await page.locator(".verdict.applied", has_text="run.cancelled").wait_for()
    assert (await client.view(run_id))["status"] == "cancelled"
