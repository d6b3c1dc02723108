"""PORTING.md, connection: a Worker or QueueEvents still running on a pool the caller passed
when the caller closes it stops, and emits ``pgjobs.PoolClosed`` on ``error``."""

from __future__ import annotations

import asyncio

import asyncpg

from bullmq_compat import QueueEvents, Worker
from pgjobs import JobQueue, PoolClosed, create_pool
from tests.helpers import eventually


async def test_a_worker_and_queue_events_report_a_closed_pool_on_error(
    pg_dsn: str, schema_name: str, admin: asyncpg.Connection
) -> None:
    pool = await create_pool(pg_dsn, min_size=1, max_size=6)
    await (await JobQueue.connect(pool=pool, schema=schema_name)).migrate()
    opts = {"connection": pool, "schema": schema_name}
    errors: dict[str, list[BaseException]] = {"worker": [], "events": []}

    async def processor(job: object, token: object) -> None:
        return None

    worker = Worker("mail", processor, opts)
    worker.on("error", errors["worker"].append)
    events = QueueEvents("mail", opts)
    events.on("error", errors["events"].append)
    await worker.waitUntilReady()
    await events.waitUntilReady()

    async def both_waiting() -> bool:  # the worker registered idle, the stream as a reader
        return bool(
            await admin.fetchval(
                f"SELECT EXISTS (SELECT FROM {schema_name}.idle_workers)"
                f" AND EXISTS (SELECT FROM {schema_name}.event_readers)"
            )
        )

    await eventually(both_waiting)
    await asyncio.wait_for(pool.close(), 10)

    async def both_reported() -> bool:
        return bool(errors["worker"] and errors["events"])

    await eventually(both_reported, timeout=10)
    assert [type(e) for e in errors["worker"]] == [PoolClosed]
    assert [type(e) for e in errors["events"]] == [PoolClosed]
    await asyncio.wait_for(worker.close(), 10)
    await asyncio.wait_for(events.close(), 10)
