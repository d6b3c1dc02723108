"""BullMQ's Node cases for stalled jobs (tests/stalled_jobs.test.ts), in Python against the
package's API. A job stalls when its worker stops renewing its lock: here a first worker takes
the jobs and is force-closed (``close(force=True)``), and a second worker, whose stalled-job
check runs every 100 ms, finds them once their lock (1 s) has run out. The Python worker's
``stalled`` event carries the job id only, and its ``failed`` event (job, error): Node's third
argument (the previous state) has no Python counterpart."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


def make_worker(bq: Bull, name: str, processor: Any, **opts: Any) -> Any:
    """``bq.worker`` with a ``drainDelay`` of 1 s unless given (BullMQ's default is 5 s). On
    the real package (redis-py's 5 s default socket timeout), ``close()`` can miss the cancel
    of a blocking wait for jobs that has just begun: the wait then runs its course, and one as
    long as the socket timeout is retried again and again, so that the close never ends."""
    return bq.worker(name, processor, **{"drainDelay": 1, **opts})


STALLED = "job stalled more than allowable limit"


async def noop(job: Any, token: str) -> None:
    return None


async def forever(job: Any, token: str) -> None:
    # outlives the lock (1 s) by far; a force-closed worker may still start one of these, which
    # its later (non-forced) close awaits: Node's 10 s would hold up every teardown
    await asyncio.sleep(3)


async def stall(bq: Bull, name: str, count: int, add: Any, **opts: Any) -> Any:
    """A worker (lock 1 s, concurrency 4) takes ``count`` jobs that ``add()`` adds and is
    force-closed while they run; returns what ``add()`` returned."""
    worker = make_worker(
        bq,
        name,
        opts.pop("processor", forever),
        **{"lockDuration": 1000, "stalledInterval": 100, "concurrency": 4, **opts},
    )
    worker.on("error", lambda *args: None)
    all_active = future_of(worker, "active", count)
    added = await add()
    await wait_for(all_active)
    await worker.close(force=True)
    return added


def four_jobs(queue: Any, opts: dict[str, Any] | None = None) -> Any:
    async def add() -> list[Any]:
        datas = [{"bar": "baz"}, {"bar1": "baz1"}, {"bar2": "baz2"}, {"bar3": "baz3"}]
        return [await queue.add("test", data, opts or {}) for data in datas]

    return add


# Node: tests/stalled_jobs.test.ts › stalled jobs › process stalled jobs when starting a queue
async def test_stalled_jobs_are_processed_by_the_next_worker(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    global_stalled = future_of(events, "stalled", 4)
    await stall(bq, name, 4, four_jobs(queue))
    worker2 = make_worker(bq, name, noop, stalledInterval=100, concurrency=4)
    stalled = future_of(worker2, "stalled", 4)
    completed = future_of(worker2, "completed", 4)
    await wait_for(stalled)
    await wait_for(global_stalled)
    results = await wait_for(completed)
    assert [job.stalledCounter for job, _ in results] == [1, 1, 1, 1]


async def _fail_four_stalled(bq: Bull, queue: Any, name: str, opts: dict[str, Any] | None = None):
    """Four jobs stall once with ``maxStalledCount`` 0: the next worker fails them."""
    jobs = await stall(bq, name, 4, four_jobs(queue, opts), maxStalledCount=0)
    worker2 = make_worker(bq, name, noop, stalledInterval=100, maxStalledCount=0, concurrency=4)
    failed = future_of(worker2, "failed", 4)
    return jobs, worker2, failed


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › moves jobs to failed
async def test_jobs_stalled_beyond_the_limit_fail(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    global_failed = future_of(events, "failed")
    _, _, failed = await _fail_four_stalled(bq, queue, name)
    for job, err in await wait_for(failed, 10):
        assert isinstance(job.finishedOn, int) and job.finishedOn > 0
        assert job.attemptsStarted == 2
        assert job.attemptsMade == 1
        assert job.stalledCounter == 1
        assert str(err) == STALLED
    [(args, _id)] = await wait_for(global_failed)
    assert args["failedReason"] == STALLED


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when retrying jobs › keeps stalledCounter
async def test_retried_stalled_jobs_keep_their_stalled_counter(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    global_failed = future_of(events, "failed")
    jobs, worker2, failed = await _fail_four_stalled(bq, queue, name)
    completed = future_of(worker2, "completed", 4)
    for job, err in await wait_for(failed, 10):
        assert (job.attemptsStarted, job.attemptsMade, job.stalledCounter) == (2, 1, 1)
        assert str(err) == STALLED
    [(args, _id)] = await wait_for(global_failed)
    assert args["failedReason"] == STALLED
    for job in jobs:
        await job.retry()
    for job, _ in await wait_for(completed):
        assert (job.attemptsStarted, job.attemptsMade, job.stalledCounter) == (3, 2, 1)


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › moves jobs to failed with maxStalledCount > 1
async def test_jobs_fail_after_stalling_more_than_max_stalled_count(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    global_failed = future_of(events, "failed")
    jobs = await four_jobs(queue, {"removeOnFail": True})()
    for _ in range(3):  # each worker takes the jobs again, and stalls them
        await stall(bq, name, 4, lambda: asyncio.sleep(0), maxStalledCount=2)
    last = make_worker(
        bq,
        name,
        forever,
        lockDuration=1000,
        stalledInterval=100,
        maxStalledCount=2,
        concurrency=4,
    )
    failed = future_of(last, "failed", 4)
    for job, err in await wait_for(failed, 10):
        assert (job.attemptsStarted, job.attemptsMade, job.stalledCounter) == (4, 1, 3)
        assert str(err) == STALLED
    [(args, _id)] = await wait_for(global_failed)
    assert args["failedReason"] == STALLED
    for job in jobs:
        assert await queue.getJob(job.id) is None
    await last.close(force=True)


async def _child_stalls_in_a_flow(bq: Bull, child_opts: dict[str, Any]) -> tuple[Any, ...]:
    """A flow whose one child (with ``child_opts``) stalls, with three plain jobs, beyond
    ``maxStalledCount`` 0; returns (queue, flow tree, failed future of the next worker)."""
    name = bq.name()
    parent_name = bq.name("parent-queue")
    queue = bq.queue(name)
    bq.queue(parent_name)
    flow = bq.flow_producer()

    async def add() -> Any:
        tree = await flow.add(
            {
                "name": "parent-job",
                "queueName": parent_name,
                "data": {},
                "children": [
                    {"name": "test", "data": {"foo": "bar"}, "queueName": name, "opts": child_opts}
                ],
            }
        )
        await queue.addBulk([{"name": "test", "data": {"index": i}} for i in range(3)])
        return tree

    tree = await stall(bq, name, 4, add, maxStalledCount=0)
    worker2 = make_worker(bq, name, noop, stalledInterval=100, maxStalledCount=0, concurrency=4)
    failed = future_of(worker2, "failed", 4)
    return queue, parent_name, tree, failed


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when failParentOnFailure is provided as true › should move parent to failed
#   when child is moved to failed
async def test_stalled_child_fails_its_parent_with_fail_parent_on_failure(bq: Bull) -> None:
    name = bq.name()
    parent_name = bq.name("parent-queue")
    queue = bq.queue(name)
    bq.queue(parent_name)
    flow = bq.flow_producer()
    parent_worker = make_worker(bq, parent_name, noop)
    parent_failed = future_of(parent_worker, "failed")

    async def add() -> Any:
        tree = await flow.add(
            {
                "name": "parent-job",
                "queueName": parent_name,
                "data": {},
                "children": [
                    {
                        "name": "test",
                        "data": {"foo": "bar"},
                        "queueName": name,
                        "opts": {"failParentOnFailure": True},
                    }
                ],
            }
        )
        await queue.addBulk([{"name": "test", "data": {"index": i}} for i in range(3)])
        return tree

    tree = await stall(bq, name, 4, add, maxStalledCount=0)
    worker2 = make_worker(bq, name, noop, stalledInterval=100, maxStalledCount=0, concurrency=4)
    failed = future_of(worker2, "failed", 4)
    for _job, err in await wait_for(failed, 10):
        assert str(err) == STALLED
    [(_parent, err)] = await wait_for(parent_failed)
    child = tree["children"][0]["job"]
    assert str(err) == f"child {queue.qualifiedName}:{child.id} failed"


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when continueParentOnFailure is provided as true › should start processing
#   parent when child is moved to failed
async def test_stalled_child_releases_its_parent_with_continue_parent_on_failure(
    bq: Bull,
) -> None:
    _queue, _parent_name, tree, failed = await _child_stalls_in_a_flow(
        bq, {"continueParentOnFailure": True}
    )
    for _job, err in await wait_for(failed, 10):
        assert str(err) == STALLED
    assert await tree["job"].getState() == "waiting"


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when ignoreDependencyOnFailure is provided as true › should move parent to
#   waiting when child is moved to failed and save child failedReason
# (Node also reads the parent's ``getIgnoredChildrenFailures()``, which the Python package
# lacks.)
async def test_stalled_child_releases_its_parent_with_ignore_dependency_on_failure(
    bq: Bull,
) -> None:
    _queue, _parent_name, tree, failed = await _child_stalls_in_a_flow(
        bq, {"ignoreDependencyOnFailure": True}
    )
    for _job, err in await wait_for(failed, 10):
        assert str(err) == STALLED
    assert await tree["job"].getState() == "waiting"


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when removeDependencyOnFailure is provided as true › should move parent to
#   waiting when child is moved to failed
async def test_stalled_child_releases_its_parent_with_remove_dependency_on_failure(
    bq: Bull,
) -> None:
    _queue, _parent_name, tree, failed = await _child_stalls_in_a_flow(
        bq, {"removeDependencyOnFailure": True}
    )
    for _job, err in await wait_for(failed, 10):
        assert str(err) == STALLED
    assert await tree["job"].getState() == "waiting"


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when removeOnFail is provided as a number › keeps the specified number of
#   jobs in failed
async def test_stalled_failures_respect_remove_on_fail_count(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def add() -> Any:
        jobs = [
            {"name": "test", "data": {"index": i}, "opts": {"removeOnFail": 3}} for i in range(4)
        ]
        return await queue.addBulk(jobs)

    await stall(bq, name, 4, add, maxStalledCount=0)
    worker2 = make_worker(bq, name, noop, stalledInterval=100, maxStalledCount=0, concurrency=4)
    failed = future_of(worker2, "failed", 4)
    for _job, err in await wait_for(failed, 10):
        assert str(err) == STALLED
    assert await queue.getFailedCount() == 3


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when removeOnFail is provided as boolean › when removeOnFail is provided as
#   true › removes all job keys
async def test_stalled_failures_with_remove_on_fail_true_are_removed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    global_failed = future_of(events, "failed")
    jobs, _worker2, failed = await _fail_four_stalled(bq, queue, name, {"removeOnFail": True})
    for job, err in await wait_for(failed, 10):
        assert (job.attemptsStarted, job.attemptsMade, job.stalledCounter) == (2, 1, 1)
        assert str(err) == STALLED
    [(args, _id)] = await wait_for(global_failed)
    assert args["failedReason"] == STALLED
    for job in jobs:
        assert await queue.getJob(job.id) is None


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when removeOnFail is provided as boolean › keeps the jobs with removeOnFail
#   as false in failed
async def test_stalled_failures_keep_jobs_with_remove_on_fail_false(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def add() -> Any:
        jobs = [
            {"name": "test", "data": {"index": i}, "opts": {"removeOnFail": i % 2 == 1}}
            for i in range(4)
        ]
        return await queue.addBulk(jobs)

    await stall(bq, name, 4, add, maxStalledCount=0)
    worker2 = make_worker(bq, name, noop, stalledInterval=100, maxStalledCount=0, concurrency=4)
    failed = future_of(worker2, "failed", 4)
    for job, err in await wait_for(failed, 10):
        assert (job.attemptsStarted, job.attemptsMade, job.stalledCounter) == (2, 1, 1)
        assert str(err) == STALLED
    assert await queue.getFailedCount() == 2


# Node: tests/stalled_jobs.test.ts › stalled jobs › when stalled jobs stall more than allowable
#   stalled limit › when removeOnFail is provided as a object › keeps the specified number of
#   jobs in failed respecting the age
async def test_stalled_failures_respect_remove_on_fail_age(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        if job.data["index"] < 2:
            raise Exception("fail")
        await asyncio.sleep(3)

    worker = make_worker(
        bq,
        name,
        process,
        autorun=False,
        lockDuration=1000,
        stalledInterval=100,
        maxStalledCount=0,
        concurrency=4,
    )
    all_active = future_of(worker, "active", 4)
    first_failures = future_of(worker, "failed", 2)
    jobs = await queue.addBulk(
        [
            {"name": "test", "data": {"index": i}, "opts": {"removeOnFail": {"count": 4, "age": 1}}}
            for i in range(4)
        ]
    )
    running = asyncio.ensure_future(worker.run())
    await wait_for(all_active)
    await wait_for(first_failures)
    await worker.close(force=True)
    await asyncio.gather(running, return_exceptions=True)
    worker2 = make_worker(bq, name, noop, stalledInterval=100, maxStalledCount=0, concurrency=4)
    failed = future_of(worker2, "failed", 2)
    results = await wait_for(failed, 10)
    for _job, err in results:
        assert str(err) == STALLED
    # the two that failed first are more than ``age`` (1 s) old by then, and were removed
    assert await queue.getFailedCount() == 2
    assert sorted(job.id for job, _ in results) == sorted([jobs[2].id, jobs[3].id])
    assert sorted(job.data["index"] for job, _ in results) == [2, 3]


# Node: tests/stalled_jobs.test.ts › stalled jobs › jobs not stalled while lock is extended
async def test_jobs_do_not_stall_while_their_lock_is_renewed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(4)

    worker = make_worker(bq, name, process, lockDuration=100, stalledInterval=50, concurrency=4)
    all_active = future_of(worker, "active", 4)
    await queue.addBulk([{"name": "test", "data": {"bar": f"baz-{i}"}} for i in range(4)])
    await wait_for(all_active)
    worker2 = make_worker(bq, name, noop, stalledInterval=50, concurrency=4)
    stalled = future_of(worker2, "stalled", 4)
    await asyncio.sleep(0.5)  # five lock durations: the locks are renewed meanwhile
    assert not stalled.done()
    assert (await queue.getJobCounts("active"))["active"] == 4
    await worker.close(force=True)
    await wait_for(stalled)


FACADE_PENDING: dict[str, str] = {}
