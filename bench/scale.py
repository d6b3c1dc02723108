"""History at scale: `./run bench-scale [N]` (default 10,000,000 finished jobs).

Two schemas on one server: one empty, one holding N finished jobs of one queue finished over
ten days (bench/history.py: the engine's row shape, counted as the engine counts), vacuumed
once written (as autovacuum leaves a table a while after a bulk write). Measured:

- processing 10,000 no-op jobs at concurrency 10 in each, interleaved (empty, history, three
  times), as the ratio of the medians: what the history costs the hot path;
- the reads that grow with history in the history schema: ``queue_stats``, ``substate_counts``
  of every queue, the dashboard's overview and the history queue's page (server time, median
  of 7 in-process requests);
- pruning the oldest day of history as retention does today (``purge`` with
  ``finished_before``: a DELETE), its time, and the tables' size before and after;
- the bound of pruning by dropping: the same history copied into a table partitioned by day
  of finish, one day's partition dropped (its time and the space it gives back);
- ten simulated days of retention at a steady rate (N/10 jobs a day, each day's jobs added
  and every job older than a day pruned, then a plain VACUUM as autovacuum would run): the
  tables' size each day.

Prints Markdown; the figures go on docs/performance.md.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pydantic

from bench.history import top_up_history
from pgjobs import JobContext, JobFilter, JobQueue, JobSpec, Registry, create_pool
from pgjobs.dashboard import create_app
from pgjobs.devserver import find_or_start_postgres

DAY = 86_400
JOBS = 10_000
REQUESTS = 7


class Noop(pydantic.BaseModel):
    i: int


def noop_registry() -> Registry:
    """A registry of one no-op kind, ``noop``, on queue ``work``."""
    registry = Registry()

    @registry.kind("noop", input=Noop, queue="work")
    async def noop(ctx: JobContext, data: Noop) -> None:
        return None

    return registry


async def _process(jobs: JobQueue) -> float:
    """Jobs per second of one worker (concurrency 10) taking JOBS no-op jobs."""
    for offset in range(0, JOBS, 1000):
        await jobs.enqueue_many(JobSpec("noop", {"i": i}) for i in range(offset, offset + 1000))
    await jobs.pool.execute(f"VACUUM ANALYZE {jobs.db.schema}.jobs")
    worker = jobs.worker(queues=["work"], concurrency=10)
    started = time.perf_counter()
    await worker.run(until_drained=True)
    elapsed = time.perf_counter() - started
    assert worker.stats.completed == JOBS, worker.stats
    await jobs.purge(JobFilter(queue="work"))  # leave the history as it was
    return JOBS / elapsed


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    """The median of REQUESTS calls, in ms."""
    samples = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def _size_mib(jobs: JobQueue) -> float:
    size = await jobs.pool.fetchval(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind = 'r'",
        jobs.db.schema,
    )
    return float(size or 0) / 2**20


async def _drop_bound(jobs: JobQueue, oldest: datetime) -> tuple[int, float, float]:
    """What pruning by dropping would cost: the history copied into a table partitioned by
    day of finish (with the jobs table's primary key and finish-time index per partition),
    then the day after ``oldest`` dropped. Its rows, the seconds the DROP took, the MiB it
    gave back. The copy is dropped afterwards."""
    schema = jobs.db.schema
    start = oldest.replace(hour=0, minute=0, second=0, microsecond=0)
    days = 12
    await jobs.pool.execute(
        f"CREATE TABLE {schema}.history_by_day (LIKE {schema}.jobs INCLUDING DEFAULTS)"
        " PARTITION BY RANGE (finished_at)"
    )
    try:
        for day in range(days):
            low, high = start + timedelta(days=day), start + timedelta(days=day + 1)
            await jobs.pool.execute(
                f"CREATE TABLE {schema}.history_day_{day} PARTITION OF {schema}.history_by_day"
                f" FOR VALUES FROM ('{low.isoformat()}') TO ('{high.isoformat()}')"
            )
        await jobs.pool.execute(
            f"INSERT INTO {schema}.history_by_day SELECT * FROM {schema}.jobs"
            " WHERE finished_at >= $1 AND finished_at < $2",
            start,
            start + timedelta(days=days),
        )
        await jobs.pool.execute(
            f"ALTER TABLE {schema}.history_by_day ADD PRIMARY KEY (id, finished_at)"
        )
        await jobs.pool.execute(
            f"CREATE INDEX ON {schema}.history_by_day (queue, status, finished_at, id)"
        )
        victim = f"{schema}.history_day_1"
        rows = await jobs.pool.fetchval(f"SELECT count(*) FROM {victim}")
        size = await jobs.pool.fetchval(f"SELECT pg_total_relation_size('{victim}')")
        started = time.perf_counter()
        await jobs.pool.execute(f"DROP TABLE {victim}")
        return int(rows), time.perf_counter() - started, float(size) / 2**20
    finally:
        await jobs.pool.execute(f"DROP TABLE IF EXISTS {schema}.history_by_day")


async def main(size: int) -> None:
    dsn = find_or_start_postgres()
    pool = await create_pool(dsn, min_size=4, max_size=20)
    tag = uuid.uuid4().hex[:8]
    empty = await JobQueue.connect(pool=pool, schema=f"scale_empty_{tag}", registry=noop_registry())
    full = await JobQueue.connect(pool=pool, schema=f"scale_full_{tag}", registry=noop_registry())
    began = time.perf_counter()
    try:
        for jobs in (empty, full):
            await jobs.migrate()
        await full.describe_queue("bull:history", label="history", dialect="bullmq")
        await top_up_history(full, size, spread_seconds=10 * DAY)
        seeded = time.perf_counter() - began
        # settled, as autovacuum leaves a table some time after a bulk write: measured apart
        started = time.perf_counter()
        await pool.execute(f"VACUUM (ANALYZE) {full.db.schema}.jobs")
        vacuumed = time.perf_counter() - started
        print(f"{size:,} finished jobs written in {seeded:.0f} s, vacuumed in {vacuumed:.0f} s; "
              f"tables {await _size_mib(full):,.0f} MiB")  # fmt: skip

        rates: dict[str, list[float]] = {"empty": [], "history": []}
        for _ in range(3):
            rates["empty"].append(await _process(empty))
            rates["history"].append(await _process(full))
        ratio = statistics.median(rates["history"]) / statistics.median(rates["empty"])

        transport = httpx.ASGITransport(app=create_app(full))
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
            for path in ("/?refresh=0", "/queues/history?refresh=0"):
                assert (await client.get(path)).status_code == 200
            reads = {
                "queue_stats()": await _timed(full.queue_stats),
                "substate_counts(), every queue": await _timed(full.substate_counts),
                "dashboard overview": await _timed(lambda: client.get("/?refresh=0")),
                "dashboard, history queue": await _timed(
                    lambda: client.get("/queues/history?refresh=0")
                ),
            }

        before = await _size_mib(full)
        cutoff = datetime.now(UTC) - timedelta(seconds=9 * DAY)  # the oldest of ten days
        started = time.perf_counter()
        pruned = await full.purge(  # as retention does: no 'removed' events
            JobFilter(queue="bull:history", finished_before=cutoff), removed_events=False
        )
        prune_seconds = time.perf_counter() - started
        after = await _size_mib(full)

        print(f"\n| measure ({size:,} finished jobs) | value |\n| --- | ---: |")
        print(f"| processing 10k at c=10: history / empty | {ratio:.2f}× "
              f"({statistics.median(rates['history']):,.0f} / "
              f"{statistics.median(rates['empty']):,.0f} jobs/s) |")  # fmt: skip
        for label, ms in reads.items():
            print(f"| {label} | {ms:,.1f} ms |")
        print(
            f"| pruning the oldest day ({pruned.deleted:,} rows, DELETE) | {prune_seconds:,.1f} s |"
        )
        print(f"| tables before / after pruning | {before:,.0f} / {after:,.0f} MiB |")
        bound = await _drop_bound(full, cutoff)
        print(
            f"| the bound: the next day dropped from a copy partitioned by finish day "
            f"({bound[0]:,} rows) | {bound[1] * 1000:,.1f} ms, {bound[2]:,.0f} MiB returned |"
        )

        # ten simulated days at a steady rate, retention keeping one day
        per_day = max(size // 10, 1)
        steady = await JobQueue.connect(pool=pool, schema=f"scale_steady_{tag}")
        await steady.migrate()
        sizes = []
        try:
            for day in range(10):  # day 9 ends now
                ago = (9 - day) * DAY
                have = await steady.pool.fetchval(
                    f"SELECT count(*) FROM {steady.db.schema}.jobs WHERE queue = 'steady'"
                )
                await top_up_history(steady, have + per_day, queue="steady",
                                     spread_seconds=DAY, ended_seconds_ago=ago)  # fmt: skip
                kept_from = datetime.now(UTC) - timedelta(seconds=ago + DAY)
                await steady.purge(
                    JobFilter(queue="steady", finished_before=kept_from), removed_events=False
                )
                await steady.fold_finished_counts()  # as running workers do
                await steady.pool.execute(f"VACUUM {steady.db.schema}.jobs")
                sizes.append(await _size_mib(steady))
        finally:
            await pool.execute(f"DROP SCHEMA {steady.db.schema} CASCADE")
        print(f"\nretention keeping a day, {per_day:,} jobs a day: tables' size (MiB) by day: "
              + ", ".join(f"{s:,.0f}" for s in sizes))  # fmt: skip
        print(f"\nrun took {time.perf_counter() - began:,.0f} s")
    finally:
        for jobs in (empty, full):
            await pool.execute(f"DROP SCHEMA IF EXISTS {jobs.db.schema} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000))
