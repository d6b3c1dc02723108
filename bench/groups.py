"""Claims with groups beside claims without: `./run bench-groups [GROUPS]` (default 1,000).

One schema, one worker at concurrency 10, 20,000 no-op jobs per run, the variants run in turn
in each of five rounds; each variant's figure is the median of its rounds' ratios to the plain
run of the same round (a shared machine's noise moves whole rounds more than one run):

- plain: jobs without a group (and, for reference, the same with ``claim_ahead=0``: a claim
  of a queue or group with a cap never claims ahead);
- grouped: the same jobs spread over GROUPS groups of skewed sizes (a tenth of the groups hold
  nine tenths of the jobs), so every claim rotates over many groups;
- grouped, capped: the same, with the worker's ``group_concurrency=2`` (each group's running
  jobs counted at every look).

Prints Markdown; the figures go on docs/performance.md.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
import uuid
from typing import Any

from bench.scale import noop_registry
from pgjobs import JobFilter, JobQueue, JobSpec, create_pool
from pgjobs.devserver import find_or_start_postgres

JOBS = 20_000
ROUNDS = 5


def _groups(count: int) -> list[str | None]:
    """A group for each job: a tenth of the groups take nine tenths of the jobs."""
    rng = random.Random(42)
    big = [f"g{i}" for i in range(max(count // 10, 1))]
    small = [f"g{i}" for i in range(len(big), count)] or big
    return [rng.choice(big) if rng.random() < 0.9 else rng.choice(small) for _ in range(JOBS)]


async def _process(jobs: JobQueue, groups: list[str | None], **options: Any) -> float:
    """Jobs per second of one worker (concurrency 10) taking JOBS no-op jobs."""
    for offset in range(0, JOBS, 1000):
        await jobs.enqueue_many(
            JobSpec("noop", {"i": i}, group_key=groups[i]) for i in range(offset, offset + 1000)
        )
    await jobs.pool.execute(f"VACUUM ANALYZE {jobs.db.schema}.jobs")
    worker = jobs.worker(queues=["work"], concurrency=10, **options)
    started = time.perf_counter()
    await worker.run(until_drained=True)
    elapsed = time.perf_counter() - started
    assert worker.stats.completed == JOBS, worker.stats
    await jobs.purge(JobFilter(queue="work"))
    return JOBS / elapsed


async def main(group_count: int) -> None:
    dsn = find_or_start_postgres()
    pool = await create_pool(dsn, min_size=2, max_size=12)
    schema = f"bench_groups_{uuid.uuid4().hex[:8]}"
    jobs = await JobQueue.connect(pool=pool, schema=schema, registry=noop_registry())
    try:
        await jobs.migrate()
        plain: list[str | None] = [None] * JOBS
        grouped = _groups(group_count)
        rates: dict[str, list[float]] = {"plain": [], "ahead0": [], "grouped": [], "capped": []}
        for _ in range(ROUNDS):
            rates["plain"].append(await _process(jobs, plain))
            rates["ahead0"].append(await _process(jobs, plain, claim_ahead=0))
            rates["grouped"].append(await _process(jobs, grouped))
            rates["capped"].append(await _process(jobs, grouped, group_concurrency=2))
        print(f"\n| {JOBS:,} no-op jobs, one worker at c=10 | jobs/s (median of {ROUNDS}) "
              "| ratio to plain (median of rounds) |\n| --- | ---: | ---: |")  # fmt: skip
        for label, key in (
            ("no groups", "plain"),
            ("no groups, claim_ahead=0", "ahead0"),
            (f"{group_count:,} groups, skewed", "grouped"),
            (f"{group_count:,} groups, group_concurrency=2", "capped"),
        ):
            rate = statistics.median(rates[key])
            ratios = [a / b for a, b in zip(rates[key], rates["plain"], strict=True)]
            print(f"| {label} | {rate:,.0f} ({min(rates[key]):,.0f}–{max(rates[key]):,.0f}) "
                  f"| {statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) |")  # fmt: skip
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
