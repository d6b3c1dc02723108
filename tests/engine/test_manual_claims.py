"""Jobs claimed by hand (``JobQueue.claim``) and finished through their context, and a running
handler told of its job's cancellation at once."""

from __future__ import annotations

import asyncio

import pydantic
import pytest

from pgjobs import Backoff, InvalidOption, JobContext, JobQueue, Registry, Status
from tests.helpers import expire_lease


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    registry.declare("task", input=Item, max_attempts=2, backoff=Backoff.fixed(60))


async def test_a_claimed_job_is_completed_by_hand(jobs: JobQueue, kinds) -> None:
    first = await jobs.enqueue("task", {"n": 1})
    await jobs.enqueue("task", {"n": 2}, priority=5)
    (best,) = await jobs.claim(["default"])
    assert best.payload == {"n": 2} and best.attempts == 1  # higher priority first
    (ctx,) = await jobs.claim(["default"])
    assert ctx.id == first.id and (await jobs.get(first.id)).status is Status.RUNNING
    assert await ctx.complete({"done": 1})
    row = await jobs.get(first.id)
    assert row.status is Status.COMPLETED and row.output == {"done": 1}
    with pytest.raises(InvalidOption, match="already completed"):
        await ctx.complete(None)
    assert await jobs.claim(["default"], kinds=["task"]) == []  # best is still running


async def test_fail_gives_the_outcome_a_handler_raising_would_get(jobs: JobQueue, kinds) -> None:
    job = await jobs.enqueue("task", {})
    (ctx,) = await jobs.claim(["default"])
    assert await ctx.fail(RuntimeError("boom")) == "pending"  # a retry after its backoff
    row = await jobs.get(job.id)
    assert row.sub_state == "retry" and row.last_error["message"] == "boom"
    await jobs.promote(job.id)
    (again,) = await jobs.claim(["default"])
    assert again.attempts == 2
    assert ctx.last_error is None  # a first run has none
    # a retry is claimed with its previous attempt's error, the traceback left behind
    assert again.last_error is not None and again.last_error["message"] == "boom"
    assert again.last_error["type"] == "RuntimeError" and "traceback" not in again.last_error
    assert await again.fail(RuntimeError("boom again")) == "dead"  # its last attempt
    assert (await jobs.get(job.id)).status is Status.DEAD


async def test_release_gives_the_job_back_in_its_place(jobs: JobQueue, kinds) -> None:
    job = await jobs.enqueue("task", {})
    later = await jobs.enqueue("task", {})
    (ctx,) = await jobs.claim(["default"])
    assert await ctx.release()
    row = await jobs.get(job.id)
    assert row.status is Status.PENDING and row.attempts == 0
    (again,) = await jobs.claim(["default"])
    assert again.id == job.id != later.id


async def test_a_lapsed_hand_claim_writes_nothing(jobs: JobQueue, kinds) -> None:
    job = await jobs.enqueue("task", {})
    (ctx,) = await jobs.claim(["default"], lease=60)
    assert await ctx.extend_lease(120)
    await expire_lease(jobs, job.id)
    await jobs.db.fetch("rescue_stalled", 10, "unused")
    assert not await ctx.complete("late")
    assert ctx.lost and (await jobs.get(job.id)).status is Status.PENDING
    assert not await ctx.extend_lease()


async def test_claim_checks_its_arguments(jobs: JobQueue) -> None:
    with pytest.raises(InvalidOption, match="kinds"):
        await jobs.claim(["default"])
    with pytest.raises(InvalidOption, match="limit"):
        await jobs.claim(["default"], kinds=["x"], limit=0)
    with pytest.raises(InvalidOption, match="lease"):
        await jobs.claim(["default"], kinds=["x"], lease=0)


async def test_a_running_handler_hears_of_its_cancellation_at_once(
    jobs: JobQueue, registry: Registry
) -> None:
    """The heartbeat (which would also notice) is minutes away: only the cancel notification
    can tell the handler within the test."""
    started, stopped = asyncio.Event(), asyncio.Event()
    heard: list[object] = []

    @registry.kind("long", input=Item, max_attempts=1)
    async def long(ctx: JobContext, item: Item) -> None:
        started.set()
        await asyncio.wait_for(ctx.cancelled.wait(), 30)
        heard.append(ctx.cancel_reason)
        stopped.set()

    job = await jobs.enqueue("long", {})
    worker = jobs.worker(lease=600, concurrency=1)
    task = worker.start()
    await asyncio.wait_for(started.wait(), 20)
    assert await jobs.cancel(job.id)
    await asyncio.wait_for(stopped.wait(), 20)
    await worker.stop()
    await task
    assert heard == ["cancelled"]
    assert (await jobs.get(job.id)).status is Status.CANCELLED


async def test_cancel_job_signals_a_handler_this_worker_runs(
    jobs: JobQueue, registry: Registry
) -> None:
    started = asyncio.Event()

    @registry.kind("waits", input=Item, max_attempts=1)
    async def waits(ctx: JobContext, item: Item) -> str:
        started.set()
        await ctx.cancelled.wait()
        return str(ctx.cancel_reason)

    job = await jobs.enqueue("waits", {})
    worker = jobs.worker(concurrency=1)
    task = worker.start()
    await asyncio.wait_for(started.wait(), 20)
    assert not worker.cancel_job(job.id + 1000)
    assert worker.cancel_job(job.id, "user asked")
    assert not worker.cancel_job(job.id, "twice")
    await worker.stop()
    await task
    row = await jobs.get(job.id)
    assert row.status is Status.COMPLETED and row.output == "user asked"
