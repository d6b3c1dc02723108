"""BullMQ's Node cases for delayed jobs (tests/delay.test.ts), in Python against the package's
API: a job added with ``delay`` waits in ``delayed``, is published as ``delayed`` on the
queue's events, and is processed once its time has come, in order of due time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


def make_worker(bq: Bull, name: str, processor: Any, **opts: Any) -> Any:
    """``bq.worker`` with a ``drainDelay`` of 1 s unless given (BullMQ's default is 5 s). On
    the real package (redis-py's 5 s default socket timeout), ``close()`` can miss the cancel
    of a blocking wait for jobs that has just begun: the wait then runs its course, and one as
    long as the socket timeout is retried again and again, so that the close never ends."""
    return bq.worker(name, processor, **{"drainDelay": 1, **opts})


async def noop(job: Any, token: str) -> None:
    return None


def start(worker: Any) -> asyncio.Future[None]:
    return asyncio.ensure_future(worker.run())


async def stop(worker: Any, running: asyncio.Future[None]) -> None:
    await worker.close()
    await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 10)


# Node: tests/delay.test.ts › Delayed jobs › should process a delayed job only after delayed
#   time
async def test_delayed_job_is_processed_after_its_delay(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    delayed = future_of(events, "delayed")
    worker = make_worker(bq, name, noop)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"delayed": "foobar"}, {"delay": 1000})
    assert job.id
    assert job.data["delayed"] == "foobar"
    assert job.opts["delay"] == 1000
    assert job.delay == 1000
    [(done, _)] = await wait_for(completed)
    assert delayed.done()
    assert 1000 <= done.processedOn - done.timestamp < 1000 * 1.2
    assert await queue.getWaiting() == []
    assert await queue.getDelayed() == []


# Node: tests/delay.test.ts › Delayed jobs › when delay is provided as 0 › when priority is not
#   provided › should add job directly into wait state
async def test_zero_delay_job_is_waiting(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {}, {"delay": 0})
    assert await job.getState() == "waiting"


# Node: tests/delay.test.ts › Delayed jobs › when delay is provided as 0 › when priority is
#   provided › should add job directly into prioritized state
async def test_zero_delay_job_with_priority_is_prioritized(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {}, {"delay": 0, "priority": 1})
    assert await job.getState() == "prioritized"


# Node: tests/delay.test.ts › Delayed jobs › should process a delayed job added after an initial
#   long delayed job
async def test_short_delay_added_after_a_long_one_is_processed_in_time(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    delayed = future_of(events, "delayed", 2)
    worker = make_worker(bq, name, noop)
    completed = future_of(worker, "completed")
    await queue.add("test", {"delayed": "foobar"}, {"delay": 1000 * 60 * 60 * 24 * 365})
    await asyncio.sleep(1)  # the worker settles on the year-long delay
    job = await queue.add("test", {"delayed": "foobar"}, {"delay": 1000})
    assert job.opts["delay"] == 1000
    assert job.delay == 1000
    [(done, _)] = await wait_for(completed)
    assert 1000 <= done.processedOn - done.timestamp < 1000 * 1.2
    assert await queue.getWaiting() == []
    assert len(await queue.getDelayed()) == 1
    await wait_for(delayed)
    assert await queue.getJobCountByTypes("active") == 0


# Node: tests/delay.test.ts › Delayed jobs › when failed jobs are retried and moved to delayed ›
#   processes jobs without getting stuck
async def test_retries_through_delayed_do_not_get_stuck(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processed: list[Any] = []

    async def process(job: Any, token: str) -> None:
        if job.attemptsMade == 0:
            await asyncio.sleep(0.25)
            raise Exception("forced error in test")
        await asyncio.sleep(0.025)
        processed.append(job.data)

    worker = make_worker(bq, name, process, autorun=False, concurrency=50)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    for j in range(2):
        await queue.add("test", {"foo": f"bar{j}"}, {"attempts": 2, "backoff": 10})
    await wait_for(completed)
    assert len(processed) == 2
    assert await queue.getJobCountByTypes("failed", "wait", "delayed") == 0
    await stop(worker, running)


# Node: tests/delay.test.ts › Delayed jobs › should process delayed jobs with exact same
#   timestamps in correct order (FIFO)
async def test_delayed_jobs_due_at_the_same_time_run_fifo(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[int] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data["order"])

    worker = make_worker(bq, name, process)
    completed = future_of(worker, "completed", 43)
    failures: list[Any] = []
    worker.on("failed", lambda *args: failures.append(args))
    now = int(time.time() * 1000)
    for i in range(1, 44):
        await queue.add("test", {"order": i}, {"delay": 1000, "timestamp": now})
    await wait_for(completed)
    assert seen == list(range(1, 44))
    assert failures == []


# Node: tests/delay.test.ts › Delayed jobs › when autorun option is provided as false › should
#   process a delayed job only after delayed time
async def test_delayed_job_is_processed_by_a_worker_started_later(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    delayed = future_of(events, "delayed")
    completed = future_of(events, "completed")
    worker = make_worker(bq, name, noop, autorun=False)
    started = time.monotonic()
    job = await queue.add("test", {"delayed": "foobar"}, {"delay": 1000})
    assert job.opts["delay"] == 1000
    running = start(worker)
    await wait_for(delayed)
    await wait_for(completed)
    assert time.monotonic() - started > 1.0
    assert await queue.getWaiting() == []
    assert await queue.getDelayed() == []
    await stop(worker, running)


FACADE_PENDING: dict[str, str] = {}
