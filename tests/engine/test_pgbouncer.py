"""Workers through a real pgbouncer in transaction pooling mode: with no prepared-statement
cache they enqueue, claim and finish; with ``listen_dsn`` their LISTEN goes straight to
PostgreSQL and wakes them at once; without it they say that notifications do not arrive and
keep working by polling."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from pgjobs import JobContext, JobQueue, Registry, Status
from tests.helpers import eventually
from tests.pgbouncer_server import pgbouncer

POLLING_WARNING = "new jobs are reaching this worker only by polling"


@pytest.fixture
def pooled_dsn(pg_dsn: str) -> AsyncIterator[str]:
    with pgbouncer(pg_dsn) as dsn:
        yield dsn


@pytest.fixture
def ticks(registry: Registry) -> list[int]:
    seen: list[int] = []

    @registry.kind("tick", input=dict, queue="pooled")
    async def tick(ctx: JobContext, data: dict) -> None:
        seen.append(data["n"])

    return seen


async def _through(
    pooled_dsn: str, jobs: JobQueue, registry: Registry, listen_dsn: str | None
) -> JobQueue:
    return await JobQueue.connect(
        pooled_dsn,
        schema=jobs.schema,
        registry=registry,
        statement_cache_size=0,
        listen_dsn=listen_dsn,
    )


async def _completed(jobs: JobQueue, job_id: int) -> bool:
    row = await jobs.get(job_id)
    return row is not None and row.status is Status.COMPLETED


async def test_a_worker_behind_pgbouncer_with_a_direct_listen_is_woken_at_once(
    jobs: JobQueue,
    registry: Registry,
    ticks: list[int],
    pooled_dsn: str,
    pg_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobs.worker")
    pooled = await _through(pooled_dsn, jobs, registry, listen_dsn=pg_dsn)
    try:
        # The poll interval is longer than the test may wait: only a notification can start
        # these jobs in time.
        worker = pooled.worker(queues=["pooled"], poll_interval=120)
        running = asyncio.create_task(worker.run())
        await eventually(lambda: pooled.list_workers("pooled"))
        for n in range(5):
            result = await pooled.enqueue("tick", {"n": n})
            await eventually(lambda result=result: _completed(pooled, result.id), timeout=30)
        bulk = await pooled.enqueue_batch("tick", [{"n": n} for n in range(5, 105)])
        await eventually(lambda: _completed(pooled, bulk[-1].id), timeout=30)
        await worker.stop()
        await running
    finally:
        await pooled.close()
    assert sorted(ticks) == list(range(105))
    assert not [r for r in caplog.records if POLLING_WARNING in r.getMessage()]


async def test_without_a_direct_listen_it_warns_and_keeps_working_by_polling(
    jobs: JobQueue,
    registry: Registry,
    ticks: list[int],
    pooled_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobs.worker")
    pooled = await _through(pooled_dsn, jobs, registry, listen_dsn=None)
    try:
        worker = pooled.worker(queues=["pooled"], poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        await eventually(lambda: pooled.list_workers("pooled"))
        for n in range(6):
            result = await pooled.enqueue("tick", {"n": n})
            await eventually(lambda result=result: _completed(pooled, result.id), timeout=30)
        await worker.stop()
        await running
    finally:
        await pooled.close()
    assert sorted(ticks) == list(range(6))
    warnings = [r.getMessage() for r in caplog.records if POLLING_WARNING in r.getMessage()]
    assert len(warnings) == 1 and "pgbouncer" in warnings[0]
