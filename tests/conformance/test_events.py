"""BullMQ's Node cases for events (tests/events.test.ts, tests/events.redis.test.ts), in Python
against the package's API: the global events a QueueEvents delivers (waiting, active,
completed, drained, cleaned, added, duplicated, waiting-children, custom events) and the
Worker's own events. Node starts its QueueEvents at '$' once ready; a QueueEvents here replays
the queue's stream from the start (``lastEventId='0'``), so no event of the case can be
missed. Where Node reads the stream with XLEN, a QueueEvents shows what it holds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conformance.conftest import Bull, eventually, future_of, wait_for


def where(emitter: Any, event: str, predicate: Any) -> asyncio.Future[tuple[Any, ...]]:
    """A future for the arguments of the first ``event`` of ``emitter`` matching ``predicate``."""
    future: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()

    def listener(*args: Any) -> None:
        if not future.done() and predicate(*args):
            future.set_result(args)

    emitter.on(event, listener)
    return future


def recorder(events: Any, *names: str) -> list[tuple[str, dict[str, Any]]]:
    """Every one of the ``names`` events ``events`` delivers, in order, with its payload."""
    seen: list[tuple[str, dict[str, Any]]] = []
    for event in names:
        events.on(event, lambda args, _id, event=event: seen.append((event, args)))
    return seen


async def settle(queue: Any, events: Any) -> str:
    """Wait until every event published so far has reached ``events``: add a marker job and
    wait for its 'added' event, which the stream delivers after all earlier ones. Returns the
    marker's id."""
    marker = where(events, "added", lambda args, _id: args.get("name") == "marker")
    await queue.add("marker", {})
    [args, _id] = await wait_for(marker)
    return str(args["jobId"])


async def noop(job: Any, token: str) -> None:
    return None


# === tests/events.test.ts ====================================================================


# Node: tests/events.test.ts › events › when autorun option is provided as false › emits waiting
#   when a job has been added
async def test_queue_events_run_by_hand_delivers_waiting(bq: Bull) -> None:
    # Node listens on the Queue ('waiting' is also a local Queue event there); the package's
    # Queue emits no local events, so the QueueEvents started by hand is what is observed.
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, autorun=False, lastEventId="0")
    waiting = future_of(events, "waiting")
    running = asyncio.ensure_future(events.run())
    job = await queue.add("test", {"foo": "bar"})
    [(args, _id)] = await wait_for(waiting)
    assert args["jobId"] == job.id
    await queue.close()
    await events.close()
    await asyncio.wait([running], timeout=10)
    assert running.done()  # run() ends with close()


# Node: tests/events.test.ts › events › when autorun option is provided as false › when run
#   method is called when queueEvent is running › throws error
async def test_queue_events_run_twice_fails(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, autorun=False, lastEventId="0")
    added = future_of(events, "added")
    running = asyncio.ensure_future(events.run())
    await queue.add("test", {"foo": "bar"})
    await wait_for(added)  # the first run() is consuming
    # Node's message: 'Queue Events is already running.'
    with pytest.raises(Exception, match="already running"):
        await events.run()
    await queue.close()
    await events.close()
    await asyncio.wait([running], timeout=10)
    assert running.done()


# Node: tests/events.test.ts › events › should emit global waiting event when a job has been
#   added
async def test_global_waiting_event_on_add(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    waiting = future_of(events, "waiting")
    job = await queue.add("test", {"foo": "bar"})
    [(args, _id)] = await wait_for(waiting)
    assert args["jobId"] == job.id


# Node: tests/events.test.ts › events › when jobs are cleaned › emits cleaned global event
async def test_clean_publishes_a_cleaned_event_with_the_count(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    cleaned = future_of(events, "cleaned")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.01)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed", 50)
    await queue.addBulk([{"name": "test", "data": {"foo": "bar"}} for _ in range(50)])
    running = asyncio.ensure_future(worker.run())
    await wait_for(completed)
    await queue.clean(0, 0, "completed")
    [(args, _id)] = await wait_for(cleaned)
    assert args["count"] == "50"
    assert await queue.getJobCountByTypes("completed") == 0
    assert await queue.getJobCountByTypes("waiting", "delayed", "prioritized") == 0
    await worker.close()
    await wait_for(running)


# Node: tests/events.test.ts › events › emits drained global event when all jobs have been
#   processed
async def test_drained_global_event_after_the_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    drained = future_of(events, "drained")
    worker = bq.worker(name, noop, drainDelay=1)
    await queue.addBulk([{"name": "test", "data": {"foo": "bar"}}, {"name": "test", "data": {}}])
    [(event_id,)] = await wait_for(drained)
    assert isinstance(event_id, str)
    assert 1 <= await queue.getJobCountByTypes("completed") <= 2
    await worker.close()


# Node: tests/events.test.ts › events › when concurrency is greater than 1 › emits drained global
#   event when all jobs have been processed
async def test_drained_global_event_with_concurrency(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    drained = future_of(events, "drained")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.5)

    worker = bq.worker(name, process, concurrency=4, drainDelay=500)
    await queue.addBulk([{"name": "test", "data": {"foo": foo}} for foo in "abcd"])
    [(event_id,)] = await wait_for(drained)
    assert isinstance(event_id, str)
    assert await queue.getJobCountByTypes("completed") == 4
    await worker.close()


# Node: tests/events.test.ts › events › emits drained global event only once when worker is idle
async def test_drained_global_event_once_per_emptying(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    drained: list[str] = []
    events.on("drained", lambda event_id: drained.append(event_id))

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.025)

    worker = bq.worker(name, process, drainDelay=1)
    batch = [{"name": "test", "data": {"foo": "bar"}}, {"name": "test", "data": {"foo": "baz"}}]
    await queue.addBulk(batch)
    await asyncio.sleep(1.0)  # Node: the worker idles a second between the two batches
    await queue.addBulk(batch)
    await asyncio.sleep(2.0)  # and two after: an idle worker must not repeat 'drained'
    assert await queue.getJobCountByTypes("completed") == 4
    assert len(drained) == 2
    await worker.close()


# Node: tests/events.test.ts › events › emits error event when there is an error on other events
async def test_error_in_a_completed_listener_is_an_error_event(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, noop, drainDelay=1)

    def broken(job: Any, result: Any) -> None:
        print(job.bar.id)  # no such attribute: the listener raises

    worker.on("completed", broken)
    error = future_of(worker, "error")
    await queue.add("test", {"foo": "bar"})
    await wait_for(error)
    assert await queue.getJobCountByTypes("completed") == 1
    await worker.close()


# Node: tests/events.test.ts › events › when one job is added › emits added event
async def test_added_event_carries_id_and_name(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    added = future_of(events, "added")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)

    worker = bq.worker(name, process, drainDelay=1)
    await queue.add("test", {"foo": "bar"})
    [(args, _id)] = await wait_for(added)
    assert args["jobId"] == "1"
    assert args["name"] == "test"
    await worker.close()


# Node: tests/events.test.ts › events › when job has been added again › emits duplicated event
async def test_adding_an_existing_job_id_publishes_duplicated(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    duplicated = future_of(events, "duplicated")

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.05)
        await queue.add("test", {"foo": "bar"}, {"jobId": "a1"})
        await asyncio.sleep(0.05)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"}, {"jobId": "a1"})
    running = asyncio.ensure_future(worker.run())
    [(args, _id)] = await wait_for(duplicated)
    assert args["jobId"] == "a1"
    await wait_for(completed)
    await worker.close()
    await wait_for(running)


# Node: tests/events.test.ts › events › should emit an event when a job becomes active
async def test_worker_emits_active_then_completed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, noop)
    order: list[str] = []
    worker.on("active", lambda *args: order.append("active"))
    completed = future_of(worker, "completed")
    worker.on("completed", lambda *args: order.append("completed"))
    await queue.add("test", {})
    await wait_for(completed)
    assert order == ["active", "completed"]
    await worker.close()


# Node: tests/events.test.ts › events › should emit an active event for every processed job
async def test_worker_emits_active_for_every_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, noop)
    active: list[Any] = []
    worker.on("active", lambda job, *rest: active.append(job.id))
    errors = future_of(worker, "error")
    completed = future_of(worker, "completed", 20)
    await queue.addBulk([{"name": "test", "data": {"index": i}} for i in range(20)])
    await wait_for(completed)
    assert not errors.done()
    assert len(active) == 20
    await worker.close()


# Node: tests/events.test.ts › events › when one job is a parent › emits waiting-children and
#   waiting event
async def test_parent_publishes_waiting_children_then_waiting(bq: Bull) -> None:
    name = bq.name()
    children_name = bq.name("children")
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    waiting_children = future_of(events, "waiting-children")
    worker = bq.worker(name, noop, autorun=False, drainDelay=1)

    async def child(job: Any, token: str) -> None:
        await asyncio.sleep(0.15)

    children_worker = bq.worker(children_name, child, autorun=False, drainDelay=1)
    flow = bq.flow_producer()
    await flow.add(
        {
            "name": "parent-job",
            "queueName": name,
            "data": {},
            "children": [{"name": "test", "data": {"foo": "bar"}, "queueName": children_name}],
        }
    )
    [(args, _id)] = await wait_for(waiting_children)
    parent = await queue.getJob(args["jobId"])
    assert await parent.getState() == "waiting-children"
    assert parent.name == "parent-job"
    waiting = where(events, "waiting", lambda args, _id: args["jobId"] == parent.id)
    running = [
        asyncio.ensure_future(worker.run()),
        asyncio.ensure_future(children_worker.run()),
    ]
    [args, _id] = await wait_for(waiting)
    assert args["prev"] == "waiting-children"
    await worker.close()
    await children_worker.close()
    await wait_for(asyncio.gather(*running))


# Node: tests/events.test.ts › events › should listen to global events
async def test_global_events_come_in_order(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "waiting", "active", "completed")
    completed = future_of(events, "completed")
    worker = bq.worker(name, noop)
    await queue.add("test", {})
    await wait_for(completed)
    assert [event for event, _args in seen] == ["waiting", "active", "completed"]
    assert all(args["jobId"] == "1" for _event, args in seen)
    assert seen[1][1]["prev"] == "waiting"
    assert seen[2][1]["returnvalue"] is None
    await worker.close()


# Node: tests/events.test.ts › events › emits completed global event with the deserialized
#   return value
async def test_completed_event_carries_the_return_value(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    completed = future_of(events, "completed")

    async def process(job: Any, token: str) -> Any:
        return {"result": 42}

    worker = bq.worker(name, process)
    await queue.add("test", {})
    [(args, _id)] = await wait_for(completed)
    assert args["jobId"] == "1"
    assert args["returnvalue"] == {"result": 42}
    await worker.close()


# === tests/events.redis.test.ts ==============================================================


# Node: tests/events.redis.test.ts › events (redis-only) › when jobs removal is attempted on
#   non-existed records › should not publish removed events
async def test_removing_unknown_ids_publishes_nothing(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    for i in range(100):
        await queue.remove(str(i))
    events = bq.queue_events(name, lastEventId="0")
    seen = recorder(events, "removed", "added", "waiting")
    marker = await settle(queue, events)
    assert [event for event, _args in seen if event == "removed"] == []
    assert all(args["jobId"] == marker for _event, args in seen)


# Node: tests/events.redis.test.ts › events (redis-only) › should trim events manually
async def test_trim_events_to_zero_empties_the_stream(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    for _ in range(4):
        await queue.add("test", {})
    before = bq.queue_events(name, lastEventId="0")
    seen_before = recorder(before, "added", "waiting")

    async def all_eight() -> bool:
        return len(seen_before) >= 8

    await eventually(all_eight)
    await before.close()
    assert len(seen_before) == 8
    await queue.trimEvents(0)
    after = bq.queue_events(name, lastEventId="0")
    seen_after = recorder(after, "added", "waiting")
    marker = await settle(queue, after)
    assert all(args["jobId"] == marker for _event, args in seen_after)


# Node: tests/events.redis.test.ts › events (redis-only) › when publishing custom events › emits
#   waiting when a job has been added
async def test_custom_event_published_before_run_is_delivered(bq: Bull) -> None:
    name = bq.name()
    producer = bq.closing(bq.QueueEventsProducer(name, bq.options()))
    events = bq.queue_events(name, autorun=False, lastEventId="0-0")
    example = future_of(events, "example")
    await producer.publishEvent({"eventName": "example", "custom": "value"})
    running = asyncio.ensure_future(events.run())
    [(args, _id)] = await wait_for(example)
    assert args["custom"] == "value"
    await producer.close()
    await events.close()
    await asyncio.wait([running], timeout=10)


FACADE_PENDING: dict[str, str] = {}
