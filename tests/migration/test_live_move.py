"""The live move (migration_tools/live.py): BullMQ producers and workers keep running on Redis
while the tool moves their queues to PostgreSQL. Redis data is written and processed by the
real BullMQ package; the facade runs on PostgreSQL at the same time.

Interleavings considered, each with its test here:
- a job a BullMQ worker holds (active, locked) is never taken; it is moved once it is done
  (or left to the worker, its outcome staying in Redis's history);
- a job that moved on between the tool's read and its take (promoted, taken by a worker) is
  refused by the take, and read again by the next pass;
- the tool stopped after the take and before the write: the job is runnable nowhere until
  the rerun writes it (from the queue's ``pgjobs:moving`` record);
- the tool stopped after the write and before the release: the rerun releases it, writing
  nothing twice (the import ledger);
- producers adding to Redis and a BullMQ worker processing during the move, a facade worker
  processing on PostgreSQL: every job runs once, in one store, none left in either."""

from __future__ import annotations

import asyncio
from typing import Any

import bullmq
import pytest
import redis.asyncio as aioredis

import bullmq_compat
from migration_tools import ExitCode, live, migrate
from pgjobs import JobQueue
from tests.migration.test_migration import options


def facade(jobs: JobQueue, prefix: str) -> dict[str, Any]:
    return {"connection": jobs, "prefix": prefix}


def redis_options(redis_url: str, prefix: str) -> dict[str, Any]:
    return {"connection": redis_url, "prefix": prefix}


async def test_waiting_delayed_and_prioritized_jobs_move_and_leave_redis(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    waiting = await queue.add("w", {"n": 1})
    delayed = await queue.add("d", {"n": 2}, {"delay": 3_600_000})
    prioritized = await queue.add("p", {"n": 3}, {"priority": 5})
    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 3 and report.passes == 1, report.render()
    for job in (waiting, delayed, prioritized):
        assert await queue.getJob(job.id) is None  # gone from Redis, hash and all
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    states = {job.id: await ours.getJobState(job.id) for job in (waiting, delayed, prioritized)}
    assert states == {waiting.id: "waiting", delayed.id: "delayed", prioritized.id: "prioritized"}
    assert (await ours.getJob(delayed.id)).data == {"n": 2}  # type: ignore[union-attr]
    counts = await live.still_in_redis(aioredis.from_url(redis_url), f"{prefix}:main:")
    assert counts == {}
    await ours.close()
    await queue.close()


async def test_an_active_job_is_left_to_its_bullmq_worker_and_the_rest_moves(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """A job a BullMQ worker is running (locked) stays; the deadline ends the move with it
    reported; once the worker finished it, a rerun finds nothing unfinished left."""
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Any, token: str) -> str:
        started.set()
        await release.wait()
        return "done in redis"

    worker = bullmq.Worker("main", hold, redis_options(redis_url, prefix))
    try:
        busy = await queue.add("busy", {})
        await asyncio.wait_for(started.wait(), 30)
        await worker.pause(True)  # takes nothing more; the busy job stays active and locked
        others = [await queue.add("other", {"n": n}) for n in range(3)]
        report = await migrate(
            options(
                redis_url, pg_dsn, jobs, prefix, live=True, live_deadline=0.5, live_interval=0.1
            )
        )
        assert report.exit_code is ExitCode.INCOMPLETE, report.render()
        assert report.written == 3, report.render()
        assert report.left[f"{prefix}:main"] == {"active": 1}, report.render()
        assert await queue.getJobState(busy.id) == "active"
        ours = bullmq_compat.Queue("main", facade(jobs, prefix))
        assert [await ours.getJobState(j.id) for j in others] == ["waiting"] * 3
        assert await ours.getJob(busy.id) is None

        finished = asyncio.get_running_loop().create_future()
        worker.on("completed", lambda job, *_: finished.done() or finished.set_result(job.id))
        release.set()
        assert await asyncio.wait_for(finished, 30) == busy.id
        await worker.close()
        again = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
        assert again.exit_code is ExitCode.OK, again.render()
        assert again.written == 0 and again.left[f"{prefix}:main"] == {"completed": 1}
        await ours.close()
        await queue.close()
    finally:
        release.set()
        await worker.close()


async def test_the_take_refuses_a_job_that_moved_on_or_is_locked(
    redis_url: str, prefix: str
) -> None:
    """The take decides on Redis as it is: a job read as delayed that BullMQ promoted since,
    a job with a lock, a job removed: nothing is taken, not even the other jobs of the unit."""
    redis = aioredis.from_url(redis_url)
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    base = f"{prefix}:main:"
    promoted = await queue.add("x", {}, {"delay": 3_600_000})
    await (await queue.getJob(promoted.id)).promote()  # type: ignore[union-attr]
    plain = await queue.add("y", {})
    reason = await live.quarantine(
        redis, [(base, plain.id, "wait"), (base, promoted.id, "delayed")]
    )
    assert reason == f"{base}{promoted.id} no longer delayed"
    assert await queue.getJobState(plain.id) == "waiting"  # all or nothing
    assert await redis.hlen(base + live.MOVING) == 0

    await redis.set(f"{base}{plain.id}:lock", "someone")
    assert await live.quarantine(redis, [(base, plain.id, "wait")]) == f"{base}{plain.id} locked"
    await redis.delete(f"{base}{plain.id}:lock")
    await (await queue.getJob(plain.id)).remove()  # type: ignore[union-attr]
    assert await live.quarantine(redis, [(base, plain.id, "wait")]) == f"{base}{plain.id} gone"

    # Taken: out of every container BullMQ reads, its hash kept; given back: as it was.
    taken = await queue.add("z", {})
    assert await live.quarantine(redis, [(base, taken.id, "wait")]) is None
    assert await queue.getJobState(taken.id) == "unknown"
    assert await queue.getWaitingCount() == 1  # only the promoted job
    await live.restore(redis, [(base, taken.id)])
    assert await queue.getJobState(taken.id) == "waiting"
    await queue.close()
    await redis.aclose()


async def test_a_move_stopped_after_the_take_is_finished_by_the_rerun(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """Taken and not written (the tool killed there): runnable in neither store; the rerun
    reads it from the queue's moving record, with its state, and writes and releases it."""
    redis = aioredis.from_url(redis_url)
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    base = f"{prefix}:main:"
    job = await queue.add("late", {"n": 7}, {"delay": 3_600_000})
    assert await live.quarantine(redis, [(base, job.id, "delayed")]) is None
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert await ours.getJob(job.id) is None and await queue.getDelayedCount() == 0

    report = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.written == 1
    moved = await ours.getJob(job.id)
    assert moved is not None and moved.data == {"n": 7}
    assert await ours.getJobState(job.id) == "delayed"
    assert moved.timestamp + moved.delay == job.timestamp + job.delay  # due when it was due
    assert await redis.exists(base + job.id) == 0 and await redis.hlen(base + live.MOVING) == 0
    await ours.close()
    await queue.close()
    await redis.aclose()


async def test_a_move_stopped_after_the_write_is_released_by_the_rerun(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written and not released (the tool killed there): the rerun releases it from Redis and
    writes nothing twice."""
    queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    job = await queue.add("once", {"n": 1})

    async def killed(*_args: Any) -> int:
        raise ConnectionError("killed between the write and the release")

    with monkeypatch.context() as patched:
        patched.setattr(live, "release", killed)
        first = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert first.exit_code is ExitCode.INCOMPLETE, first.render()
    assert await queue.getJobState(job.id) == "unknown"  # taken, not runnable in Redis
    again = await migrate(options(redis_url, pg_dsn, jobs, prefix, live=True))
    assert again.exit_code is ExitCode.OK, again.render()
    assert again.written == 0 and again.already_done == 1, again.render()
    assert await queue.getJob(job.id) is None
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert await ours.getJobCounts("waiting") == {"waiting": 1}
    await ours.close()
    await queue.close()


async def test_every_job_runs_once_while_both_stores_are_busy(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """A BullMQ producer keeps adding to Redis and a BullMQ worker keeps processing there while
    the live move runs and a facade worker processes on PostgreSQL: once the producer stops,
    the move ends with nothing left, and every job ran exactly once, in one store."""
    total = 300
    ran: list[tuple[str, str]] = []

    def processor(store: str) -> Any:
        async def process(job: Any, token: str) -> None:
            ran.append((store, job.data["n"]))
            await asyncio.sleep(0.002)

        return process

    redis_queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    redis_worker = bullmq.Worker("main", processor("redis"), redis_options(redis_url, prefix))
    pg_worker = bullmq_compat.Worker("main", processor("postgres"), facade(jobs, prefix))

    async def produce() -> None:
        for n in range(total):
            delay = {"delay": 200} if n % 7 == 0 else {}
            await redis_queue.add("job", {"n": n}, delay)
            if n % 20 == 0:
                await asyncio.sleep(0.05)

    producing = asyncio.ensure_future(produce())
    await asyncio.sleep(0.1)
    moving = asyncio.ensure_future(
        migrate(
            options(
                redis_url,
                pg_dsn,
                jobs,
                prefix,
                live=True,
                live_interval=0.2,
                live_quiet=1.5,
                live_deadline=60,
            )
        )
    )
    await producing
    report = await asyncio.wait_for(moving, 90)
    assert report.exit_code is ExitCode.OK, report.render()
    assert report.passes >= 2, report.render()

    async def all_ran() -> None:
        while len(ran) < total:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(all_ran(), 60)
    await redis_worker.close()
    await pg_worker.close()
    numbers = sorted(n for _, n in ran)
    assert numbers == list(range(total)), "every job once"  # no job twice, none lost
    stores = {store for store, _ in ran}
    assert stores == {"redis", "postgres"}  # both were busy
    counts = await live.still_in_redis(aioredis.from_url(redis_url), f"{prefix}:main:")
    assert set(counts) <= {"completed", "failed"}, counts
    await redis_queue.close()


async def test_a_scheduler_ticks_once_per_slot_across_the_move(
    redis_url: str, pg_dsn: str, jobs: JobQueue, prefix: str
) -> None:
    """A job scheduler firing every 300 ms, run by a BullMQ worker on Redis, moves with its
    pending iteration while both workers run: no slot fires twice, and the slot Redis had
    scheduled next is the first to fire on PostgreSQL (BullMQ itself skips slots a late
    worker missed; the move skips none)."""
    fired: list[tuple[str, int]] = []

    def processor(store: str) -> Any:
        async def process(job: Any, token: str) -> None:
            fired.append((store, int(job.id.rsplit(":", 1)[1])))

        return process

    redis_queue = bullmq.Queue("main", redis_options(redis_url, prefix))
    await redis_queue.upsertJobScheduler("tick", {"every": 300}, "tick", {})
    redis_worker = bullmq.Worker("main", processor("redis"), redis_options(redis_url, prefix))
    pg_worker = bullmq_compat.Worker("main", processor("postgres"), facade(jobs, prefix))
    try:

        async def fired_in(store: str, count: int) -> None:
            while sum(s == store for s, _ in fired) < count:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(fired_in("redis", 3), 30)
        report = await migrate(
            options(redis_url, pg_dsn, jobs, prefix, live=True, live_interval=0.1)
        )
        assert report.exit_code is ExitCode.OK, report.render()
        # the first run on PostgreSQL: the iteration Redis had pending
        pending = await jobs.db.pool.fetchval(
            f"SELECT job_key FROM {jobs.schema}.jobs ORDER BY id LIMIT 1"
        )
        await asyncio.wait_for(fired_in("postgres", 3), 30)
    finally:
        await redis_worker.close()
        await pg_worker.close()
    slots = [ms for _, ms in fired]
    assert len(slots) == len(set(slots)), fired  # no slot fired twice
    on_redis = [ms for store, ms in fired if store == "redis"]
    on_postgres = [ms for store, ms in fired if store == "postgres"]
    assert max(on_redis) < min(on_postgres), fired  # one store at a time
    assert pending == f"repeat:tick:{min(on_postgres)}", (pending, fired)  # the slot after
    assert await redis_queue.getJobSchedulers() == []
    ours = bullmq_compat.Queue("main", facade(jobs, prefix))
    assert [s["key"] for s in await ours.getJobSchedulers()] == ["tick"]
    await ours.close()
    await redis_queue.close()
