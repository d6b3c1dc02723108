"""Database faults seen through the facade: a Worker built during an outage, a connection
terminated while it starts, an add during an outage. Each waits the fault out and works once
the database answers, as BullMQ's objects wait for Redis; nothing is lost or written twice.
Runs against a private cluster (private_postgres.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
import pytest

from bullmq_compat import Job, Queue, Worker
from pgjobs import JobQueue
from tests.helpers import eventually
from tests.reliability.private_postgres import PrivateServer

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def _opts(server: PrivateServer) -> dict[str, Any]:
    return {"connection": server.dsn, "schema": "faults"}


async def test_a_worker_built_while_the_server_is_down_starts_when_it_is_up(
    private_server: PrivateServer,
    private_jobs: JobQueue,  # migrates the private server's schema
) -> None:
    await asyncio.to_thread(private_server.stop, "fast")
    done: asyncio.Queue[Any] = asyncio.Queue()

    async def process(job: Job, token: str) -> str:
        done.put_nowait(job.data)
        return "ok"

    errors: list[BaseException] = []
    worker = Worker("outage", process, _opts(private_server))
    worker.on("error", errors.append)
    try:
        await eventually(lambda: asyncio.sleep(0, len(errors) >= 2))  # retried, and said so
        assert worker.isRunning()
        await asyncio.to_thread(private_server.start)
        queue = Queue("outage", _opts(private_server))
        await queue.add("after", {"n": 1})
        assert await asyncio.wait_for(done.get(), 30) == {"n": 1}
        await queue.close()
    finally:
        await worker.close()
    assert all(
        isinstance(e, OSError | asyncpg.PostgresError | asyncpg.InterfaceError) for e in errors
    )


async def test_a_connection_terminated_while_the_worker_starts_is_retried(
    private_server: PrivateServer,
    private_jobs: JobQueue,
) -> None:
    """The worker's start-up writes its queue's settings: that write is held behind a lock
    another session takes, and its connection is terminated while it waits."""
    observer = await asyncpg.connect(private_server.dsn)
    await private_jobs.set_max_stalls("bull:terminated", 1)  # the row the start-up will update
    blocker = await asyncpg.connect(private_server.dsn)
    tx = blocker.transaction()
    await tx.start()
    await blocker.execute(
        "SELECT 1 FROM faults.queue_settings WHERE queue = 'bull:terminated' FOR UPDATE"
    )
    done: asyncio.Queue[Any] = asyncio.Queue()

    async def process(job: Job, token: str) -> None:
        done.put_nowait(job.id)

    errors: list[BaseException] = []
    worker = Worker("terminated", process, _opts(private_server))
    worker.on("error", errors.append)
    try:

        async def waiting_backend() -> int | None:
            return await observer.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                blocker.get_server_pid(),
            )

        pid = await eventually(waiting_backend)
        assert await observer.fetchval("SELECT pg_terminate_backend($1)", pid)
        await eventually(lambda: asyncio.sleep(0, bool(errors)))
        await tx.rollback()
        queue = Queue("terminated", _opts(private_server))
        job = await queue.add("x", {})
        assert await asyncio.wait_for(done.get(), 30) == job.id
        await queue.close()
    finally:
        await worker.close()
        await blocker.close()
        await observer.close()
    assert len(errors) >= 1


async def test_an_add_during_an_outage_waits_for_the_server(
    private_server: PrivateServer,
    private_jobs: JobQueue,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="bullmq_compat")
    queue = Queue("outage_add", _opts(private_server))
    await queue.add("before", {})  # the queue's pool is open
    await asyncio.to_thread(private_server.stop, "fast")
    adding = asyncio.create_task(queue.add("during", {"n": 2}, {"jobId": "during"}))

    async def retrying() -> bool:
        return any("retrying" in r.getMessage() for r in caplog.records)

    await eventually(retrying)
    assert not adding.done()
    await asyncio.to_thread(private_server.start)
    job = await asyncio.wait_for(adding, 60)
    assert job.id == "during"
    assert [j.name for j in await queue.getWaiting()] == ["before", "during"]
    await queue.close()
