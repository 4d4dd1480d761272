"""The HTTP API (`callgate serve`): one ASGI app other services and people reach callgate by.

`create_app` builds it; Prometheus metrics and the web console mount on the same app.  It is a
door, never a second authority: submissions go through `callgate.client`, every decision through
`callgate.decisions.desk.ApprovalDesk` signed with the server's delegate key, and the workers
verify what it posts exactly as they verify the CLI's and the Slack bot's.
"""

from __future__ import annotations

from callgate.api.app import create_app

__all__ = ["create_app"]
