"""Failover to a synchronous streaming replica: the primary stopped hard, the standby promoted,
and producers and a worker on a multi-host DSN (``target_session_attrs=read-write``) that
follow it. No acknowledged add is lost (synchronous replication: an acknowledged commit is on
the standby), no job runs twice beyond the jobs in flight at the crash, and the worker resumes
on the new primary. Two private clusters, never the shared server."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import asyncpg
import pytest

from pgjobs import TRANSIENT_ERRORS, JobContext, JobQueue, Registry
from tests.helpers import eventually
from tests.reliability.figures import Figure, record, seconds
from tests.reliability.private_postgres import PrivateServer, primary_and_standby

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

SCHEMA = "failover"
CONCURRENCY = 4


@pytest.fixture
def pair() -> Iterator[tuple[PrivateServer, PrivateServer]]:
    with primary_and_standby() as servers:
        yield servers


async def _make_synchronous(primary: PrivateServer) -> None:
    conn = await asyncpg.connect(primary.dsn)
    try:
        await conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        await conn.execute("SELECT pg_reload_conf()")
        query = "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
        await eventually(lambda: _equals(conn.fetchval(query), "sync"), timeout=30)
    finally:
        await conn.close()


async def _equals(value: object, expected: object) -> bool:
    return await value == expected  # type: ignore[misc]


@pytest.mark.timeout(240)
async def test_a_promoted_synchronous_standby_takes_over_with_nothing_lost(
    pair: tuple[PrivateServer, PrivateServer],
) -> None:
    primary, standby = pair
    await _make_synchronous(primary)
    dsn = (
        f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/postgres"
        "?target_session_attrs=read-write"
    )
    registry = Registry()
    runs: Counter[int] = Counter()

    @registry.kind("pay", input=dict[str, int], max_attempts=50)
    async def pay(ctx: JobContext, data: dict[str, int]) -> None:
        runs[ctx.id] += 1
        await asyncio.sleep(0.005)
        async with ctx.completing() as conn:  # the effect commits with the completion
            await conn.execute(f"INSERT INTO {SCHEMA}.effects VALUES ($1)", ctx.id)

    jobs = await JobQueue.connect(dsn, schema=SCHEMA, registry=registry)
    await jobs.migrate()
    await jobs.pool.execute(f"CREATE TABLE {SCHEMA}.effects (job_id bigint NOT NULL)")
    worker = jobs.worker(concurrency=CONCURRENCY)
    task = worker.start()
    acknowledged: list[int] = []
    stop_producing = asyncio.Event()

    async def produce() -> None:
        n = 0
        while not stop_producing.is_set():
            try:
                acknowledged.append((await jobs.enqueue("pay", {"n": n})).id)
                n += 1
            except TRANSIENT_ERRORS:
                await asyncio.sleep(0.05)  # the primary is gone: try again, on whoever is one
            await asyncio.sleep(0.002)

    producer = asyncio.create_task(produce())
    try:
        await eventually(lambda: _done(worker, 200), timeout=60)
        primary.stop("immediate")  # the primary's host is gone, mid-load
        crashed = time.monotonic()
        standby.promote()
        promoted = time.monotonic() - crashed
        before = worker.stats.completed
        await eventually(lambda: _done(worker, before + 1), timeout=60)
        resumed = time.monotonic() - crashed
        settled = len(acknowledged)
        await eventually(lambda: _done(worker, before + 200), timeout=60)
        stop_producing.set()
        await producer
        await eventually(lambda: _all_finished(jobs, acknowledged), timeout=60)
    finally:
        stop_producing.set()
        await asyncio.gather(producer, return_exceptions=True)
        await worker.stop()
        await task
    try:
        rows = await jobs.pool.fetch(
            f"SELECT id, status FROM {SCHEMA}.jobs WHERE id = ANY($1::bigint[])", acknowledged
        )
        effects = Counter(
            r["job_id"] for r in await jobs.pool.fetch(f"SELECT job_id FROM {SCHEMA}.effects")
        )
    finally:
        await jobs.close()
    assert len(rows) == len(acknowledged), "an acknowledged add was lost"
    assert {r["status"] for r in rows} == {"completed"}
    assert all(effects[i] == 1 for i in acknowledged), "a fenced effect was written twice"
    run_twice = [i for i, count in runs.items() if count > 1]
    assert len(run_twice) <= CONCURRENCY, run_twice  # only jobs in flight at the crash
    assert settled > 200
    record(
        Figure(
            scenario="failover to a promoted synchronous standby (multi-host DSN, 1 worker)",
            faults="primary stopped hard mid-load, standby promoted",
            jobs=len(acknowledged),
            lost=0,
            duplicated=f"fenced effects 0; {len(run_twice)} jobs run twice (in flight)",
            recovery=f"promoted in {promoted:.2f} s; crash → first completion on the new "
            f"primary: {seconds([resumed])}",
        )
    )


async def _done(worker: object, count: int) -> bool:
    return bool(worker.stats.completed >= count)  # type: ignore[attr-defined]


async def _all_finished(jobs: JobQueue, ids: list[int]) -> bool:
    left = await jobs.pool.fetchval(
        f"SELECT count(*) FROM {SCHEMA}.jobs WHERE id = ANY($1::bigint[]) AND status <> 'completed'",
        ids,
    )
    return left == 0
