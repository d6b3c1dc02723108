"""Load: jobs streamed through four worker processes, with count retention on (the newest
1,000 completed kept, as ``removeOnComplete: 1000``). Exactly every job completes once; each
worker's memory stays within a stated bound after warm-up; the jobs table stops growing.

``PGJOBS_LOAD_JOBS`` sets the size: 40,000 in the default suite (CI), 1,000,000 with
``./run reliability``. The driver runs ``VACUUM`` on the jobs table after each tenth of the run,
as autovacuum would (its one-minute naptime would not fire within a short run), so what is
measured is whether the engine's churn is reclaimable: no long-held snapshot, no ever-growing
index, no rows left behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest

from pgjobs import JobQueue, JobSpec, Keep, Registry
from pgjobs.maintenance import GcInput, collect_garbage
from tests.reliability.figures import Figure, record

ROOT = Path(__file__).resolve().parents[2]
JOBS = int(os.environ.get("PGJOBS_LOAD_JOBS", "40000"))
WORKERS = 4
CHUNK = 5_000
BACKLOG = 50_000
SLICES = 10
KEEP = 1_000
# The suite's 120 s per-test guard scaled to the run: 1M jobs need minutes.
pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(max(120, JOBS // 200))]
RSS_GROWTH_BOUND_KIB = 32 * 1024
"""Each worker's resident memory may grow by at most 32 MiB from the end of the first tenth
of the run to the end (allocator slack and caches; a leak of 150 bytes per job would exceed it
in the 1M run)."""


@dataclass
class WorkerProcess:
    proc: asyncio.subprocess.Process
    samples: list[tuple[int, int]] = field(default_factory=list)  # (rss KiB, completed)
    final: tuple[int, int] | None = None

    @property
    def completed(self) -> int:
        return self.samples[-1][1] if self.samples else 0


async def spawn(
    pg_dsn: str, schema: str, progress: asyncio.Event
) -> tuple[WorkerProcess, asyncio.Task[None]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).with_name("load_worker.py")), pg_dsn, schema,
        stdout=asyncio.subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    worker = WorkerProcess(proc)

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            tag, rss, done = line.decode().split()
            if tag == "final":
                worker.final = (int(rss), int(done))
            else:
                worker.samples.append((int(rss), int(done)))
            progress.set()

    return worker, asyncio.create_task(read())


async def test_a_long_load_completes_every_job_once_in_bounded_memory_and_table(
    jobs: JobQueue, registry: Registry, pg_dsn: str
) -> None:
    registry.declare("load", input=dict[str, int], keep_completed=Keep(count=KEEP))
    schema = jobs.schema
    progress = asyncio.Event()
    spawned = [await spawn(pg_dsn, schema, progress) for _ in range(WORKERS)]
    workers = [w for w, _ in spawned]
    observer = await asyncpg.connect(pg_dsn)
    slices: list[dict[str, float]] = []  # per tenth: jobs/s over it, table bytes after it
    enqueued = 0
    started = last = time.monotonic()
    last_done = 0
    try:
        while True:
            pending = await observer.fetchval(
                f"SELECT count(*) FROM {schema}.jobs WHERE status = 'pending'"
            )
            # One chunk per look, so that each tenth is measured as it passes.
            if enqueued < JOBS and pending < BACKLOG:
                size = min(CHUNK, JOBS - enqueued)
                await jobs.enqueue_many([JobSpec("load", {"n": enqueued + i}) for i in range(size)])
                enqueued += size
                pending += size
            done = sum(w.completed for w in workers)
            if done >= JOBS * (len(slices) + 1) // SLICES:
                await observer.execute(f"VACUUM {schema}.jobs")
                stats = await observer.fetchrow(
                    "SELECT pg_total_relation_size($1::regclass) AS bytes, n_dead_tup AS dead"
                    " FROM pg_stat_user_tables WHERE relid = $1::regclass",
                    f"{schema}.jobs",
                )
                now = time.monotonic()
                slices.append({
                    "rate": (done - last_done) / (now - last), "bytes": stats["bytes"],
                })  # fmt: skip
                last, last_done = now, done
                if done >= JOBS:
                    break
            if any(w.proc.returncode is not None for w in workers):
                raise AssertionError("a load worker exited on its own")
            if enqueued == JOBS or pending >= BACKLOG:
                await progress.wait()  # the workers report every tenth of a second
                progress.clear()
        elapsed = time.monotonic() - started
    finally:
        for worker in workers:
            if worker.proc.returncode is None:
                worker.proc.send_signal(signal.SIGTERM)
        for worker, reader in spawned:
            await asyncio.wait_for(worker.proc.wait(), 60)
            await reader
        left = await observer.fetch(
            f"SELECT status, count(*) AS n FROM {schema}.jobs GROUP BY status"
        )
        await observer.close()

    finals = [w.final for w in workers]
    assert all(f is not None for f in finals), ("a worker did not stop gracefully", finals)
    completed = sum(f[1] for f in finals if f is not None)
    assert completed == JOBS, (completed, finals)  # every job once: none lost, none run twice
    # Count retention is applied by every outcome write, in turn: the history is exactly KEEP
    # (and the GC finds nothing more to remove).
    kept = {r["status"]: r["n"] for r in left}
    assert kept == {"completed": KEEP}, kept
    await collect_garbage(jobs.db, GcInput())
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {schema}.jobs") == KEEP
    growth = []
    for worker, final in zip(workers, finals, strict=True):
        assert final is not None
        warm = next(rss for rss, done in worker.samples if done >= worker.completed // SLICES)
        growth.append(final[0] - warm)
    assert max(growth) <= RSS_GROWTH_BOUND_KIB, growth
    # The table plateaus: the last slice ends no bigger than 1.5x the largest of the first three.
    early = max(s["bytes"] for s in slices[:3])
    assert slices[-1]["bytes"] <= 1.5 * early, [s["bytes"] for s in slices]
    first, final_slice = slices[0], slices[-1]
    record(
        Figure(
            scenario=f"load: {JOBS:,} jobs, 4 worker processes, keep newest {KEEP:,}",
            faults="none (sustained load)",
            jobs=JOBS,
            lost=JOBS - completed,
            duplicated="0",
            recovery=(
                f"{JOBS / elapsed:,.0f} jobs/s overall, first/last tenth "
                f"{first['rate']:,.0f}/{final_slice['rate']:,.0f}"
                f" jobs/s; RSS growth after warm-up max {max(growth) / 1024:.1f} MiB (bound "
                f"{RSS_GROWTH_BOUND_KIB // 1024} MiB); jobs table {early / 2**20:.1f} MiB early, "
                f"{final_slice['bytes'] / 2**20:.1f} MiB at the end"
            ),
        )
    )
