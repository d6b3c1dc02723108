"""Migration throughput: a BullMQ queue of N jobs (60% waiting, 30% delayed, 10% completed),
written by BullMQ's own client, drained into pgjobs. Prints jobs/s and the peak RSS of the
migrating process. `./run bench-migration [N]` (default 1,000,000); needs Redis and PostgreSQL
as the benchmark does."""

from __future__ import annotations

import asyncio
import resource
import sys
import time
import uuid
from typing import Any

import bullmq
import redis.asyncio as aioredis

from migration_tools import MigrationOptions, migrate
from pgjobs import JobQueue
from pgjobs.devserver import find_or_start_postgres

REDIS = "redis://127.0.0.1:6379/12"


async def seed(prefix: str, total: int) -> None:
    queue = bullmq.Queue("big", {"connection": REDIS, "prefix": prefix})
    completed = total // 10
    delayed = total * 3 // 10
    waiting = total - completed - delayed
    for start in range(0, completed, 1000):
        await queue.addBulk([{"name": "done", "data": {"i": i}}
                             for i in range(start, min(start + 1000, completed))])  # fmt: skip
    done = asyncio.Event()
    count = 0

    async def process(job: Any, token: Any) -> None:
        nonlocal count
        count += 1
        if count == completed:
            done.set()

    worker = bullmq.Worker("big", process, {"connection": REDIS, "prefix": prefix,
                                            "concurrency": 50})  # fmt: skip
    await asyncio.wait_for(done.wait(), 600)
    await worker.close()
    for start in range(0, delayed, 1000):
        await queue.addBulk([{"name": "later", "data": {"i": i, "pad": "x" * 40},
                              "opts": {"delay": 3_600_000 + i}}
                             for i in range(start, min(start + 1000, delayed))])  # fmt: skip
    for start in range(0, waiting, 1000):
        await queue.addBulk([{"name": "now", "data": {"i": i, "pad": "y" * 40},
                              "opts": {"priority": i % 3}}
                             for i in range(start, min(start + 1000, waiting))])  # fmt: skip
    await queue.close()


async def main(total: int) -> None:
    dsn = find_or_start_postgres()
    prefix = f"mbench{uuid.uuid4().hex[:6]}"
    schema = f"mbench_{uuid.uuid4().hex[:6]}"
    jobs = await JobQueue.connect(dsn, schema=schema)
    await jobs.migrate()
    print(f"seeding {total:,} jobs with BullMQ ...", flush=True)
    await seed(prefix, total)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    report = await migrate(MigrationOptions(redis_url=REDIS, postgres_dsn=dsn, schema=schema,
                                            prefixes=[prefix], include_history=True,
                                            batch_size=1000))  # fmt: skip
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(report.render().splitlines()[-1])
    print(f"migrated {report.written:,} jobs in {elapsed:.1f} s: {report.written / elapsed:,.0f} "
          f"jobs/s (write, verify and fingerprints included); peak RSS {peak / 1024:,.0f} MiB "
          f"(before the run {rss_before / 1024:,.0f} MiB)")  # fmt: skip
    client = aioredis.from_url(REDIS)
    async for key in client.scan_iter(match=f"{prefix}:*", count=5000):
        await client.delete(key)
    await client.aclose()
    await jobs.pool.execute(f"DROP SCHEMA {schema} CASCADE")
    await jobs.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
