"""Claiming ahead: a worker with short handlers claims more than its free slots, keeps those
jobs leased until it starts them, and gives them back untouched on stop, pause or loss."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pydantic
import pytest

from pgjobs import InvalidOption, JobContext, JobQueue, JobSpec, Registry
from pgjobs.claimer import CLAIM_AHEAD_BELOW_SECONDS
from pgjobs.worker import Worker
from tests.helpers import eventually


class Item(pydantic.BaseModel):
    n: int = 0


async def claim(jobs: JobQueue, queue: str, free: int, ahead: int) -> int:
    return len(await jobs.db.fetch("claim", [queue], ["k"], free, 30.0, ahead))


async def rows(jobs: JobQueue, ids: list[int]) -> dict[int, tuple[str, int]]:
    found = await jobs.db.pool.fetch(
        f"SELECT id, status, attempts FROM {jobs.schema}.jobs WHERE id = ANY($1)", ids
    )
    return {r["id"]: (r["status"], r["attempts"]) for r in found}


@pytest.fixture
def job_one_blocks(registry: Registry) -> Iterator[tuple[list[int], asyncio.Event]]:
    """Kind "k": records each input's n; the job with n == 1 waits until the event is set
    (at the latest when the test ends, so that a failed test's worker can stop)."""
    seen: list[int] = []
    release = asyncio.Event()

    @registry.kind("k", input=Item)
    async def k(ctx: JobContext, item: Item) -> None:
        seen.append(item.n)
        if item.n == 1:
            await release.wait()

    yield seen, release
    release.set()


async def test_the_claim_takes_ahead_only_from_queues_without_caps_or_rate_limits(
    jobs: JobQueue, registry: Registry
) -> None:
    registry.declare("k", input=Item)
    for queue in ("free", "capped", "limited"):
        await jobs.enqueue_many([JobSpec("k", {"n": i}, queue=queue) for i in range(20)])
    await jobs.set_concurrency("capped", 10)
    await jobs.set_rate_limit("limited", 10, 60.0)
    assert await claim(jobs, "free", 2, 5) == 7
    assert await claim(jobs, "capped", 2, 5) == 2
    assert await claim(jobs, "limited", 2, 5) == 2


async def test_short_handlers_claim_ahead_and_stop_gives_back_what_never_started(
    jobs: JobQueue, job_one_blocks: tuple[list[int], asyncio.Event]
) -> None:
    seen, release = job_one_blocks
    ids = [r.id for r in await jobs.enqueue_many([JobSpec("k", {"n": i}) for i in range(6)])]
    due = await due_times(jobs, ids)
    worker = jobs.worker(concurrency=1, claim_ahead=3)
    worker.start()
    # Job 0 is claimed alone (handler times unknown yet) and is short: the next claim takes
    # job 1 for the free slot and jobs 2-4 ahead, all leased; job 1 then holds the only slot
    # (its handler starts a moment after the claim is counted).
    await eventually(lambda: claimed(worker, 5))
    await eventually(lambda: asyncio.sleep(0, len(seen) == 2))
    assert seen == [0, 1]
    assert await rows(jobs, ids[2:5]) == {i: ("running", 1) for i in ids[2:5]}
    stopping = asyncio.create_task(worker.stop())
    # Stopping gives the claimed-ahead jobs back at once, their attempt refunded, while the
    # running one is let finish.
    await eventually(lambda: all_pending_unused(jobs, ids[2:5]))
    release.set()
    await stopping
    assert seen == [0, 1]
    assert await rows(jobs, ids[:2]) == {ids[0]: ("completed", 1), ids[1]: ("completed", 1)}
    assert await rows(jobs, ids[2:]) == {i: ("pending", 0) for i in ids[2:]}
    # ...and keeps its place in the queue: its due time is the one it was enqueued with.
    assert await due_times(jobs, ids[2:]) == {i: due[i] for i in ids[2:]}


async def test_jobs_claimed_ahead_are_heartbeated_dropped_when_cancelled_and_released_on_pause(
    jobs: JobQueue, job_one_blocks: tuple[list[int], asyncio.Event]
) -> None:
    seen, release = job_one_blocks
    ids = [r.id for r in await jobs.enqueue_many([JobSpec("k", {"n": i}) for i in range(4)])]
    worker = jobs.worker(concurrency=1, claim_ahead=2, lease=1.0, heartbeat_interval=0.1)
    worker.start()
    await eventually(lambda: claimed(worker, 4))  # job 1 runs; jobs 2 and 3 wait in the buffer
    # Their leases are renewed like the running job's: a 1 s lease outlives its first second.
    await eventually(lambda: renewed_past_claim(jobs, ids[3], 1.0), timeout=30)
    # A job cancelled while it waits is dropped by the next heartbeat and never runs.
    assert await jobs.cancel(ids[2])
    await eventually(lambda: asyncio.sleep(0, worker.stats.lost == 1))
    # Pausing gives the rest back untouched.
    await worker.pause(wait_for_running=False)
    assert await rows(jobs, [ids[3]]) == {ids[3]: ("pending", 0)}
    release.set()
    worker.resume()
    await eventually(lambda: asyncio.sleep(0, seen == [0, 1, 3]))
    await worker.stop()
    assert await rows(jobs, ids) == {
        ids[0]: ("completed", 1),
        ids[1]: ("completed", 1),
        ids[2]: ("cancelled", 1),
        ids[3]: ("completed", 1),
    }


def test_claim_ahead_must_be_a_non_negative_integer(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("h", input=Item)
    async def h(ctx: JobContext, item: Item) -> None:
        return None

    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(InvalidOption, match="claim_ahead") as caught:
            jobs.worker(claim_ahead=bad)
        assert caught.value.option == "claim_ahead"


async def due_times(jobs: JobQueue, ids: list[int]) -> dict[int, object]:
    found = await jobs.db.pool.fetch(
        f"SELECT id, run_at FROM {jobs.schema}.jobs WHERE id = ANY($1)", ids
    )
    return {r["id"]: r["run_at"] for r in found}


async def claimed(worker: Worker, n: int) -> bool:
    return worker.stats.claimed == n


async def all_pending_unused(jobs: JobQueue, ids: list[int]) -> bool:
    return set((await rows(jobs, ids)).values()) == {("pending", 0)}


async def renewed_past_claim(jobs: JobQueue, job_id: int, lease: float) -> bool:
    """The job's lease now ends more than ``lease`` seconds after it was claimed."""
    return bool(
        await jobs.db.pool.fetchval(
            f"SELECT locked_until > started_at + make_interval(secs => $2)"
            f" FROM {jobs.schema}.jobs WHERE id = $1",
            job_id,
            lease,
        )
    )


def test_by_default_a_worker_claims_four_per_slot_ahead_bounded_by_the_wait(
    jobs: JobQueue, registry: Registry
) -> None:
    """claim_ahead defaults to 4 per slot; what a claim takes ahead also never exceeds what
    the slots work through in CLAIM_AHEAD_BELOW_SECONDS at the handlers' average."""

    @registry.kind("k", input=Item)
    async def k(ctx: JobContext, item: Item) -> None:
        return None

    worker = jobs.worker(concurrency=3)
    assert worker.claim_ahead == 12
    claimer = worker._claimer
    assert claimer.ahead_wanted() == 0  # no handler has run yet
    claimer.record_run(0.0001)
    assert claimer.ahead_wanted() == 12  # fast handlers: the whole allowance
    claimer.handler_seconds = 0.025  # 3 slots work through 6 jobs in 50 ms
    assert claimer.ahead_wanted() == 6
    claimer.handler_seconds = 0.049
    assert claimer.ahead_wanted() == 3
    claimer.handler_seconds = CLAIM_AHEAD_BELOW_SECONDS
    assert claimer.ahead_wanted() == 0
    assert jobs.worker(concurrency=3, claim_ahead=2)._claimer.claim_ahead == 2
