"""Workers report themselves while they run (JobQueue.list_workers): at start, with each
heartbeat, and not after they stop; rows of workers that died stop being listed."""

from __future__ import annotations

import asyncio
import os

import pydantic

from pgjobs import JobContext, JobQueue, Registry
from tests.helpers import eventually


class Item(pydantic.BaseModel):
    n: int = 0


async def test_a_running_worker_is_listed_with_what_it_holds(
    jobs: JobQueue, registry: Registry
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @registry.kind("slow", input=Item, queue="presence")
    async def slow(ctx: JobContext, item: Item) -> None:
        started.set()
        await release.wait()

    assert await jobs.list_workers() == []
    worker = jobs.worker(name="billing-1", concurrency=3, lease=3, heartbeat_interval=0.1)
    running = asyncio.create_task(worker.run())
    (info,) = await eventually(jobs.list_workers)
    assert info.id == worker.id and info.name == "billing-1"
    assert info.queues == ["presence"] and info.concurrency == 3 and info.pid == os.getpid()
    assert info.started_at <= info.last_seen
    await jobs.enqueue("slow", {}, queue="presence")
    await started.wait()

    async def holding_one() -> bool:
        (seen,) = await jobs.list_workers("presence")
        return seen.running == 1

    await eventually(holding_one)
    assert await jobs.list_workers("elsewhere") == []
    release.set()
    await worker.stop()
    await running
    assert await jobs.list_workers() == []


async def test_a_worker_that_died_is_not_listed(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("x", input=Item)
    async def x(ctx: JobContext, item: Item) -> None:
        return None

    worker = jobs.worker(lease=3, heartbeat_interval=1)
    running = asyncio.create_task(worker.run())
    await eventually(jobs.list_workers)
    # What a killed process leaves: its row, last seen longer ago than three heartbeats.
    await worker.stop()
    await running
    await jobs.pool.execute(
        f"INSERT INTO {jobs.schema}.workers (id, name, host, pid, queues, concurrency, heartbeat,"
        " last_seen) VALUES ($1, 'ghost', 'h', 1, '{{default}}', 1, 1, now() - interval '4 s')",
        worker.id,
    )
    assert await jobs.list_workers() == []
    assert await jobs.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.workers") == 1
