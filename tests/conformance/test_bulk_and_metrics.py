"""Adding jobs in bulk (``Queue.addBulk``), after BullMQ's tests/bulk.test.ts, as differential
cases on both backends.

BullMQ's tests/metrics.test.ts has no case here: the Python package 3.4.4 has no
``Queue.getMetrics`` (and those cases drive the clock with fake timers); see
tests/conformance/node_cases/adapter.tsv.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


def qualify(reference: Any, queue_name: str) -> str:
    """The qualified name of ``queue_name``, with the qualifier (``<prefix>:``) taken from a
    queue whose qualifiedName is known (as Node's case derives it)."""
    qualifier = reference.qualifiedName[: len(reference.qualifiedName) - len(reference.name)]
    return f"{qualifier}{queue_name}"


# Node: tests/bulk.test.ts › bulk jobs › should process jobs
async def test_add_bulk_jobs_are_returned_and_processed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[dict[str, Any]] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data)

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 2)
    jobs = await queue.addBulk(
        [
            {"name": "test", "data": {"idx": 0, "foo": "bar"}},
            {"name": "test", "data": {"idx": 1, "foo": "baz"}},
        ]
    )
    assert len(jobs) == 2
    assert jobs[0].id
    assert jobs[0].data["foo"] == "bar"
    assert jobs[1].id
    assert jobs[1].data["foo"] == "baz"

    await wait_for(completed)
    assert seen == [{"idx": 0, "foo": "bar"}, {"idx": 1, "foo": "baz"}]
    await worker.close()


# Node: tests/bulk.test.ts › bulk jobs › should allow to pass parent option
# Node reads the parent's unprocessed dependency count (getDependenciesCount), which the Python
# package lacks: here the children are processed instead, and the parent then holds both of
# their values (getChildrenValues), which it only does for children it depends on.
async def test_add_bulk_with_parent_option_makes_the_jobs_children_of_the_parent(
    bq: Bull,
) -> None:
    name = bq.name()
    parent_name = bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)

    parent = await parent_queue.add("parent", {"some": "data"})
    parent_ref = {"id": parent.id, "queue": qualify(queue, parent_name)}
    jobs = await queue.addBulk(
        [
            {"name": "test", "data": {"idx": 0, "foo": "bar"}, "opts": {"parent": parent_ref}},
            {"name": "test", "data": {"idx": 1, "foo": "baz"}, "opts": {"parent": parent_ref}},
        ]
    )
    assert len(jobs) == 2
    assert jobs[0].id
    assert jobs[0].data["foo"] == "bar"
    assert jobs[1].id
    assert jobs[1].data["foo"] == "baz"

    async def process(job: Any, token: str) -> str:
        return f"done-{job.data['idx']}"

    children_worker = bq.worker(name, process)
    completed = future_of(children_worker, "completed", 2)
    await wait_for(completed)
    await children_worker.close()

    fetched = await parent_queue.getJob(parent.id)
    values = await fetched.getChildrenValues()
    assert sorted(values.values()) == ["done-0", "done-1"]


# Node: tests/bulk.test.ts › bulk jobs › should keep workers busy
async def test_add_bulk_keeps_two_workers_busy(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")  # from the start: no readiness race
    all_completed = future_of(events, "completed", 6)
    processed_by: dict[str, int] = {"first": 0, "second": 0}

    def processor(worker_label: str) -> Any:
        async def process(job: Any, token: str) -> None:
            processed_by[worker_label] += 1
            await asyncio.sleep(0.3)  # the work itself, not a synchronisation

        return process

    first = bq.worker(name, processor("first"))
    second = bq.worker(name, processor("second"))

    await queue.addBulk([{"name": "test", "data": {"index": i}} for i in range(6)])

    await wait_for(all_completed, timeout=10)
    assert sum(processed_by.values()) == 6
    assert processed_by["first"] > 0
    assert processed_by["second"] > 0
    await first.close()
    await second.close()


# Node: tests/bulk.test.ts › bulk jobs › should process jobs with custom ids
async def test_add_bulk_honours_custom_job_ids(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[tuple[str, dict[str, Any]]] = []

    async def process(job: Any, token: str) -> None:
        seen.append((job.id, job.data))

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 2)
    jobs = await queue.addBulk(
        [
            {"name": "test", "data": {"idx": 0, "foo": "bar"}, "opts": {"jobId": "test1"}},
            {"name": "test", "data": {"idx": 1, "foo": "baz"}, "opts": {"jobId": "test2"}},
        ]
    )
    assert len(jobs) == 2
    assert jobs[0].id == "test1"
    assert jobs[0].data["foo"] == "bar"
    assert jobs[1].id == "test2"
    assert jobs[1].data["foo"] == "baz"

    await wait_for(completed)
    assert seen == [("test1", {"idx": 0, "foo": "bar"}), ("test2", {"idx": 1, "foo": "baz"})]
    await worker.close()


FACADE_PENDING: dict[str, str] = {}
