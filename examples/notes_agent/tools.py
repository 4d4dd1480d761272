"""The example agent's tools: ``search_notes`` (a read) and ``add_note`` (a write).

Register with ``CALLGATE_TOOL_MODULES=notes_agent.tools`` (``callgate up --tools
notes_agent.tools``) with ``examples/`` on the workers' ``PYTHONPATH``: a worker imports this
module once at start and uses its ``TOOLS`` list.  The tools talk to the notes service
(`notes_agent.service`) at ``NOTES_URL`` (default ``http://127.0.0.1:8780``).

Policy is code here, never text in a description: a user may read and write only their own
notebook (named after them) and the shared ``team`` notebook; every note for ``team`` waits
for a person with the ``editor`` role (the trust file says who has it); notes in one notebook
are written in order.  A note's ``text`` is sensitive: callgate keeps it out of logs, events
and traces (the ledger keeps it, for the approver and ``callgate view``).

Error contract: a 4xx is a definitive `callgate.ToolError` the model is told; a 5xx, a dropped
connection or a timeout propagates, so a read fails with an explicit result and the write
becomes ``unknown`` and is settled by ``reconcile`` — asking the service by operation id.
"""

from __future__ import annotations

from typing import Annotated, Any

import aiohttp
from pydantic import Field

import callgate
from callgate import Effect, Identity, Reconciliation, ToolContext, ToolError

NOTES_URL_SETTING = "NOTES_URL"
DEFAULT_NOTES_URL = "http://127.0.0.1:8780"
SHARED_NOTEBOOK = "team"
EDITOR_ROLE = "editor"

Notebook = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")]


def _url(ctx: ToolContext, path: str) -> str:
    return ctx.setting(NOTES_URL_SETTING, DEFAULT_NOTES_URL).rstrip("/") + path


async def _answer(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The JSON body of a 2xx; a 4xx is a `ToolError`; a 5xx raises (outcome not known)."""
    if 400 <= resp.status < 500:
        body = await resp.json(content_type=None)
        message = body.get("error") if isinstance(body, dict) else None
        raise ToolError(str(message or f"notes service answered {resp.status}"), code="rejected")
    resp.raise_for_status()
    body = await resp.json()
    if not isinstance(body, dict):
        raise ToolError("notes service sent an unexpected answer", code="bad_upstream")
    return body


def _own_or_shared(identity: Identity, args: Any) -> str | None:
    """Authorization: None allows; a string is the reason the model is told."""
    if args.notebook in (SHARED_NOTEBOOK, identity.user):
        return None
    return f"user {identity.user!r} may not use notebook {args.notebook!r}"


@callgate.tool(effect=Effect.READ, authorize=_own_or_shared, timeout_s=2.0)
async def search_notes(
    ctx: ToolContext, notebook: Notebook, query: Annotated[str, Field(max_length=100)] = ""
) -> dict[str, Any]:
    """Titles of the notes in a notebook, newest first.

    Args:
        notebook: "team", or your own user name for your private notebook.
        query: Words the title must contain; empty for every note.
    """
    url = _url(ctx, f"/notebooks/{notebook}/notes")
    async with ctx.session.get(url, params={"query": query}) as resp:
        return await _answer(resp)


def _needs_editor(identity: Identity, args: Any) -> str | None:
    """The approval rule: the role a person must hold to approve this call, or None."""
    return EDITOR_ROLE if args.notebook == SHARED_NOTEBOOK else None


def _notebook(args: Any) -> str:
    """The resource key: writes to one notebook run one at a time, in the model's order."""
    return f"notebook:{args.notebook}"


async def _made_under(ctx: ToolContext, args: Any, operation_id: str) -> Reconciliation:
    """Did the write under ``operation_id`` happen?  Asked of the service, which knows.

    200 → applied (the note's summary is the result the model gets); 404 → not applied;
    anything else, or a note with other arguments, stays unknown (a person decides:
    ``callgate resolve``).
    """
    return await callgate.reconcile_by_lookup(
        ctx,
        _url(ctx, f"/operations/{operation_id}"),
        matches=lambda note: (
            (note.get("notebook"), note.get("title")) == (args.notebook, args.title)
        ),
    )


@callgate.tool(
    effect=Effect.WRITE,
    authorize=_own_or_shared,
    approval=_needs_editor,
    resource_key=_notebook,
    reconcile=_made_under,
    sensitive_fields={"text"},
    timeout_s=5.0,
)
async def add_note(
    ctx: ToolContext,
    notebook: Notebook,
    title: Annotated[str, Field(min_length=1, max_length=120)],
    text: Annotated[str, Field(min_length=1, max_length=4000)],
    operation_id: str,
) -> dict[str, Any]:
    """Add a note to a notebook. Notes for the "team" notebook wait for an editor's approval.

    Args:
        notebook: "team", or your own user name for your private notebook.
        title: A short title.
        text: The note itself.
    """
    body = {"title": title, "text": text, "author": ctx.identity.user, "operation_id": operation_id}
    url = _url(ctx, f"/notebooks/{notebook}/notes")
    async with ctx.session.post(url, json=body) as resp:
        return await _answer(resp)


TOOLS: list[callgate.Tool[Any]] = [search_notes, add_note]
"""What a worker registers from this module."""
