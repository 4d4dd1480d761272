"""The deployment the people-in-the-loop e2e tests share (tests/e2e/people.py has their helpers):
every worker, the scripted model, the travel and booking services, once per module; and a
client of it, the booking service and the model's log reset before each test.

A module that needs another deployment defines its own ``system`` and ``client``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from callgate.client import CallgateClient
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from tests.e2e.people import connected, deployment


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    yield from deployment(redis_server, ("travel", "booking"))


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    async with connected(system, reset=("booking", "model")) as c:
        yield c
