"""History at scale: `./run bench-scale [N]` (default 10,000,000 finished jobs).

Two schemas on one server: one empty, one holding N finished jobs of one queue finished over
ten days (bench/history.py: the engine's row shape, where GC keeps them, counted as the
engine counts), vacuumed once written (as autovacuum leaves a table a while after a bulk
write). Measured:

- processing 10,000 no-op jobs at concurrency 10 in each, interleaved (empty, history, three
  times), as the ratio of the medians: what the history costs the hot path;
- the reads that grow with history in the history schema: ``queue_stats``, ``substate_counts``
  of every queue, the dashboard's overview and the history queue's page (server time, median
  of 7 in-process requests);
- pruning the oldest day of history as GC does (``drop_history``: the day's partition
  dropped), its time, and the tables' size before and after;
- what moving costs: a day's completed jobs (N/10, at most MOVED_AT_MOST) finished in
  ``jobs_live`` and moved by GC to their day's partition, in jobs per second;
- ten simulated days of retention at a steady rate (N/10 jobs a day, at most
  STEADY_AT_MOST; each day's jobs added, then GC keeping a day: the days past it dropped,
  the dead jobs past it deleted; then a plain VACUUM as autovacuum would run): the tables'
  size each day.

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
from pgjobs.maintenance import GcInput, collect_garbage, drop_history, move_to_history

DAY = 86_400
JOBS = 10_000
REQUESTS = 7
MOVED_AT_MOST = 2_000_000
STEADY_AT_MOST = 1_000_000


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


async def _moving_rate(pool: object, size: int, tag: str) -> tuple[int, float]:
    """A day's completed jobs finished in jobs_live and moved by GC: how many, and the jobs
    per second of the move (partition creation included)."""
    moving = await JobQueue.connect(pool=pool, schema=f"scale_moving_{tag}")  # type: ignore[arg-type]
    await moving.migrate()
    try:
        schema = moving.db.schema
        await moving.pool.execute(  # counted as the engine counts them
            f"WITH ins AS (INSERT INTO {schema}.jobs (queue, kind, name, payload, output, status,"
            " max_attempts, attempts, backoff, created_at, started_at, finished_at)"
            " SELECT 'moving', 'noop', 'noop', jsonb_build_object('i', g), 'null', 'completed',"
            " 1, 1, '{}', now() - interval '2 days', now() - interval '2 days',"
            " now() - interval '1 day' - make_interval(secs => g::float8 / $1 * 3600)"
            " FROM generate_series(1, $1) AS g RETURNING 1)"
            f" INSERT INTO {schema}.finished_counts (queue, status, n)"
            " SELECT 'moving', 'completed', count(*) FROM ins",
            size,
        )
        await moving.pool.execute(f"VACUUM (ANALYZE) {schema}.jobs")
        started = time.perf_counter()
        moved = await move_to_history(
            moving.db, GcInput(history_after=3600, completed_after=30 * DAY, batch=50_000)
        )
        return int(moved or 0), time.perf_counter() - started
    finally:
        await pool.execute(f"DROP SCHEMA {moving.db.schema} CASCADE")  # type: ignore[attr-defined]


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

        # The oldest day is partial (the history starts within it): dropped first, not timed.
        # Then the next, a whole day, past retention as it is after midnight.
        days = [
            r["d"]
            for r in await full.pool.fetch(f"SELECT d FROM {full.db.schema}.history_days() d")
        ]
        before = 0.0
        for day, timed in ((days[0], False), (days[1], True)):
            end = datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC)
            gc = GcInput(completed_after=(datetime.now(UTC) - end).total_seconds() - 60)
            if timed:
                before = await _size_mib(full)
            started = time.perf_counter()
            dropped, _ = await drop_history(full.db, gc)
        prune_seconds = time.perf_counter() - started
        after = await _size_mib(full)

        print(f"\n| measure ({size:,} finished jobs) | value |\n| --- | ---: |")
        print(f"| processing 10k at c=10: history / empty | {ratio:.2f}× "
              f"({statistics.median(rates['history']):,.0f} / "
              f"{statistics.median(rates['empty']):,.0f} jobs/s) |")  # fmt: skip
        for label, ms in reads.items():
            print(f"| {label} | {ms:,.1f} ms |")
        print(f"| pruning a whole day ({sum(dropped.values()):,} rows, its partition dropped) "
              f"| {prune_seconds * 1000:,.0f} ms |")  # fmt: skip
        print(f"| tables before / after pruning | {before:,.0f} / {after:,.0f} MiB |")
        moved, move_seconds = await _moving_rate(pool, min(max(size // 10, 1), MOVED_AT_MOST), tag)
        print(f"| GC moving {moved:,} completed jobs to their day | {move_seconds:,.1f} s, "
              f"{moved / move_seconds:,.0f} jobs/s |")  # fmt: skip

        # ten simulated days at a steady rate, retention keeping a day
        per_day = min(max(size // 10, 1), STEADY_AT_MOST)
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
                kept = ago + DAY  # GC as a job would run it: moves, drops, deletes
                await collect_garbage(
                    steady.db,
                    GcInput(completed_after=kept, dead_after=kept, cancelled_after=kept),
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
