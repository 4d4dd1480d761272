"""The runner's window on the world outside callgate: the demo services and the model server.

Executions and effects are counted by the services that carry them out (per run, from the
``X-Callgate-Run-Id`` header every demo tool sends), and the results the model received are
read from the scripted model server's request log — never from callgate's own records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from callgate.ops.conformance.catalogue import Case

TOOL_COUNTERS: dict[str, tuple[str, str]] = {
    "get_train_status": ("travel", "train_status"),
    "get_weather": ("travel", "weather"),
    "reserve_seat": ("booking", "reserve"),
}
"""Tool → (demo service, the endpoint whose per-run request count is its executions).

``check_seats`` and ``check_eligibility`` are left out on purpose: the validator calls those
endpoints for ``reserve_seat``'s preconditions, so their counts are not tool executions."""


class ProbeError(RuntimeError):
    """A demo service or the model server answered something unexpected."""


class Probes:
    """HTTP to the demo services (``urls["travel"]``, ``urls["booking"]``) and ``urls["model"]``."""

    def __init__(self, session: aiohttp.ClientSession, urls: Mapping[str, str]) -> None:
        self.session = session
        self.urls = dict(urls)

    async def _json(self, method: str, url: str, body: Any = None) -> Any:
        async with self.session.request(method, url, json=body) as reply:
            if reply.status != 200:
                raise ProbeError(f"{method} {url}: {reply.status} {await reply.text()}")
            return orjson.loads(await reply.read())

    async def arm(self, run_id: str, case: Case) -> None:
        """Apply the case's faults and delays to this run only."""
        if case.travel_config:
            url = f"{self.urls['travel']}/_config?run_id={run_id}"
            await self._json("POST", url, dict(case.travel_config))
        if case.booking_faults:
            url = f"{self.urls['booking']}/_faults?run_id={run_id}"
            await self._json("POST", url, dict(case.booking_faults))

    async def _run_stats(self, service: str, run_id: str) -> dict[str, Any]:
        if service not in self.urls:
            return {}
        stats: dict[str, Any] = await self._json(
            "GET", f"{self.urls[service]}/_stats/runs/{run_id}"
        )
        return stats

    async def counts(self, run_id: str) -> tuple[dict[str, int], int]:
        """(executions per tool, reservations created) for one run, as the services count."""
        stats = {s: await self._run_stats(s, run_id) for s in ("travel", "booking")}
        executions = {
            tool: int(stats[service].get("requests", {}).get(endpoint, 0))
            for tool, (service, endpoint) in TOOL_COUNTERS.items()
        }
        return executions, int(stats["booking"].get("created", 0))

    async def executions(self, run_id: str) -> dict[str, int]:
        return (await self.counts(run_id))[0]

    async def reserve_requests(self, run_id: str) -> int:
        """Reservation requests the booking service has received from this run so far."""
        return int((await self._run_stats("booking", run_id)).get("requests", {}).get("reserve", 0))

    async def model_requests(self, run_id: str) -> list[dict[str, Any]]:
        """Every request body the model server received for this run, oldest first.

        A run is recognised by its id, which the runner puts in the user's input."""
        log = await self._json("GET", f"{self.urls['model']}/_log")
        bodies = [entry.get("body") for entry in log]
        return [b for b in bodies if isinstance(b, dict) and run_id in orjson.dumps(b).decode()]
