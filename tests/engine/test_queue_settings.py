"""Queue settings enforced inside the claim: pause, rate limit, global and group concurrency."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pydantic
import pytest

from pgjobs import InvalidOption, JobContext, JobQueue, JobSpec, Registry, Status


class Item(pydantic.BaseModel):
    n: int = 0


async def claim(jobs: JobQueue, queue: str, kinds: list[str], n: int = 10) -> list[int]:
    rows = await jobs.db.fetch("claim", [queue], kinds, n, 30.0, 0)
    return [row["id"] for row in rows]


async def test_paused_queue_hands_out_nothing_but_accepts_jobs(
    jobs: JobQueue, registry: Registry
) -> None:
    registry.declare("p", input=Item, queue="q")
    await jobs.pause("q")
    job = await jobs.enqueue("p", {})
    assert await claim(jobs, "q", ["p"]) == []
    assert (await jobs.queue_settings("q")).paused
    await jobs.resume("q")
    assert await claim(jobs, "q", ["p"]) == [job.id]


async def test_paused_queue_does_not_spin_a_worker_and_resume_wakes_it(
    jobs: JobQueue, registry: Registry
) -> None:
    done = asyncio.Event()

    @registry.kind("p", input=Item, queue="q")
    async def p(ctx: JobContext, item: Item) -> None:
        done.set()

    await jobs.pause("q")
    await jobs.enqueue("p", {})
    worker = jobs.worker(poll_interval=60)
    claims = 0
    original = jobs.db.fetch

    async def counting(name, *args, **kw):
        nonlocal claims
        claims += name == "claim"
        return await original(name, *args, **kw)

    jobs.db.fetch = counting  # type: ignore[method-assign]
    worker.start()
    await asyncio.sleep(0.3)  # a spinning worker would claim hundreds of times meanwhile
    assert claims <= 2
    await jobs.resume("q")  # the NOTIFY wakes it: the 60 s poll never would in this test
    await asyncio.wait_for(done.wait(), 20)
    await worker.stop()


async def test_limit_queue_for_holds_the_queue(jobs: JobQueue, registry: Registry) -> None:
    registry.declare("p", input=Item, queue="q")
    job = await jobs.enqueue("p", {})
    await jobs.limit_queue_for("q", 3600)
    assert await claim(jobs, "q", ["p"]) == []
    await jobs.limit_queue_for("q", 0)
    assert await claim(jobs, "q", ["p"]) == [job.id]


@pytest.mark.slow
async def test_rate_limit_is_honoured_by_three_concurrent_workers(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("limited", input=Item, queue="rl")
    async def limited(ctx: JobContext, item: Item) -> None:
        return None

    period = 0.5
    await jobs.set_rate_limit("rl", 5, per_seconds=period)
    await jobs.enqueue_many([JobSpec("limited", {"n": i}) for i in range(15)])
    workers = [jobs.worker(concurrency=10, queues=["rl"]) for _ in range(3)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    starts = sorted(
        r["started_at"]
        for r in await jobs.db.pool.fetch(
            f"SELECT started_at FROM {jobs.schema}.jobs WHERE status = 'completed'"
        )
    )
    assert len(starts) == 15
    # A fixed window admits 5 starts; the 6th and 11th must each wait for a new window.
    assert starts[5] - starts[0] >= timedelta(seconds=period)
    assert starts[10] - starts[0] >= timedelta(seconds=2 * period)
    assert sum(w.stats.completed for w in workers) == 15


async def test_global_concurrency_cap_across_workers(jobs: JobQueue, registry: Registry) -> None:
    running = 0
    peak = 0
    db_peak = 0

    @registry.kind("capped", input=Item, queue="cq")
    async def capped(ctx: JobContext, item: Item) -> None:
        nonlocal running, peak, db_peak
        running += 1
        peak = max(peak, running)
        now_running = await jobs.db.pool.fetchval(
            f"SELECT count(*) FROM {jobs.schema}.jobs WHERE queue = 'cq' AND status = 'running'"
        )
        db_peak = max(db_peak, now_running)
        await asyncio.sleep(0.02)  # some work, so that several jobs overlap
        running -= 1

    await jobs.set_concurrency("cq", 2)
    await jobs.enqueue_many([JobSpec("capped", {"n": i}) for i in range(20)])
    workers = [jobs.worker(concurrency=5, queues=["cq"]) for _ in range(3)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    assert peak == 2 and db_peak <= 2
    assert sum(w.stats.completed for w in workers) == 20


async def test_group_concurrency_cap(jobs: JobQueue, registry: Registry) -> None:
    running: dict[str, int] = {}
    peaks: dict[str, int] = {}

    class Grouped(pydantic.BaseModel):
        group: str
        n: int

    @registry.kind("grouped", input=Grouped, queue="gq", group_key=lambda g: g.group)
    async def grouped(ctx: JobContext, item: Grouped) -> None:
        running[item.group] = running.get(item.group, 0) + 1
        peaks[item.group] = max(peaks.get(item.group, 0), running[item.group])
        await asyncio.sleep(0.02)
        running[item.group] -= 1

    await jobs.set_group_concurrency("gq", 1)
    await jobs.enqueue_many(
        [
            JobSpec("grouped", {"group": g, "n": i})
            for i in range(4)
            for g in ("red", "blue", "green")
        ]
    )
    workers = [jobs.worker(concurrency=6, queues=["gq"]) for _ in range(2)]
    await asyncio.gather(*(w.run(until_drained=True) for w in workers))
    assert peaks == {"red": 1, "blue": 1, "green": 1}
    assert sum(w.stats.completed for w in workers) == 12
    row_statuses = await jobs.db.pool.fetch(f"SELECT DISTINCT status FROM {jobs.schema}.jobs")
    assert [r["status"] for r in row_statuses] == [Status.COMPLETED]


async def test_settings_validation(jobs: JobQueue) -> None:
    with pytest.raises(InvalidOption, match="concurrency"):
        await jobs.set_concurrency("q", 0)
    with pytest.raises(InvalidOption, match="per_seconds"):
        await jobs.set_rate_limit("q", 5)
    with pytest.raises(InvalidOption, match="queue"):
        await jobs.pause("")
    await jobs.set_rate_limit("q", 5, per_seconds=1)
    await jobs.set_concurrency("q", 3)
    await jobs.set_rate_limit("q", None)
    settings = await jobs.queue_settings("q")
    assert (settings.rate_limit, settings.concurrency, settings.paused) == (None, 3, False)


async def test_setting_the_same_rate_limit_again_keeps_the_current_window(
    jobs: JobQueue,
) -> None:
    await jobs.set_rate_limit("rl", 2, 60)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.queue_settings SET window_start = now(), window_count = 2"
        " WHERE queue = 'rl'"
    )
    await jobs.set_rate_limit("rl", 2, 60)  # the same limit set again (setGlobalRateLimit)
    settings = await jobs.queue_settings("rl")
    row = await jobs.db.pool.fetchrow(
        f"SELECT window_start, window_count FROM {jobs.schema}.queue_settings WHERE queue = 'rl'"
    )
    assert settings.rate_limit == 2 and row["window_count"] == 2 and row["window_start"]
    await jobs.set_rate_limit("rl", 3, 60)  # a new limit starts a new window
    row = await jobs.db.pool.fetchrow(
        f"SELECT window_start, window_count FROM {jobs.schema}.queue_settings WHERE queue = 'rl'"
    )
    assert row["window_count"] == 0 and row["window_start"] is None


async def test_settings_report_the_rate_limit_window(jobs: JobQueue, registry: Registry) -> None:
    registry.declare("w", input=Item, queue="win")
    await jobs.set_rate_limit("win", 2, 60)
    fresh = await jobs.queue_settings("win")
    assert (fresh.window_start, fresh.window_count) == (None, 0)
    await jobs.enqueue_many([JobSpec("w", {"n": i}) for i in range(3)])
    assert len(await claim(jobs, "win", ["w"])) == 2
    settings = await jobs.queue_settings("win")
    assert settings.window_count == 2 and settings.window_start is not None
