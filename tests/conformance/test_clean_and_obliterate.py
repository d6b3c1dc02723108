"""Queue.clean and Queue.obliterate, after BullMQ's tests/clean.test.ts, tests/obliterate.test.ts
and tests/obliterate.redis.test.ts, as differential cases on both backends.

The Redis-only obliterate cases assert that no key of the queue is left; here the same outcome is
read through the public API (no job, count or scheduler left)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conformance.conftest import Bull, future_of, wait_for

# What Node's ``Queue.count()`` sums (the Python package has no ``count``).
UNPROCESSED = ("waiting", "delayed", "prioritized", "waiting-children")


async def count(queue: Any) -> int:
    return await queue.getJobCountByTypes(*UNPROCESSED)


async def clock_tick() -> None:
    """``clean`` compares ms timestamps with now - grace: let the clock move past the jobs'."""
    await asyncio.sleep(0.01)


async def nothing(job: Any, token: str) -> None:
    return None


async def failing(job: Any, token: str) -> None:
    await asyncio.sleep(0.1)  # the work the job does
    raise Exception("It failed")


def flow_of(parent_queue: str, children_queue: str, children: int, **child: Any) -> dict[str, Any]:
    return {
        "name": "parent-job",
        "queueName": parent_queue,
        "data": {},
        "children": [
            {"name": "child-job", "data": {"idx": i}, "queueName": children_queue, **child}
            for i in range(children)
        ],
    }


async def add_two(queue: Any, **opts: Any) -> None:
    await queue.add("test", {"some": "data"}, opts)
    await queue.add("test", {"some": "data"}, opts)


# --- clean ---------------------------------------------------------------------------------


# Node: tests/clean.test.ts › Cleaner › should clean an empty queue
# (Python's Queue emits no 'cleaned' event: that part of the Node case is left out)
async def test_clean_of_an_empty_queue_removes_nothing(bq: Bull) -> None:
    queue = bq.queue()
    assert await queue.clean(0, 0, "completed") == []


# Node: tests/clean.test.ts › Cleaner › should clean two jobs from the queue
async def test_clean_removes_completed_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, nothing)
    completed = future_of(worker, "completed", 2)
    await queue.addBulk([{"name": "test", "data": {"some": "data"}}] * 2)
    await wait_for(completed)
    await clock_tick()
    assert len(await queue.clean(0, 0, "completed")) == 2
    await worker.close()


# Node: tests/clean.test.ts › Cleaner › should succeed when the limit is higher than the actual
#   number of jobs
async def test_clean_with_a_limit_above_the_job_count(bq: Bull) -> None:
    queue = bq.queue()
    await add_two(queue)
    await clock_tick()
    assert len(await queue.clean(0, 100, "wait")) == 2
    assert await count(queue) == 0


# Node: tests/clean.test.ts › Cleaner › should only remove a job outside of the grace period
async def test_clean_keeps_jobs_within_the_grace_period(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, nothing)
    first_two = future_of(worker, "completed", 2)
    await add_two(queue)
    await wait_for(first_two)
    await asyncio.sleep(0.6)  # the first two age past the grace period
    last = future_of(worker, "completed")
    await queue.add("test", {"some": "data"})
    await wait_for(last)
    await queue.clean(300, 100, "completed")
    assert len(await queue.getCompleted()) == 1
    await worker.close()


# Node: tests/clean.test.ts › Cleaner › should not clean anything if all jobs are in grace period
async def test_clean_removes_nothing_within_the_grace_period(bq: Bull) -> None:
    queue = bq.queue()
    await add_two(queue)
    assert await count(queue) == 2
    assert await queue.clean(5000, 2, "wait") == []
    assert await queue.clean(5000, 2, "wait") == []
    assert await count(queue) == 2


# Node: tests/clean.test.ts › Cleaner › should clean all failed jobs
async def test_clean_removes_failed_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, failing, autorun=False)
    await queue.addBulk([{"name": "test", "data": {"some": "data"}}] * 2)
    failed = future_of(worker, "failed", 2)
    running = asyncio.ensure_future(worker.run())
    await wait_for(failed)
    await clock_tick()
    assert len(await queue.clean(0, 0, "failed")) == 2
    assert await count(queue) == 0
    await worker.close()
    await wait_for(running)


async def with_scheduler_finished(bq: Bull, process: Any, event: str) -> tuple[Any, Any]:
    """Two jobs and a scheduler's first iteration, all gone to ``event``."""
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, process, autorun=False)
    await queue.addBulk([{"name": "test", "data": {"some": "data"}}] * 2)
    await queue.upsertJobScheduler("test-scheduler1", {"every": 5000})
    finished = future_of(worker, event, 3)
    running = asyncio.ensure_future(worker.run())
    await wait_for(finished)
    await clock_tick()
    return queue, (worker, running)


# Node: tests/clean.test.ts › Cleaner › when job scheduler is present › should clean all failed jobs
async def test_clean_removes_failed_jobs_with_a_scheduler_present(bq: Bull) -> None:
    queue, (worker, running) = await with_scheduler_finished(bq, failing, "failed")
    assert len(await queue.clean(0, 0, "failed")) == 3
    assert await count(queue) == 1  # the scheduler's next iteration
    await worker.close()
    await wait_for(running)


# Node: tests/clean.test.ts › Cleaner › when job scheduler is present ›
#   should clean all completed jobs
async def test_clean_removes_completed_jobs_with_a_scheduler_present(bq: Bull) -> None:
    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.1)  # the work the job does

    queue, (worker, running) = await with_scheduler_finished(bq, process, "completed")
    assert len(await queue.clean(0, 0, "completed")) == 3
    assert await count(queue) == 1  # the scheduler's next iteration
    await worker.close()
    await wait_for(running)


# Node: tests/clean.test.ts › Cleaner › should clean all waiting jobs
async def test_clean_removes_waiting_jobs(bq: Bull) -> None:
    queue = bq.queue()
    await add_two(queue)
    await clock_tick()
    assert len(await queue.clean(0, 0, "wait")) == 2
    assert await count(queue) == 0


# Node: tests/clean.test.ts › Cleaner › should clean all delayed jobs when limit is given
async def test_clean_removes_delayed_jobs_up_to_a_limit(bq: Bull) -> None:
    queue = bq.queue()
    await add_two(queue, delay=5000)
    await clock_tick()
    assert len(await queue.clean(0, 1000, "delayed")) == 2
    assert await count(queue) == 0


# Node: tests/clean.test.ts › Cleaner › should clean all prioritized jobs when limit is given
async def test_clean_removes_prioritized_jobs_up_to_a_limit(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("test", {"some": "data"}, {"priority": 5000})
    await queue.add("test", {"some": "data"}, {"priority": 5001})
    await clock_tick()
    assert len(await queue.clean(0, 1000, "prioritized")) == 2
    assert await count(queue) == 0


# Node: tests/clean.test.ts › Cleaner › when prioritized state is provided ›
#   should clean the number of jobs requested
async def test_clean_removes_only_the_requested_number_of_prioritized_jobs(bq: Bull) -> None:
    queue = bq.queue()
    for priority in (1, 2, 3):
        await queue.add("test", {"some": "data"}, {"priority": priority})
    await clock_tick()
    assert len(await queue.clean(0, 1, "prioritized")) == 1
    assert (await queue.getJobCounts("prioritized"))["prioritized"] == 2


# Node: tests/clean.test.ts › Cleaner › when delayed state is provided › cleans all delayed jobs
async def test_clean_removes_every_delayed_job(bq: Bull) -> None:
    queue = bq.queue()
    await add_two(queue, delay=5000)
    await clock_tick()
    assert len(await queue.clean(0, 0, "delayed")) == 2
    assert await count(queue) == 0


# Node: tests/clean.test.ts › Cleaner › when delayed state is provided ›
#   does not clean anything if all jobs are in grace period
async def test_clean_keeps_delayed_jobs_within_the_grace_period(bq: Bull) -> None:
    queue = bq.queue()
    await add_two(queue, delay=5000)
    assert await queue.clean(5000, 2, "delayed") == []
    assert await count(queue) == 2


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to same queue ›
#   when parent has more than 1 pending children in the same queue › removes parent record
async def test_clean_of_waiting_children_removes_their_same_queue_parent(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await bq.flow_producer().add(flow_of(name, name, 3))
    assert await count(queue) == 4
    await clock_tick()
    await queue.clean(0, 0, "wait")
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to same queue ›
#   when parent has all processed children in the same queue › when parent completes ›
#   deletes parent and its dependency keys
async def test_clean_of_a_completed_flow_removes_parent_and_children(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.02)  # the work the job does

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 4)
    await bq.flow_producer().add(flow_of(name, name, 3))
    await wait_for(completed)
    await clock_tick()
    await queue.clean(0, 0, "completed")
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("completed") == 0
    await worker.close()


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to same queue ›
#   when parent has all processed children in the same queue › when parent fails ›
#   deletes parent dependencies and keeps parent
async def test_clean_of_completed_children_keeps_their_failed_parent(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        if job.data["idx"] == 3:
            raise Exception("error")
        await asyncio.sleep(0.01)  # the work the job does

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    flow = flow_of(name, name, 3)
    flow["data"] = {"idx": 3}
    tree = await bq.flow_producer().add(flow)
    await wait_for(failed)
    await clock_tick()
    await queue.clean(0, 0, "completed")
    assert await tree["job"].getState() == "failed"
    assert await queue.getJob(tree["job"].id) is not None
    assert await queue.getJobCountByTypes("completed") == 0
    await worker.close()


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to same queue ›
#   when parent has only 1 pending child in the same queue › deletes parent and its dependency keys
async def test_clean_of_the_failed_child_removes_its_waiting_parent(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    first = True

    async def process(job: Any, token: str) -> None:
        nonlocal first
        if first:
            first = False
            raise Exception("failed first")
        await asyncio.sleep(0.01)  # the work the job does

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 2)
    failed = future_of(worker, "failed")
    tree = await bq.flow_producer().add(flow_of(name, name, 3))
    await wait_for(failed)
    await wait_for(completed)
    await clock_tick()
    await queue.clean(0, 0, "failed")
    assert await queue.getJobCountByTypes("completed") == 2
    assert await tree["job"].getState() == "unknown"
    await worker.close()


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to same queue ›
#   when parent has pending children in different queue › keeps parent in waiting-children
async def test_clean_of_wait_keeps_a_parent_whose_children_are_elsewhere(bq: Bull) -> None:
    name, children_name = bq.name(), bq.name("children")
    queue = bq.queue(name)
    bq.queue(children_name)
    await bq.flow_producer().add(flow_of(name, children_name, 1))
    assert await count(queue) == 1
    await clock_tick()
    await queue.clean(0, 0, "wait")
    assert await count(queue) == 1


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to same queue ›
#   when creating children at runtime and call clean when parent is active ›
#   does not delete parent record
async def test_clean_of_a_failed_runtime_child_keeps_its_active_parent(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    initial, second, third, finish = range(4)
    proceed = asyncio.Event()

    async def process(job: Any, token: str) -> Any:
        if job.name == "child":
            await asyncio.sleep(0.1)  # the work the job does
            raise Exception("forced child error")
        step = job.data["step"]
        while step != finish:
            if step == initial:
                await queue.add(
                    "child",
                    {"foo": "bar"},
                    {
                        "parent": {"id": job.id, "queue": job.queueQualifiedName},
                        "removeDependencyOnFailure": True,
                    },
                )
                await proceed.wait()  # until the case has cleaned the failed child
                await job.updateData({"step": second})
                step = second
            elif step == second:
                await asyncio.sleep(0.1)  # the work the job does
                await job.updateData({"step": third})
                step = third
            elif step == third:
                if not await job.moveToWaitingChildren(token, {}):
                    await job.updateData({"step": finish})
                    return finish
                raise bq.WaitingChildrenError()
        return None

    worker = bq.worker(name, process, concurrency=2)
    failed = future_of(worker, "failed")
    parent = await queue.add("parent", {"step": initial}, {"attempts": 3, "backoff": 1000})
    try:
        await wait_for(failed)
        await clock_tick()
        await queue.clean(0, 0, "failed")
        assert await queue.getJob(parent.id) is not None
        assert await queue.getJobCountByTypes("completed") == 0
        assert await parent.getState() == "active"
    finally:
        proceed.set()
    await worker.close()


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to different
#   queue › when parent has more than 1 pending children ›
#   deletes each children until trying to move parent to wait
async def test_clean_of_several_children_moves_parent_in_other_queue_to_wait(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    await bq.flow_producer().add(flow_of(parent_name, name, 3))
    assert await count(queue) == 3
    await clock_tick()
    await queue.clean(0, 0, "wait")
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    assert await parent_queue.getJobCountByTypes("wait") == 1


# Node: tests/clean.test.ts › Cleaner › when creating a flow › when parent belongs to different
#   queue › when parent has only 1 pending children › moves parent to wait to try to process it
async def test_clean_of_the_only_prioritized_child_moves_parent_to_wait(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    await bq.flow_producer().add(flow_of(parent_name, name, 1, opts={"priority": 1}))
    assert await count(queue) == 1
    assert (await queue.getJobCounts("prioritized"))["prioritized"] == 1
    await clock_tick()
    await queue.clean(0, 0, "prioritized")
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    assert await parent_queue.getJobCountByTypes("wait") == 1


# --- obliterate ------------------------------------------------------------------------------


async def mixed_queue_with_one_active(bq: Bull) -> tuple[Any, Any, asyncio.Event]:
    """Jobs failed, completed and delayed, and one held active until the event is set."""
    name = bq.name()
    queue = bq.queue(name)
    await queue.add("test", {"foo": "bar"})
    await queue.add("test", {"qux": "baz"})
    await queue.add("test", {"foo": "bar2"})
    await queue.add("test", {"foo": "bar3"}, {"delay": 5000})
    calls = 0
    third_started, release = asyncio.Event(), asyncio.Event()

    async def process(job: Any, token: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Exception("failed first")
        if calls == 3:
            third_started.set()
            await release.wait()

    worker = bq.worker(name, process)
    await wait_for(third_started.wait())
    return queue, worker, release


async def assert_obliterated(queue: Any, *job_ids: str) -> None:
    assert await queue.getJobCountByTypes() == 0
    assert await queue.getJobCountByTypes(*UNPROCESSED) == 0
    for job_id in job_ids:
        assert await queue.getJob(job_id) is None


# Node: tests/obliterate.test.ts › Obliterate › should raise exception if queue has active jobs
async def test_obliterate_refuses_a_queue_with_active_jobs(bq: Bull) -> None:
    queue, worker, release = await mixed_queue_with_one_active(bq)
    try:
        with pytest.raises(Exception, match="Cannot obliterate queue with active jobs"):
            await queue.obliterate()
    finally:
        release.set()
    await worker.close()


# Node: tests/obliterate.test.ts › Obliterate › should remove job logs
async def test_obliterate_removes_job_logs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> Any:
        await asyncio.sleep(0.1)  # the work the job does
        return await job.log("Lorem Ipsum Dolor Sit Amet")

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {})
    await wait_for(completed)
    await queue.obliterate(force=True)
    assert (await queue.getJobLogs(job.id))["logs"] == []
    await worker.close()


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › should obliterate an empty queue
async def test_obliterate_an_empty_queue(bq: Bull) -> None:
    queue = bq.queue()
    await queue.obliterate()
    await assert_obliterated(queue)


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) ›
#   should obliterate a queue which is empty but has had jobs in the past
async def test_obliterate_a_queue_whose_jobs_were_removed(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.remove()
    await queue.obliterate()
    await assert_obliterated(queue, job.id)


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) ›
#   should obliterate a queue with jobs in different statuses
async def test_obliterate_a_queue_with_jobs_in_several_states(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    first = await queue.add("test", {"foo": "bar"})
    second = await queue.add("test", {"foo": "bar2"})
    delayed = await queue.add("test", {"foo": "bar3"}, {"delay": 5000})
    last = await queue.add("test", {"qux": "baz"})
    failed_first = True

    async def process(job: Any, token: str) -> None:
        nonlocal failed_first
        if failed_first:
            failed_first = False
            raise Exception("failed first")
        await asyncio.sleep(0.05)  # the work the job does

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 2)
    await wait_for(completed)
    assert await queue.getJobCountByTypes("failed", "completed", "delayed") == 4
    await queue.obliterate()
    await assert_obliterated(queue, first.id, second.id, delayed.id, last.id)
    await worker.close()


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › when creating a flow ›
#   when parent belongs to same queue › when parent has more than 1 pending children in the same
#   queue › removes parent record
async def test_obliterate_removes_a_flow_in_the_queue(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    tree = await bq.flow_producer().add(flow_of(name, name, 3))
    assert await count(queue) == 4
    await queue.obliterate()
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    await assert_obliterated(queue, tree["job"].id)


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › when creating a flow ›
#   when parent belongs to same queue › when parent has only 1 pending child in the same queue ›
#   obliterates a queue with jobs and its dependency keys
async def test_obliterate_removes_a_partly_processed_flow(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    first = True

    async def process(job: Any, token: str) -> None:
        nonlocal first
        if first:
            first = False
            raise Exception("failed first")
        await asyncio.sleep(0.01)  # the work the job does

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 2)
    failed = future_of(worker, "failed")
    tree = await bq.flow_producer().add(flow_of(name, name, 3))
    await wait_for(failed)
    await wait_for(completed)
    await queue.obliterate()
    await assert_obliterated(queue, tree["job"].id, *(c["job"].id for c in tree["children"]))
    await worker.close()


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › when creating a flow ›
#   when parent belongs to same queue › when parent has pending children in different queue ›
#   keeps parent in waiting-children
async def test_obliterate_keeps_a_parent_whose_children_are_elsewhere(bq: Bull) -> None:
    name, children_name = bq.name(), bq.name("children")
    queue = bq.queue(name)
    bq.queue(children_name)
    tree = await bq.flow_producer().add(flow_of(name, children_name, 1))
    assert await count(queue) == 1
    await queue.obliterate()
    assert await count(queue) == 1
    assert await queue.getJobCountByTypes("waiting-children") == 1
    assert await queue.getJob(tree["job"].id) is not None


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › when creating a flow ›
#   when parent belongs to different queue › when parent has more than 1 pending children ›
#   deletes each children until trying to move parent to wait
async def test_obliterate_of_several_children_moves_parent_in_other_queue_to_wait(
    bq: Bull,
) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    await bq.flow_producer().add(flow_of(parent_name, name, 3))
    assert await count(queue) == 3
    await queue.obliterate()
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    assert await parent_queue.getJobCountByTypes("wait") == 1


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › when creating a flow ›
#   when parent belongs to different queue › when parent has only 1 pending children ›
#   moves parent to wait to try to process it
async def test_obliterate_of_the_only_child_moves_parent_in_other_queue_to_wait(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    await bq.flow_producer().add(flow_of(parent_name, name, 1))
    assert await count(queue) == 1
    await queue.obliterate()
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    assert await parent_queue.getJobCountByTypes("wait") == 1


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) ›
#   should obliterate if queue has active jobs using "force"
async def test_obliterate_with_force_removes_a_queue_with_active_jobs(bq: Bull) -> None:
    queue, worker, release = await mixed_queue_with_one_active(bq)
    try:
        await queue.obliterate(force=True)
        await assert_obliterated(queue)
    finally:
        release.set()
    await worker.close()


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) › should remove job schedulers
async def test_obliterate_removes_job_schedulers(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("test-scheduler", {"every": 1000})
    assert len(await queue.getJobSchedulers()) == 1
    await queue.obliterate()
    assert await queue.getJobSchedulers() == []
    await assert_obliterated(queue)


# Node: tests/obliterate.redis.test.ts › Obliterate (redis-only) ›
#   should obliterate a queue with high number of jobs in different statuses
async def test_obliterate_a_queue_with_many_jobs_in_several_states(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    fail = False

    async def process(job: Any, token: str) -> None:
        if fail:
            raise Exception("failed job")

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 300)
    await queue.addBulk([{"name": "test", "data": {"foo": f"barLoop{i}"}} for i in range(300)])
    await wait_for(completed, 60)
    fail = True
    failed = future_of(worker, "failed", 300)
    await queue.addBulk([{"name": "test", "data": {"foo": f"barLoop{i}"}} for i in range(300)])
    await wait_for(failed, 60)
    await worker.close()
    await queue.addBulk(
        [
            {"name": "test", "data": {"foo": f"barLoop{i}"}, "opts": {"delay": 10000}}
            for i in range(1623)
        ]
    )
    assert await queue.getJobCountByTypes("completed", "failed", "delayed") == 2223
    await queue.obliterate()
    await assert_obliterated(queue)


FACADE_PENDING: dict[str, str] = {}
