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

This VM's speed drifts by a third within minutes, which a ratio of two slices minutes apart
cannot tell from the table's growth. So before each slice a control runs: the same worker
processing 20,000 jobs in a second schema emptied first, whose tables never grow. Its rate
follows the machine alone; the last slice's ratio divided by the control's is the slowdown that
the table's growth caused. Both ratios are printed; the target is judged on the raw one.

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
CONTROL = 20_000


class Noop(pydantic.BaseModel):
    i: int


async def process(jobs: JobQueue, start: int, size: int) -> float:
    """Enqueue ``size`` jobs in bulk (untimed), then the jobs/s of one worker (concurrency 10)
    taking them all."""
    for offset in range(start, start + size, 1000):
        await jobs.enqueue_many(
            JobSpec("noop", {"i": i}) for i in range(offset, min(offset + 1000, start + size))
        )
    worker = jobs.worker(concurrency=10)
    began = time.perf_counter()
    await worker.run(until_drained=True)
    elapsed = time.perf_counter() - began
    assert worker.stats.completed == size, worker.stats
    return size / elapsed


async def main(total: int, vacuum: bool) -> None:
    dsn = find_or_start_postgres()
    registry = Registry()

    @registry.kind("noop", input=Noop, queue="sustained")
    async def noop(ctx: JobContext, data: Noop) -> None:
        return None

    pool = await create_pool(dsn, min_size=4, max_size=20)
    schema = f"sustained_{uuid.uuid4().hex[:8]}"
    jobs = await JobQueue.connect(pool=pool, schema=schema, registry=registry)
    control = await JobQueue.connect(pool=pool, schema=f"{schema}_control", registry=registry)
    await jobs.migrate()
    await control.migrate()
    rates: list[float] = []
    controls: list[float] = []
    autovacuum = await pool.fetchval("SHOW autovacuum")
    print(f"{total:,} jobs in slices of {SLICE:,}, one worker at concurrency 10; server "
          f"autovacuum {autovacuum}; vacuum check after each slice: {vacuum}; before each "
          f"slice a control of {CONTROL:,} jobs on empty tables", flush=True)  # fmt: skip
    try:
        for start in range(0, total, SLICE):
            await pool.execute(f"TRUNCATE {schema}_control.jobs CASCADE")
            controls.append(await process(control, 0, CONTROL))
            rates.append(await process(jobs, start, min(SLICE, total - start)))
            dead, mib = await pg_storage(dsn, schema)
            vacuumed = (
                (await vacuum_churning_tables(jobs.db, VacuumInput()))["vacuumed"] if vacuum else {}
            )
            print(f"slice {len(rates):>2}: {rates[-1]:8,.0f} jobs/s   control {controls[-1]:8,.0f} "
                  f"jobs/s   tables {mib:7.1f} MiB   dead tuples {dead:9,.0f}   "
                  f"vacuumed {sorted(vacuumed) or '-'}", flush=True)  # fmt: skip
    finally:
        for name in (schema, f"{schema}_control"):
            await pool.execute(f"DROP SCHEMA {name} CASCADE")
        await pool.close()
    raw = rates[-1] / rates[0]
    drift = controls[-1] / controls[0]
    print(f"last slice / first slice: {raw:.2f}× "
          f"(min {min(rates):,.0f}, max {max(rates):,.0f} jobs/s)")  # fmt: skip
    print(f"the control, last / first: {drift:.2f}× (the machine's drift); the slice ratio "
          f"over it: {raw / drift:.2f}× (the tables' growth alone)")  # fmt: skip


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-vacuum"]
    asyncio.run(main(int(args[0]) if args else 1_000_000, "--no-vacuum" not in sys.argv))
