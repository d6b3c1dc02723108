"""BullMQ's Node cases for the Worker (tests/worker.test.ts, tests/worker.redis.test.ts), in
Python against the package's API: processing, return values and failures, retries and
backoffs, closing and pausing, auto removal, priorities, and jobs processed by hand
(``getNextJob`` on a Worker without a processor).

Python's processor exceptions are the job's failure, so a case never asserts inside a
processor: it records what it saw and asserts afterwards. The Python EventEmitter calls its
listeners synchronously, so a listener that must await starts a task."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from tests.conformance.conftest import Bull, eventually, future_of, wait_for


def make_worker(bq: Bull, name: str, processor: Any, **opts: Any) -> Any:
    """``bq.worker`` with a ``drainDelay`` of 1 s unless given (BullMQ's default is 5 s). On
    the real package (redis-py's 5 s default socket timeout), ``close()`` can miss the cancel
    of a blocking wait for jobs that has just begun: the wait then runs its course, and one as
    long as the socket timeout is retried again and again, so that the close never ends."""
    return bq.worker(name, processor, **{"drainDelay": 1, **opts})


TOKEN = "my-token"


def now_ms() -> int:
    return int(time.time() * 1000)


def raises(message: str) -> Any:
    """``pytest.raises`` on any exception whose text contains ``message`` (Node's ``toThrow``)."""
    return pytest.raises(Exception, match=re.escape(message))


def start(worker: Any) -> asyncio.Future[None]:
    """``worker.run()`` in the background (a Worker built with ``autorun=False``)."""
    return asyncio.ensure_future(worker.run())


async def stop(worker: Any, running: asyncio.Future[None]) -> None:
    """Close ``worker`` and collect its ``run()`` task."""
    await worker.close()
    await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 10)


async def noop(job: Any, token: str) -> None:
    return None


def in_background(coro_fn: Any) -> Any:
    """A synchronous listener that runs the async ``coro_fn(*args)`` as a task (its tasks are
    kept in ``listener.tasks``)."""
    tasks: list[asyncio.Future[Any]] = []

    def listener(*args: Any) -> None:
        tasks.append(asyncio.ensure_future(coro_fn(*args)))

    listener.tasks = tasks  # type: ignore[attr-defined]
    return listener


# --- processing ---------------------------------------------------------------------------


# Node: tests/worker.test.ts › workers › process a lifo queue
async def test_lifo_jobs_are_processed_newest_first(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data["count"])

    worker = make_worker(bq, name, process)
    done = future_of(worker, "completed", 4)
    await queue.pause()
    for count in range(1, 5):
        await queue.add("test", {"count": count}, {"lifo": True})
    await queue.resume()
    await wait_for(done)
    assert seen == [4, 3, 2, 1]


# Node: tests/worker.test.ts › workers › process several jobs serially
async def test_jobs_are_processed_serially_in_order(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data["num"])
        assert job.data["foo"] == "bar"

    worker = make_worker(bq, name, process)
    done = future_of(worker, "completed", 35)
    for num in range(1, 36):
        await queue.add("test", {"foo": "bar", "num": num})
    await wait_for(done)
    assert seen == list(range(1, 36))
    assert worker.running is True


# Node: tests/worker.test.ts › workers › process a job that updates progress as number
# Node: tests/worker.test.ts › workers › process a job that updates progress as object
# Node: tests/worker.test.ts › workers › process a job that updates progress as string
# Node: tests/worker.test.ts › workers › process a job that updates progress as boolean
@pytest.mark.parametrize(
    "progress",
    [42, {"percentage": 42}, "progress as string", True],
    ids=["number", "object", "string", "boolean"],
)
async def test_progress_update_reaches_queue_events(bq: Bull, progress: Any) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    published = future_of(events, "progress")
    job = await queue.add("test", {"foo": "bar"})
    assert job.id
    assert job.data["foo"] == "bar"

    async def process(job: Any, token: str) -> None:
        await job.updateProgress(progress)

    make_worker(bq, name, process)
    [(args, _id)] = await wait_for(published)
    assert args["jobId"] == job.id
    assert args["data"] == progress


# Node: tests/worker.test.ts › workers › processes jobs that were added before the worker
#   started
async def test_jobs_added_before_the_worker_starts_are_processed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    for data in ({"bar": "baz"}, {"bar1": "baz1"}, {"bar2": "baz2"}, {"bar3": "baz3"}):
        await queue.add("test", data)
    worker = make_worker(bq, name, noop)
    await wait_for(future_of(worker, "completed", 4))


# Node: tests/worker.test.ts › workers › process a job that returns data in the process handler
async def test_returned_data_is_the_completed_value_and_stored(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> int:
        return 37

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    [(done, value)] = await wait_for(completed)
    assert done.id == job.id
    assert value == 37
    stored = await queue.getJob(job.id)
    assert stored.returnvalue == 37


# Node: tests/worker.test.ts › workers › process a job that returns a string in the process
#   handler
async def test_returned_string_reaches_queue_events_and_is_stored(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    published = future_of(events, "completed")

    async def process(job: Any, token: str) -> str:
        return "a very dignified string"

    make_worker(bq, name, process)
    await queue.add("test", {"testing": True})
    [(args, _id)] = await wait_for(published)
    assert args["returnvalue"] == "a very dignified string"
    stored = await queue.getJob(args["jobId"])
    assert stored is not None
    assert stored.returnvalue == "a very dignified string"


# Node: tests/worker.test.ts › workers › process a job that does some asynchronous operation
async def test_processor_awaiting_before_returning(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> str:
        await asyncio.sleep(0.25)
        return "my data"

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    [(done, value)] = await wait_for(completed)
    assert done is not None
    assert value == "my data"


# Node: tests/worker.test.ts › workers › process a synchronous job
async def test_processor_that_never_awaits(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[Any] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data["foo"])

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    [(done, _value)] = await wait_for(completed)
    assert done is not None
    assert seen == ["bar"]


# Node: tests/worker.test.ts › workers › process a slow job without waiting previous job to
#   finish
async def test_slow_job_does_not_hold_back_the_next_with_concurrency(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> str:
        if job.data["index"] == 1:
            await queue.add("test", {"foo": "bar", "index": 2})
            await asyncio.sleep(0.5)
        return "my data"

    worker = make_worker(bq, name, process, concurrency=2)
    completed = future_of(worker, "completed", 2)
    await queue.add("test", {"foo": "bar", "index": 1})
    results = await wait_for(completed)
    assert [job.data["index"] for job, _ in results] == [2, 1]
    assert [value for _, value in results] == ["my data", "my data"]


# Node: tests/worker.test.ts › workers › does not process a job that is being processed when a
#   new queue starts
async def test_second_worker_does_not_take_an_active_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    first_seen: list[str] = []
    second_seen: list[str] = []

    async def first(job: Any, token: str) -> None:
        first_seen.append(job.id)
        await asyncio.sleep(0.5)

    async def second(job: Any, token: str) -> None:
        second_seen.append(job.id)

    worker = make_worker(bq, name, first)
    active = future_of(worker, "active")
    completed = future_of(worker, "completed")
    added = await queue.add("test", {"foo": "bar"})
    await wait_for(active)  # the job is being processed (Node's worker is ready beforehand)
    another = make_worker(bq, name, second)
    await wait_for(completed)
    await worker.close()
    await another.close()
    assert first_seen == [added.id]
    assert second_seen == []


# Node: tests/worker.test.ts › workers › process a job that throws an exception
async def test_processor_exception_fails_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    error = Exception("Job Failed")

    async def process(job: Any, token: str) -> None:
        raise error

    worker = make_worker(bq, name, process, autorun=False)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    assert job.id
    running = start(worker)
    [(failed_job, err)] = await wait_for(failed)
    assert isinstance(failed_job.finishedOn, int)
    assert failed_job.data["foo"] == "bar"
    assert str(err) == "Job Failed"
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › process a job that returns data with a circular
#   dependency
async def test_unserialisable_return_value_fails_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> Any:
        circular: dict[str, Any] = {"x": {}}
        circular["x"] = circular
        return circular

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed")
    completions: list[Any] = []
    worker.on("completed", lambda *args: completions.append(args))
    await queue.add("test", {"foo": "bar"})
    await wait_for(failed)
    assert completions == []


# --- retrying failed and completed jobs ---------------------------------------------------


async def _retry_a_failed_job(bq: Bull, opts: dict[str, Any] | None) -> tuple[Any, Any]:
    name = bq.name()
    queue = bq.queue(name)
    failed_once: list[bool] = []

    async def process(job: Any, token: str) -> None:
        if not failed_once:
            raise Exception("Not even!")

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed")
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    [(failed_job, err)] = await wait_for(failed)
    assert failed_job.data["foo"] == "bar"
    assert failed_job.attemptsStarted == 1
    assert failed_job.attemptsMade == 1
    assert str(err) == "Not even!"
    failed_once.append(True)
    if opts is None:
        await job.retry()
    else:
        await job.retry("failed", opts)
    [(done, _value)] = await wait_for(completed)
    return done, failed_job


# Node: tests/worker.test.ts › workers › when job is in failed state › retries a job that fails
async def test_retrying_a_failed_job_counts_its_attempts(bq: Bull) -> None:
    done, _ = await _retry_a_failed_job(bq, None)
    assert done.attemptsStarted == 2
    assert done.attemptsMade == 2


# Node: tests/worker.test.ts › workers › when job is in failed state › when passing
#   resetAttemptsMade and resetAttemptsStarted as true › retries a job that fails and resets
#   attemptsMade and attemptsStarted
async def test_retrying_a_failed_job_can_reset_its_attempts(bq: Bull) -> None:
    done, _ = await _retry_a_failed_job(
        bq, {"resetAttemptsMade": True, "resetAttemptsStarted": True}
    )
    assert done.attemptsStarted == 1
    assert done.attemptsMade == 1


async def _retry_a_completed_job(bq: Bull, opts: dict[str, Any] | None) -> list[Any]:
    name = bq.name()
    queue = bq.queue(name)
    results = iter([1, 2])

    async def process(job: Any, token: str) -> int:
        return next(results)

    worker = make_worker(bq, name, process)
    first = future_of(worker, "completed")
    both = future_of(worker, "completed", 2)
    job = await queue.add("test", {"foo": "bar"})
    [(done, value)] = await wait_for(first)
    assert done.data["foo"] == "bar"
    assert (done.attemptsStarted, done.attemptsMade, value) == (1, 1, 1)
    await job.retry("completed", opts or {})
    return await wait_for(both)


# Node: tests/worker.test.ts › workers › when job is in completed state › retries a job that
#   completes
async def test_retrying_a_completed_job_runs_it_again(bq: Bull) -> None:
    [_, (again, value)] = await _retry_a_completed_job(bq, None)
    assert again.data["foo"] == "bar"
    assert (again.attemptsStarted, again.attemptsMade, value) == (2, 2, 2)


# Node: tests/worker.test.ts › workers › when job is in completed state › when passing
#   resetAttemptsMade and resetAttemptsStarted as true › retries a job that completes and
#   resets attemptsMade and attemptsStarted
async def test_retrying_a_completed_job_can_reset_its_attempts(bq: Bull) -> None:
    [_, (again, value)] = await _retry_a_completed_job(
        bq, {"resetAttemptsMade": True, "resetAttemptsStarted": True}
    )
    assert (again.attemptsStarted, again.attemptsMade, value) == (1, 1, 2)


# --- closing --------------------------------------------------------------------------------


# Node: tests/worker.test.ts › workers › when closing a worker › process a job that throws an
#   exception after worker close
async def test_close_lets_an_active_job_fail(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: str) -> None:
        started.set_result(None)
        await asyncio.sleep(0.5)
        raise Exception("Job Failed")

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed")
    await queue.add("test", {"foo": "bar"})
    await wait_for(started)
    closing = asyncio.ensure_future(worker.close())
    [(job, err)] = await wait_for(failed)
    assert job.data["foo"] == "bar"
    assert str(err) == "Job Failed"
    counts = await queue.getJobCounts("active", "failed")
    assert counts["active"] == 0
    assert counts["failed"] == 1
    await wait_for(closing)


# Node: tests/worker.test.ts › workers › when closing a worker › process a job that complete
#   after worker close
async def test_close_lets_an_active_job_complete(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: str) -> None:
        started.set_result(None)
        await asyncio.sleep(0.5)

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    await wait_for(started)
    closing = asyncio.ensure_future(worker.close())
    [(job, _value)] = await wait_for(completed)
    assert isinstance(job.finishedOn, int)
    assert job.data["foo"] == "bar"
    counts = await queue.getJobCounts("active", "completed")
    assert counts["active"] == 0
    assert counts["completed"] == 1
    await wait_for(closing)


async def _close_while_a_job_delays_itself(bq: Bull, pause_first: bool) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: str) -> None:
        if not started.done():
            started.set_result(None)
        await job.moveToDelayed(now_ms(), token)
        await asyncio.sleep(0.2)
        raise bq.DelayedError()

    worker = make_worker(bq, name, process, drainDelay=10)
    await queue.addBulk([{"name": "test", "data": {"index": i}} for i in range(50)])
    await wait_for(started)
    if pause_first:
        await wait_for(worker.pause())
    await wait_for(worker.close(), 5)


# Node: tests/worker.test.ts › workers › when closing a worker › resolves close() when an
#   active job throws DelayedError during shutdown
async def test_close_resolves_while_active_job_raises_delayed_error(bq: Bull) -> None:
    await _close_while_a_job_delays_itself(bq, pause_first=False)


# Node: tests/worker.test.ts › workers › when closing a worker › resolves close() when a paused
#   worker has an active job that throws DelayedError
async def test_close_resolves_on_paused_worker_with_delayed_error_job(bq: Bull) -> None:
    await _close_while_a_job_delays_itself(bq, pause_first=True)


# --- auto job removal -----------------------------------------------------------------------


async def _keep_on_finish(
    bq: Bull, keep: Any, expected: int, *, fail: bool = False, on_worker: bool = False
) -> None:
    """15 jobs, each logging a row, finished (failed with ``fail``) under the removal option
    ``keep`` (set on the jobs, or with ``on_worker`` on the Worker): the newest ``expected``
    remain, with their logs, and the others are gone with theirs."""
    name = bq.name()
    queue = bq.queue(name)
    option = "removeOnFail" if fail else "removeOnComplete"
    state = "failed" if fail else "completed"

    async def process(job: Any, token: str) -> None:
        await job.log("test log")
        if fail:
            raise Exception("job failed")

    worker = make_worker(bq, name, process, **({option: keep} if on_worker else {}))
    finished = future_of(worker, state, 15)
    ids = []
    for data in range(15):
        job = await queue.add("test", data, {} if on_worker else {option: keep})
        ids.append(job.id)
    await wait_for(finished)
    counts = await queue.getJobCounts(state)
    assert counts[state] == expected
    for index, job_id in enumerate(ids):
        kept = index >= len(ids) - expected
        stored = await queue.getJob(job_id)
        logs = await queue.getJobLogs(job_id)
        assert (stored is not None) == kept, (index, stored)
        assert (len(logs["logs"]) > 0) == kept, (index, logs)


# Node: tests/worker.test.ts › workers › auto job removal › should remove job after completed if
#   removeOnComplete
async def test_remove_on_complete_true_removes_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    tokens: list[Any] = []

    async def process(job: Any, token: str) -> None:
        tokens.append(token)

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"}, {"removeOnComplete": True})
    [(done, _)] = await wait_for(completed)
    assert isinstance(done.finishedOn, int)
    assert await queue.getJob(job.id) is None
    assert (await queue.getJobCounts("completed"))["completed"] == 0
    assert len(tokens) == 1 and isinstance(tokens[0], str)


# Node: tests/worker.test.ts › workers › auto job removal › should remove a job after completed
#   if the default job options specify removeOnComplete
async def test_default_remove_on_complete_removes_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name, defaultJobOptions={"removeOnComplete": True})
    worker = make_worker(bq, name, noop)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    assert await queue.getJob(job.id) is None
    assert (await queue.getJobCounts("completed"))["completed"] == 0


# Node: tests/worker.test.ts › workers › auto job removal › should keep specified number of jobs
#   after completed with removeOnComplete
async def test_remove_on_complete_count_keeps_the_newest(bq: Bull) -> None:
    await _keep_on_finish(bq, 3, 3)


# Node: tests/worker.test.ts › workers › auto job removal › should keep of jobs newer than
#   specified and up to a count completed with removeOnComplete
# (Node ages the jobs with a fake clock; here all are younger than ``age``, so the count rules)
async def test_remove_on_complete_age_and_count_keeps_count(bq: Bull) -> None:
    await _keep_on_finish(bq, {"age": 7, "count": 5}, 5)


# Node: tests/worker.test.ts › workers › auto job removal › should keep of jobs newer than
#   specified and up to a count fail with removeOnFail
async def test_remove_on_fail_age_and_count_keeps_count(bq: Bull) -> None:
    await _keep_on_finish(bq, {"age": 7, "count": 5}, 5, fail=True)


# Node: tests/worker.test.ts › workers › auto job removal › should keep specified number of jobs
#   after completed with default job options removeOnComplete
async def test_default_remove_on_complete_count_keeps_the_newest(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name, defaultJobOptions={"removeOnComplete": 3})

    async def process(job: Any, token: str) -> None:
        await job.log("test log")

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed", 9)
    ids = [(await queue.add("test", data)).id for data in range(9)]
    await wait_for(completed)
    assert (await queue.getJobCounts("completed"))["completed"] == 3
    for index, job_id in enumerate(ids):
        assert (await queue.getJob(job_id) is not None) == (index >= 6)


# Node: tests/worker.test.ts › workers › auto job removal › should remove job after failed if
#   removeOnFail
async def test_remove_on_fail_true_removes_the_jobs(bq: Bull) -> None:
    await _keep_on_finish(bq, True, 0, fail=True)


# Node: tests/worker.test.ts › workers › auto job removal › should remove a job after fail if the
#   default job options specify removeOnFail
async def test_default_remove_on_fail_removes_the_job(bq: Bull) -> None:
    name = bq.name()

    async def process(job: Any, token: str) -> None:
        raise Exception("error")

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed")
    queue = bq.queue(name, defaultJobOptions={"removeOnFail": True})
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(failed)
    assert await queue.getJob(job.id) is None
    assert (await queue.getJobCounts("failed"))["failed"] == 0


# Node: tests/worker.test.ts › workers › auto job removal › should keep specified number of jobs
#   after completed with removeOnFail
async def test_remove_on_fail_count_keeps_the_newest(bq: Bull) -> None:
    await _keep_on_finish(bq, 3, 3, fail=True)


# Node: tests/worker.test.ts › workers › auto job removal › should keep specified number of jobs
#   after completed with global removeOnFail
async def test_default_remove_on_fail_count_keeps_the_newest(bq: Bull) -> None:
    name = bq.name()

    async def process(job: Any, token: str) -> None:
        raise Exception("error")

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed", 9)
    queue = bq.queue(name, defaultJobOptions={"removeOnFail": 3})
    ids = [(await queue.add("test", data)).id for data in range(9)]
    await wait_for(failed)
    assert (await queue.getJobCounts("failed"))["failed"] == 3
    for index, job_id in enumerate(ids):
        assert (await queue.getJob(job_id) is not None) == (index >= 6)


# Node: tests/worker.test.ts › workers › auto job removal › when worker has removeOnFinish
#   options › should keep of jobs newer than specified and up to a count completed with
#   removeOnComplete
async def test_worker_remove_on_complete_age_and_count_keeps_count(bq: Bull) -> None:
    await _keep_on_finish(bq, {"age": 7, "count": 5}, 5, on_worker=True)


# Node: tests/worker.test.ts › workers › auto job removal › when worker has removeOnFinish
#   options › should keep of jobs newer than specified and up to a count fail with removeOnFail
async def test_worker_remove_on_fail_age_and_count_keeps_count(bq: Bull) -> None:
    await _keep_on_finish(bq, {"age": 7, "count": 5}, 5, fail=True, on_worker=True)


# Node: tests/worker.test.ts › workers › auto job removal › when worker has removeOnFinish
#   options › should remove all jobs when count is 0 with removeOnFail
async def test_worker_remove_on_fail_count_zero_removes_all(bq: Bull) -> None:
    await _keep_on_finish(bq, {"count": 0}, 0, fail=True, on_worker=True)


# Node: tests/worker.redis.test.ts › workers (redis-only) › should not leave orphaned job data
#   when limit is less than removable jobs
async def test_age_removal_with_limit_leaves_no_orphaned_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, noop, removeOnComplete={"age": 1, "limit": 2})
    first = future_of(worker, "completed", 10)
    ids = [(await queue.add("test", {"phase": 1, "i": i})).id for i in range(10)]
    await wait_for(first)
    await asyncio.sleep(1.5)  # the first ten grow older than ``age``
    trigger = await queue.add("test", {"phase": 2, "trigger": True})

    async def trigger_finished() -> bool:
        job = await queue.getJob(trigger.id)
        return bool(job and job.finishedOn)

    await eventually(trigger_finished)
    # Every job still stored is in the completed set, and every completed job is stored.
    stored = [job_id for job_id in ids if await queue.getJob(job_id) is not None]
    for job_id in stored:
        assert await queue.getJobState(job_id) == "completed"
    completed = (await queue.getJobCounts("completed"))["completed"]
    assert completed == len(stored) + 1  # and the trigger


# --- delayed and prioritized jobs -----------------------------------------------------------


# Node: tests/worker.test.ts › workers › when adding delayed job after standard one when worker
#   is drained › pick standard job without delay
async def test_drained_worker_takes_a_standard_job_without_waiting_for_a_delayed_one(
    bq: Bull,
) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(1)

    worker = make_worker(bq, name, process)
    finished_at: list[tuple[float, Any]] = []
    worker.on("completed", lambda job, _v: finished_at.append((time.monotonic(), job)))
    first = future_of(worker, "completed")
    three = future_of(worker, "completed", 3)
    await queue.add("test1", {"foo": "bar"})
    await wait_for(first)  # the worker is drained now
    bulk_start = time.monotonic()
    await queue.addBulk(
        [
            {"name": "test1", "data": {"idx": 0, "foo": "bar"}},
            {"name": "test2", "data": {"idx": 1, "foo": "baz"}, "opts": {"delay": 3000}},
        ]
    )
    await wait_for(three)
    standard_at, standard = finished_at[1]
    delayed_at, delayed = finished_at[2]
    assert standard.data["idx"] == 0
    assert standard_at - bulk_start < 1.5
    assert delayed.data["idx"] == 1
    assert 4.0 <= delayed_at - bulk_start < 4.5
    assert delayed.delay == 0


# Node: tests/worker.test.ts › workers › when prioritized jobs are added › should process jobs
#   by priority
async def test_jobs_are_processed_by_priority(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data["p"])

    worker = make_worker(bq, name, process)
    done = future_of(worker, "completed", 18)
    jobs = []
    for _ in range(6):
        for p in (2, 3, 1):
            jobs.append({"name": "test", "data": {"p": p}, "opts": {"priority": p}})
    await queue.addBulk(jobs)
    await wait_for(done)
    assert seen == [1] * 6 + [2] * 6 + [3] * 6


# Node: tests/worker.test.ts › workers › when prioritized jobs are added › when jobs are added
#   with the maximum allowed priority value › should process jobs with the same priority in
#   FIFO order
async def test_jobs_at_maximum_priority_are_processed_fifo(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.addBulk(
        [{"name": "test", "data": {"order": i}, "opts": {"priority": 2097151}} for i in range(5)]
    )
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data["order"])

    worker = make_worker(bq, name, process)
    await wait_for(future_of(worker, "completed", 5))
    assert seen == [0, 1, 2, 3, 4]


# Node: tests/worker.test.ts › workers › when prioritized jobs are added › while processing last
#   active job › should process prioritized job whithout delay
async def test_prioritized_job_added_while_processing_is_taken_at_once(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.add("test1", {"p": 2}, {"priority": 2})
    seen: list[Any] = []

    async def process(job: Any, token: str) -> None:
        if job.name == "test1":
            await queue.add("test", {"p": 2}, {"priority": 2})
        seen.append(job.data["p"])

    worker = make_worker(bq, name, process, drainDelay=2)
    # within the worker's drainDelay: the second job is taken without waiting for it
    await wait_for(future_of(worker, "completed", 2), 1.5)
    assert seen == [2, 2]


# Node: tests/worker.test.ts › workers › when prioritized jobs are added › when using custom
#   jobId › should process prioritized jobs
async def test_prioritized_jobs_with_custom_ids_are_processed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.add("test1", {"p": 2}, {"priority": 2, "jobId": "custom1"})
    await queue.add("test2", {"p": 3}, {"priority": 3, "jobId": "custom2"})

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.025)

    worker = make_worker(bq, name, process, autorun=False)
    done = future_of(worker, "completed", 2)
    running = start(worker)
    results = await wait_for(done, 3)
    assert [job.id for job, _ in results] == ["custom1", "custom2"]
    await stop(worker, running)


# --- autorun, run() -------------------------------------------------------------------------


# Node: tests/worker.test.ts › workers › when autorun option is provided as false › processes
#   several jobs serially using process option as false
async def test_autorun_false_worker_processes_after_run(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.02)
        seen.append(job.data["num"])

    worker = make_worker(bq, name, process, autorun=False)
    done = future_of(worker, "completed", 10)
    for num in range(1, 11):
        await queue.add("test", {"foo": "bar", "num": num})
    running = start(worker)
    await wait_for(done)
    assert seen == list(range(1, 11))
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › when autorun option is provided as false › when run
#   method is called when worker is running › throws error
async def test_run_while_running_raises(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, noop, autorun=False)
    first = future_of(worker, "completed")
    running = start(worker)
    for num in range(1, 11):
        await queue.add("test", {"foo": "bar", "num": num})
    await wait_for(first)  # the Python worker is flagged running only once it has started up
    with raises("Worker is already running"):
        await wait_for(worker.run(), 5)
    await stop(worker, running)


# --- retry() --------------------------------------------------------------------------------


# Node: tests/worker.test.ts › workers › when queue is paused and retry a job › moves job to wait
async def test_retried_job_of_a_paused_queue_is_waiting(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    [(done, _)] = await wait_for(completed)
    assert done.data["foo"] == "bar"
    await queue.pause()
    await job.retry("completed")
    assert await queue.getWaitingCount() == 1


# Node: tests/worker.test.ts › workers › retry a job that fails using job retry method
async def test_retry_from_the_failed_listener_clears_the_outcome(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    calls: list[int] = []

    async def process(job: Any, token: str) -> None:
        calls.append(1)
        if len(calls) % 2 != 0:
            raise Exception("Not even!")

    worker = make_worker(bq, name, process)
    seen: dict[str, Any] = {}

    async def on_failed(job: Any, err: Any) -> None:
        if seen:
            return
        seen["err"] = str(err)
        await worker.pause(True)
        await job.retry()
        seen["local"] = (job.failedReason, job.processedOn, job.finishedOn, job.returnvalue)
        updated = await queue.getJob(job.id)
        seen["stored"] = (
            updated.failedReason,
            updated.processedOn,
            updated.finishedOn,
            updated.returnvalue,
        )
        worker.resume()

    listener = in_background(on_failed)
    worker.on("failed", listener)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    await asyncio.gather(*listener.tasks)
    assert seen["err"] == "Not even!"
    assert seen["local"] == (None, None, None, None)
    failed_reason, processed_on, finished_on, returnvalue = seen["stored"]
    assert not failed_reason and not processed_on and not finished_on
    assert returnvalue is None


# --- stalls and locks -----------------------------------------------------------------------


# Node: tests/worker.test.ts › workers › continues processing after a worker has stalled
async def test_worker_continues_after_its_job_stalled(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    first: list[bool] = []

    async def process(job: Any, token: str) -> None:
        if not first:
            first.append(True)
            await asyncio.sleep(2)

    worker = make_worker(
        bq, name, process, lockDuration=1000, lockRenewTime=3000, stalledInterval=100
    )
    worker.on("error", lambda *args: None)
    completed = future_of(worker, "completed")
    await queue.add("test", {"bar": "baz"})
    await wait_for(completed)


# Node: tests/worker.test.ts › workers › lock extender continues to run until all active jobs
#   are completed when closing a worker
async def test_locks_are_renewed_while_close_waits_for_active_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.get_running_loop().create_future()

    async def process(job: Any, token: str) -> None:
        started.set_result(None)
        await asyncio.sleep(2)

    worker = make_worker(
        bq, name, process, lockDuration=1000, lockRenewTime=500, stalledInterval=1000
    )
    completed = future_of(worker, "completed")
    failed = future_of(worker, "failed")
    await queue.add("test", {"bar": "baz"})
    await wait_for(started)
    await wait_for(worker.close())
    assert completed.done()
    assert not failed.done()


# Node: tests/worker.redis.test.ts › workers (redis-only) › emits error if lock is lost
async def test_finishing_after_the_lock_expired_emits_an_error(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(1.25)

    worker = make_worker(bq, name, process, lockDuration=1000, lockRenewTime=3000)
    error = future_of(worker, "error")
    job = await queue.add("test", {"bar": "baz"})
    [(err, *_rest)] = await wait_for(error)
    assert str(err) == f"Missing lock for job {job.id}. moveToFinished"


# --- concurrency and pausing ----------------------------------------------------------------


# Node: tests/worker.test.ts › workers › Concurrency process › should run job in sequence if I
#   specify a concurrency of 1
async def test_concurrency_one_runs_jobs_in_sequence(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    active: list[int] = [0]
    overlaps: list[int] = []

    async def process(job: Any, token: str) -> None:
        active[0] += 1
        overlaps.append(active[0])
        await asyncio.sleep(0.05)
        active[0] -= 1

    worker = make_worker(bq, name, process, autorun=False, concurrency=1)
    await queue.add("test", {})
    await queue.add("test", {})
    done = future_of(worker, "completed", 2)
    running = start(worker)
    await wait_for(done)
    assert overlaps == [1, 1]
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › Concurrency process › should process job respecting the
#   concurrency set
async def test_concurrency_caps_jobs_in_parallel(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    active = [0]
    peaks: list[int] = []
    wait = [0.01]

    async def process(job: Any, token: str) -> None:
        active[0] += 1
        peaks.append(active[0])
        wait[0] += 0.1
        await asyncio.sleep(wait[0])
        active[0] -= 1

    worker = make_worker(bq, name, process, concurrency=4)
    done = future_of(worker, "completed", 8)
    await asyncio.gather(*(queue.add("test", {}) for _ in range(8)))
    await wait_for(done)
    assert max(peaks) == 4


# Node: tests/worker.test.ts › workers › Concurrency process › when pausing › should wait for all
#   concurrent processing
async def test_pause_waits_for_the_jobs_in_progress(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    activated = [0]
    finished = [0]

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep((100 - activated[0] * 10) / 1000)
        finished[0] += 1
        if activated[0] % 7 == 0:
            raise Exception()

    worker = make_worker(bq, name, process, autorun=False, concurrency=4)
    seen: dict[str, Any] = {}

    async def on_active(*_args: Any) -> None:
        activated[0] += 1
        if activated[0] == 4:
            await worker.pause()
            seen["finished_when_paused"] = finished[0]

    listener = in_background(on_active)
    worker.on("active", listener)
    worker.on("paused", lambda *args: worker.resume())
    ended = future_of(worker, "completed", 1)
    outcomes: list[Any] = []
    all_done = asyncio.get_running_loop().create_future()

    def outcome(*args: Any) -> None:
        outcomes.append(args)
        if len(outcomes) == 8 and not all_done.done():
            all_done.set_result(None)

    worker.on("completed", outcome)
    worker.on("failed", outcome)
    await asyncio.gather(*(queue.add("test", {}) for _ in range(8)))
    running = start(worker)
    await wait_for(all_done)
    await wait_for(ended)
    await asyncio.gather(*listener.tasks)
    assert 3 <= seen["finished_when_paused"] <= 4
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › Concurrency process › when pausing › should not keep
#   active jobs
async def test_paused_worker_leaves_no_active_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = make_worker(bq, name, process, autorun=False, concurrency=4)
    pausing: list[asyncio.Future[Any]] = []

    def on_completed(*_args: Any) -> None:
        if not pausing:
            pausing.append(asyncio.ensure_future(worker.pause()))

    worker.on("completed", on_completed)
    paused = future_of(worker, "paused")
    await asyncio.gather(*(queue.add("test", {}) for _ in range(8)))
    running = start(worker)
    await wait_for(paused)
    assert (await queue.getJobCounts("active"))["active"] == 0
    await wait_for(pausing[0])
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › Concurrency process › when pausing › should resume
#   processing after pause with doNotWaitActive
async def test_worker_resumes_after_pause_without_waiting(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.05)

    worker = make_worker(bq, name, process)
    first = future_of(worker, "completed")
    await queue.add("test", {"seq": "first"})
    await wait_for(first)
    assert worker.running is True
    await worker.pause(True)
    assert worker.running is True
    worker.resume()
    second = future_of(worker, "completed")
    await queue.add("test", {"seq": "after-resume"})
    [(job, _)] = await wait_for(second)
    assert job.data["seq"] == "after-resume"


# --- retries and backoffs -------------------------------------------------------------------


async def _always_fails(job: Any, token: str) -> None:
    raise Exception("error")


# Node: tests/worker.test.ts › workers › Retries and backoffs › updates job's delay property if
#   it fails and backoff is set
async def test_failed_attempt_records_the_backoff_delay(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, _always_fails)
    failed = future_of(worker, "failed")
    await queue.add("test", {"bar": "baz"}, {"attempts": 3, "backoff": 300})
    [(job, _)] = await wait_for(failed)
    assert job.delay == 300
    assert (await queue.getJob(job.id)).delay == 300


# Node: tests/worker.test.ts › workers › Retries and backoffs › when backoff type is
#   exponential › updates job's delay property if it fails and backoff is set
async def test_exponential_backoff_grows_the_delay(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, _always_fails, autorun=False)
    failed = future_of(worker, "failed", 3)
    await queue.add(
        "test", {"bar": "baz"}, {"attempts": 3, "backoff": {"type": "exponential", "delay": 200}}
    )
    delays: list[tuple[int, int]] = []
    worker.on("failed", lambda job, _err: delays.append((job.attemptsMade, job.delay)))
    running = start(worker)
    results = await wait_for(failed)
    (made1, delay1), (made2, delay2), (made3, delay3) = delays
    assert (made1, made2, made3) == (1, 2, 3)
    assert delay1 >= 200
    assert delay2 >= 400
    assert delay3 == 0
    assert (await queue.getJob(results[-1][0].id)).delay == 0
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › Retries and backoffs › when backoff type is fixed ›
#   updates job's delay property and respects fixed delay value
async def test_fixed_backoff_spaces_the_attempts(bq: Bull) -> None:
    # Node's delay is 750 ms: 1000 here, as the Python worker rounds its waits for a delayed
    # job up to whole seconds on Redis
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, _always_fails)
    failed = future_of(worker, "failed", 4)
    started = time.monotonic()
    await queue.add(
        "test", {"bar": "baz"}, {"attempts": 4, "backoff": {"type": "fixed", "delay": 1000}}
    )
    results = await wait_for(failed)
    elapsed = time.monotonic() - started
    last, _ = results[-1]
    assert last.attemptsMade == 4
    assert last.delay == 0
    assert (await queue.getJob(last.id)).delay == 0
    assert elapsed >= 3.0  # three waits of the fixed delay


# Node: tests/worker.test.ts › workers › Retries and backoffs › when attempts is 1 and job fails
#   › should execute job only once and emits retries-exhausted event
async def test_single_attempt_failure_emits_retries_exhausted(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    exhausted = future_of(events, "retries-exhausted")

    async def process(job: Any, token: str) -> None:
        raise Exception("failed")

    make_worker(bq, name, process)
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    [(args, _id)] = await wait_for(exhausted)
    assert args["jobId"] == job.id
    assert int(args["attemptsMade"]) == 1
    assert await job.getState() == "failed"


# Node: tests/worker.test.ts › workers › Retries and backoffs › when jobs do not fail and get the
#   maximum attempts limit › does not emit retries-exhausted event
async def test_completed_jobs_emit_no_retries_exhausted(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    exhausted: list[Any] = []
    events.on("retries-exhausted", lambda *args: exhausted.append(args))
    completed = future_of(events, "completed", 3)
    make_worker(bq, name, noop)
    for _ in range(3):
        await queue.add("test", {"foo": "baz"}, {"attempts": 1})
    await wait_for(completed)
    assert exhausted == []


# Node: tests/worker.test.ts › workers › Retries and backoffs › when job has been failed and
#   moved to wait › saves failedReason
async def test_failed_reason_is_saved_when_the_job_goes_back_to_wait(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    made: list[int] = []

    async def process(job: Any, token: str) -> None:
        made.append(job.attemptsMade)
        await queue.rateLimit(5000)
        raise Exception("error")

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 5})
    await wait_for(failed)
    assert (await queue.getJob(job.id)).failedReason == "error"
    assert made == [0]


# Node: tests/worker.test.ts › workers › Retries and backoffs › should automatically retry a
#   failed job if attempts is bigger than 1
async def test_failed_job_is_retried_automatically(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    made: list[int] = []

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.01)
        made.append(job.attemptsMade)
        if job.attemptsMade < 1:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process, autorun=False)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    running = start(worker)
    await wait_for(completed)
    assert made == [0, 1]
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › Retries and backoffs › when there are delayed jobs
#   between retries › when using retryJob › promotes delayed jobs first
async def test_retry_promotes_due_delayed_jobs_first(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    order: list[tuple[str, int]] = []

    async def process(job: Any, token: str) -> None:
        order.append((job.id, job.attemptsMade))
        await asyncio.sleep(0.2)
        if job.data.get("first") and job.attemptsMade < 1:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process, autorun=False)
    done = future_of(worker, "completed", 4)
    first = await queue.add("test", {"foo": "bar", "first": True}, {"attempts": 2})
    delayed = await queue.addBulk(
        [{"name": "test", "data": {}, "opts": {"delay": 200}} for _ in range(3)]
    )
    running = start(worker)
    await wait_for(done)
    ids = [job.id for job in delayed]
    assert order == [(first.id, 0), (ids[0], 0), (ids[1], 0), (ids[2], 0), (first.id, 1)]
    await stop(worker, running)


# Node: tests/worker.test.ts › workers › Retries and backoffs › when there are delayed jobs
#   between retries › when job has more priority than delayed jobs › executes retried job first
async def test_retried_job_with_higher_priority_runs_before_delayed_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    order: list[tuple[str, int]] = []

    async def process(job: Any, token: str) -> None:
        order.append((job.id, job.attemptsMade))
        await asyncio.sleep(0.2)
        if job.data.get("first") and job.attemptsMade < 1:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process)
    done = future_of(worker, "completed", 4)
    first = await queue.add("test", {"foo": "bar", "first": True}, {"attempts": 2, "priority": 1})
    delayed = await queue.addBulk(
        [{"name": "test", "data": {}, "opts": {"delay": 200, "priority": 2}} for _ in range(3)]
    )
    await wait_for(done)
    ids = [job.id for job in delayed]
    assert [job_id for job_id, made in order if made == 0] == [first.id, *ids]
    assert order[:2] == [(first.id, 0), (first.id, 1)]


# Node: tests/worker.test.ts › workers › Retries and backoffs › should not retry a failed job
#   more than the number of given attempts times
async def test_job_is_not_retried_beyond_its_attempts(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    exhausted = future_of(events, "retries-exhausted")
    prevs: list[Any] = []
    events.on("waiting", lambda args, _id: prevs.append(args.get("prev")))
    tries = [0]

    async def process(job: Any, token: str) -> None:
        tries[0] += 1
        if job.attemptsMade < 3:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process)
    completions: list[Any] = []
    worker.on("completed", lambda *args: completions.append(args))
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    [(args, _id)] = await wait_for(exhausted)
    assert args["jobId"] == job.id
    assert int(args["attemptsMade"]) == 3
    assert await job.getState() == "failed"
    assert completions == []
    assert tries[0] == 3
    assert all(prev == "active" for prev in prevs if prev)


# Node: tests/worker.test.ts › workers › Retries and backoffs › should retry a job after a delay
#   if a fixed backoff is given
async def test_fixed_backoff_delays_the_retries(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        if job.attemptsMade < 2:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": 300})
    await wait_for(completed)
    assert time.monotonic() - started > 0.6


# Node: tests/worker.test.ts › workers › Retries and backoffs › when UnrecoverableError is throw
#   › moves job to failed
async def test_unrecoverable_error_fails_the_job_for_good(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        if job.attemptsMade < 1:
            raise Exception("Not yet!")
        if job.attemptsMade < 2:
            raise bq.UnrecoverableError("Unrecoverable")

    worker = make_worker(bq, name, process)
    failed = future_of(worker, "failed", 2)
    started = time.monotonic()
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": 300})
    results = await wait_for(failed)
    elapsed = time.monotonic() - started
    last, err = results[-1]
    assert type(err).__name__ == "UnrecoverableError"
    assert str(err) == "Unrecoverable"
    assert elapsed > 0.3
    assert last.attemptsMade == 2
    assert await job.getState() == "failed"


STEP_INITIAL, STEP_SECOND, STEP_THIRD, STEP_FINISH = 0, 1, 2, 3


# Node: tests/worker.test.ts › workers › Retries and backoffs › when providing a way to execute
#   step jobs › should retry a job after a delay if a fixed backoff is given, keeping the
#   current step
async def test_step_job_resumes_its_step_after_a_backoff(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    finish = STEP_SECOND + 1  # Node's Step enum here: Initial, Second, Finish

    async def process(job: Any, token: str) -> int:
        step = job.data["step"]
        if step == STEP_INITIAL:
            await job.updateData({"step": STEP_SECOND})
            step = STEP_SECOND
        if step == STEP_SECOND:
            if job.attemptsMade < 2:
                raise Exception("Not yet!")
            await job.updateData({"step": finish})
            return finish
        raise Exception("invalid step")

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add("test", {"step": STEP_INITIAL}, {"attempts": 3, "backoff": 300})
    [(job, _)] = await wait_for(completed)
    assert time.monotonic() - started > 0.6
    assert job.returnvalue == finish
    assert job.attemptsMade == 3


# Node: tests/worker.test.ts › workers › Retries and backoffs › when providing a way to execute
#   step jobs › when timeout is provided › should check if timeout is reached in each step
async def test_step_job_checks_its_own_timeout_at_each_step(bq: Bull) -> None:
    # Node's timings (1000 ms steps, 1500 ms timeout, 500 ms backoff) scaled by 0.4, except the
    # backoff, 1000 ms: the Python worker rounds its waits for a delayed job up to whole seconds
    name = bq.name()
    queue = bq.queue(name)
    finish = STEP_SECOND + 1

    async def process(job: Any, token: str) -> int:
        timeout = job.data["timeout"]
        step = job.data["step"]
        deadline = time.monotonic() + timeout / 1000
        while True:
            if step == STEP_INITIAL:
                await asyncio.sleep(0.4)
                if time.monotonic() >= deadline:
                    raise Exception("Timeout")
                await job.updateData({"step": STEP_SECOND, "timeout": timeout})
                step = STEP_SECOND
            elif step == STEP_SECOND:
                await asyncio.sleep(0.4)
                if time.monotonic() >= deadline:
                    raise Exception("Timeout")
                await job.updateData({"step": finish, "timeout": timeout})
                return finish
            else:
                raise Exception("invalid step")

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add(
        "test", {"step": STEP_INITIAL, "timeout": 600}, {"attempts": 3, "backoff": 1000}
    )
    [(job, _)] = await wait_for(completed)
    elapsed = time.monotonic() - started
    assert elapsed > 2.0
    assert job.failedReason == "Timeout"
    assert job.returnvalue == finish
    assert job.attemptsMade == 2


# Node: tests/worker.test.ts › workers › Retries and backoffs › when providing a way to execute
#   step jobs › when moving job to delayed in one step › should retry job after a delay time,
#   keeping the current step
async def test_step_job_moving_itself_to_delayed_keeps_its_step(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    finish = STEP_SECOND + 1

    async def process(job: Any, token: str) -> int:
        step = job.data["step"]
        if step == STEP_INITIAL:
            await job.moveToDelayed(now_ms() + 200, token)
            await job.updateData({"step": STEP_SECOND})
            raise bq.DelayedError()
        if step == STEP_SECOND:
            await job.updateData({"step": finish})
            return finish
        raise Exception("invalid step")

    worker = make_worker(bq, name, process)
    errors: list[Any] = []
    worker.on("error", lambda *args: errors.append(args))
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add("test", {"step": STEP_INITIAL})
    [(job, _)] = await wait_for(completed)
    assert time.monotonic() - started > 0.2
    assert job.returnvalue == finish
    assert job.attemptsMade == 1
    assert job.attemptsStarted == 2
    assert errors == []


# Node: tests/worker.test.ts › workers › Retries and backoffs › should retry a job after a delay
#   if an exponential backoff is given
async def test_exponential_backoff_delays_the_retries(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        if job.attemptsMade < 2:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add(
        "test", {"foo": "bar"}, {"attempts": 3, "backoff": {"type": "exponential", "delay": 200}}
    )
    await wait_for(completed)
    assert time.monotonic() - started > 0.2 * (2**2 - 1)


async def _until_third_attempt(job: Any, token: str) -> None:
    if job.attemptsMade < 2:
        raise Exception("Not yet!")


# Node: tests/worker.test.ts › workers › Retries and backoffs › should retry a job after a delay
#   if a custom backoff is given
async def test_custom_backoff_strategy_delays_the_retries(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(
        bq,
        name,
        _until_third_attempt,
        settings={"backoffStrategy": lambda attempts_made, *_: attempts_made * 200},
    )
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": {"type": "custom"}})
    await wait_for(completed)
    assert time.monotonic() - started > 0.6


# Node: tests/worker.test.ts › workers › Retries and backoffs › when applying custom backoff by
#   type › should retry a job after a delay for custom type
async def test_custom_backoff_strategy_by_type(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    def strategy(attempts_made: int, kind: str, err: Any, job: Any) -> int:
        if kind == "custom1":
            return attempts_made * 200
        if kind == "custom2":
            return attempts_made * 400
        raise Exception("invalid type")

    worker = make_worker(bq, name, _until_third_attempt, settings={"backoffStrategy": strategy})
    started = time.monotonic()
    first = future_of(worker, "completed")
    await queue.add("test", {"foo": "baz"}, {"attempts": 3, "backoff": {"type": "custom1"}})
    await wait_for(first)
    assert time.monotonic() - started > 0.6
    second = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": {"type": "custom2"}})
    await wait_for(second)
    assert time.monotonic() - started > 1.2


# Node: tests/worker.test.ts › workers › Retries and backoffs › should not retry a job if the
#   custom backoff returns -1
async def test_custom_backoff_of_minus_one_fails_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    tries = [0]

    async def process(job: Any, token: str) -> None:
        tries[0] += 1
        if job.attemptsMade < 2:
            raise Exception("Not yet!")

    worker = make_worker(bq, name, process, settings={"backoffStrategy": lambda *_: -1})
    completions: list[Any] = []
    worker.on("completed", lambda *args: completions.append(args))
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": {"type": "custom"}})
    await wait_for(failed)
    assert tries[0] == 1
    assert await job.getState() == "failed"
    assert completions == []


# Node: tests/worker.test.ts › workers › Retries and backoffs › should retry a job after a delay
#   if a custom backoff is given based on the error thrown
async def test_custom_backoff_strategy_by_error(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    class CustomError(Exception):
        pass

    async def process(job: Any, token: str) -> None:
        if job.attemptsMade < 2:
            raise CustomError("Hey, custom error!")

    def strategy(attempts_made: int, kind: str, err: Any, *_: Any) -> int:
        return 300 if isinstance(err, CustomError) else 100

    worker = make_worker(bq, name, process, settings={"backoffStrategy": strategy})
    completed = future_of(worker, "completed")
    started = time.monotonic()
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": {"type": "custom"}})
    await wait_for(completed)
    assert time.monotonic() - started > 0.6


# Node: tests/worker.test.ts › workers › Retries and backoffs › should not retry a job that has
#   been removed
async def test_retry_of_a_removed_job_raises(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    attempts = [0]

    async def process(job: Any, token: str) -> None:
        if attempts[0] == 0:
            attempts[0] += 1
            raise Exception("failed")

    worker = make_worker(bq, name, process)
    seen: list[Any] = []

    async def on_failed(job: Any, err: Any) -> None:
        seen.append((job.data["foo"], str(err), job.failedReason))
        await job.retry()

    listener = in_background(on_failed)
    worker.on("failed", listener)
    completed = future_of(worker, "completed")
    retried = await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    await asyncio.gather(*listener.tasks)
    assert seen == [("bar", "failed", "failed")]
    assert await queue.getCompletedCount() == 1
    await asyncio.sleep(0.01)  # timestamps are in ms: let the grace of 0 cover the job
    await queue.clean(0, 0, "completed")
    with raises(f"Missing key for job {retried.id}. reprocessJob"):
        await retried.retry()
    assert await queue.getCompletedCount() == 0
    assert await queue.getFailedCount() == 0


# Node: tests/worker.test.ts › workers › Retries and backoffs › should not retry a job that has
#   been retried already
async def test_retry_of_a_job_no_longer_failed_raises(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    attempts = [0]

    async def process(job: Any, token: str) -> None:
        if attempts[0] == 0:
            attempts[0] += 1
            raise Exception("failed")

    worker = make_worker(bq, name, process)
    listener = in_background(lambda job, err: job.retry())
    worker.on("failed", listener)
    completed = future_of(worker, "completed")
    retried = await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    await asyncio.gather(*listener.tasks)
    assert await queue.getCompletedCount() == 1
    with raises(f"Job {retried.id} is not in the failed state. reprocessJob"):
        await retried.retry()
    assert await queue.getCompletedCount() == 1
    assert await queue.getFailedCount() == 0


# Node: tests/worker.test.ts › workers › Retries and backoffs › should only retry a job once
#   after it has reached the max attempts
async def test_manual_retry_after_exhausted_attempts_runs_once_more(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    attempts = [0]

    async def process(job: Any, token: str) -> None:
        if attempts[0] < 3:
            attempts[0] += 1
            raise Exception("failed")

    worker = make_worker(bq, name, process)
    third = asyncio.get_running_loop().create_future()

    async def on_failed(job: Any, err: Any) -> None:
        if job.attemptsMade == 2:
            await job.retry()
        elif job.attemptsMade == 3 and not third.done():
            third.set_result(None)

    listener = in_background(on_failed)
    worker.on("failed", listener)
    retried = await queue.add("test", {"foo": "bar"}, {"attempts": 2})
    await wait_for(third)
    await asyncio.gather(*listener.tasks)
    assert await queue.getFailedCount() == 1
    with raises(f"Job {retried.id} is not in the completed state. reprocessJob"):
        await retried.retry("completed")
    assert await queue.getCompletedCount() == 0
    assert attempts[0] == 3


# Node: tests/worker.test.ts › workers › Retries and backoffs › should not retry a job that is
#   active
async def test_retry_of_an_active_job_raises(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.5)

    worker = make_worker(bq, name, process)
    active = future_of(worker, "active")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(active)
    with raises(f"Job {job.id} is not in the failed state. reprocessJob"):
        await job.retry()


# --- processing by hand ---------------------------------------------------------------------


# Node: tests/worker.test.ts › workers › Manually process jobs › should allow to complete jobs
#   manually
async def test_job_completed_by_hand(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    await queue.add("test", {"foo": "bar"})
    job = await worker.getNextJob(TOKEN)
    assert await job.isActive() is True
    await job.moveToCompleted("return value", TOKEN)
    assert await job.isCompleted() is True
    assert job.attemptsMade == 1
    assert isinstance(job.finishedOn, int)
    assert job.returnvalue == "return value"


# Node: tests/worker.test.ts › workers › Manually process jobs › when move job to
#   waiting-children › when job is not in active state › throws an error
# (Node also reads ``parent.getDependencies()``, which the Python package lacks.)
async def test_move_to_waiting_children_of_an_inactive_parent_raises(bq: Bull) -> None:
    name = bq.name()
    parent_name = bq.name("parent-queue")
    parent_queue = bq.queue(parent_name)
    queue = bq.queue(name)
    parent_worker = make_worker(bq, parent_name, None)
    children_worker = make_worker(bq, name, None)
    await parent_queue.add("testDepend", {"foo": "bar"})
    parent = await parent_worker.getNextJob("parent-token")
    assert await parent.getState() == "active"
    await queue.add(
        "testJob1",
        {"idx": 0, "bar": "something"},
        {"parent": {"id": parent.id, "queue": parent.queueQualifiedName}},
    )
    child = await children_worker.getNextJob("child-token")
    assert await child.isActive() is True
    pending = {"child": {"id": child.id, "queue": child.queueQualifiedName}}
    await parent.moveToWaitingChildren("parent-token", pending)
    assert await parent.getState() == "waiting-children"
    assert len(await parent_queue.getWaitingChildren()) == 1
    with raises(f"Missing lock for job {parent.id}. moveToWaitingChildren"):
        await parent.moveToWaitingChildren("parent-token", pending)
    with raises(f"Job {parent.id} is not in the active state. moveToWaitingChildren"):
        await parent.moveToWaitingChildren("0", pending)


# Node: tests/worker.test.ts › workers › Manually process jobs › should allow to fail jobs
#   manually
async def test_job_failed_by_hand(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    await queue.add("test", {"foo": "bar"})
    job = await worker.getNextJob(TOKEN)
    assert await job.isActive() is True
    await job.moveToFailed(Exception("job failed for some reason"), TOKEN)
    assert await job.isCompleted() is False
    assert await job.isFailed() is True
    assert job.attemptsMade == 1
    assert isinstance(job.finishedOn, int)
    assert job.failedReason == "job failed for some reason"


# Node: tests/worker.test.ts › workers › Manually process jobs › when there is a job in waiting ›
#   should emit active event when calling getNextJob
async def test_get_next_job_emits_active(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    await queue.add("test", {"foo": "bar"})
    activated = future_of(worker, "active")
    job = await worker.getNextJob(TOKEN)
    [(active_job, *_rest)] = await wait_for(activated)
    assert active_job.id == job.id
    assert await job.isActive() is True
    await job.moveToCompleted("done", TOKEN)


# Node: tests/worker.test.ts › workers › non-blocking › should block by default
async def test_get_next_job_blocks_until_a_job_arrives(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    assert await worker.getNextJob(TOKEN) is None  # drained now

    async def add_later() -> None:
        await asyncio.sleep(0.1)
        await queue.add("test", {"foo": "bar"})

    job, _ = await wait_for(asyncio.gather(worker.getNextJob(TOKEN), add_later()))
    assert job is not None
    assert await job.isActive() is True


# --- runtime children -----------------------------------------------------------------------


async def _children_at_runtime(bq: Bull) -> tuple[Any, int]:
    name = bq.name()
    parent_name = bq.name("parent-queue")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    executions = [0]
    finish = STEP_THIRD + 1

    async def parent_process(job: Any, token: str) -> int:
        step = job.data["step"]
        while True:
            if step == STEP_INITIAL:
                await queue.add(
                    "child-1",
                    {"foo": "bar"},
                    {"parent": {"id": job.id, "queue": job.queueQualifiedName}},
                )
                await job.updateData({"step": STEP_SECOND})
                step = STEP_SECOND
            elif step == STEP_SECOND:
                await queue.add(
                    "child-2",
                    {"foo": "bar"},
                    {"parent": {"id": job.id, "queue": parent_queue.qualifiedName}},
                )
                await job.updateData({"step": STEP_THIRD})
                step = STEP_THIRD
            elif step == STEP_THIRD:
                executions[0] += 1
                if await job.moveToWaitingChildren(token, {}):
                    raise bq.WaitingChildrenError()
                await job.updateData({"step": finish})
                return finish
            else:
                raise Exception("invalid step")

    async def child_process(job: Any, token: str) -> None:
        await asyncio.sleep(0.2)

    worker = make_worker(bq, parent_name, parent_process)
    errors: list[Any] = []
    worker.on("error", lambda *args: errors.append(args))
    make_worker(bq, name, child_process)
    completed = future_of(worker, "completed")
    await parent_queue.add("test", {"step": STEP_INITIAL}, {"attempts": 3, "backoff": 1000})
    [(job, _)] = await wait_for(completed)
    assert errors == []
    assert job.returnvalue == finish
    return job, executions[0]


# Node: tests/worker.redis.test.ts › workers (redis-only) › when creating children at runtime ›
#   should wait children as one step of the parent job
async def test_parent_waits_for_children_added_at_runtime(bq: Bull) -> None:
    _, executions = await _children_at_runtime(bq)
    assert executions == 2


# Node: tests/worker.redis.test.ts › workers (redis-only) › when creating children at runtime ›
#   when skip attempt option is provided as true › should wait children as one step of the
#   parent job whithout incrementing attemptMade
async def test_waiting_for_runtime_children_does_not_use_an_attempt(bq: Bull) -> None:
    job, executions = await _children_at_runtime(bq)
    assert executions == 2
    assert job.attemptsMade == 1
    assert job.attemptsStarted == 2


FACADE_PENDING: dict[str, str] = {}
