"""A worker whose LISTEN never hears anything (behind a transaction-mode pooler such as
pgbouncer, notifications do not arrive) says so once, instead of silently running at the poll
interval's latency."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pgjobs import JobContext, JobQueue, Registry, Status
from tests.helpers import eventually

WARNING = "new jobs are reaching this worker only by polling"


@pytest.fixture
def quiet(registry: Registry) -> Registry:
    @registry.kind("tick", input=dict, queue="quiet")
    async def tick(ctx: JobContext, data: dict) -> None:
        return None

    return registry


async def _unannounced_job(jobs: JobQueue) -> int:
    """A job written without the enqueue's notification, as a pooler that drops LISTEN would
    leave the worker, due (and created) 0.2 s after it is written: only a poll can find it,
    never a claim the worker happens to run just as it is written (after finishing the
    previous job, say), which would not count as one found by polling."""
    return int(
        await jobs.db.pool.fetchval(
            f"INSERT INTO {jobs.schema}.jobs"
            " (queue, kind, name, payload, max_attempts, backoff, run_at, created_at)"
            " SELECT 'quiet', 'tick', 'tick', '{}', 1, '{}', due, due"
            " FROM (SELECT now() + interval '0.2 seconds' AS due) d RETURNING id"
        )
    )


async def _listening(jobs: JobQueue) -> bool:
    """The worker reports itself once its LISTEN is in place."""
    return bool(await jobs.list_workers("quiet"))


async def _completed(jobs: JobQueue, job_id: int) -> bool:
    row = await jobs.get(job_id)
    return row is not None and row.status is Status.COMPLETED


async def _warnings_after(
    jobs: JobQueue, caplog: pytest.LogCaptureFixture, *, announce: bool
) -> list[str]:
    """Run a polling worker through five unannounced jobs (after one announced job, with
    ``announce``; without, its LISTEN hears nothing, as behind a pooler: neither the probe it
    sends itself at start nor any queue notification reaches it); the LISTEN warnings it
    logged."""
    caplog.set_level(logging.WARNING, logger="pgjobs.worker")
    worker = jobs.worker(queues=["quiet"], poll_interval=0.05)
    if not announce:
        worker._on_notify = lambda payload: None  # type: ignore[method-assign]
        worker._on_handoff = lambda payload: None  # type: ignore[method-assign]
    running = asyncio.create_task(worker.run())
    await eventually(lambda: _listening(jobs))
    if announce:  # an ordinary enqueue: its notification shows that LISTEN works
        first = await jobs.enqueue("tick", {})
        await eventually(lambda: _completed(jobs, first.id))
    for _ in range(5):
        job_id = await _unannounced_job(jobs)
        await eventually(lambda job_id=job_id: _completed(jobs, job_id))
    await worker.stop()
    await running
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


async def test_jobs_found_only_by_polling_raise_one_warning(
    jobs: JobQueue, quiet: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    warnings = await _warnings_after(jobs, caplog, announce=False)
    assert len(warnings) == 1 and "pgbouncer" in warnings[0]


async def test_a_worker_that_hears_notifications_never_warns(
    jobs: JobQueue, quiet: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    assert await _warnings_after(jobs, caplog, announce=True) == []
