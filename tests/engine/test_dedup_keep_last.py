"""``dedup_keep_last``: a duplicate of an in-flight dedup key that arrives while the holder runs
is kept (the latest only) and enqueued by the transaction that writes the holder's final
outcome. The keep and the finish race for the holder's row: both orders are interleaved on two
connections (tests/interleave.py), and a stress run mixes many keeps with a running worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from pgjobs import InvalidOption, JobContext, JobFilter, JobQueue, Keep, Registry
from pgjobs.completer import write_outcomes
from pgjobs.outcomes import Outcome
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> list[int]:
    ran: list[int] = []

    @registry.kind("item", input=Item, max_attempts=2)
    async def item(ctx: JobContext, data: Item) -> int:
        ran.append(data.n)
        return data.n

    return ran


async def _keep(jobs: JobQueue, n: int, connection: Any = None, **options: Any) -> Any:
    return await jobs.enqueue(
        "item", {"n": n}, dedup_key="k", dedup_keep_last=True, connection=connection, **options
    )


async def _claim(jobs: JobQueue) -> Any:
    claimed = await jobs.db.fetch("claim", ["default"], ["item"], 1, 30.0, 0)
    assert len(claimed) == 1
    return claimed[0]


def _finish(jobs: JobQueue, row: Any, status: str = "completed", delay: float | None = None):
    async def write(conn: Any) -> set[int]:
        error = None if status == "completed" else '{"message": "boom"}'
        outcome = Outcome(
            row["id"], row["lock_token"], status, output_json="1", error_json=error,  # type: ignore[arg-type]
            delay=delay,
        )  # fmt: skip
        return await write_outcomes(jobs.db, [outcome], conn)

    return write


async def _in_flight(jobs: JobQueue) -> list[tuple[str, int]]:
    rows = await jobs.list_jobs(JobFilter(status=("pending", "running")), limit=100)
    return sorted((row.status, row.payload["n"]) for row in rows)


async def _kept(jobs: JobQueue) -> int:
    return await jobs.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.dedup_next")


async def test_the_latest_duplicate_of_a_running_holder_follows_it(
    jobs: JobQueue, kinds: list[int]
) -> None:
    first = await _keep(jobs, 1)
    pending_duplicate = await _keep(jobs, 9)
    assert pending_duplicate.duplicate and not pending_duplicate.kept  # a waiting holder: dropped
    holder = await _claim(jobs)
    second = await _keep(jobs, 2)
    third = await _keep(jobs, 3)
    assert (second.id, second.duplicate, second.kept) == (first.id, True, True)
    assert (third.id, third.duplicate, third.kept) == (first.id, True, True)
    assert await _in_flight(jobs) == [("running", 1)] and await _kept(jobs) == 1
    async with jobs.pool.acquire() as conn:
        await _finish(jobs, holder)(conn)
    assert await _in_flight(jobs) == [("pending", 3)]  # the latest, now holding the key
    assert await _kept(jobs) == 0
    again = await _keep(jobs, 4)
    assert again.duplicate and not again.kept
    await jobs.worker().run(until_drained=True)
    assert kinds == [3]


async def test_a_holder_removed_as_it_finishes_still_enqueues_the_kept_job(
    jobs: JobQueue, kinds: list[int]
) -> None:
    await _keep(jobs, 1, keep_completed=Keep(count=0))
    holder = await _claim(jobs)
    assert (await _keep(jobs, 2)).kept
    async with jobs.pool.acquire() as conn:
        await _finish(jobs, holder)(conn)
    assert await jobs.get(holder["id"]) is None
    assert await _in_flight(jobs) == [("pending", 2)]


async def test_a_retry_keeps_the_key_and_the_kept_job_waits_for_the_final_outcome(
    jobs: JobQueue, kinds: list[int]
) -> None:
    await _keep(jobs, 1)
    holder = await _claim(jobs)
    assert (await _keep(jobs, 2)).kept
    async with jobs.pool.acquire() as conn:
        await _finish(jobs, holder, status="pending", delay=0)(conn)
    assert await _in_flight(jobs) == [("pending", 1)] and await _kept(jobs) == 1
    holder = await _claim(jobs)
    async with jobs.pool.acquire() as conn:
        await _finish(jobs, holder, status="dead")(conn)
    assert await _in_flight(jobs) == [("pending", 2)] and await _kept(jobs) == 0


async def test_a_removed_holder_drops_its_kept_job(jobs: JobQueue, kinds: list[int]) -> None:
    first = await _keep(jobs, 1)
    await _claim(jobs)
    assert (await _keep(jobs, 2)).kept
    removed = await jobs.purge(JobFilter(ids=(first.id,)), running="cancel")
    assert removed.deleted == 1
    assert await _in_flight(jobs) == [] and await _kept(jobs) == 0
    fresh = await _keep(jobs, 3)
    assert not fresh.duplicate


async def test_keep_last_options_are_checked(jobs: JobQueue, kinds: list[int]) -> None:
    with pytest.raises(InvalidOption, match="dedup_keep_last"):
        await jobs.enqueue("item", {"n": 1}, dedup_keep_last=True)
    with pytest.raises(InvalidOption, match="dedup_keep_last"):
        await jobs.enqueue("item", {"n": 1}, dedup_key="k", dedup_ttl=5, dedup_keep_last=True)
    assert await _in_flight(jobs) == []


async def test_a_keep_that_locks_the_holder_first_is_enqueued_by_the_finish(
    jobs: JobQueue, kinds: list[int]
) -> None:
    """The keep holds the holder's row (KEY SHARE) with its job not yet committed; the finish
    waits for it, then enqueues the kept job."""
    await _keep(jobs, 1)
    holder = await _claim(jobs)

    async def keep(conn: Any) -> Any:
        return await _keep(jobs, 2, connection=conn)

    kept, _, waited = await overlap(jobs.pool, keep, _finish(jobs, holder))
    assert waited and kept.kept
    assert await _in_flight(jobs) == [("pending", 2)] and await _kept(jobs) == 0


async def test_a_finish_that_locks_the_holder_first_makes_the_keep_a_new_job(
    jobs: JobQueue, kinds: list[int]
) -> None:
    """The finish writes the holder's outcome first; the keep waits for its lock, then finds
    the holder finished and the key free, and writes its job as a new one."""
    await _keep(jobs, 1)
    holder = await _claim(jobs)

    async def keep(conn: Any) -> Any:
        return await _keep(jobs, 2, connection=conn)

    _, added, waited = await overlap(jobs.pool, _finish(jobs, holder), keep)
    assert waited and not added.duplicate and added.id != holder["id"]
    assert await _in_flight(jobs) == [("pending", 2)] and await _kept(jobs) == 0


async def test_many_keeps_beside_a_running_worker_never_hold_the_key_twice(
    jobs: JobQueue, kinds: list[int]
) -> None:
    """Producers keep duplicates while a worker runs the holders: at no moment do two jobs
    hold the key in flight, and once the worker drains, nothing is left kept and the last
    value sent has run, unless a waiting holder absorbed it (then that holder ran)."""
    worker = jobs.worker(concurrency=4)
    task = asyncio.create_task(worker.run())
    peaks: list[int] = []
    try:
        for wave in range(20):
            await asyncio.gather(*(_keep(jobs, wave * 10 + i) for i in range(5)))
            peaks.append(
                await jobs.pool.fetchval(
                    f"SELECT count(*) FROM {jobs.schema}.jobs"
                    " WHERE dedup_key = 'k' AND status IN ('pending', 'running')"
                )
            )
        last = await _keep(jobs, 1000)
    finally:
        await worker.stop()
        await task
    await jobs.worker().run(until_drained=True)
    assert max(peaks) == 1
    assert await _kept(jobs) == 0 and await _in_flight(jobs) == []
    if last.duplicate and not last.kept:
        holder = await jobs.get(last.id)
        assert holder is not None and holder.status == "completed"
    else:
        assert kinds[-1] == 1000
