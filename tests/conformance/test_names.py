"""Queue names as BullMQ takes them (found by the held-out Node cases, not a Node case itself)."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


async def test_a_long_queue_name_is_accepted_and_its_jobs_processed(bq: Bull) -> None:
    name = bq.name("q" * 300)  # well past 128 bytes, as real applications name queues by path
    queue = bq.queue(name)
    job = await queue.add("long", {"n": 1})

    async def process(job: Any, token: str) -> int:
        return int(job.data["n"]) + 1

    worker = bq.worker(name, process)
    [(done, value)] = await wait_for(future_of(worker, "completed"))
    assert (done.id, value) == (job.id, 2)
    assert (await queue.getJob(job.id)).returnvalue == 2


async def test_an_empty_queue_name_is_accepted_and_its_jobs_processed(bq: Bull) -> None:
    """BullMQ's Python Queue takes an empty name (its keys are then ``<prefix>::<id>``); so
    does the facade. The prefix is the case's own, so no other case shares the queue."""
    queue = bq.queue("")
    job = await queue.add("unnamed-queue", {"n": 4})

    async def process(job: Any, token: str) -> int:
        return int(job.data["n"]) * 2

    worker = bq.worker("", process)
    [(done, value)] = await wait_for(future_of(worker, "completed"))
    assert (done.id, value) == (job.id, 8)
    assert (await queue.getJob(job.id)).returnvalue == 8
    assert (await queue.getJobCounts("completed"))["completed"] == 1


FACADE_PENDING: dict[str, str] = {}
