"""BullMQ's Node cases for the ``deduplication`` job option (tests/deduplication.test.ts), in
Python against the package's API: the 'deduplicated' event, ttl, extend, replace and
keepLastIfActive. Node reads the events stream with XREAD; here a QueueEvents replays it from
the start (``lastEventId='0'``), so no event of the case can be missed."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, eventually, future_of, wait_for


def where(emitter: Any, event: str, predicate: Any) -> asyncio.Future[tuple[Any, ...]]:
    """A future for the arguments of the first ``event`` of ``emitter`` matching ``predicate``."""
    future: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()

    def listener(*args: Any) -> None:
        if not future.done() and predicate(*args):
            future.set_result(args)

    emitter.on(event, listener)
    return future


def recorder(events: Any, event: str) -> list[dict[str, Any]]:
    """The payloads of every ``event`` ``events`` delivers, in order."""
    seen: list[dict[str, Any]] = []
    events.on(event, lambda args, _id: seen.append(args))
    return seen


async def settle(queue: Any, events: Any) -> None:
    """Wait until every event published so far has reached ``events``: add a marker job and
    wait for its 'added' event, which the stream delivers after all earlier ones."""
    marker = where(events, "added", lambda args, _id: args.get("name") == "marker")
    await queue.add("marker", {})
    await wait_for(marker)


def start(worker: Any) -> asyncio.Future[Any]:
    """Run a Worker built with ``autorun=False``."""
    return asyncio.ensure_future(worker.run())


async def stop(worker: Any, running: asyncio.Future[Any]) -> None:
    await worker.close()
    await wait_for(running)


def dedup(dedup_id: str, **extra: Any) -> dict[str, Any]:
    return {"deduplication": {"id": dedup_id, **extra}}


def dedup_opts(dedup_id: str, options: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"deduplication": {"id": dedup_id, **options}, **extra}


async def pause_for(seconds: float) -> None:
    """Time passing is part of these scenarios (a ttl running out), not a synchronisation."""
    await asyncio.sleep(seconds)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › emits deduplicated event
async def test_second_add_with_same_id_is_deduplicated_with_an_event(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.add("test", {"foo": "bar"}, {"jobId": "a1", **dedup("dedupId")})
    await queue.add("test", {"foo": "bar"}, {"jobId": "a2", **dedup("dedupId")})
    events = bq.queue_events(name, lastEventId="0")
    deduplicated = where(
        events,
        "deduplicated",
        lambda args, _id: (
            args.get("jobId") == "a1"
            and args.get("deduplicationId") == "dedupId"
            and args.get("deduplicatedJobId") == "a2"
        ),
    )
    await wait_for(deduplicated)
    assert await queue.getJob("a1") is not None
    assert await queue.getJob("a2") is None


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is provided › uses a fixed time period and emits
#   deduplicated event
async def test_ttl_deduplicates_for_a_fixed_period(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")
    opts = dedup("a1", ttl=2000)
    job = await queue.add("test", {"foo": "bar"}, opts)
    await pause_for(1.0)
    await queue.add("test", {"foo": "bar"}, opts)
    await queue.add("test", {"foo": "bar"}, opts)
    await pause_for(1.1)
    second = await queue.add("test", {"foo": "bar"}, opts)
    await queue.add("test", {"foo": "bar"}, opts)
    await queue.add("test", {"foo": "bar"}, opts)
    await settle(queue, events)
    assert second.id != job.id
    assert [event["jobId"] for event in seen] == [job.id, job.id, second.id, second.id]
    assert {event["deduplicationId"] for event in seen} == {"a1"}


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is provided › when removing deduplicated job ›
#   removes deduplication key
async def test_removing_the_job_frees_its_ttl_deduplication_id(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")
    opts = dedup("a1", ttl=2000)
    job = await queue.add("test", {"foo": "bar"}, opts)
    await job.remove()
    await queue.add("test", {"foo": "bar"}, opts)
    await pause_for(1.0)
    await queue.add("test", {"foo": "bar"}, opts)
    await pause_for(1.1)
    second = await queue.add("test", {"foo": "bar"}, opts)
    await second.remove()
    await queue.add("test", {"foo": "bar"}, opts)
    await queue.add("test", {"foo": "bar"}, opts)
    await settle(queue, events)
    assert len(seen) == 2


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is provided › when extend is provided as true › resets
#   ttl (the case with delayed jobs)
async def test_extend_resets_the_ttl_of_a_delayed_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    running = start(worker)
    options = {"ttl": 500, "extend": True}
    await queue.add("test", {"foo": "bar"}, dedup_opts("a1", options, delay=500))
    await pause_for(0.25)
    await queue.add("test", {"foo": "baz"}, dedup_opts("a1", options, delay=500))
    await pause_for(0.25)
    await queue.add("test", {"foo": "bax"}, dedup_opts("a1", options, delay=500))
    [(job, _result)] = await wait_for(completed)
    assert job.id == "1"
    assert job.data["foo"] == "bar"
    assert await queue.getJobCountByTypes() == 1
    await settle(queue, events)
    assert len(seen) == 2
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is provided › when replace is provided as true ›
#   removes last job if it is in delayed state
async def test_replace_with_ttl_swaps_the_delayed_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    running = start(worker)
    options = {"ttl": 500, "replace": True}
    await queue.add("test", {"foo": "bar"}, dedup_opts("a1", options, delay=500))
    await pause_for(0.25)
    job2 = await queue.add("test", {"foo": "baz"}, dedup_opts("a1", options, delay=500))
    assert await queue.getDeduplicationJobId("a1") == job2.id
    await pause_for(0.3)
    job3 = await queue.add("test", {"foo": "bax"}, dedup_opts("a1", options, delay=500))
    assert await queue.getDeduplicationJobId("a1") == job3.id
    [(job, _result)] = await wait_for(completed)
    assert job.id == "2"
    assert job.data["foo"] == "baz"
    assert await queue.getJobCountByTypes() == 2
    await settle(queue, events)
    assert len(seen) == 1
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is provided › when extend is provided as true › resets
#   ttl (the case without delay)
async def test_extend_resets_the_ttl_after_the_job_is_done(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    running = start(worker)
    options = {"ttl": 500, "extend": True}
    job1 = await queue.add("test", {"foo": "bar"}, dedup_opts("a1", options))
    await pause_for(0.25)
    await queue.add("test", {"foo": "baz"}, dedup_opts("a1", options))
    assert await queue.getDeduplicationJobId("a1") == job1.id
    await pause_for(0.25)
    job3 = await queue.add("test", {"foo": "bax"}, dedup_opts("a1", options))
    assert await queue.getDeduplicationJobId("a1") == job3.id
    [(job, _result)] = await wait_for(completed)
    assert job.id == "1"
    assert job.data["foo"] == "bar"
    assert await queue.getJobCountByTypes() == 1
    await settle(queue, events)
    assert len(seen) == 2
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is provided › when extend and replace options are
#   provided as true › resets ttl and removes last job if it is in delayed state
async def test_extend_and_replace_keep_only_the_last_delayed_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    running = start(worker)
    options = {"ttl": 500, "extend": True, "replace": True}
    jobs = []
    for i in range(10):
        jobs.append(await queue.add("test", {"foo": i}, dedup_opts("a1", options, delay=500)))
        await pause_for(0.025)
    assert await queue.getDeduplicationJobId("a1") == jobs[-1].id
    [(job, _result)] = await wait_for(completed)
    assert job.id == "10"
    assert job.data["foo"] == 9
    assert await queue.getJobCountByTypes() == 1
    await settle(queue, events)
    assert len(seen) == 9
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is not provided › waits until job is finished before
#   removing deduplication key
async def test_without_ttl_the_id_is_held_until_the_job_finishes(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)
        await queue.add("test", {"foo": "bar"}, dedup("a1"))
        await asyncio.sleep(0.1)
        await queue.add("test", {"foo": "bar"}, dedup("a1"))
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, autorun=False)
    completed = where(events, "completed", lambda args, _id: True)
    running = start(worker)
    await queue.add("test", {"foo": "bar"}, dedup("a1"))
    [args, _id] = await wait_for(completed)
    assert args["jobId"] == "1"
    second = await queue.add("test", {"foo": "bar"}, dedup("a1"))
    assert await queue.getJobCountByTypes() == 2
    assert len(seen) == 2
    assert second.id == "4"
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is not provided › when replace is provided as true ›
#   removes last job if it is in delayed state
async def test_replace_without_ttl_swaps_only_a_delayed_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.25)

    worker = bq.worker(name, process, autorun=False)
    active = future_of(worker, "active")
    completed = future_of(worker, "completed")
    running = start(worker)
    await queue.add("test", {"foo": "bar"}, dedup_opts("a1", {"replace": True}, delay=500))
    await pause_for(0.15)
    job2 = await queue.add("test", {"foo": "baz"}, dedup_opts("a1", {"replace": True}, delay=250))
    assert await queue.getDeduplicationJobId("a1") == job2.id
    # Node sleeps 400 ms for job2 to be running; the package's worker may pick a delayed job
    # up to a second late (it rounds its blocking wait up), so wait for it instead.
    await wait_for(active)
    job3 = await queue.add("test", {"foo": "bax"}, dedup_opts("a1", {"replace": True}, delay=500))
    assert await queue.getDeduplicationJobId("a1") == job3.id
    [(job, _result)] = await wait_for(completed)
    assert job.id == "2"
    assert job.data["foo"] == "baz"
    assert await queue.getJobCountByTypes() == 1
    await settle(queue, events)
    assert len(seen) == 1
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is not provided › when removing deduplicated job ›
#   removes deduplication key
async def test_removing_the_job_frees_its_deduplication_id(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")
    job = await queue.add("test", {"foo": "bar"}, dedup("a1"))
    await job.remove()
    await queue.add("test", {"foo": "bar"}, dedup("a1"))
    await queue.add("test", {"foo": "bar"}, dedup("a1"))
    second = await queue.add("test", {"foo": "bar"}, dedup("a1"))
    await second.remove()
    await settle(queue, events)
    assert len(seen) == 2


# Node: tests/deduplication.test.ts › deduplication › when job is deduplicated when added again
#   with same deduplication id › when ttl is not provided › when removing deduplicated job ›
#   when manual removal on a deduplicated job in finished state › does not remove deduplication
#   key
async def test_removing_a_finished_job_keeps_the_newer_holder(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")
    job = await queue.add("test", {"foo": "bar"}, dedup("a1"))

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    running = start(worker)
    await wait_for(completed)
    await worker.close()
    await wait_for(running)
    await queue.add("test", {"foo": "bar"}, dedup("a1"))
    await job.remove()
    await queue.add("test", {"foo": "bar"}, dedup("a1"))
    await settle(queue, events)
    assert len(seen) == 1


# --- keepLastIfActive ---------------------------------------------------------------------


class HeldFirst:
    """A processor that records each job's data and holds the first one for ``hold`` seconds,
    with an event set once the first job is running."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.started = asyncio.Event()
        self.data: list[Any] = []
        self.ids: list[str] = []

    async def __call__(self, job: Any, token: str) -> None:
        if not self.started.is_set():
            self.started.set()
            await asyncio.sleep(self.hold)
        self.data.append(job.data)
        self.ids.append(job.id)


KEEP_LAST = {"keepLastIfActive": True}


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   store next job data and create new job when active job completes
async def test_keep_last_if_active_runs_the_stored_job_after_the_active_one(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.5)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    job1 = await queue.add("test", {"seq": 1}, dedup_opts("dedup-active-1", KEEP_LAST))
    await wait_for(processor.started.wait())
    job2 = await queue.add("test", {"seq": 2}, dedup_opts("dedup-active-1", KEEP_LAST))
    assert job2.id == job1.id
    await wait_for(completed)
    assert processor.data == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   still deduplicate when dedup job is waiting (not active)
async def test_keep_last_if_active_deduplicates_a_waiting_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    job1 = await queue.add("test", {"seq": 1}, dedup_opts("dedup-waiting-1", KEEP_LAST))
    job2 = await queue.add("test", {"seq": 2}, dedup_opts("dedup-waiting-1", KEEP_LAST))
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "deduplicated")
    await settle(queue, events)
    assert job2.id == job1.id
    matching = [
        event
        for event in seen
        if event.get("jobId") == job1.id and event.get("deduplicationId") == "dedup-waiting-1"
    ]
    assert len(matching) == 1


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   replace stored data with latest when multiple jobs added while active
async def test_keep_last_if_active_keeps_only_the_latest_stored_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.5)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    await queue.add("test", {"seq": 1}, dedup_opts("dedup-latest-1", KEEP_LAST))
    await wait_for(processor.started.wait())
    await queue.add("test", {"seq": 2}, dedup_opts("dedup-latest-1", KEEP_LAST))
    await queue.add("test", {"seq": 3}, dedup_opts("dedup-latest-1", KEEP_LAST))
    await wait_for(completed)
    assert processor.data == [{"seq": 1}, {"seq": 3}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should not
#   allow parallel execution of jobs with same dedup id
async def test_keep_last_if_active_never_runs_two_at_once(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    active = 0
    most = 0
    started = asyncio.Event()

    async def process(job: Any, token: str) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        started.set()
        await asyncio.sleep(0.2)
        active -= 1

    worker = bq.worker(name, process, autorun=False, concurrency=5)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    await queue.add("test", {"seq": 1}, dedup_opts("dedup-no-parallel-1", KEEP_LAST))
    await wait_for(started.wait())
    await queue.add("test", {"seq": 2}, dedup_opts("dedup-no-parallel-1", KEEP_LAST))
    await wait_for(completed)
    assert most == 1
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   properly clean up after both jobs complete
async def test_keep_last_if_active_frees_the_id_after_both_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.3)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    third = where(worker, "completed", lambda job, _result: job.data.get("seq") == 3)
    running = start(worker)
    await queue.add("test", {"seq": 1}, dedup_opts("dedup-cleanup-1", KEEP_LAST))
    await wait_for(processor.started.wait())
    await queue.add("test", {"seq": 2}, dedup_opts("dedup-cleanup-1", KEEP_LAST))
    await wait_for(completed)
    await queue.add("test", {"seq": 3}, dedup_opts("dedup-cleanup-1", KEEP_LAST))
    await wait_for(third)
    assert len(processor.data) == 3
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should work
#   with ttl option
async def test_keep_last_if_active_with_a_ttl(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.3)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    options = {"ttl": 10000, **KEEP_LAST}
    await queue.add("test", {"seq": 1}, dedup_opts("dedup-ttl-active-1", options))
    await wait_for(processor.started.wait())
    await queue.add("test", {"seq": 2}, dedup_opts("dedup-ttl-active-1", options))
    await wait_for(completed)
    assert processor.data == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should add
#   next job to paused list when queue is paused and process after resume
async def test_keep_last_if_active_stored_job_waits_for_resume(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    gate = asyncio.Event()
    processed: list[Any] = []

    async def process(job: Any, token: str) -> None:
        if not processed and not started.is_set():
            started.set()
            await gate.wait()
        processed.append(job.data)

    worker = bq.worker(name, process, autorun=False)
    first = future_of(worker, "completed")
    both = future_of(worker, "completed", 2)
    running = start(worker)
    await queue.add("test", {"seq": 1}, dedup_opts("dedupPause", KEEP_LAST))
    await wait_for(started.wait())
    await queue.pause()
    await queue.add("test", {"seq": 2}, dedup_opts("dedupPause", KEEP_LAST))
    gate.set()
    await wait_for(first)

    async def one_waiting() -> bool:
        return await queue.getWaitingCount() == 1

    await eventually(one_waiting)
    await pause_for(0.3)  # a paused queue hands the stored job to no one meanwhile
    assert processed == [{"seq": 1}]
    await queue.resume()
    await wait_for(both)
    assert processed == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   allow delay with keepLastIfActive
async def test_keep_last_if_active_allows_a_delay(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"seq": 1}, dedup_opts("dedupDelay", KEEP_LAST, delay=5000))
    assert job.id is not None
    assert await job.getState() == "delayed"


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   allow queue default delay with keepLastIfActive
async def test_keep_last_if_active_allows_a_default_delay(bq: Bull) -> None:
    queue = bq.queue(defaultJobOptions={"delay": 5000})
    job = await queue.add("test", {"seq": 1}, dedup_opts("dedupDefaultDelay", KEEP_LAST))
    assert job.id is not None
    assert await job.getState() == "delayed"


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   requeue with delay when active job completes and next job was stored
async def test_keep_last_if_active_requeues_the_stored_job_with_its_delay(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.5)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    await queue.add("test", {"seq": 1}, dedup_opts("dedupDelayRequeue", KEEP_LAST, delay=1000))
    running = start(worker)
    await wait_for(processor.started.wait())
    await queue.add("test", {"seq": 2}, dedup_opts("dedupDelayRequeue", KEEP_LAST, delay=1000))
    await wait_for(completed)
    assert processor.data == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   requeue next job when active job fails permanently
async def test_keep_last_if_active_requeues_after_a_final_failure(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    processed: list[Any] = []

    async def process(job: Any, token: str) -> None:
        processed.append(job.data)
        if len(processed) == 1:
            started.set()
            await asyncio.sleep(0.5)
            raise Exception("intentional failure")

    worker = bq.worker(name, process, autorun=False)
    failed = future_of(worker, "failed")
    completed = future_of(worker, "completed")
    running = start(worker)
    job1 = await queue.add("test", {"seq": 1}, dedup_opts("dedup-fail-1", KEEP_LAST, attempts=1))
    await wait_for(started.wait())
    job2 = await queue.add("test", {"seq": 2}, dedup_opts("dedup-fail-1", KEEP_LAST))
    assert job2.id == job1.id
    await wait_for(failed)
    await wait_for(completed)
    assert processed == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   requeue next job only after retries are exhausted
async def test_keep_last_if_active_requeues_only_after_the_retries(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    started = asyncio.Event()
    attempts = 0
    processed: list[Any] = []

    async def process(job: Any, token: str) -> None:
        nonlocal attempts
        if job.data["seq"] == 1:
            attempts += 1
            if attempts == 1:
                started.set()
                await asyncio.sleep(0.3)
            raise Exception("retry failure")
        processed.append(job.data)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    exhausted = future_of(events, "retries-exhausted")
    running = start(worker)
    await queue.add(
        "test",
        {"seq": 1},
        dedup_opts("dedup-retry-1", KEEP_LAST, attempts=3, backoff={"type": "fixed", "delay": 50}),
    )
    await wait_for(started.wait())
    await queue.add("test", {"seq": 2}, dedup_opts("dedup-retry-1", KEEP_LAST))
    await wait_for(exhausted)
    await wait_for(completed)
    assert attempts == 3
    assert processed == [{"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   prevent parallel execution even when ttl expires while job is active
async def test_keep_last_if_active_holds_the_id_past_its_ttl(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.5)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    options = {"ttl": 200, **KEEP_LAST}
    job1 = await queue.add("test", {"seq": 1}, dedup_opts("dedup-ttl-expire-1", options))
    await wait_for(processor.started.wait())
    await pause_for(0.3)  # past the ttl, the first job still running
    job2 = await queue.add("test", {"seq": 2}, dedup_opts("dedup-ttl-expire-1", options))
    assert job2.id == job1.id
    await wait_for(completed)
    assert processor.data == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


# Node: tests/deduplication.test.ts › deduplication › when keepLastIfActive is true › should
#   preserve custom jobId when requeuing proto-job
async def test_keep_last_if_active_keeps_the_stored_job_id(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processor = HeldFirst(0.5)
    worker = bq.worker(name, processor, autorun=False)
    completed = future_of(worker, "completed", 2)
    running = start(worker)
    await queue.add(
        "test",
        {"seq": 1},
        dedup_opts("dedup-custom-id-1", KEEP_LAST, jobId="my-custom-uuid-1"),
    )
    await wait_for(processor.started.wait())
    await queue.add(
        "test",
        {"seq": 2},
        dedup_opts("dedup-custom-id-1", KEEP_LAST, jobId="my-custom-uuid-2"),
    )
    await wait_for(completed)
    assert processor.ids == ["my-custom-uuid-1", "my-custom-uuid-2"]
    assert processor.data == [{"seq": 1}, {"seq": 2}]
    await stop(worker, running)


FACADE_PENDING: dict[str, str] = {}
