"""A pool closed under a running worker, event stream or scheduler, and a JobQueue closed with
its workers running.

asyncpg's ``Pool.close`` waits for every connection it lent, so a worker that kept its LISTEN
connection and retried its claims on a closed pool made ``close`` hang and logged a warning
every few seconds, forever. Now the worker gives its connections back within a second and
stops as a killed worker would (``PoolClosed``), an event stream and a scheduler end with
``PoolClosed`` instead of retrying, and a JobQueue that opened its pool stops its workers
before closing it."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pydantic
import pytest

from pgjobs import JobContext, JobQueue, PoolClosed, Registry, create_pool
from pgjobs.completer import Completer
from pgjobs.outcomes import Outcome
from tests.helpers import eventually


class Item(pydantic.BaseModel):
    n: int = 0


def blocking_kind(registry: Registry) -> tuple[asyncio.Event, list[str]]:
    """Kind "x", whose handler says it started, then waits for ever; what ended it goes to the
    returned list."""
    started = asyncio.Event()
    ends: list[str] = []

    @registry.kind("x", input=Item)
    async def x(ctx: JobContext, item: Item) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ends.append("cancelled")
            raise

    return started, ends


async def _idle(admin: asyncpg.Connection, schema: str) -> bool:
    """A worker has registered as waiting: it has claimed, found nothing, and listens."""
    return bool(await admin.fetchval(f"SELECT EXISTS (SELECT FROM {schema}.idle_workers)"))


async def test_a_pool_closed_under_an_idle_worker_is_given_back_and_ends_it(
    pg_dsn: str, schema_name: str, registry: Registry, admin: asyncpg.Connection
) -> None:
    blocking_kind(registry)
    pool = await create_pool(pg_dsn, min_size=1, max_size=4)
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await jobs.migrate()
    worker = jobs.worker(poll_interval=300)  # its next poll is far: ending cannot wait for it
    task = worker.start()
    await eventually(lambda: _idle(admin, schema_name))

    # Before: close() waited for the worker's LISTEN connection, which was never given back.
    await asyncio.wait_for(pool.close(), 10)
    with pytest.raises(PoolClosed, match="was closed while it ran"):
        await asyncio.wait_for(task, 10)


async def test_a_pool_closed_under_a_running_handler_leaves_its_job_to_the_lease(
    pg_dsn: str, schema_name: str, registry: Registry, admin: asyncpg.Connection
) -> None:
    started, ends = blocking_kind(registry)
    pool = await create_pool(pg_dsn, min_size=1, max_size=4)
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await jobs.migrate()
    job_id = (await jobs.enqueue("x", {})).id
    worker = jobs.worker(shutdown_timeout=300)  # a stop() would wait for the handler
    task = worker.start()
    await asyncio.wait_for(started.wait(), 20)

    await asyncio.wait_for(pool.close(), 10)
    with pytest.raises(PoolClosed):
        await asyncio.wait_for(task, 10)
    # As a killed worker leaves it: the handler is gone, the job still leased to it (its
    # attempt used), for the lease's end to bring it back.
    assert ends == ["cancelled"]
    row = await admin.fetchrow(
        f"SELECT status, attempts, lock_token IS NOT NULL AS leased,"
        f" locked_until > now() AS lease_running FROM {schema_name}.jobs WHERE id = $1",
        job_id,
    )
    assert dict(row) == {"status": "running", "attempts": 1, "leased": True, "lease_running": True}


async def test_closing_a_job_queue_stops_its_workers_first(
    pg_dsn: str, schema_name: str, registry: Registry, admin: asyncpg.Connection
) -> None:
    started, ends = blocking_kind(registry)
    jobs = await JobQueue.connect(pg_dsn, schema=schema_name, registry=registry)
    await jobs.migrate()
    job_id = (await jobs.enqueue("x", {})).id
    # two slots: one runs the job, the other waits for more (registered, listening)
    worker = jobs.worker(concurrency=2, shutdown_timeout=0)  # its stop() releases at once
    task = worker.start()
    await asyncio.wait_for(started.wait(), 20)
    await eventually(lambda: _idle(admin, schema_name))

    await asyncio.wait_for(jobs.close(), 20)
    assert jobs.pool.is_closing()
    # Stopped as by stop(), without error: the running job went back to pending with its
    # attempt refunded.
    assert task.done() and task.exception() is None
    assert ends == ["cancelled"]
    row = await admin.fetchrow(
        f"SELECT status, attempts FROM {schema_name}.jobs WHERE id = $1", job_id
    )
    assert dict(row) == {"status": "pending", "attempts": 0}


async def test_an_outcome_to_write_on_a_closed_pool_fails_at_once(
    pg_dsn: str, schema_name: str, registry: Registry, admin: asyncpg.Connection
) -> None:
    """The completer retried a failed write while the error looked transient, and a closed
    pool's does: its stop() then waited for ever. Now the write fails, as any write that
    cannot be retried does, and the job is left to its lease."""
    pool = await create_pool(pg_dsn, min_size=1, max_size=2)
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await jobs.migrate()
    completer = Completer(jobs.db, on_lost=lambda outcome: None)
    completer.start()
    await pool.close()

    with pytest.raises(asyncpg.InterfaceError, match="pool is closed"):
        await asyncio.wait_for(completer.submit(Outcome(1, uuid.uuid4(), "completed")), 10)
    await asyncio.wait_for(completer.stop(), 10)


async def test_a_pool_closed_under_an_event_stream_ends_it(
    pg_dsn: str, schema_name: str, registry: Registry, admin: asyncpg.Connection
) -> None:
    """A stream waiting for events read on, and retried, a closed pool for ever."""
    pool = await create_pool(pg_dsn, min_size=1, max_size=4)
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await jobs.migrate()
    stream = jobs.events(["mail"])
    await stream.start()
    waiting = asyncio.create_task(anext(stream))
    await eventually(
        lambda: admin.fetchval(f"SELECT EXISTS (SELECT FROM {schema_name}.event_readers)")
    )

    await asyncio.wait_for(pool.close(), 10)
    with pytest.raises(PoolClosed, match="the event stream on mail was closed while it ran"):
        await asyncio.wait_for(waiting, 10)
    await asyncio.wait_for(stream.close(), 10)


async def test_a_pool_closed_under_a_scheduler_ends_it(
    pg_dsn: str, schema_name: str, registry: Registry, admin: asyncpg.Connection
) -> None:
    """The scheduler logged and retried every failure, a closed pool's included, every
    poll interval for ever."""
    pool = await create_pool(pg_dsn, min_size=1, max_size=2)
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await jobs.migrate()
    scheduler = jobs.scheduler(poll_interval=0.05)
    task = scheduler.start()
    await asyncio.wait_for(pool.close(), 10)
    with pytest.raises(PoolClosed, match="the scheduler was closed while it ran: it stopped"):
        await asyncio.wait_for(task, 10)
