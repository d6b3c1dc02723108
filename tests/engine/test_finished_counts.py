"""Finished jobs counted as they finish (sql/schema/finished_counts.sql): every way a job
becomes finished, stops being finished or is deleted keeps the counts exact, a fold keeps them
and leaves one row per queue and status, folds and finishes interleaved lose nothing, and a
schema left at the release before the counts gets them from its history."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pydantic
import pytest

from pgjobs import (
    Fatal,
    ImportedJob,
    JobContext,
    JobFilter,
    JobQueue,
    JobSpec,
    Keep,
    Registry,
    SubState,
)
from pgjobs.completer import write_outcomes
from pgjobs.outcomes import Outcome
from tests.factories import insert_job
from tests.helpers import eventually
from tests.interleave import overlap
from tests.releases import at_release


class Item(pydantic.BaseModel):
    n: int = 0
    fail: bool = False


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("w", input=Item, max_attempts=1)
    async def w(ctx: JobContext, item: Item) -> int:
        if item.fail:
            raise Fatal("no")
        return item.n

    @registry.kind("other", input=Item, queue="other", max_attempts=1)
    async def other(ctx: JobContext, item: Item) -> int:
        return item.n


async def counted_one_by_one(jobs: JobQueue, queue: str | None = None) -> dict[SubState, int]:
    """The jobs of ``queue`` (of every queue: None) by sub-state, every row read."""
    rows = await jobs.pool.fetch(
        f"SELECT {jobs.db.schema}.sub_state(status, pending_deps, waits, run_at, attempts) AS s,"
        f" count(*) AS n FROM {jobs.db.schema}.jobs WHERE $1::text IS NULL OR queue = $1"
        " GROUP BY 1",
        queue,
    )
    counts = dict.fromkeys(SubState, 0)
    counts.update({SubState(r["s"]): r["n"] for r in rows})
    return counts


async def assert_exact(jobs: JobQueue, *queues: str) -> None:
    """The counts kept agree with the rows counted one by one, queue by queue and overall."""
    stats = {s.queue: s.counts for s in await jobs.queue_stats()}
    for queue in queues:
        counted = await counted_one_by_one(jobs, queue)
        assert await jobs.queue_counts(queue) == counted, queue
        assert await jobs.substate_counts(JobFilter(queue=queue)) == counted, queue
        assert stats.get(queue, counted) == counted, queue
    assert await jobs.substate_counts() == await counted_one_by_one(jobs)


async def test_every_way_in_and_out_of_finished_keeps_the_counts(
    jobs: JobQueue, kinds: None
) -> None:
    done = [(await jobs.enqueue("w", {"n": n})).id for n in range(6)]
    failing = [(await jobs.enqueue("w", {"fail": True})).id for _ in range(3)]
    cancelled = (await jobs.enqueue("w", {"n": 9})).id
    await jobs.enqueue("other", {"n": 1})
    await jobs.cancel(cancelled)
    await jobs.worker(queues=["default", "other"]).run(until_drained=True)
    await assert_exact(jobs, "default", "other")
    counts = await jobs.queue_counts("default")
    assert (counts[SubState.COMPLETED], counts[SubState.FAILED]) == (6, 3)
    assert counts[SubState.CANCELLED] == 1
    await jobs.requeue(failing[0])  # finished -> pending
    await jobs.requeue_finished(JobFilter(queue="default", ids=tuple(done[:2])))
    await jobs.purge(JobFilter(ids=(done[2],)))  # a deleted finished job
    await assert_exact(jobs, "default", "other")
    await jobs.worker(queues=["default"]).run(until_drained=True)  # they finish again
    await assert_exact(jobs, "default", "other")
    # retention at finish: a kept count of 1 trims the older completed jobs of the queue
    kept = (await jobs.enqueue("w", {"n": 7}, keep_completed=Keep(count=1))).id
    await jobs.worker(queues=["default"]).run(until_drained=True)
    await assert_exact(jobs, "default")
    assert (await jobs.get(kept)) is not None
    await jobs.pool.execute(f"TRUNCATE {jobs.db.schema}.jobs CASCADE")
    assert all(n == 0 for n in (await jobs.queue_counts("default")).values())


async def test_a_fold_keeps_the_counts_in_one_row_per_queue_and_status(
    jobs: JobQueue, kinds: None
) -> None:
    for _ in range(4):
        await jobs.enqueue_batch("w", [{"n": n, "fail": n % 5 == 0} for n in range(10)])
        await jobs.worker(queues=["default"]).run(until_drained=True)
    table = f"{jobs.db.schema}.finished_counts"
    assert await jobs.pool.fetchval(f"SELECT count(*) FROM {table}") > 2
    before = await jobs.queue_counts("default")
    assert await jobs.fold_finished_counts() > 2
    assert await jobs.queue_counts("default") == before
    rows = await jobs.pool.fetch(f"SELECT queue, status, n FROM {table} ORDER BY status")
    assert [(r["queue"], r["status"], r["n"]) for r in rows] == [
        ("default", "completed", 32), ("default", "dead", 8)
    ]  # fmt: skip
    assert await jobs.fold_finished_counts() == 2  # nothing new: the same two rows again


@pytest.mark.parametrize("fold_first", [True, False])
async def test_a_fold_and_a_finish_overlapping_lose_nothing(
    jobs: JobQueue, kinds: None, fold_first: bool
) -> None:
    """The fold's DELETE sees the rows of its snapshot only: a finish committing while the
    fold is open leaves its row for the next fold, and neither waits for the other."""
    await jobs.enqueue_batch("w", [{"n": n} for n in range(3)])
    await jobs.worker(queues=["default"]).run(until_drained=True)
    await jobs.enqueue("w", {"n": 5})
    [row] = await jobs.db.fetch("claim", ["default"], ["w"], 1, 30.0, 0)

    async def fold(conn: Any) -> int:
        return int(await jobs.db.fetchval("fold_finished_counts", conn=conn))

    async def finish(conn: Any) -> set[int]:
        outcome = Outcome(row["id"], row["lock_token"], "completed", output_json="5")
        return await write_outcomes(jobs.db, [outcome], conn)

    first, second = (fold, finish) if fold_first else (finish, fold)
    _, _, waited = await overlap(jobs.pool, first, second)
    assert not waited
    assert (await jobs.queue_counts("default"))[SubState.COMPLETED] == 4
    await jobs.fold_finished_counts()
    assert (await jobs.queue_counts("default"))[SubState.COMPLETED] == 4


async def test_a_fold_while_another_folds_leaves_it_alone(jobs: JobQueue, kinds: None) -> None:
    await jobs.enqueue_batch("w", [{"n": n} for n in range(3)])
    await jobs.worker(queues=["default"]).run(until_drained=True)
    async with jobs.pool.acquire() as conn, conn.transaction():
        assert await jobs.db.fetchval("fold_finished_counts", conn=conn) >= 1
        assert await jobs.fold_finished_counts() == 0  # the other session's lock: skipped
    assert (await jobs.queue_counts("default"))[SubState.COMPLETED] == 3


async def test_stress_finishes_requeues_and_folds_together_stay_exact(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.enqueue_batch("w", [{"n": n, "fail": n % 7 == 0} for n in range(600)])
    rng = random.Random(3)
    stop = asyncio.Event()

    async def folder() -> None:
        while not stop.is_set():
            await jobs.fold_finished_counts()
            await asyncio.sleep(0)

    async def requeuer() -> None:
        while not stop.is_set():
            finished = await jobs.list_jobs(JobFilter(queue="default", status="completed"),
                                            limit=5)  # fmt: skip
            picked = [j.id for j in finished if rng.random() < 0.3]
            if picked:
                await jobs.requeue_finished(JobFilter(ids=tuple(picked)))
            await asyncio.sleep(0)

    folding = [asyncio.ensure_future(folder()) for _ in range(2)]
    requeuing = asyncio.ensure_future(requeuer())
    await asyncio.gather(*(jobs.worker(queues=["default"], concurrency=8).run(until_drained=True)
                           for _ in range(3)))  # fmt: skip
    stop.set()
    await asyncio.gather(*folding, requeuing)
    await jobs.worker(queues=["default"]).run(until_drained=True)
    await assert_exact(jobs, "default")
    counts = await jobs.queue_counts("default")
    assert counts[SubState.COMPLETED] + counts[SubState.FAILED] == 600


async def test_imported_finished_jobs_count_themselves(jobs: JobQueue, kinds: None) -> None:
    imported = [
        ImportedJob(JobSpec("w", {"n": n}, job_key=f"k{n}"), status=status)
        for n, status in enumerate(["completed", "completed", "dead", "pending"])
    ]
    await jobs.import_jobs(imported)
    await jobs.import_jobs(imported)  # again: the keys are taken, nothing is counted twice
    await assert_exact(jobs, "default")
    counts = await jobs.queue_counts("default")
    assert (counts[SubState.COMPLETED], counts[SubState.FAILED]) == (2, 1)


async def test_a_schema_at_the_release_before_gets_counts_from_its_history(
    pool: asyncpg.Pool, schema_name: str, registry: Registry
) -> None:
    async with pool.acquire() as conn:
        await at_release(conn, schema_name, 1)
        await conn.execute(
            f"INSERT INTO {schema_name}.jobs (queue, kind, name, payload, status, max_attempts,"
            " backoff, finished_at) SELECT 'old', 'w', 'w', '{}', s, 1, '{}', now()"
            " FROM unnest(ARRAY['completed', 'completed', 'dead', 'cancelled']) AS s"
        )
    jobs = await JobQueue.connect(pool=pool, schema=schema_name, registry=registry)
    await jobs.migrate()
    counts = await jobs.queue_counts("old")
    assert (counts[SubState.COMPLETED], counts[SubState.FAILED], counts[SubState.CANCELLED]) == (
        2, 1, 1,
    )  # fmt: skip
    await assert_exact(jobs, "old")


async def test_truncating_jobs_with_the_counts_in_one_statement_works(
    jobs: JobQueue, kinds: None
) -> None:
    """What a test or bench reset does: every table of the schema in one TRUNCATE."""
    await jobs.enqueue("w", {"n": 1})
    await jobs.worker(queues=["default"]).run(until_drained=True)
    schema = jobs.db.schema
    await jobs.pool.execute(f"TRUNCATE {schema}.jobs, {schema}.finished_counts CASCADE")
    assert all(n == 0 for n in (await jobs.queue_counts("default")).values())


async def test_a_running_worker_folds_the_counts_and_sweeps_the_metrics(
    jobs: JobQueue, kinds: None
) -> None:
    """Upkeep needs no maintenance job: a worker of the fleet folds the counts and sweeps the
    metrics rollup (a worker run until drained, a batch, leaves it to the fleet)."""
    for _ in range(3):
        await jobs.enqueue_batch("w", [{"n": n} for n in range(4)])
        await jobs.worker(queues=["default"]).run(until_drained=True)
    earlier = datetime.now(UTC) - timedelta(hours=2)  # past the sweep's settle time
    await insert_job(jobs.pool, jobs.db.schema, queue="default", status="completed",
                     finished_at=earlier)  # fmt: skip
    table = f"{jobs.db.schema}.finished_counts"
    assert await jobs.pool.fetchval(f"SELECT count(*) FROM {table}") >= 3  # not folded
    watermark = f"SELECT swept_until FROM {jobs.db.schema}.metrics_watermark"
    assert await jobs.pool.fetchval(watermark) is None
    worker = jobs.worker(queues=["other"])
    running = asyncio.ensure_future(worker.run())

    async def upkept() -> bool:
        rows = await jobs.pool.fetchval(f"SELECT count(*) FROM {table}")
        return rows == 1 and await jobs.pool.fetchval(watermark) is not None

    await eventually(upkept)
    await worker.stop()
    await running
    assert (await jobs.queue_counts("default"))[SubState.COMPLETED] == 13
    swept = await jobs.queue_metrics("default", "hour", earlier - timedelta(hours=1))
    assert sum(b.completed for b in swept) == 13
