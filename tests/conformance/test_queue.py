"""Queue-level operations (add, drain, retryJobs, promoteJobs), after BullMQ's
tests/queue.test.ts, as differential cases on both backends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for

# What Node's ``Queue.count()`` sums (the Python package has no ``count``).
UNPROCESSED = ("waiting", "delayed", "prioritized", "waiting-children")


async def count(queue: Any) -> int:
    return await queue.getJobCountByTypes(*UNPROCESSED)


def flow_of(parent_queue: str, children_queue: str, children: int) -> dict[str, Any]:
    return {
        "name": "parent-job",
        "queueName": parent_queue,
        "data": {},
        "children": [
            {"name": "child-job", "data": {"idx": i}, "queueName": children_queue}
            for i in range(children)
        ],
    }


# Node: tests/queue.test.ts › queues › use generics › should be able to use generics
async def test_job_data_round_trips_through_get_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    job = await queue.add(name, {"foo": "bar", "bar": 1})
    fetched = await queue.getJob(job.id)
    assert fetched.data["foo"] == "bar"
    assert fetched.data["bar"] == 1


# Node: tests/queue.test.ts › queues › use generics ›
#   should resolve Job<any, any, string> when no generics provided
async def test_get_jobs_returns_job_instances(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("test-job", {"foo": "bar", "num": 123})
    jobs = await queue.getJobs(["waiting"])
    assert isinstance(jobs, list)
    assert len(jobs) >= 1
    assert isinstance(jobs[0], bq.Job)


# Node: tests/queue.test.ts › queues › .drain › count added, unprocessed jobs
async def test_drain_removes_prioritized_jobs(bq: Bull) -> None:
    queue = bq.queue()
    for i in range(1, 101):
        await queue.add("test", {"foo": "bar", "num": i}, {"priority": i})
    assert await count(queue) == 100
    assert await queue.getJobCountByTypes("prioritized") == 100
    await queue.drain()
    assert await count(queue) == 0


# Node: tests/queue.test.ts › queues › .drain › when having a flow › when parent belongs to same
#   queue › when parent has more than 1 pending children in the same queue › deletes parent record
async def test_drain_removes_parent_with_several_children_in_same_queue(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await bq.flow_producer().add(flow_of(name, name, 3))
    assert await count(queue) == 4
    await queue.drain()
    assert await count(queue) == 0


# Node: tests/queue.test.ts › queues › .drain › when having a flow › when parent belongs to same
#   queue › when parent has only 1 pending child in the same queue › deletes parent record
async def test_drain_removes_parent_with_one_child_in_same_queue(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await bq.flow_producer().add(flow_of(name, name, 1))
    assert await count(queue) == 2
    await queue.drain()
    assert await count(queue) == 0


# Node: tests/queue.test.ts › queues › .drain › when having a flow › when parent belongs to same
#   queue › when parent has pending children in different queue › keeps parent in waiting-children
async def test_drain_keeps_parent_whose_children_are_in_another_queue(bq: Bull) -> None:
    name, children_name = bq.name(), bq.name("children")
    queue = bq.queue(name)
    bq.queue(children_name)
    await bq.flow_producer().add(flow_of(name, children_name, 1))
    assert await count(queue) == 1
    await queue.drain()
    assert await count(queue) == 1
    assert await queue.getJobCountByTypes("waiting-children") == 1


# Node: tests/queue.test.ts › queues › .drain › when having a flow › when parent belongs to
#   different queue › when parent has more than 1 pending children ›
#   deletes each children until trying to move parent to wait
async def test_drain_of_several_children_moves_parent_in_other_queue_to_wait(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    await bq.flow_producer().add(flow_of(parent_name, name, 3))
    assert await count(queue) == 3
    await queue.drain()
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    assert await parent_queue.getJobCountByTypes("wait") == 1


# Node: tests/queue.test.ts › queues › .drain › when having a flow › when parent belongs to
#   different queue › when parent has only 1 pending children ›
#   moves parent to wait to try to process it
async def test_drain_of_only_child_moves_parent_in_other_queue_to_wait(bq: Bull) -> None:
    name, parent_name = bq.name(), bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    await bq.flow_producer().add(flow_of(parent_name, name, 1))
    assert await count(queue) == 1
    await queue.drain()
    assert await count(queue) == 0
    assert await queue.getJobCountByTypes("failed") == 0
    assert await parent_queue.getJobCountByTypes("wait") == 1


async def add_waiting_and_delayed(queue: Any, each: int) -> None:
    await queue.addBulk(
        [{"name": "test", "data": {"foo": "bar", "num": i}} for i in range(each)]
        + [
            {"name": "test", "data": {"foo": "bar", "num": i}, "opts": {"delay": 10000}}
            for i in range(each)
        ]
    )


# Node: tests/queue.test.ts › queues › .drain › when delayed option is provided as false ›
#   clean queue without delayed jobs
async def test_drain_without_delayed_keeps_delayed_jobs(bq: Bull) -> None:
    queue = bq.queue()
    await add_waiting_and_delayed(queue, 50)
    assert await count(queue) == 100
    await queue.drain(False)
    assert await count(queue) == 50
    assert await queue.getJobCountByTypes("delayed") == 50


# Node: tests/queue.test.ts › queues › .drain › when delayed option is provided as true ›
#   clean queue including delayed jobs
async def test_drain_with_delayed_removes_delayed_jobs(bq: Bull) -> None:
    queue = bq.queue()
    await add_waiting_and_delayed(queue, 50)
    assert await count(queue) == 100
    await queue.drain(True)
    assert await count(queue) == 0


# Node: tests/queue.test.ts › queues › .drain › when queue is paused ›
#   clean queue including paused jobs
async def test_drain_removes_jobs_of_a_paused_queue(bq: Bull) -> None:
    queue = bq.queue()
    await queue.pause()
    for i in range(50):
        await queue.add("test", {"foo": "bar", "num": i})
    assert await count(queue) == 50
    assert (await queue.getJobCounts("wait"))["wait"] == 50
    await queue.drain()
    assert await count(queue) == 0


def failing_until_told(state: dict[str, Any], pause: float = 0.01) -> Any:
    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(pause)  # the work the job does
        if state["fail"]:
            raise Exception("failed")

    return process


async def fail_all(bq: Bull, name: str, jobs: int, process: Any) -> tuple[Any, Any, list[Any]]:
    """A queue whose ``jobs`` jobs (data idx 0..jobs-1) all failed, in order, on a worker."""
    queue = bq.queue(name)
    worker = bq.worker(name, process)
    failing = future_of(worker, "failed", jobs)
    for idx in range(jobs):
        await queue.add("test", {"idx": idx})
    failed = await wait_for(failing)
    assert [job.data["idx"] for job, _ in failed] == list(range(jobs))
    assert (await queue.getJobCounts("failed"))["failed"] == jobs
    return queue, worker, failed


# Node: tests/queue.test.ts › queues › .retryJobs › retries all failed jobs by default
async def test_retry_jobs_retries_every_failed_job_in_order(bq: Bull) -> None:
    name = bq.name()
    state = {"fail": True}
    queue, worker, _ = await fail_all(bq, name, 8, failing_until_told(state))
    completing = future_of(worker, "completed", 8)
    state["fail"] = False
    await queue.retryJobs({"count": 2})
    completed = await wait_for(completing)
    assert [job.data["idx"] for job, _ in completed] == list(range(8))
    assert (await queue.getJobCounts("completed"))["completed"] == 8
    await worker.close()


# Node: tests/queue.test.ts › queues › .retryJobs › when completed state is provided ›
#   retries all completed jobs
async def test_retry_jobs_retries_completed_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    gate = asyncio.Event()
    gate.set()

    async def process(job: Any, token: str) -> None:
        await gate.wait()

    worker = bq.worker(name, process)
    completing = future_of(worker, "completed", 8)
    await queue.addBulk([{"name": "test", "data": {"idx": i}} for i in range(8)])
    await wait_for(completing)
    assert (await queue.getJobCounts("completed"))["completed"] == 8

    gate.clear()  # hold the retried jobs until their move out of completed is seen
    completing_again = future_of(worker, "completed", 8)
    await queue.retryJobs({"count": 2, "state": "completed"})
    assert (await queue.getJobCounts("completed"))["completed"] == 0
    gate.set()
    await wait_for(completing_again)
    assert (await queue.getJobCounts("completed"))["completed"] == 8
    await worker.close()


# Node: tests/queue.test.ts › queues › .retryJobs › when timestamp is provided ›
#   should retry all failed jobs before specific timestamp
async def test_retry_jobs_retries_only_jobs_failed_before_timestamp(bq: Bull) -> None:
    name = bq.name()
    state: dict[str, Any] = {"fail": True}
    queue = bq.queue(name)
    worker = bq.worker(name, failing_until_told(state, pause=0.05))

    def on_failed(job: Any, err: Any) -> None:
        if job.data["idx"] == 3:
            state["timestamp"] = round(time.time() * 1000)

    worker.on("failed", on_failed)
    failing = future_of(worker, "failed", 8)
    for idx in range(8):
        await queue.add("test", {"idx": idx})
    failed = await wait_for(failing)
    assert [job.data["idx"] for job, _ in failed] == list(range(8))

    completing = future_of(worker, "completed", 4)
    state["fail"] = False
    await queue.retryJobs({"count": 2, "timestamp": state["timestamp"]})
    completed = await wait_for(completing)
    assert [job.data["idx"] for job, _ in completed] == [0, 1, 2, 3]
    counts = await queue.getJobCounts("completed", "failed")
    assert counts["completed"] == 4
    assert counts["failed"] == 4
    await worker.close()


# Node: tests/queue.test.ts › queues › .retryJobs › when queue is paused ›
#   moves retried jobs to wait
async def test_retry_jobs_of_a_paused_queue_moves_them_to_wait(bq: Bull) -> None:
    name = bq.name()
    state = {"fail": True}
    queue, worker, _ = await fail_all(bq, name, 8, failing_until_told(state))
    state["fail"] = False
    await queue.pause()
    await queue.retryJobs({"count": 2})
    assert (await queue.getJobCounts("wait"))["wait"] == 8
    await worker.close()


# Node: tests/queue.test.ts › queues › .promoteJobs › promotes all delayed jobs by default
async def test_promote_jobs_moves_every_delayed_job_to_wait(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    for i in range(8):
        await queue.add("test", {"idx": i}, {"delay": 10000})
    assert (await queue.getJobCounts("delayed"))["delayed"] == 8
    await queue.promoteJobs()
    assert (await queue.getJobCounts("waiting"))["waiting"] == 8

    async def process(job: Any, token: str) -> None:
        await asyncio.sleep(0.01)  # the work the job does

    worker = bq.worker(name, process)
    await wait_for(future_of(worker, "completed", 8))
    assert (await queue.getJobCounts("delayed"))["delayed"] == 0
    await worker.close()


FACADE_PENDING: dict[str, str] = {}
