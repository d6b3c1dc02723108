"""Sustained throughput: N no-op jobs through one engine worker (concurrency 10), in slices of
100,000, with the default retention (finished rows stay until the GC), so the table churns and
grows to N finished rows. Each slice is enqueued in bulk (untimed), then processed (timed).
Prints jobs/s per slice, the table's size and dead tuples after each, and the last slice's
throughput as a ratio of the first (the target: within 20%). After each slice the engine's
vacuum maintenance check runs (``pgjobs.maintenance.vacuum_churning_tables``, what the
``pgjobs.vacuum`` schedule does every minute), vacuuming a table only past its threshold: this
VM's PostgreSQL runs with autovacuum off, and without it dead index entries of finished jobs
pile up under the claim (the first version of this run fell from ~12,000 to ~550 jobs/s by
the fourth slice). Pass ``--no-vacuum`` to see that.

`./run bench-sustained [N] [--no-vacuum]` (default 1,000,000).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import pydantic

from bench.systems import pg_storage
from pgjobs import JobContext, JobQueue, JobSpec, Registry, create_pool
from pgjobs.devserver import find_or_start_postgres
from pgjobs.maintenance import VacuumInput, vacuum_churning_tables

SLICE = 100_000


class Noop(pydantic.BaseModel):
    i: int


async def main(total: int, vacuum: bool) -> None:
    dsn = find_or_start_postgres()
    registry = Registry()

    @registry.kind("noop", input=Noop, queue="sustained")
    async def noop(ctx: JobContext, data: Noop) -> None:
        return None

    pool = await create_pool(dsn, min_size=4, max_size=20)
    schema = f"sustained_{uuid.uuid4().hex[:8]}"
    jobs = await JobQueue.connect(pool=pool, schema=schema, registry=registry)
    await jobs.migrate()
    rates: list[float] = []
    autovacuum = await pool.fetchval("SHOW autovacuum")
    print(f"{total:,} jobs in slices of {SLICE:,}, one worker at concurrency 10; server "
          f"autovacuum {autovacuum}; vacuum check after each slice: {vacuum}", flush=True)  # fmt: skip
    try:
        for start in range(0, total, SLICE):
            size = min(SLICE, total - start)
            for offset in range(start, start + size, 1000):
                await jobs.enqueue_many(
                    JobSpec("noop", {"i": i})
                    for i in range(offset, min(offset + 1000, start + size))
                )
            worker = jobs.worker(concurrency=10)
            began = time.perf_counter()
            await worker.run(until_drained=True)
            elapsed = time.perf_counter() - began
            assert worker.stats.completed == size, worker.stats
            rates.append(size / elapsed)
            dead, mib = await pg_storage(dsn, schema)
            vacuumed = (
                (await vacuum_churning_tables(jobs.db, VacuumInput()))["vacuumed"] if vacuum else {}
            )
            print(f"slice {len(rates):>2}: {rates[-1]:8,.0f} jobs/s   tables {mib:7.1f} MiB   "
                  f"dead tuples {dead:9,.0f}   vacuumed {sorted(vacuumed) or '-'}",
                  flush=True)  # fmt: skip
    finally:
        await pool.execute(f"DROP SCHEMA {schema} CASCADE")
        await pool.close()
    print(f"last slice / first slice: {rates[-1] / rates[0]:.2f}× "
          f"(min {min(rates):,.0f}, max {max(rates):,.0f} jobs/s)")  # fmt: skip


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-vacuum"]
    asyncio.run(main(int(args[0]) if args else 1_000_000, "--no-vacuum" not in sys.argv))
