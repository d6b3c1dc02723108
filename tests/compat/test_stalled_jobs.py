"""Stalled jobs with BullMQ's semantics: a job whose worker died (it stopped renewing its lock)
runs again without using an attempt, up to ``maxStalledCount`` times (default 1); past that
it fails with BullMQ's reason. ``attempts`` only counts failures of the processor."""

from __future__ import annotations

import asyncio
from typing import Any

from bullmq_compat import Job, Queue, Worker
from pgjobs import JobQueue
from tests.helpers import eventually


async def _claimed_by_a_dead_worker(jobs: JobQueue, queue: Queue) -> None:
    """A worker claimed the job and died: its lock lapses at once."""
    rows = await jobs.db.fetch("claim", [queue.qualifiedName], ["bullmq"], 1, 0.001, 0)
    assert len(rows) == 1


async def test_a_stalled_job_runs_again_without_using_its_attempt(jobs: JobQueue) -> None:
    queue = Queue("stalls", {"connection": jobs})
    job = await queue.add("x", {"n": 1})  # no attempts: one attempt, as BullMQ's default
    await _claimed_by_a_dead_worker(jobs, queue)
    done = asyncio.Event()

    async def process(job: Job, token: str) -> str:
        return "ran"

    worker = Worker("stalls", process, {"connection": jobs, "stalledInterval": 50})
    worker.on("completed", lambda job, result: done.set())
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    finished = await queue.getJob(job.id)
    assert await finished.getState() == "completed" and finished.returnvalue == "ran"
    assert finished.attemptsMade == 1  # the run that completed; the stall took none
    row = await jobs.get(finished.engine_id)
    assert row.stalls == 1
    assert (await jobs.queue_settings(queue.qualifiedName)).max_stalls == 1
    await queue.close()


async def test_a_job_that_stalls_more_than_max_stalled_count_fails(jobs: JobQueue) -> None:
    queue = Queue("stalls", {"connection": jobs})
    job = await queue.add("x", {"n": 1}, {"attempts": 5})
    await _claimed_by_a_dead_worker(jobs, queue)
    ran: list[Any] = []

    async def process(job: Job, token: str) -> None:
        ran.append(job.id)

    worker = Worker(
        "stalls", process, {"connection": jobs, "stalledInterval": 50, "maxStalledCount": 0}
    )

    async def failed() -> bool:
        return await (await queue.getJob(job.id)).getState() == "failed"

    await eventually(failed)
    await worker.close()
    finished = await queue.getJob(job.id)
    assert finished.failedReason == "job stalled more than allowable limit"
    assert ran == []  # never handed to the processor again
    await queue.close()
