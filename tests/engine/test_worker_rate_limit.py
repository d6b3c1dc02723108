"""A worker's own rate limit (``Worker(rate_limit=, rate_period=)``, ``JobQueue.claim(rate_limit=,
rate_period=)``): passed with each claim, counted in one window per queue that every claim with
a limit shares (sql/schema/claim_jobs.sql, table worker_windows), ignored by claims without
one, and never written onto the queue's settings."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from typing import Any

import pydantic
import pytest

from pgjobs import InvalidOption, JobContext, JobQueue, JobSpec, Registry
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


def limited_claim(
    jobs: JobQueue, queues: list[str], n: int, max_jobs: int, period: float = 3600.0
) -> Any:
    """A claim of up to ``n`` jobs by a claimer limited to ``max_jobs`` per ``period``, on a
    connection the test drives; the ids it took."""

    async def run(conn: Any) -> list[int]:
        rows = await jobs.db.fetch(
            "claim_limited", queues, ["k"], n, 30.0, 0, max_jobs, period, None, None, None,
            conn=conn,
        )  # fmt: skip
        return sorted(row["id"] for row in rows)

    return run


def unlimited_claim(jobs: JobQueue, queues: list[str], n: int) -> Any:
    async def run(conn: Any) -> list[int]:
        rows = await jobs.db.fetch("claim", queues, ["k"], n, 30.0, 0, conn=conn)
        return sorted(row["id"] for row in rows)

    return run


async def window(jobs: JobQueue, queue: str) -> tuple[Any, int] | None:
    row = await jobs.db.pool.fetchrow(
        f"SELECT window_end, window_count FROM {jobs.schema}.worker_windows WHERE queue = $1",
        queue,
    )
    return None if row is None else (row["window_end"], row["window_count"])


async def enqueue(jobs: JobQueue, registry: Registry, queue: str, count: int) -> list[int]:
    if "k" not in registry.names():
        registry.declare("k", input=Item, queue=queue)
    done = await jobs.enqueue_many([JobSpec("k", {"n": i}, queue=queue) for i in range(count)])
    return [job.id for job in done]


async def test_two_limited_claims_race_for_the_last_slot_of_a_window(
    jobs: JobQueue, registry: Registry
) -> None:
    """One slot is left: the first claim takes it, the second waits for the window's lock and
    then finds the window full (it never admits a second job on a count it read before)."""
    ids = await enqueue(jobs, registry, "w", 4)
    async with jobs.pool.acquire() as conn:
        assert await limited_claim(jobs, ["w"], 1, 2)(conn) == ids[:1]
    first, second, waited = await overlap(
        jobs.pool, limited_claim(jobs, ["w"], 5, 2), limited_claim(jobs, ["w"], 5, 2)
    )
    assert waited
    assert first == ids[1:2] and second == []
    state = await window(jobs, "w")
    assert state is not None and state[1] == 2


async def test_claims_with_different_limits_share_one_count(
    jobs: JobQueue, registry: Registry
) -> None:
    """Each claimer compares the shared count with its own max, as BullMQ's workers compare
    theirs with the one limiter key."""
    ids = await enqueue(jobs, registry, "w", 10)
    async with jobs.pool.acquire() as conn:
        assert await limited_claim(jobs, ["w"], 10, 2)(conn) == ids[:2]
        assert await limited_claim(jobs, ["w"], 10, 5)(conn) == ids[2:5]
        assert await limited_claim(jobs, ["w"], 10, 2)(conn) == []
        assert await limited_claim(jobs, ["w"], 10, 5)(conn) == []
        assert await limited_claim(jobs, ["w"], 10, 6)(conn) == ids[5:6]
    state = await window(jobs, "w")
    assert state is not None and state[1] == 6


async def test_an_unlimited_claim_beside_an_exhausted_worker_window(
    jobs: JobQueue, registry: Registry
) -> None:
    """A claim without a limit neither waits for the window's lock (held by a limited claim in
    flight) nor is held by the full window, nor counts in it."""
    ids = await enqueue(jobs, registry, "w", 6)
    async with jobs.pool.acquire() as conn:
        assert await limited_claim(jobs, ["w"], 1, 1)(conn) == ids[:1]
    before = await window(jobs, "w")
    assert before is not None and before[1] == 1
    held, free, waited = await overlap(
        jobs.pool, limited_claim(jobs, ["w"], 5, 1), unlimited_claim(jobs, ["w"], 3)
    )
    assert not waited
    assert held == [] and free == ids[1:4]
    assert await window(jobs, "w") == before
    settings = await jobs.queue_settings("w")
    assert settings.rate_limit is None and settings.window_count == 0


async def test_an_ended_window_gives_way_to_one_of_the_next_claims_period(
    jobs: JobQueue, registry: Registry
) -> None:
    ids = await enqueue(jobs, registry, "w", 4)
    async with jobs.pool.acquire() as conn:
        assert await limited_claim(jobs, ["w"], 5, 2, period=3600)(conn) == ids[:2]
        assert await limited_claim(jobs, ["w"], 5, 2)(conn) == []
        await conn.execute(  # the hour is over
            f"UPDATE {jobs.schema}.worker_windows SET window_end = now() - interval '1 second'"
        )
        assert await limited_claim(jobs, ["w"], 5, 2, period=60)(conn) == ids[2:4]
    state = await window(jobs, "w")
    assert state is not None and state[1] == 2
    left = await jobs.db.pool.fetchval(
        f"SELECT extract(epoch FROM window_end - now())::float8 FROM {jobs.schema}.worker_windows"
    )
    assert 0 < left <= 60  # the window the 60 s claim opened, not the hour of the first one


async def test_a_worker_limit_leaves_nothing_on_the_queue(
    jobs: JobQueue, registry: Registry
) -> None:
    """A limited worker whose window is full when it stops holds back no worker without a
    limit, and the queue's settings never name its limit."""
    ran: list[int] = []

    @registry.kind("k", input=Item, queue="w")
    async def k(ctx: JobContext, item: Item) -> None:
        ran.append(item.n)

    await jobs.enqueue_many([JobSpec("k", {"n": i}) for i in range(3)])
    limited = jobs.worker(queues=["w"], concurrency=5, rate_limit=3, rate_period=3600)
    await limited.run(until_drained=True)
    assert limited.stats.completed == 3
    state = await window(jobs, "w")
    assert state is not None and state[1] == 3  # full for the next hour
    assert (await jobs.queue_settings("w")).rate_limit is None
    await jobs.enqueue_many([JobSpec("k", {"n": i}) for i in range(3, 23)])
    free = jobs.worker(queues=["w"], concurrency=5)
    await free.run(until_drained=True)
    assert free.stats.completed == 20 and sorted(ran) == list(range(23))
    await jobs.enqueue("k", {"n": 99})
    assert await jobs.claim(["w"], rate_limit=3, rate_period=3600) == []  # still full
    assert len(await jobs.claim(["w"])) == 1


async def test_a_full_window_makes_a_limited_worker_wait_for_its_end(
    jobs: JobQueue, registry: Registry
) -> None:
    """idle_state (when to look again) counts the window for a worker with a limit, so that it
    sleeps until the window ends instead of claiming again at once; not for one without."""
    await enqueue(jobs, registry, "w", 3)
    async with jobs.pool.acquire() as conn:
        assert len(await limited_claim(jobs, ["w"], 5, 1, period=600)(conn)) == 1

    async def until_due(rate_limit: int | None) -> float:
        row = await jobs.db.fetchrow(
            "idle_state", ["w"], ["k"], None, 0, 60.0, 30.0, "none", rate_limit
        )
        assert row is not None
        return float(row["until_due"])

    assert 0 < await until_due(1) <= 600
    assert await until_due(5) <= 0  # room left under a larger max: due now
    assert await until_due(None) <= 0


async def test_the_queue_limit_holds_limited_workers_too(
    jobs: JobQueue, registry: Registry
) -> None:
    ids = await enqueue(jobs, registry, "w", 5)
    await jobs.set_rate_limit("w", 2, 3600)
    async with jobs.pool.acquire() as conn:
        assert await limited_claim(jobs, ["w"], 5, 4)(conn) == ids[:2]
        assert await limited_claim(jobs, ["w"], 5, 4)(conn) == []
    state = await window(jobs, "w")
    assert state is not None and state[1] == 2


async def test_a_limited_claim_takes_nothing_ahead(jobs: JobQueue, registry: Registry) -> None:
    await enqueue(jobs, registry, "w", 10)
    rows = await jobs.db.fetch(
        "claim_limited", ["w"], ["k"], 2, 30.0, 8, 100, 60.0, None, None, None
    )
    assert len(rows) == 2


async def test_rate_limit_options_are_checked(jobs: JobQueue, registry: Registry) -> None:
    registry.declare("k", input=Item, queue="w")

    @registry.kind("h", input=Item, queue="w")
    async def h(ctx: JobContext, item: Item) -> None:
        return None

    with pytest.raises(InvalidOption, match="rate_period"):
        jobs.worker(rate_limit=3)
    with pytest.raises(InvalidOption, match="rate_limit"):
        jobs.worker(rate_period=1.0)
    with pytest.raises(InvalidOption, match="rate_limit"):
        await jobs.claim(["w"], rate_limit=0, rate_period=1.0)
    with pytest.raises(InvalidOption, match="rate_period"):
        await jobs.claim(["w"], rate_limit=1, rate_period=0)


async def test_many_concurrent_limited_claims_never_overfill_a_window(
    jobs: JobQueue, registry: Registry
) -> None:
    """Twelve claimers on two queues, some with the limit and some without, claim in
    transactions of their own; each limited one reads the windows right after its claim, in
    the same transaction (it still holds their locks). Per window (its end identifies it),
    the jobs limited claims took add up to the count recorded, never past the max."""
    max_jobs, period = 5, 0.05
    await enqueue(jobs, registry, "a", 400)
    await enqueue(jobs, registry, "b", 400)
    took: dict[tuple[str, Any], int] = defaultdict(int)
    seen: dict[tuple[str, Any], int] = defaultdict(int)
    unlimited_took = 0
    rounds = 30

    async def claimer(limited: bool, seed: int) -> None:
        nonlocal unlimited_took
        rng = random.Random(seed)
        for _ in range(rounds):
            queues = rng.choice([["a"], ["b"], ["a", "b"]])
            async with jobs.pool.acquire() as conn, conn.transaction():
                if not limited:
                    unlimited_took += len(await unlimited_claim(jobs, queues, 2)(conn))
                    continue
                rows = await jobs.db.fetch(
                    "claim_limited", queues, ["k"], 3, 30.0, 0, max_jobs, period,
                    None, None, None, conn=conn,
                )  # fmt: skip
                windows = {
                    r["queue"]: (r["window_end"], r["window_count"])
                    for r in await conn.fetch(
                        f"SELECT queue, window_end, window_count FROM {jobs.schema}.worker_windows"
                        " WHERE queue = ANY($1)",
                        queues,
                    )
                }
                for row in rows:
                    took[(row["queue"], windows[row["queue"]][0])] += 1
                for queue, (end, count) in windows.items():
                    seen[(queue, end)] = max(seen[(queue, end)], count)
            await asyncio.sleep(0)

    await asyncio.gather(*(claimer(i % 3 != 0, i) for i in range(12)))
    assert took, "no limited claim took anything"
    assert len(took) > 2  # several windows opened and ended meanwhile
    for key, count in took.items():
        assert count <= max_jobs, (key, count)
        assert seen[key] == count, (key, count, seen[key])
    assert unlimited_took > 0
