"""Pausing a queue globally and a worker locally, after BullMQ's tests/pause.test.ts, as
differential cases on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, eventually, future_of, wait_for


# Node: tests/pause.test.ts › Pause › should not process delayed jobs
async def test_a_paused_queue_does_not_process_a_delayed_job_once_due(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processed = False

    async def process(job: Any, token: str) -> None:
        nonlocal processed
        processed = True

    worker = bq.worker(name, process)
    await queue.pause()
    await queue.add("test", {}, {"delay": 300})
    counts = await queue.getJobCounts("waiting", "delayed")
    assert counts["waiting"] == 0
    assert counts["delayed"] == 1

    async def promoted() -> bool:
        counts = await queue.getJobCounts("waiting", "delayed")
        return counts["waiting"] == 1 and counts["delayed"] == 0

    await eventually(promoted, timeout=10)
    assert not processed
    await worker.close()


# Node: tests/pause.test.ts › Pause › should pause a queue until resumed
async def test_jobs_added_to_a_paused_queue_are_processed_once_resumed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    queue_paused = False
    seen: list[tuple[bool, Any]] = []

    async def process(job: Any, token: str) -> None:
        seen.append((queue_paused, job.data["foo"]))

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed", 2)
    running = asyncio.ensure_future(worker.run())
    await queue.pause()
    queue_paused = True
    await queue.add("test", {"foo": "paused"})
    await queue.add("test", {"foo": "paused"})
    queue_paused = False
    await queue.resume()
    await wait_for(completed)
    assert seen == [(False, "paused"), (False, "paused")]
    await worker.close()
    await wait_for(running)


# Node: tests/pause.test.ts › Pause › should be able to pause a running queue and emit relevant events
async def test_pausing_a_running_queue_emits_paused_and_resumed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    paused_seen: list[tuple[Any, ...]] = []
    resumed = future_of(events, "resumed")
    first = True

    async def process(job: Any, token: str) -> None:
        nonlocal first
        assert job.data["foo"] == "paused"
        if first:
            first = False
            await queue.pause()
        else:
            assert len(paused_seen) == 1  # resumed only from the 'paused' listener

    resuming: list[asyncio.Future[None]] = []

    def on_paused(*args: Any) -> None:
        paused_seen.append(args)
        resuming.append(asyncio.ensure_future(queue.resume()))

    events.on("paused", on_paused)
    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed", 2)
    await queue.add("test", {"foo": "paused"})
    await queue.add("test", {"foo": "paused"})
    running = asyncio.ensure_future(worker.run())
    await wait_for(completed)
    [(paused_args, paused_id)] = paused_seen
    assert paused_args == {}
    assert isinstance(paused_id, str)
    [(resumed_args, resumed_id)] = await wait_for(resumed)
    assert resumed_args == {}
    assert isinstance(resumed_id, str)
    await wait_for(asyncio.gather(*resuming))
    await worker.close()
    await wait_for(running)


# Node: tests/pause.test.ts › Pause › should pause the queue locally
async def test_a_locally_paused_worker_processes_nothing_until_resumed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processed = 0

    async def process(job: Any, token: str) -> None:
        nonlocal processed
        processed += 1

    worker = bq.worker(name, process)
    await worker.pause()
    await queue.add("test", {"foo": "paused"})
    await queue.add("test", {"foo": "paused"})
    assert processed == 0
    assert (await queue.getJobCounts("waiting"))["waiting"] == 2
    completed = future_of(worker, "completed", 2)
    worker.resume()
    await wait_for(completed)
    assert processed == 2
    await worker.close()


# Node: tests/pause.test.ts › Pause › should wait until active jobs are finished before resolving pause
async def test_worker_pause_waits_for_the_active_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str) -> None:
        started.set()
        await asyncio.sleep(0.3)  # the work the job does

    worker = bq.worker(name, process)
    for i in range(10):
        await queue.add("test", i)
    await wait_for(started.wait())
    await worker.pause()
    assert await queue.getJobCountByTypes("active") == 0
    # one of the 10 was processed
    assert await queue.getJobCountByTypes("delayed", "waiting") == 9
    await queue.add("test", {})
    assert await queue.getJobCountByTypes("active") == 0
    assert await queue.getJobCountByTypes("paused", "waiting", "delayed") == 10
    await worker.close()


# Node: tests/pause.test.ts › Pause › should pause the queue locally when more than one worker is active
async def test_pausing_two_workers_waits_for_both_active_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = [asyncio.Event(), asyncio.Event()]

    def processor(index: int) -> Any:
        async def process(job: Any, token: str) -> None:
            started[index].set()
            await asyncio.sleep(0.5)  # the work the job does

        return process

    worker1 = bq.worker(name, processor(0))
    worker2 = bq.worker(name, processor(1))
    for i in range(1, 5):
        await queue.add("test", i)
    await wait_for(asyncio.gather(started[0].wait(), started[1].wait()))
    await asyncio.gather(worker1.pause(), worker2.pause())
    counts = await queue.getJobCounts("active", "waiting", "completed")
    assert counts["active"] == 0
    assert counts["waiting"] == 2
    assert counts["completed"] == 2
    await asyncio.gather(worker1.close(), worker2.close())


# Node: tests/pause.test.ts › Pause ›
#   should wait for blocking job retrieval to complete before pausing locally
async def test_a_worker_paused_while_idle_leaves_new_jobs_waiting(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str) -> None:
        started.set()
        await asyncio.sleep(0.2)  # the work the job does

    worker = bq.worker(name, process)
    await queue.add("test", 1)
    await wait_for(started.wait())
    await worker.pause()
    await queue.add("test", 2)
    counts = await queue.getJobCounts("active", "waiting", "completed")
    assert counts["active"] == 0
    assert counts["waiting"] == 1
    assert counts["completed"] == 1
    await worker.close()


# Node: tests/pause.test.ts › Pause › pauses fast when queue is drained
async def test_pausing_a_drained_queue_is_fast(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    drained = future_of(events, "drained")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.05)  # the work the job does

    worker = bq.worker(name, process)
    await queue.add("test", {})
    await wait_for(drained)
    await wait_for(queue.pause())  # returns without waiting for anything
    await worker.close()


# Node: tests/pause.test.ts › Pause › gets the right response from isPaused
async def test_is_paused_follows_pause_and_resume(bq: Bull) -> None:
    queue = bq.queue()
    await queue.pause()
    assert await queue.isPaused() is True
    await queue.resume()
    assert await queue.isPaused() is False


# Node: tests/pause.test.ts › Pause › should pause and resume worker without error
async def test_a_worker_pauses_and_resumes_without_error(bq: Bull) -> None:
    name = bq.name()
    errors: list[Any] = []

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)  # the work the job does

    worker = bq.worker(name, process)
    worker.on("error", lambda *args: errors.append(args))
    await asyncio.sleep(0.01)  # let the worker start waiting for jobs
    await worker.pause()
    await asyncio.sleep(0.01)
    worker.resume()
    await asyncio.sleep(0.01)
    await worker.pause()
    await asyncio.sleep(0.01)
    await worker.close()
    assert errors == []


# Node: tests/pause.test.ts › Pause › when backoff is 0 › moves job into paused queue
async def test_a_job_retried_without_backoff_goes_to_wait_of_a_paused_queue(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    retried: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    resuming: list[asyncio.Future[None]] = []

    async def process(job: Any, token: str) -> None:
        if job.attemptsMade == 0:
            await queue.pause()
            raise Exception("Not yet!")

    async def on_retried(prev: str) -> None:
        retried.set_result((prev, await queue.getJobCountByTypes("wait")))
        await queue.resume()

    def on_waiting(args: dict[str, Any], event_id: str) -> None:
        if args.get("prev") and not resuming:
            resuming.append(asyncio.ensure_future(on_retried(args["prev"])))

    events.on("waiting", on_waiting)
    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"}, {"attempts": 2, "backoff": 0})
    running = asyncio.ensure_future(worker.run())
    assert await wait_for(retried) == ("active", 1)
    await wait_for(asyncio.gather(*resuming))
    [(job, _)] = await wait_for(completed)
    assert job.attemptsMade == 2
    await worker.close()
    await wait_for(running)


FACADE_PENDING: dict[str, str] = {}
