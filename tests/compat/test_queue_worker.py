"""The BullMQ facade, one documented BullMQ behaviour per test, on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

from bullmq_compat import DelayedError, Queue, UnrecoverableError, Worker
from pgjobs import InvalidOption, JobQueue, SchemaMissing
from tests.helpers import eventually


async def run_until(worker: Worker, done: asyncio.Event) -> None:
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()


async def test_priority_order_is_bullmqs(opts: dict) -> None:
    queue = Queue("prio", opts)
    await queue.add("a", {"n": "a"})
    await queue.add("b", {"n": "b"}, {"priority": 5})
    await queue.add("c", {"n": "c"}, {"priority": 1})
    await queue.add("d", {"n": "d"})
    await queue.add("e", {"n": "e"}, {"priority": 2})
    seen: list[str] = []
    done = asyncio.Event()

    async def process(job, token):
        seen.append(job.data["n"])
        if len(seen) == 5:
            done.set()

    await run_until(Worker("prio", process, opts), done)
    # No priority runs before any prioritized job; among prioritized, lower first.
    assert seen == ["a", "d", "c", "e", "b"]
    await queue.close()


async def test_job_id_names_one_job_over_every_state(opts: dict) -> None:
    queue = Queue("keys", opts)
    first = await queue.add("x", {"v": 1}, {"jobId": "order:1"})
    again = await queue.add("x", {"v": 2}, {"jobId": "order:1"})
    assert first.id == again.id == "order:1"
    runs: list[int] = []
    done = asyncio.Event()

    async def process(job, token):
        runs.append(job.data["v"])
        done.set()
        return "ok"

    await run_until(Worker("keys", process, opts), done)
    after = await queue.add("x", {"v": 3}, {"jobId": "order:1"})
    assert after.id == "order:1" and runs == [1]
    stored = await queue.getJob("order:1")
    assert stored is not None and stored.data == {"v": 1} and stored.returnvalue == "ok"
    assert await stored.getState() == "completed"
    other = Queue("other-keys", opts)
    elsewhere = await other.add("x", {}, {"jobId": "order:1"})
    assert (await other.getJob("order:1")) is not None and elsewhere.id == "order:1"
    assert await queue.getJobCountByTypes("completed", "waiting") == 1
    await queue.close()
    await other.close()


async def test_automatic_ids_are_strings_found_by_getjob(opts: dict) -> None:
    queue = Queue("auto", opts)
    job = await queue.add("x", {"k": 1})
    assert isinstance(job.id, str) and job.id.isdigit()
    found = await queue.getJob(job.id)
    assert found is not None and found.id == job.id and found.data == {"k": 1} and found.name == "x"
    assert await Queue("not-auto", opts).getJob(job.id) is None  # another queue's id
    assert await queue.getJob("999999999") is None
    await queue.close()


async def test_attempts_made_counts_finished_attempts(opts: dict) -> None:
    queue = Queue("retries", opts)
    await queue.add("flaky", {}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 10}})
    seen: list[int] = []
    failed: list[tuple[int, str]] = []
    completed: list[tuple[int, object]] = []
    done = asyncio.Event()

    async def process(job, token):
        seen.append(job.attemptsMade)
        if job.attemptsMade < 2:
            raise ValueError(f"try {job.attemptsMade}")
        return "third time"

    worker = Worker("retries", process, opts)
    worker.on("failed", lambda job, err: failed.append((job.attemptsMade, str(err))))

    async def on_completed(job, result):  # an async listener runs too
        completed.append((job.attemptsMade, result))
        done.set()

    worker.on("completed", on_completed)
    await run_until(worker, done)
    assert seen == [0, 1, 2]
    assert failed == [(1, "try 0"), (2, "try 1")]
    assert completed == [(3, "third time")]
    [job] = await queue.getCompleted()
    assert job.attemptsMade == 3 and job.returnvalue == "third time"
    # One stack trace per failed attempt, oldest first, kept after the job completed.
    assert len(job.stacktrace) == 2
    assert "try 0" in job.stacktrace[0] and "try 1" in job.stacktrace[1]
    await queue.close()


async def test_a_retry_started_before_its_last_failure_was_told_keeps_both_events(
    opts: dict,
) -> None:
    """A retry can be claimed again (and start) before the worker hears that the previous
    attempt's failure was written. Each attempt's ``failed`` still reaches the listener with
    that attempt's job: the late event of attempt 1 must not take attempt 2's job."""
    queue = Queue("late-event", opts)
    await queue.add("flaky", {}, {"attempts": 2})
    second_started = asyncio.Event()
    failed: list[tuple[int, str]] = []
    done = asyncio.Event()

    async def process(job, token):
        if job.attemptsMade == 1:
            second_started.set()
        raise ValueError(f"try {job.attemptsMade}")

    worker = Worker("late-event", process, opts)
    told = worker._on_engine_event  # the engine's outcome events, in the order it writes them

    def told_late(event, ctx, detail):
        if event == "retrying":  # hold attempt 1's event until attempt 2 is running

            async def later():
                await second_started.wait()
                told(event, ctx, detail)

            return later()
        return told(event, ctx, detail)

    worker._on_engine_event = told_late  # type: ignore[method-assign]

    def on_failed(job, err):
        failed.append((job.attemptsMade, str(err)))
        if len(failed) == 2:
            done.set()

    worker.on("failed", on_failed)
    await run_until(worker, done)
    assert sorted(failed) == [(1, "try 0"), (2, "try 1")]
    await queue.close()


async def test_unrecoverable_error_fails_at_once(opts: dict) -> None:
    queue = Queue("fatal", opts)
    added = await queue.add("doomed", {}, {"attempts": 5})
    done = asyncio.Event()

    async def process(job, token):
        raise UnrecoverableError("bad input file")

    worker = Worker("fatal", process, opts)
    worker.on("failed", lambda job, err: done.set())
    await run_until(worker, done)
    job = await queue.getJob(added.id)
    assert job is not None and await job.getState() == "failed"
    assert job.attemptsMade == 1 and job.failedReason == "bad input file"
    assert "UnrecoverableError" in job.stacktrace[0]
    await queue.close()


async def test_remove_on_complete_deletes_the_job(opts: dict) -> None:
    queue = Queue("tidy", opts)
    kept = await queue.add("keep", {})
    gone = await queue.add("go", {}, {"removeOnComplete": True})
    done = asyncio.Event()
    count = 0

    async def process(job, token):
        nonlocal count
        count += 1

    worker = Worker("tidy", process, opts)
    worker.on("completed", lambda job, result: done.set() if count == 2 else None)
    await run_until(worker, done)
    assert await queue.getJob(gone.id) is None
    assert await queue.getJob(kept.id) is not None
    await queue.close()


async def test_states_and_counts(opts: dict) -> None:
    queue = Queue("states", opts)
    waiting = await queue.add("w", {})
    prioritized = await queue.add("p", {}, {"priority": 3})
    delayed = await queue.add("d", {}, {"delay": 60_000})
    assert await waiting.getState() == "waiting"
    assert await prioritized.getState() == "prioritized"
    assert await delayed.getState() == "delayed"
    counts = await queue.getJobCounts()
    assert counts == {
        "active": 0,
        "completed": 0,
        "delayed": 1,
        "failed": 0,
        "prioritized": 1,
        "waiting": 1,
        "waiting-children": 0,
    }
    assert await queue.getJobCounts("waiting", "delayed") == {"waiting": 1, "delayed": 1}
    await delayed.promote()
    assert await delayed.getState() == "waiting"
    with pytest.raises(RuntimeError, match="not in the delayed state"):
        await delayed.promote()
    assert [j.id for j in await queue.getWaiting()] == [waiting.id, delayed.id]
    assert [j.id for j in await queue.getPrioritized()] == [prioritized.id]
    assert await queue.count() == 3
    assert await (await queue.getJob(prioritized.id)).getState() == "prioritized"  # type: ignore[union-attr]
    await queue.close()


async def test_pause_resume_drain_obliterate(opts: dict) -> None:
    queue = Queue("control", opts)
    assert not await queue.isPaused()
    await queue.pause()
    assert await queue.isPaused()
    await queue.resume()
    assert not await queue.isPaused()
    await queue.addBulk(
        [{"name": "a", "data": {}}, {"name": "b", "data": {}, "opts": {"delay": 60_000}}]
    )
    await queue.drain()
    assert await queue.getJobCounts("waiting", "delayed") == {"waiting": 0, "delayed": 1}
    await queue.drain(delayed=True)
    assert await queue.count() == 0

    started, release = asyncio.Event(), asyncio.Event()

    async def process(job, token):
        started.set()
        await release.wait()

    await queue.add("busy", {})
    worker = Worker("control", process, opts)
    await asyncio.wait_for(started.wait(), 30)
    with pytest.raises(RuntimeError, match="active jobs"):
        await queue.obliterate()
    await queue.obliterate(force=True)
    release.set()
    await worker.close()
    assert await queue.getJobCountByTypes(*("active", "completed", "waiting", "failed")) == 0
    await queue.close()


async def test_log_without_await_takes_effect(opts: dict) -> None:
    queue = Queue("logs", opts)
    added = await queue.add("chatty", {})
    done = asyncio.Event()

    async def process(job, token):
        job.log("first line")  # no await, as JavaScript code ports it
        job.log("second line")
        return 1

    worker = Worker("logs", process, opts)
    worker.on("completed", lambda job, result: done.set())
    await run_until(worker, done)
    logs = await queue.getJobLogs(added.id)
    assert logs == {"logs": ["first line", "second line"], "count": 2}
    await queue.close()


async def test_move_to_delayed_does_not_use_an_attempt(opts: dict) -> None:
    queue = Queue("defer", opts)
    added = await queue.add("later", {}, {"attempts": 1})
    done = asyncio.Event()
    runs: list[int] = []

    async def process(job, token):
        runs.append(job.attemptsMade)
        if len(runs) < 3:
            await job.moveToDelayed(time.time() * 1000 + 10, token)
            raise DelayedError()
        return "finally"

    worker = Worker("defer", process, opts)
    failed: list[object] = []
    worker.on("failed", lambda job, err: failed.append(err))
    worker.on("completed", lambda job, result: done.set())
    await run_until(worker, done)
    job = await queue.getJob(added.id)
    assert job is not None and await job.getState() == "completed" and job.returnvalue == "finally"
    assert runs == [0, 0, 0] and failed == []  # attempts=1, yet three runs: no attempt was used
    await queue.close()


async def test_worker_limiter_spaces_its_starts_and_sets_no_queue_limit(
    opts: dict, jobs: JobQueue
) -> None:
    queue = Queue("limited", opts)
    await queue.addBulk([{"name": "j", "data": {"i": i}} for i in range(4)])
    done = asyncio.Event()
    count = 0

    async def process(job, token):
        nonlocal count
        count += 1
        if count == 4:
            done.set()

    worker = Worker(
        "limited", process, {**opts, "limiter": {"max": 2, "duration": 400}, "concurrency": 4}
    )
    await run_until(worker, done)
    assert await queue.getGlobalRateLimit() is None  # the limiter went with its claims
    assert (await jobs.queue_settings(queue.qualifiedName)).rate_limit is None
    starts = sorted(r.started_at for r in await jobs.list_jobs())
    assert (starts[2] - starts[0]).total_seconds() >= 0.4
    await queue.close()


async def test_limiter_errors_name_the_bullmq_option(opts: dict) -> None:
    async def process(job, token):
        return None

    for limiter, option in (
        ({"max": 0, "duration": 1000}, "limiter.max"),
        ({"max": "8", "duration": 1000}, "limiter.max"),
        ({"max": 8}, "limiter.duration"),
        ({"max": 8, "duration": 0}, "limiter.duration"),
        ([8, 1000], "limiter"),
    ):
        with pytest.raises(InvalidOption, match=option.replace(".", r"\.")) as refused:
            Worker("bad-limiter", process, {**opts, "limiter": limiter, "autorun": False})
        assert refused.value.option == option
    queue = Queue("bad-limiter", opts)
    with pytest.raises(InvalidOption, match="max"):
        await queue.setGlobalRateLimit(0, 1000)
    with pytest.raises(InvalidOption, match="duration"):
        await queue.setGlobalRateLimit(5, -1)
    assert await queue.getGlobalRateLimit() is None
    await queue.close()


async def test_rate_limit_ttl_reads_the_window_of_the_workers_with_a_limiter(
    opts: dict, jobs: JobQueue
) -> None:
    """As BullMQ's limiter key: open while the window the limited workers share lasts, full
    for a ``maxJobs`` it has reached; a worker without a limiter still takes the jobs."""
    queue = Queue("ttl", opts)
    assert await queue.getRateLimitTtl() == -2
    done = asyncio.Event()

    async def process(job, token):
        done.set()

    limited = Worker("ttl", process, {**opts, "limiter": {"max": 1, "duration": 60000}})
    await queue.addBulk([{"name": "j", "data": {"i": i}} for i in range(3)])
    await run_until(limited, done)
    assert 0 < await queue.getRateLimitTtl() <= 60000  # the workers' window is open
    assert 0 < await queue.getRateLimitTtl(1) <= 60000  # and full for a max of 1
    assert await queue.getRateLimitTtl(2) == 0
    assert await queue.getGlobalRateLimit() is None
    settings = await jobs.queue_settings(queue.qualifiedName)
    assert settings.rate_limit is None and settings.worker_window_count == 1
    finished = 0
    both = asyncio.Event()

    async def free_process(job, token):
        nonlocal finished
        finished += 1
        if finished == 2:
            both.set()

    await run_until(Worker("ttl", free_process, opts), both)
    assert await queue.getJobCountByTypes("completed") == 3
    await queue.close()


async def test_a_global_rate_limit_holds_workers_with_and_without_a_limiter(
    opts: dict, jobs: JobQueue
) -> None:
    """setGlobalRateLimit is a setting of the queue: every worker honours it, one with a
    ``limiter`` as well (with both, a claim is held by either window)."""
    queue = Queue("global", opts)
    assert await queue.setGlobalRateLimit(2, 60000) == 2
    await queue.addBulk([{"name": "j", "data": {"i": i}} for i in range(5)])
    started = 0
    two = asyncio.Event()

    async def process(job, token):
        nonlocal started
        started += 1
        if started == 2:
            two.set()

    workers = [
        Worker("global", process, {**opts, "concurrency": 5}),
        Worker(
            "global", process, {**opts, "concurrency": 5, "limiter": {"max": 10, "duration": 60000}}
        ),
    ]
    await asyncio.wait_for(two.wait(), 30)
    assert 0 < await queue.getRateLimitTtl() <= 60000  # the global window is full
    for worker in workers:
        await worker.close()
    assert started == 2 and await queue.getJobCountByTypes("waiting") == 3
    assert await queue.removeGlobalRateLimit() == 2
    await queue.close()


async def test_missing_schema_names_the_command_to_run(pool, schema_name: str) -> None:
    queue = Queue("nowhere", {"connection": pool, "schema": schema_name})
    with pytest.raises(SchemaMissing, match="pgjobs migrate"):
        await queue.add("x", {})
    await queue.close()


async def test_unsupported_options_say_what_to_use(opts: dict) -> None:
    queue = Queue("unsupported", opts)
    with pytest.raises(ValueError, match="upsertJobScheduler"):
        await queue.add("x", {}, {"repeat": {"every": 1000}})
    with pytest.raises(ValueError, match="debounce"):
        await queue.add("x", {}, {"debounce": {"id": "k", "ttl": 10}})
    with pytest.raises(ValueError, match="priority"):
        await queue.add("x", {}, {"priority": -1})
    with pytest.raises(ValueError, match="cannot be integers"):
        await queue.add("x", {}, {"jobId": "42"})
    assert await queue.count() == 0
    await queue.close()


async def test_simple_deduplication_returns_the_holder(opts: dict) -> None:
    queue = Queue("dedup", opts)
    first = await queue.add("x", {"v": 1}, {"deduplication": {"id": "same"}})
    second = await queue.add("x", {"v": 2}, {"deduplication": {"id": "same"}})
    assert second.id == first.id
    assert await queue.count() == 1

    async def waiting_count() -> bool:
        return await queue.getWaitingCount() == 1

    await eventually(waiting_count)
    assert await queue.getDeduplicationJobId("same") == first.id
    assert await queue.removeDeduplicationKey("same") == 1
    third = await queue.add("x", {"v": 3}, {"deduplication": {"id": "same"}})
    assert third.id != first.id
    await queue.close()


async def test_throttle_debounce_and_extend_modes(opts: dict, jobs: JobQueue) -> None:
    queue = Queue("modes", opts)
    # throttle: held for ttl even after the job completed
    first = await queue.add("t", {"v": 1}, {"deduplication": {"id": "thr", "ttl": 60_000}})
    done = asyncio.Event()

    async def process(job, token):
        done.set()

    worker = Worker("modes", process, opts)
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    again = await queue.add("t", {"v": 2}, {"deduplication": {"id": "thr", "ttl": 60_000}})
    assert again.id == first.id and await queue.getDeduplicationJobId("thr") == first.id
    # debounce: the newest delayed job replaces the holder, with the newest data
    opts_d = {"delay": 60_000, "deduplication": {"id": "deb", "ttl": 60_000, "replace": True}}
    old = await queue.add("d", {"v": 1}, opts_d)
    new = await queue.add("d", {"v": 2}, opts_d)
    assert new.id != old.id and await queue.getJob(old.id) is None
    assert (await queue.getDelayed())[0].data == {"v": 2}
    # extend: each duplicate restarts the ttl
    ext = {"deduplication": {"id": "ext", "ttl": 1_000, "extend": True}}
    await queue.add("e", {}, ext)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.dedup_holds SET expires_at = now() + interval '100 ms'"
        " WHERE key = 'ext'"
    )
    await queue.add("e", {}, ext)
    left = await jobs.db.pool.fetchval(
        f"SELECT extract(epoch FROM expires_at - now()) FROM {jobs.schema}.dedup_holds"
        " WHERE key = 'ext'"
    )
    assert left > 0.5
    await queue.close()


async def test_get_metrics_in_bullmq_shape(opts: dict) -> None:
    queue = Queue("metered", opts)
    await queue.addBulk(
        [{"name": "ok", "data": {"fail": False}}] * 3 + [{"name": "bad", "data": {"fail": True}}]
    )
    done = asyncio.Event()
    finished = 0

    async def process(job, token):
        nonlocal finished
        finished += 1
        if finished == 4:
            done.set()
        if job.data["fail"]:
            raise UnrecoverableError("no")

    worker = Worker("metered", process, opts)

    async def all_written() -> bool:
        return await queue.getJobCountByTypes("completed", "failed") == 4

    await asyncio.wait_for(done.wait(), 30)
    await eventually(all_written)
    await worker.close()
    completed = await queue.getMetrics("completed")
    failed = await queue.getMetrics("failed")
    assert completed["meta"]["count"] == 3 and failed["meta"]["count"] == 1
    assert completed["count"] == len(completed["data"]) >= 20160
    assert sum(completed["data"][:2]) == 3  # the newest minutes first
    assert (await queue.getMetrics("completed", 0, 9))["data"] == completed["data"][:10]
    with pytest.raises(ValueError, match="completed"):
        await queue.getMetrics("active")
    await queue.close()


async def test_add_in_the_callers_transaction(opts: dict, jobs: JobQueue) -> None:
    queue = Queue("tx", opts)
    with pytest.raises(RuntimeError, match="business write failed"):
        async with jobs.transaction() as conn:
            await queue.add("confirm", {"order": 1}, connection=conn)
            raise RuntimeError("business write failed")
    assert await queue.count() == 0
    async with jobs.transaction() as conn:
        await queue.addBulk([{"name": "confirm", "data": {"order": 2}}], connection=conn)
    assert await queue.count() == 1
    await queue.close()
