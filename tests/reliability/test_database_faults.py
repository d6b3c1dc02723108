"""Database faults: the PostgreSQL server crashed and restarted mid-run, and the worker's LISTEN
connection dropped. Workers reconnect with backoff, say so in the log, lose nothing, and resume.

The restart runs against a private cluster (see private_postgres.py), never the shared one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

import pgjobs.events
from pgjobs import EventStream, JobContext, JobQueue, JobSpec, Registry
from pgjobs.executor import TRANSIENT_ERRORS
from tests.helpers import eventually
from tests.reliability.figures import Figure, record, seconds
from tests.reliability.private_postgres import PrivateServer

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

JOBS = 3_000


async def _count(dsn: str, sql: str) -> int | None:
    """A count on a fresh connection, or None while the server is down."""
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return None
    try:
        return int(await conn.fetchval(sql))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return None
    finally:
        await conn.close()


async def test_server_restarts_lose_nothing_and_workers_resume(
    private_server: PrivateServer, private_jobs: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = private_jobs
    caplog.set_level(logging.WARNING, logger="pgjobs")
    await jobs.db.pool.execute(
        "CREATE TABLE faults.effects (job_id bigint NOT NULL, attempt int NOT NULL)"
    )

    @jobs.registry.kind("fenced", input=dict[str, int], max_attempts=50)
    async def fenced(ctx: JobContext, data: dict[str, int]) -> None:
        await asyncio.sleep(0.002)
        async with ctx.completing(output=data["n"]) as conn:
            await conn.execute("INSERT INTO faults.effects VALUES ($1, $2)", ctx.id, ctx.attempts)

    await jobs.enqueue_many([JobSpec("fenced", {"n": i}) for i in range(JOBS)])
    done_sql = "SELECT count(*) FROM faults.jobs WHERE status = 'completed'"
    workers = [jobs.worker(concurrency=10, lease=3, poll_interval=0.5) for _ in range(2)]
    tasks = [worker.start() for worker in workers]
    recoveries: list[float] = []
    try:
        for target, mode in ((JOBS // 4, "immediate"), (JOBS // 2, "fast")):

            async def reached(target: int = target) -> bool:
                return (await _count(private_server.dsn, done_sql) or 0) >= target

            await eventually(reached, timeout=120, interval=0.05)
            await asyncio.to_thread(private_server.restart, mode)
            back_up = time.monotonic()
            before = await _count(private_server.dsn, done_sql)
            assert before is not None

            async def progressed(before: int = before) -> bool:
                return (await _count(private_server.dsn, done_sql) or 0) > before

            await eventually(progressed, timeout=60, interval=0.02)
            recoveries.append(time.monotonic() - back_up)

        async def all_done() -> bool:
            return await _count(private_server.dsn, done_sql) == JOBS

        await eventually(all_done, timeout=180, interval=0.1)
    finally:
        for worker in workers:
            await worker.stop()
        for task in tasks:
            await task
    statuses = await jobs.db.pool.fetch(
        "SELECT status, count(*) AS n FROM faults.jobs GROUP BY status"
    )
    assert {r["status"]: r["n"] for r in statuses} == {"completed": JOBS}
    per_job = await jobs.db.pool.fetch(
        "SELECT j.id, count(e.job_id) AS n FROM faults.jobs j"
        " LEFT JOIN faults.effects e ON e.job_id = j.id GROUP BY j.id"
    )
    assert {r["n"] for r in per_job} == {1}  # every effect recorded, and exactly once
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("LISTEN" in m and "reconnecting" in m for m in warnings), warnings[:20]
    assert any("failed" in m and "retrying" in m for m in warnings), warnings[:20]
    record(
        Figure(
            scenario="PostgreSQL server restarted mid-run (2 workers)",
            faults="1 crash (immediate stop) + 1 fast restart",
            jobs=JOBS,
            lost=0,
            duplicated="fenced effects 0",
            recovery="first completion after the server is back: " + seconds(recoveries),
        )
    )


async def _hold_off_the_wal_writer(server: PrivateServer) -> None:
    """Asynchronous commits stay in WAL buffers for 10 s (and no autovacuum commits durably
    meanwhile), so that a crash now loses them and hands their transaction ids out again."""
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        await admin.execute("ALTER SYSTEM SET autovacuum = off")
        await admin.execute("SELECT pg_reload_conf()")
    finally:
        await admin.close()


async def _stop_the_wal_writer(server: PrivateServer) -> None:
    """SIGSTOP the WAL writer until the server is killed: asynchronous commits then stay in
    PostgreSQL's WAL buffers whatever else is written (left running, even with a long delay,
    it writes out every WAL page that fills, and with it any commit before the page's end), so
    ``server.kill()`` loses every one of them."""
    admin = await asyncpg.connect(server.dsn)
    try:
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'"
        )
    finally:
        await admin.close()
    assert pid is not None, "no WAL writer process"
    os.kill(pid, signal.SIGSTOP)


async def _burn_transaction_ids(server: PrivateServer, count: int) -> int:
    """Commit ``count`` transactions that take an id and write nothing else (so no WAL flush);
    the next id to be handed out."""
    conn = await asyncpg.connect(server.dsn)
    try:
        for _ in range(count):
            await conn.fetchval("SELECT pg_current_xact_id()")
        return int(await conn.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())"))
    finally:
        await conn.close()


REGISTERED = (
    "SELECT (SELECT count(*) FROM faults.idle_workers)"
    " + (SELECT count(*) FROM faults.event_readers)"
)


@contextlib.asynccontextmanager
async def _pinging_worker(jobs: JobQueue, **options: Any) -> AsyncIterator[asyncio.Queue[int]]:
    """Kind "ping" (each run puts its input's n on the queue yielded) and a worker running it,
    stopped on the way out; the stream the caller opened inside is closed first."""
    ran: asyncio.Queue[int] = asyncio.Queue()

    @jobs.registry.kind("ping", input=dict[str, int])
    async def ping(ctx: JobContext, data: dict[str, int]) -> None:
        ran.put_nowait(data["n"])

    worker = jobs.worker(**options)
    task = worker.start()
    try:
        yield ran
    finally:
        await worker.stop()
        await task


async def test_after_a_server_crash_waiting_workers_and_event_streams_are_woken_again(
    private_server: PrivateServer,
    private_jobs: JobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crash empties the unlogged registrations (idle_workers, event_readers), and writes
    notify only the queues someone is registered on. A waiting worker and an open event
    stream register again once their LISTEN is back, so the first job written after the
    crash wakes them both: the worker polls only every 10 minutes here, the stream renews its
    registration only every 20 minutes, and the write's notification on the events channel is
    seen by a connection listening beside them.

    The crash also hands out again the 50 transaction ids burnt just before the stream starts
    (nothing reached the disk after them): the stream's start, which its snapshot fixes, is
    followed by a durable write, so the first write after the crash still comes after it."""
    jobs = private_jobs
    monkeypatch.setattr(pgjobs.events, "IDLE_POLL_SECONDS", 600.0)
    monkeypatch.setattr(pgjobs.events, "READER_TTL_SECONDS", 3600.0)
    await _hold_off_the_wal_writer(private_server)
    async with _pinging_worker(jobs, poll_interval=600) as started:
        stream = jobs.events(["default"])
        try:
            await eventually(lambda: _count(private_server.dsn, REGISTERED + " = 1"), timeout=20)
            await _burn_transaction_ids(private_server, 50)
            await stream.start()
            await eventually(lambda: _count(private_server.dsn, REGISTERED + " = 2"), timeout=20)
            await asyncio.to_thread(private_server.restart, "immediate")
            await eventually(
                lambda: _count(private_server.dsn, REGISTERED + " = 2"), timeout=60, interval=0.05
            )
            heard: list[str] = []
            sentinel = asyncio.Event()
            listener = await asyncpg.connect(private_server.dsn)

            def on_event(_c: object, _p: int, _channel: str, payload: str) -> None:
                if payload == "sentinel":
                    sentinel.set()
                else:
                    heard.append(payload)

            try:
                await listener.add_listener("faults_events", on_event)
                job = await jobs.enqueue("ping", {"n": 1}, events=True)
                await listener.execute("NOTIFY faults_events, 'sentinel'")
                await asyncio.wait_for(sentinel.wait(), 20)
            finally:
                await listener.close()
            assert heard == ["default"]  # the stream's registration was back: the write woke it
            assert await asyncio.wait_for(started.get(), 30) == 1  # and the worker, by notification
            event = await asyncio.wait_for(anext(stream), 30)
            assert (event.event, event.job_id) == ("added", job.id)
        finally:
            await stream.close()


async def test_an_event_stream_reads_what_follows_a_crash_that_lost_what_it_had_read(
    private_server: PrivateServer, private_jobs: JobQueue
) -> None:
    """A stream delivers the events of a job written and run with Durability.ASYNC; the crash
    loses them (they never reached the disk) and hands their transaction ids out again, so the
    job written after the crash gets ids older than the stream's position. The stream sees the
    new incarnation, goes back to its last position on disk, and delivers the new job's
    events: nothing after the crash is skipped."""
    jobs = private_jobs
    await _hold_off_the_wal_writer(private_server)  # no autovacuum
    async with _pinging_worker(jobs, durability="async") as done:
        stream = jobs.events(["default"])
        try:
            await stream.start()  # its durable write is the last before the crash
            await _stop_the_wal_writer(private_server)
            lost = await jobs.enqueue("ping", {"n": 0}, events=True, durability="async")
            before = [await asyncio.wait_for(anext(stream), 30) for _ in range(3)]
            lifecycle = ["added", "active", "completed"]
            assert [(e.event, e.job_id) for e in before] == [(name, lost.id) for name in lifecycle]
            assert await done.get() == 0
            await _burn_transaction_ids(private_server, 50)
            await asyncio.to_thread(private_server.kill)
            await asyncio.to_thread(private_server.start)
            assert await _count(private_server.dsn, "SELECT count(*) FROM faults.jobs") == 0  # lost
            job = await jobs.enqueue("ping", {"n": 1}, events=True)
            after = [await asyncio.wait_for(anext(stream), 30) for _ in range(3)]
            assert [(e.event, e.job_id) for e in after] == [(name, job.id) for name in lifecycle]
            position = int(before[-1].cursor.split(":")[0])
            assert int(after[0].cursor.split(":")[0]) < position  # an id handed out again
        finally:
            await stream.close()


async def test_an_event_stream_misses_nothing_through_three_crashes_under_load(
    private_server: PrivateServer, private_jobs: JobQueue
) -> None:
    """Stress: a producer enqueues jobs that record events, one in ten durable and the rest
    async (with the WAL writer held off, so each crash loses the async ones since the last
    durable one and hands their ids out again), while an event stream is read, and the server
    crashes three times under it. The stream rides through (its reads are retried) and, at the
    end, has delivered the 'added' event of every job that survived (a crash may repeat events,
    never skip one); every durable enqueue that was acknowledged survived."""
    jobs = private_jobs
    await _hold_off_the_wal_writer(private_server)

    @jobs.registry.kind("ping", input=dict[str, int])
    async def ping(ctx: JobContext, data: dict[str, int]) -> None:
        pass

    acknowledged: list[int] = []
    durable: set[int] = set()
    delivered: set[int | None] = set()
    repeated = 0
    stopping = asyncio.Event()

    async def produce() -> None:
        n = 0
        while not stopping.is_set():
            n += 1
            level = "durable" if n % 10 == 0 else "async"
            try:
                job = await jobs.enqueue("ping", {"n": n}, events=True, durability=level)
            except TRANSIENT_ERRORS:
                await asyncio.sleep(0.05)  # the server is restarting: try the next one
                continue
            acknowledged.append(job.id)
            if level == "durable":
                durable.add(job.id)

    async def consume(stream: EventStream) -> None:
        nonlocal repeated
        async for event in stream:
            if event.event == "added":
                repeated += event.job_id in delivered
                delivered.add(event.job_id)

    stream = jobs.events(["default"])
    await stream.start()
    reader = asyncio.ensure_future(consume(stream))
    producer = asyncio.ensure_future(produce())
    try:

        async def two_hundred_more() -> None:
            target = len(acknowledged) + 200
            await eventually(lambda: asyncio.sleep(0, len(acknowledged) >= target), timeout=60)

        for _ in range(3):
            await two_hundred_more()
            await asyncio.to_thread(private_server.restart, "immediate")
        await two_hundred_more()
        stopping.set()
        await producer
        last = await jobs.enqueue("ping", {"n": -1}, events=True)
        await eventually(lambda: asyncio.sleep(0, last.id in delivered), timeout=60)
        conn = await asyncpg.connect(private_server.dsn)
        try:
            survived = {r["id"] for r in await conn.fetch("SELECT id FROM faults.jobs")}
        finally:
            await conn.close()
        assert durable <= survived  # durable enqueues lose nothing
        assert survived <= delivered  # and the stream skipped none of what survived
        assert len(survived) >= 800
        record(
            Figure(
                scenario="event stream read through server crashes, under a producer of "
                "1 durable and 9 async enqueues in 10",
                faults="3 crashes (immediate stop; WAL writer held off 10 s)",
                jobs=len(acknowledged) + 1,
                lost=len(survived - delivered),
                duplicated=f"{repeated} 'added' events delivered again (the moments before a "
                f"crash); {len(set(acknowledged) - survived)} acknowledged async enqueues lost "
                "by the crashes, as async allows",
                recovery="every surviving job's 'added' event delivered; every acknowledged "
                "durable enqueue survived",
            )
        )
    finally:
        stopping.set()
        await stream.close()
        await asyncio.gather(reader, producer, return_exceptions=True)


async def test_a_dropped_listen_connection_comes_back_and_wakes_the_worker(
    jobs: JobQueue, registry: Registry, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the safety-net poll at 10 minutes, only a notification can start a job within the
    test's deadline: jobs enqueued after each drop prove the LISTEN is back."""
    caplog.set_level(logging.INFO, logger="pgjobs.notifier")
    started: asyncio.Queue[int] = asyncio.Queue()

    @registry.kind("ping", input=dict[str, int])
    async def ping(ctx: JobContext, data: dict[str, int]) -> None:
        started.put_nowait(data["n"])

    worker = jobs.worker(concurrency=2, poll_interval=600)
    task = worker.start()
    observer = await asyncpg.connect(pg_dsn)
    listening = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()"
    )
    recoveries: list[float] = []
    drops = 3
    try:
        first = await eventually(lambda: observer.fetchval(listening))
        await jobs.enqueue("ping", {"n": -1})
        assert await asyncio.wait_for(started.get(), 20) == -1
        for n in range(drops):
            old = await observer.fetchval(listening)
            assert await observer.fetchval("SELECT pg_terminate_backend($1)", old)
            dropped = time.monotonic()

            async def relistening(old: int = old) -> int | None:
                pid = await observer.fetchval(listening)
                return pid if pid not in (None, old) else None

            await eventually(relistening)
            recoveries.append(time.monotonic() - dropped)
            await jobs.enqueue("ping", {"n": n})
            assert await asyncio.wait_for(started.get(), 20) == n
        assert first is not None
    finally:
        await observer.close()
        await worker.stop()
        await task
    messages = [r.getMessage() for r in caplog.records]
    assert sum("re-established" in m for m in messages) == drops, messages
    assert worker.stats.completed == drops + 1
    record(
        Figure(
            scenario="worker's LISTEN connection terminated (poll at 10 min)",
            faults=f"{drops} pg_terminate_backend",
            jobs=drops + 1,
            lost=0,
            duplicated="0",
            recovery="LISTEN back: " + seconds(recoveries),
        )
    )


async def test_a_worker_started_while_the_server_is_down_waits_for_it(
    private_server: PrivateServer, private_jobs: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """Starting needs the database (the schema check): a worker started during an outage keeps
    retrying, says so, and works once the server is back, instead of dying at start."""
    jobs = private_jobs
    caplog.set_level(logging.WARNING, logger="pgjobs.worker")
    done: asyncio.Queue[int] = asyncio.Queue()

    @jobs.registry.kind("after_outage", input=dict[str, int])
    async def after_outage(ctx: JobContext, data: dict[str, int]) -> None:
        done.put_nowait(data["n"])

    await asyncio.to_thread(private_server.stop, "fast")
    worker = jobs.worker(concurrency=1, poll_interval=0.5)
    task = worker.start()
    try:

        async def retrying() -> bool:
            return any("schema check failed" in r.getMessage() for r in caplog.records)

        await eventually(retrying)
        assert not task.done()  # still trying, not dead
        await asyncio.to_thread(private_server.start)
        await jobs.enqueue("after_outage", {"n": 7})
        assert await asyncio.wait_for(done.get(), 30) == 7
    finally:
        await worker.stop()
        await task
    assert worker.stats.completed == 1


async def test_a_worker_stopped_during_an_outage_returns(
    private_server: PrivateServer, private_jobs: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """stop() ends a worker still waiting for the database to start, without an error."""
    caplog.set_level(logging.WARNING, logger="pgjobs.worker")

    @private_jobs.registry.kind("never", input=dict[str, int])
    async def never(ctx: JobContext, data: dict[str, int]) -> None: ...

    await asyncio.to_thread(private_server.stop, "fast")
    worker = private_jobs.worker()
    task = worker.start()

    async def retrying() -> bool:
        return any("schema check failed" in r.getMessage() for r in caplog.records)

    await eventually(retrying)
    await asyncio.wait_for(worker.stop(), 10)
    assert task.done() and task.exception() is None
