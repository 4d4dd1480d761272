"""The HTTP API (`callgate serve`): one ASGI app other services and people reach callgate by.

`create_app` builds it; Prometheus metrics and the web console mount on the same app.  It is a
door, never a second authority: submissions go through `callgate.client`, every decision through
`callgate.decisions.desk.ApprovalDesk` signed with the server's delegate key, and the workers
verify what it posts exactly as they verify the CLI's and the Slack bot's.

`create_app` is imported when first asked for, so the CLI (which lists `serve` among its
commands) does not load the web framework for every other command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from callgate.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from callgate.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
