"""Fencing, leases, heartbeats, stalled-job rescue and graceful shutdown."""

from __future__ import annotations

import asyncio
import logging

import pydantic
import pytest

from pgjobs import (
    Backoff,
    EdgePolicy,
    Flow,
    InvalidOption,
    JobContext,
    JobLost,
    JobQueue,
    JobSpec,
    Registry,
    Status,
)
from pgjobs.config import notify_channel
from tests.helpers import eventually, expire_lease


class Task(pydantic.BaseModel):
    n: int = 0


async def test_stalled_job_is_reclaimed_and_the_first_workers_completion_is_a_no_op(
    jobs: JobQueue, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgjobs.worker")
    first_started = asyncio.Event()
    release_first = asyncio.Event()
    second_done = asyncio.Event()
    progress_after_loss: list[bool] = []

    @registry.kind("slow", input=Task, max_attempts=3)
    async def slow(ctx: JobContext, task: Task) -> str:
        if ctx.attempts == 1:
            first_started.set()
            await release_first.wait()
            progress_after_loss.append(await ctx.progress({"step": "late"}))
            return "first"
        second_done.set()
        return "second"

    result = await jobs.enqueue("slow", {})
    first = jobs.worker(concurrency=1, lease=60)  # heartbeats every 20 s: not during this test
    first.start()
    await asyncio.wait_for(first_started.wait(), 20)
    await expire_lease(jobs, result.id)

    second = jobs.worker(concurrency=1, lease=60, rescue_interval=0.05)
    second.start()
    await asyncio.wait_for(second_done.wait(), 20)
    await second.stop()

    release_first.set()
    await first.stop()
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == "second"
    assert row.attempts == 2 and row.progress is None
    assert row.last_error["type"] == "LeaseExpired"
    assert progress_after_loss == [False]
    assert first.stats.lost == 1 and first.stats.completed == 0
    # Either worker's rescue loop may be the one that frees it (both run it); exactly once.
    assert first.stats.rescued + second.stats.rescued == 1
    assert second.stats.completed == 1
    # the rescue is logged, one line naming the job, with the fields for structured logs
    [rescue] = [r for r in caplog.records if getattr(r, "outcome", None) == "stalled"]
    assert rescue.job_id == result.id and rescue.queue == "default"  # type: ignore[attr-defined]
    assert f"job {result.id} (queue default) stalled" in rescue.getMessage()


async def test_heartbeat_keeps_a_long_job_and_notices_loss(
    jobs: JobQueue, registry: Registry
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @registry.kind("long", input=Task)
    async def long(ctx: JobContext, task: Task) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    result = await jobs.enqueue("long", {})
    worker = jobs.worker(concurrency=1, lease=0.6, heartbeat_interval=0.1, rescue_interval=30)
    worker.start()
    await asyncio.wait_for(started.wait(), 20)
    before = (await jobs.get(result.id)).heartbeat_at  # type: ignore[union-attr]

    async def heartbeat_moved() -> bool:
        row = await jobs.get(result.id)
        return row is not None and row.heartbeat_at is not None and row.heartbeat_at > before

    await eventually(heartbeat_moved)
    # Another actor takes the job (here: a direct re-claim with a new token).
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET lock_token = gen_random_uuid() WHERE id = $1", result.id
    )
    await asyncio.wait_for(cancelled.wait(), 20)
    await worker.stop()
    assert worker.stats.lost == 1
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.RUNNING  # the successor's row is untouched


async def test_handler_transaction_commits_with_fenced_progress(
    jobs: JobQueue, registry: Registry
) -> None:
    await jobs.db.pool.execute(f"CREATE TABLE {jobs.schema}.effects (job_id bigint, step int)")

    @registry.kind("batched", input=Task)
    async def batched(ctx: JobContext, task: Task) -> str:
        for step in range(3):
            async with ctx.transaction(progress={"step": step}) as conn:
                await conn.execute(
                    f"INSERT INTO {jobs.schema}.effects VALUES ($1, $2)", ctx.id, step
                )
        return "done"

    result = await jobs.enqueue("batched", {})
    await jobs.worker().run(until_drained=True)
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.COMPLETED and row.progress == {"step": 2}
    effects = await jobs.db.pool.fetch(f"SELECT step FROM {jobs.schema}.effects ORDER BY step")
    assert [r["step"] for r in effects] == [0, 1, 2]


async def test_handler_transaction_rolls_back_when_ownership_was_lost(
    jobs: JobQueue, registry: Registry
) -> None:
    await jobs.db.pool.execute(f"CREATE TABLE {jobs.schema}.effects (job_id bigint)")
    outcomes: list[str] = []

    @registry.kind("dispossessed", input=Task)
    async def dispossessed(ctx: JobContext, task: Task) -> None:
        await jobs.db.pool.execute(  # someone else takes the job over mid-handler
            f"UPDATE {jobs.schema}.jobs SET lock_token = gen_random_uuid() WHERE id = $1", ctx.id
        )
        try:
            async with ctx.transaction(progress={"cursor": 10}) as conn:
                await conn.execute(f"INSERT INTO {jobs.schema}.effects VALUES ($1)", ctx.id)
        except JobLost:
            outcomes.append("lost")
            raise

    result = await jobs.enqueue("dispossessed", {})
    worker = jobs.worker(concurrency=1, lease=60)
    worker.start()

    async def lost_seen() -> bool:
        return outcomes == ["lost"] and worker.stats.lost == 1

    await eventually(lost_seen)
    await worker.stop()
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.effects") == 0
    row = await jobs.get(result.id)
    assert row is not None and row.progress is None and row.status is Status.RUNNING


async def test_graceful_stop_finishes_in_flight_then_releases_the_rest(
    jobs: JobQueue, registry: Registry
) -> None:
    quick_started = asyncio.Event()
    stuck_started = asyncio.Event()
    release_quick = asyncio.Event()

    @registry.kind("quick", input=Task)
    async def quick(ctx: JobContext, task: Task) -> str:
        quick_started.set()
        await release_quick.wait()
        return "finished during shutdown"

    @registry.kind("stuck", input=Task)
    async def stuck(ctx: JobContext, task: Task) -> None:
        stuck_started.set()
        await asyncio.Event().wait()

    quick_job = await jobs.enqueue("quick", {})
    stuck_job = await jobs.enqueue("stuck", {})
    before = await jobs.get(stuck_job.id)
    assert before is not None
    stuck_due = before.run_at
    worker = jobs.worker(concurrency=2)
    worker.start()
    await asyncio.wait_for(asyncio.gather(quick_started.wait(), stuck_started.wait()), 20)
    stopping = asyncio.create_task(worker.stop(timeout=0.5))
    release_quick.set()
    await stopping
    quick_row = await jobs.get(quick_job.id)
    stuck_row = await jobs.get(stuck_job.id)
    assert quick_row is not None and quick_row.status is Status.COMPLETED
    assert stuck_row is not None and stuck_row.status is Status.PENDING
    assert stuck_row.attempts == 0  # released without using an attempt
    assert stuck_row.run_at == stuck_due  # and in its place in the queue


async def test_rescue_kills_a_job_on_its_last_attempt(jobs: JobQueue, registry: Registry) -> None:
    started = asyncio.Event()

    @registry.kind("hangs", input=Task, max_attempts=1)
    async def hangs(ctx: JobContext, task: Task) -> None:
        started.set()
        await asyncio.Event().wait()

    result = await jobs.enqueue("hangs", {})
    first = jobs.worker(concurrency=1, lease=60)
    first.start()
    await asyncio.wait_for(started.wait(), 20)
    await expire_lease(jobs, result.id)
    rescued = await jobs.db.fetch("rescue_stalled", 100, "unused_channel")
    assert [r["status"] for r in rescued] == ["dead"]
    await first.stop(timeout=0.1)
    row = await jobs.get(result.id)
    assert (
        row is not None and row.status is Status.DEAD and row.last_error["type"] == "LeaseExpired"
    )


async def test_a_job_killed_by_its_last_lease_resolves_its_dependents(
    jobs: JobQueue, registry: Registry
) -> None:
    started = asyncio.Event()

    @registry.kind("hangs_in_flow", input=Task, max_attempts=1)
    async def hangs(ctx: JobContext, task: Task) -> None:
        started.set()
        await asyncio.Event().wait()

    registry.declare("after", input=Task)
    flow = Flow()
    flow.add("hang", "hangs_in_flow", {})
    flow.add("after", "after", {})
    flow.edge("hang", "after", EdgePolicy.CASCADE)
    submitted = await jobs.submit_flow(flow)
    first = jobs.worker(concurrency=1, lease=60)
    first.start()
    await asyncio.wait_for(started.wait(), 20)
    await expire_lease(jobs, submitted.job_ids["hang"])
    rescuer = jobs.worker(concurrency=1, lease=60, rescue_interval=0.05, queues=["elsewhere"])
    rescuer.start()

    async def cascaded() -> bool:
        row = await jobs.get(submitted.job_ids["after"])
        return row is not None and row.status is Status.DEAD

    await eventually(cascaded)
    await rescuer.stop()
    await first.stop(timeout=0.1)


async def test_a_failed_outcome_write_neither_hangs_the_worker_nor_loses_the_job(
    jobs: JobQueue, registry: Registry
) -> None:
    runs: list[int] = []

    @registry.kind("unlucky", input=Task, max_attempts=3)
    async def unlucky(ctx: JobContext, task: Task) -> int:
        runs.append(ctx.attempts)
        return ctx.attempts

    original = jobs.db.fetch
    failures = 0

    async def failing_once(name, *args, **kw):
        nonlocal failures
        if name == "finish" and failures == 0:
            failures += 1
            raise ValueError("injected: the outcome write fails once")  # not a connection error
        return await original(name, *args, **kw)

    jobs.db.fetch = failing_once  # type: ignore[method-assign]
    result = await jobs.enqueue("unlucky", {})
    worker = jobs.worker(concurrency=1, lease=0.5, heartbeat_interval=0.1, rescue_interval=0.1)
    worker.start()

    async def completed() -> bool:
        row = await jobs.get(result.id)
        return row is not None and row.status is Status.COMPLETED

    await eventually(completed)
    await asyncio.wait_for(worker.stop(), 20)  # and the worker still stops
    assert runs == [1, 2] and failures == 1
    row = await jobs.get(result.id)
    assert row is not None and row.output == 2 and row.last_error["type"] == "LeaseExpired"


async def test_completing_commits_the_effect_and_the_completion_together(
    jobs: JobQueue, registry: Registry
) -> None:
    await jobs.db.pool.execute(f"CREATE TABLE {jobs.schema}.effects (job_id bigint)")
    events: list[tuple[str, object]] = []

    @registry.kind("charge", input=Task)
    async def charge(ctx: JobContext, task: Task) -> str:
        async with ctx.completing(output={"charged": task.n}) as conn:
            await conn.execute(f"INSERT INTO {jobs.schema}.effects VALUES ($1)", ctx.id)
            # Inside the transaction the job is still running: the completion commits with it.
            status = await conn.fetchval(
                f"SELECT status FROM {jobs.schema}.jobs WHERE id = $1", ctx.id
            )
            assert status == "running"
        return "ignored: completing() stored the output"

    result = await jobs.enqueue("charge", {"n": 12})
    worker = jobs.worker(on_event=lambda event, ctx, detail: events.append((event, detail)))
    await worker.run(until_drained=True)
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == {"charged": 12}
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.effects") == 1
    assert worker.stats.completed == 1 and worker.stats.lost == 0
    assert [e for e, _ in events] == ["active", "completed"]
    assert events[1][1]["output"] == {"charged": 12}


async def test_completing_rolls_back_the_effect_when_the_job_was_taken_over(
    jobs: JobQueue, registry: Registry
) -> None:
    await jobs.db.pool.execute(f"CREATE TABLE {jobs.schema}.effects (job_id bigint)")
    seen: list[str] = []

    @registry.kind("charge", input=Task)
    async def charge(ctx: JobContext, task: Task) -> None:
        await jobs.db.pool.execute(  # a rescuer took the job over meanwhile
            f"UPDATE {jobs.schema}.jobs SET lock_token = gen_random_uuid() WHERE id = $1", ctx.id
        )
        try:
            async with ctx.completing() as conn:
                await conn.execute(f"INSERT INTO {jobs.schema}.effects VALUES ($1)", ctx.id)
        except JobLost:
            seen.append("lost")
            raise

    result = await jobs.enqueue("charge", {})
    worker = jobs.worker(concurrency=1, lease=60)
    worker.start()

    async def lost_seen() -> bool:
        return seen == ["lost"] and worker.stats.lost == 1

    await eventually(lost_seen)
    await worker.stop()
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.effects") == 0
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.RUNNING and row.output is None


async def test_completing_that_raises_writes_nothing_and_retries(
    jobs: JobQueue, registry: Registry
) -> None:
    await jobs.db.pool.execute(f"CREATE TABLE {jobs.schema}.effects (job_id bigint)")

    @registry.kind("charge", input=Task, max_attempts=2, backoff=Backoff.fixed(0.01))
    async def charge(ctx: JobContext, task: Task) -> None:
        async with ctx.completing(output=ctx.attempts) as conn:
            await conn.execute(f"INSERT INTO {jobs.schema}.effects VALUES ($1)", ctx.id)
            if ctx.attempts == 1:
                raise ConnectionError("card network down")

    result = await jobs.enqueue("charge", {})
    await jobs.worker().run(until_drained=True)
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == 2
    assert row.attempts == 2 and row.last_error["message"] == "card network down"
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.effects") == 1


async def test_completing_refuses_an_output_that_is_not_json(
    jobs: JobQueue, registry: Registry
) -> None:
    @registry.kind("charge", input=Task, max_attempts=1)
    async def charge(ctx: JobContext, task: Task) -> None:
        async with ctx.completing(output=object()):
            pass

    result = await jobs.enqueue("charge", {})
    await jobs.worker().run(until_drained=True)
    row = await jobs.get(result.id)
    assert row is not None and row.status is Status.DEAD
    assert row.last_error["type"] == "InvalidOption" and "output" in row.last_error["message"]


async def test_a_rescued_job_keeps_its_place_in_the_queue(
    jobs: JobQueue, registry: Registry
) -> None:
    order: list[int] = []

    @registry.kind("ordered", input=Task)
    async def ordered(ctx: JobContext, task: Task) -> None:
        order.append(task.n)

    await jobs.enqueue("ordered", {"n": 1})
    # A worker claimed it and died: the row stays running until its (tiny) lease is over.
    assert len(await jobs.db.fetch("claim", ["default"], ["ordered"], 1, 0.001, 0)) == 1
    await jobs.enqueue_many([JobSpec("ordered", {"n": n}) for n in (2, 3)])
    rescued = await jobs.db.fetch("rescue_stalled", 100, notify_channel(jobs.schema))
    assert [r["status"] for r in rescued] == ["pending"]
    await jobs.worker(concurrency=1).run(until_drained=True)
    assert order == [1, 2, 3]  # back in its place, not behind the jobs enqueued meanwhile


async def test_a_stall_budget_gives_the_attempt_back_until_it_is_spent(
    jobs: JobQueue, registry: Registry
) -> None:
    """With ``set_max_stalls(queue, 1)`` a job whose worker died runs again without losing an
    attempt; when it stalls a second time its failure ("stalled more than allowable limit") is
    deferred: the next claim records it without running the handler, using that attempt."""
    ran: list[int] = []

    @registry.kind("fragile", input=Task, max_attempts=1)
    async def fragile(ctx: JobContext, task: Task) -> None:
        ran.append(ctx.id)

    await jobs.set_max_stalls("default", 1)
    assert (await jobs.queue_settings("default")).max_stalls == 1
    job = await jobs.enqueue("fragile", {})
    channel = notify_channel(jobs.schema)
    for stalls in (1, 2):
        [claimed] = await jobs.db.fetch("claim", ["default"], ["fragile"], 1, 30.0, 0)
        assert claimed["stalls"] == stalls - 1 and claimed["deferred_failure"] is None
        await expire_lease(jobs, job.id)
        rescued = await jobs.db.fetch("rescue_stalled", 100, channel)
        assert [(r["id"], r["status"]) for r in rescued] == [(job.id, "pending")]
        row = await jobs.get(job.id)
        assert row is not None and row.attempts == 0 and row.stalls == stalls
    assert row.last_error["message"] == "job stalled more than allowable limit"
    await jobs.worker().run(until_drained=True)
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.DEAD and ran == []
    assert (row.attempts, row.stalls) == (1, 2)
    assert row.last_error["message"] == "job stalled more than allowable limit"
    assert "deferred" not in row.last_error
    # a manual re-drive runs it
    await jobs.requeue(job.id, reset_attempts=False)
    await jobs.worker().run(until_drained=True)
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.COMPLETED and ran == [job.id]
    await jobs.set_max_stalls("default", None)
    assert (await jobs.queue_settings("default")).max_stalls is None


async def test_a_deferred_stall_failure_reaches_the_handler_context(
    jobs: JobQueue, registry: Registry
) -> None:
    """A manual claim of a job whose stall failure is deferred carries it
    (``ctx.deferred_failure``, for the caller to record) and its stall count."""
    registry.declare("doomed", input=Task)
    await jobs.set_max_stalls("default", 0)
    job = await jobs.enqueue("doomed", {})
    assert len(await jobs.db.fetch("claim", ["default"], ["doomed"], 1, 30.0, 0)) == 1
    await expire_lease(jobs, job.id)
    await jobs.db.fetch("rescue_stalled", 100, notify_channel(jobs.schema))
    [ctx] = await jobs.claim(["default"], kinds=["doomed"])
    assert ctx.stalls == 1 and ctx.deferred_failure is not None
    assert ctx.deferred_failure["message"] == "job stalled more than allowable limit"


async def test_on_renewed_hears_each_heartbeat_with_the_jobs_it_renewed(
    jobs: JobQueue, registry: Registry
) -> None:
    renewals: list[list[int]] = []
    twice = asyncio.Event()

    def renewed(contexts: list[JobContext]) -> None:
        renewals.append([c.id for c in contexts])
        if len(renewals) >= 2:
            twice.set()

    @registry.kind("long", input=Task)
    async def long(ctx: JobContext, task: Task) -> None:
        await asyncio.wait_for(twice.wait(), 10)  # outlives two heartbeats

    job = await jobs.enqueue("long", {})
    worker = jobs.worker(lease=0.6, heartbeat_interval=0.1, on_renewed=renewed)
    await worker.run(until_drained=True)
    assert len(renewals) >= 2 and all(ids == [job.id] for ids in renewals)
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.COMPLETED


async def test_a_heartbeat_interval_past_the_lease_lets_long_jobs_lapse(
    jobs: JobQueue, registry: Registry
) -> None:
    """``heartbeat_interval`` at or past the lease (BullMQ's lockRenewTime past lockDuration):
    a job running longer than its lease lapses (handler cancelled, ``lost``, nothing written,
    left to the rescue); a short one completes; nothing is claimed ahead."""
    cancelled = asyncio.Event()
    events: list[tuple[str, int]] = []

    @registry.kind("lapses", input=Task, max_attempts=3)
    async def lapses(ctx: JobContext, task: Task) -> int:
        if task.n == 0 or ctx.stalls:
            return ctx.stalls
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 2

    with pytest.raises(InvalidOption, match="claim_ahead"):
        jobs.worker(lease=0.4, heartbeat_interval=0.4, claim_ahead=1)
    quick = await jobs.enqueue("lapses", {"n": 0})
    slow = await jobs.enqueue("lapses", {"n": 1})
    worker = jobs.worker(
        concurrency=2,
        lease=0.4,
        heartbeat_interval=10,
        rescue_interval=30,
        on_event=lambda event, ctx, detail: events.append((event, ctx.id)),
    )
    assert worker.heartbeat_interval == 10
    worker.start()
    await asyncio.wait_for(cancelled.wait(), 20)
    await worker.stop()
    assert worker.stats.lost == 1 and worker.stats.completed == 1
    assert ("lost", slow.id) in events and ("completed", quick.id) in events
    row = await jobs.get(slow.id)
    assert row is not None and row.status is Status.RUNNING  # nothing written: the rescue's
    second = jobs.worker(lease=60, rescue_interval=0.05)
    second.start()

    async def rerun() -> bool:
        row = await jobs.get(slow.id)
        return row is not None and row.status is Status.COMPLETED

    await eventually(rerun)
    await second.stop()
    row = await jobs.get(slow.id)
    assert row is not None and (row.output, row.stalls) == (1, 1)
