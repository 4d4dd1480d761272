"""The follower and the courier against real Redis: event logs written as the ledger writes them
(XADD ``t``/``type``/``d`` on each run's log, the run in its partition's runs index), a real HTTP
receiver, and the arq delivery job's retry decision.

* each event is handed to each subscribed endpoint once, however many passes run, and a fresh
  worker (no memory) resumes from the cursors in Redis instead of starting over;
* counters move once per event;
* one pass at a time: a pass finds the lease held and reads nothing;
* an ended run leaves the watch; one that waits for a person again comes back;
* a delivery is posted once, retried on the schedule, and dead-lettered after the last try.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from aiohttp import ClientSession, web
from arq import Retry

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.embedded_redis import free_port
from callgate.ops.inspect_render import dead_letter_row
from callgate.records import RunRecord
from callgate.states import RunState
from callgate.streams.follow import Follower
from callgate.streams.outbound import Outbound
from callgate.webhooks.deliver import Courier, job_of
from callgate.webhooks.events import WebhookEvent
from callgate.webhooks.follow import ENDED_GRACE_MS, Feed, delivery_id
from callgate.webhooks.settings import Endpoint, WebhookSettings
from callgate.webhooks.signing import SIGNATURE_HEADER, verify
from tests.seed import seed

SECRET = "s" * 32
EVERYTHING = Endpoint(name="all", url="http://127.0.0.1:1/x", secret=SECRET)
ENDS_ONLY = Endpoint(
    name="ends", url="http://127.0.0.1:1/x", secret=SECRET, events=frozenset({"run.finished"})
)


class Recorder:
    """The enqueue side of a feed: what it handed over, refusing a job id twice as arq does."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.sent: list[tuple[str, str]] = []
        """(endpoint, event id) of each job taken."""

    async def __call__(self, endpoint: Endpoint, event: WebhookEvent) -> bool:
        job_id = delivery_id(endpoint, event)
        if job_id in self.jobs:
            return False
        self.jobs.append(job_id)
        self.sent.append((endpoint.name, event.id))
        return True


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.key_prefix, settings.partitions)


def feed(redis: aioredis.Redis, keys: Keys, sent: Recorder, owner: str = "w1") -> Feed:
    return Feed(Follower(redis, keys, 3600), 1, 3600, [EVERYTHING, ENDS_ONLY], sent, owner=owner)


async def log(redis: aioredis.Redis, keys: Keys, run_id: str, type: str, **data: Any) -> None:
    """One event-log entry, as `Ledger.event` writes it."""
    await redis.xadd(keys.events(run_id), {"t": now_ms(), "type": type, "d": orjson.dumps(data)})


async def new_run(redis: aioredis.Redis, keys: Keys, run_id: str) -> None:
    await redis.zadd(keys.runs_index(0), {run_id: now_ms()})
    await log(redis, keys, run_id, "run.created")


async def counts(redis: aioredis.Redis, keys: Keys) -> dict[str, int]:
    raw = await redis.hgetall(keys.webhooks(0, "counts"))
    return {k.decode(): int(v) for k, v in raw.items()}


async def test_each_event_once_per_endpoint_across_passes_and_a_fresh_worker(
    redis: aioredis.Redis, keys: Keys
) -> None:
    sent = Recorder()
    await new_run(redis, keys, "r1")
    await log(redis, keys, "r1", "call.created", call_id="c1", tool="reserve_seat")
    await redis.hset(keys.call("r1", "c1"), mapping={"tool": "reserve_seat"})
    await log(redis, keys, "r1", "run.transition", to="paused_approval", **{"from": ["x"]})
    assert await feed(redis, keys, sent).run_pass() == 1
    paused_id = (await redis.xrange(keys.events("r1")))[2][0].decode()
    assert sent.sent == [("all", f"r1/{paused_id}")]

    again = feed(redis, keys, sent)  # another process, nothing in memory
    assert await again.run_pass() == 0 and len(sent.jobs) == 1, "resumed from the cursor"

    await log(
        redis,
        keys,
        "r1",
        "call.transition",
        call_id="c1",
        to="succeeded",
        **{"from": ["executing"]},
    )
    await log(redis, keys, "r1", "run.transition", to="completed", **{"from": ["x"]})
    assert await again.run_pass() == 2, "run.finished for both endpoints"
    assert [endpoint for endpoint, _ in sent.sent[1:]] == ["all", "ends"]
    await again.run_pass()
    assert await counts(redis, keys) == {
        "calls|reserve_seat|succeeded": 1,
        "finished|completed": 1,
    }, "counted once"


async def test_a_pass_that_finds_the_lease_held_reads_nothing(
    redis: aioredis.Redis, keys: Keys
) -> None:
    sent = Recorder()
    await new_run(redis, keys, "r1")
    await log(redis, keys, "r1", "run.transition", to="failed", **{"from": ["x"]})
    holder = feed(redis, keys, sent, owner="w1")
    assert await holder.follower.lease("w1", 10_000)
    assert await feed(redis, keys, sent, owner="w2").run_pass() == 0
    assert sent.jobs == [] and await counts(redis, keys) == {}
    await holder.follower.release("w1")
    assert await feed(redis, keys, sent, owner="w2").run_pass() == 2


async def ended_long_ago(redis: aioredis.Redis, keys: Keys, run_id: str) -> None:
    """``run_id`` in the runs index and its log ending ``completed``, past the ended grace."""
    ended_ms = now_ms() - 2 * ENDED_GRACE_MS
    await redis.zadd(keys.runs_index(0), {run_id: ended_ms - 1000})
    await redis.xadd(
        keys.events(run_id),
        {
            "t": ended_ms,
            "type": "run.transition",
            "d": orjson.dumps({"to": "completed", "from": ["x"]}),
        },
        id=f"{ended_ms}-0",
    )


async def test_an_ended_run_leaves_the_watch_and_comes_back_when_it_waits_again(
    redis: aioredis.Redis, keys: Keys
) -> None:
    sent = Recorder()
    watch = keys.webhooks(0, "watch")
    await ended_long_ago(redis, keys, "r1")
    follower = feed(redis, keys, sent)
    await follower.run_pass()
    assert await redis.zscore(watch, "r1") is not None, "still watched in the pass it ended"
    await follower.run_pass()
    assert await redis.zscore(watch, "r1") is None, "ended, nothing new: no longer read"

    # A follow-up turn asks for an approval: the inbox brings the run back, from its cursor.
    await log(redis, keys, "r1", "run.transition", to="paused_approval", **{"from": ["x"]})
    await redis.zadd(keys.pending_approvals(0), {"r1 a1": now_ms() + 60_000})
    before = len(sent.sent)
    assert await follower.run_pass() == 1
    assert sent.sent[before][0] == "all" and sent.sent[before][1].startswith("r1/")


async def test_a_run_that_takes_a_reply_after_it_ended_is_followed_to_its_next_end(
    redis: aioredis.Redis, keys: Keys, settings: Settings
) -> None:
    """The reply step (like a resume) puts the run back on the watch in the same atomic step,
    so its second end is announced: nothing else says an ended run came back."""
    sent, watch = Recorder(), keys.webhooks(0, "watch")
    ledger = Ledger(redis, keys, settings)
    run = RunRecord(
        run_id="r3",
        status=RunState.COMPLETED,
        api="openai-responses",
        model="m",
        input="hi",
        turn=1,
    )
    await seed(ledger, run)
    await ended_long_ago(redis, keys, "r3")
    follower = feed(redis, keys, sent)
    await follower.run_pass()
    await follower.run_pass()
    assert await redis.zscore(watch, "r3") is None, "ended a while ago: no longer followed"

    reply = await ledger.continue_run(
        run, [b'{"role": "user", "content": "and?"}'], reply_id="q2", sender="svc", max_turns=5
    )
    assert (await ledger.apply(reply)).ok
    assert await redis.zscore(watch, "r3") is not None, "the reply put it back on the watch"
    await log(redis, keys, "r3", "run.transition", to="completed", **{"from": ["awaiting_model"]})
    before = len(sent.sent)
    await follower.run_pass()
    assert ("ends", sent.sent[-1][1]) in sent.sent[before:], "its second end is announced"


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[tuple[dict[str, str], bytes]], list[int]]]:
    got: list[tuple[dict[str, str], bytes]] = []
    answers: list[int] = []

    async def hook(request: web.Request) -> web.Response:
        got.append((dict(request.headers), await request.read()))
        return web.Response(status=answers.pop(0) if answers else 200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/hook", got, answers
    finally:
        await runner.cleanup()


def test_a_delivery_id_names_the_endpoint_and_cannot_be_guessed_without_its_secret() -> None:
    """Submitters may create arq job keys: one they could predict, they could squat."""
    event = WebhookEvent("r1/1-0", "run.finished", "r1", 1, {})
    other = Endpoint(name="all", url="http://127.0.0.1:1/x", secret="t" * 32)
    assert delivery_id(EVERYTHING, event) == delivery_id(EVERYTHING, event)
    assert delivery_id(EVERYTHING, event).startswith("webhook:all:")
    assert "r1" not in delivery_id(EVERYTHING, event)
    assert delivery_id(EVERYTHING, event) != delivery_id(other, event)


async def test_a_delivery_is_posted_once_retried_on_schedule_then_dead_lettered(
    redis: aioredis.Redis,
    keys: Keys,
    settings: Settings,
    receiver: tuple[str, list[tuple[dict[str, str], bytes]], list[int]],
) -> None:
    url, got, answers = receiver
    endpoint = Endpoint(name="ops", url=url, secret=SECRET)
    event = WebhookEvent("r1/1-0", "run.finished", "r1", 1, {"status": "completed"})
    job = job_of(endpoint, event.as_dict(), delivery_id(endpoint, event))
    outbound = Outbound(redis, keys, 3600, 1000)
    async with ClientSession() as session:
        courier = Courier(
            {"ops": endpoint}, WebhookSettings(retry_schedule_s=(0.5, 2.0)), outbound, session
        )
        assert await courier.deliver(job, 1) == "delivered"
        assert await courier.deliver(job, 1) == "delivered before"
        assert len(got) == 1 and got[0][1] == event.body()
        assert verify(SECRET.encode(), got[0][0][SIGNATURE_HEADER], got[0][1])

        other = WebhookEvent("r1/2-0", "run.finished", "r1", 2, {"status": "failed"})
        failing = job_of(endpoint, other.as_dict(), delivery_id(endpoint, other))
        answers.extend([503, 503, 503])
        for attempt, delay in ((1, 0.5), (2, 2.0)):
            with pytest.raises(Retry) as retry:
                await courier.deliver(failing, attempt)
            assert retry.value.defer_score == delay * 1000
        assert await courier.deliver(failing, 3) == "dead-lettered"
        forged = {**job, "endpoint": "not-registered"}
        assert await courier.deliver(forged, 1) == "dropped"

    [(entry_id, fields)] = [
        (i.decode(), {k.decode(): v for k, v in f.items()})
        for i, f in await redis.xrange(keys.dead_letter(0))
    ]
    row = dead_letter_row(0, entry_id, fields)
    assert (row["stream"], row["kind"], row["run_id"], row["delivery_count"]) == (
        "webhooks",
        "webhook_delivery",
        "r1",
        3,
    )
    assert "HTTP 503" in row["reason"]
    stats = {k.decode(): int(v) for k, v in (await redis.hgetall(keys.webhook_stats())).items()}
    assert stats == {"ops|delivered": 1, "ops|failed": 3, "ops|dead_lettered": 1}


async def test_a_run_indexed_behind_the_cursor_is_still_found(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """Two ingress steps: the later-stamped run commits first and moves the cursor past the
    other, whose entry lands behind it a moment later."""
    sent = Recorder()
    follower = feed(redis, keys, sent)
    stamp = now_ms()
    await redis.zadd(keys.runs_index(0), {"later": stamp})
    await follower.run_pass()
    await redis.zadd(keys.runs_index(0), {"earlier": stamp - 500})
    await log(redis, keys, "earlier", "run.transition", to="refused", **{"from": ["x"]})
    assert await follower.run_pass() == 2, "run.finished of the run indexed behind the cursor"


async def test_an_event_older_than_the_max_age_is_counted_but_not_delivered(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """A first start on a deployment with a week of history does not replay it to receivers."""
    sent = Recorder()
    old_ms = now_ms() - 2 * 86_400_000
    await redis.zadd(keys.runs_index(0), {"old": old_ms})
    await redis.xadd(
        keys.events("old"),
        {"t": old_ms, "type": "run.transition", "d": orjson.dumps({"to": "failed", "from": ["x"]})},
        id=f"{old_ms}-0",
    )
    await new_run(redis, keys, "new")
    await log(redis, keys, "new", "run.transition", to="failed", **{"from": ["x"]})
    follower = feed(redis, keys, sent)
    follower.follower.retention_s = follower.retention_s = 7 * 86_400
    assert await follower.run_pass() == 2, "the new run's end, to both endpoints"
    assert all(event_id.startswith("new/") for _, event_id in sent.sent)
    assert (await counts(redis, keys))["finished|failed"] == 2, "both counted"


async def test_two_passes_at_once_in_one_process_count_once(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """arq starts the next second's pass while a slow one still runs: same owner, same lease."""
    sent = Recorder()
    await new_run(redis, keys, "r1")
    await log(redis, keys, "r1", "run.transition", to="cancelled", **{"from": ["x"]})
    follower = feed(redis, keys, sent)
    results = await asyncio.gather(follower.run_pass(), follower.run_pass())
    assert sorted(results) == [0, 2]
    assert await counts(redis, keys) == {"finished|cancelled": 1}


async def test_an_approval_wait_spans_passes_and_its_request_time_is_not_kept_forever(
    redis: aioredis.Redis, keys: Keys
) -> None:
    sent = Recorder()
    await new_run(redis, keys, "r1")
    await log(redis, keys, "r1", "approval.requested", approval_id="a1", call_id="c1")
    await log(redis, keys, "r1", "approval.requested", approval_id="a2", call_id="c2")
    follower = feed(redis, keys, sent)
    await follower.run_pass()
    asked = keys.webhook_asked("r1")
    assert set(await redis.hkeys(asked)) == {b"a1", b"a2"}
    assert 0 < await redis.ttl(asked) <= 3600, "expires like the run (a withdrawn one too)"
    await log(redis, keys, "r1", "approval.denied", approval_id="a1", call_id="c1")
    await follower.run_pass()
    assert await redis.hkeys(asked) == [b"a2"]
    found = await counts(redis, keys)
    assert found["wait|denied|+Inf"] == 1 and found["wait|denied|5"] == 1


async def test_one_pass_reads_a_watch_larger_than_its_window(
    redis: aioredis.Redis, keys: Keys
) -> None:
    sent = Recorder()
    for i in range(5):
        await new_run(redis, keys, f"r{i}")
        await log(redis, keys, f"r{i}", "run.transition", to="completed", **{"from": ["x"]})
    small = Feed(Follower(redis, keys, 3600), 1, 3600, [ENDS_ONLY], sent, batch=2)
    assert await small.run_pass() == 5, "three windows of two"
    assert await small.run_pass() == 0
