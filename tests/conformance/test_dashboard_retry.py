"""The dashboard's Retry of a facade job is BullMQ's ``job.retry()``: checked against real
BullMQ, where the same case calls ``job.retry()`` (bull-board's retry does the same)."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for
from tests.dashboard.clients import client_for, csrf_of


async def test_a_failed_job_retried_keeps_its_attempts_made(bq: Bull) -> None:
    """Its attempts go on counting: attemptsMade stays 1 after the retry, and the next run
    sees 1 and ends with 2."""
    name = bq.name()
    queue = bq.queue(name)
    job = await queue.add("flaky", {"n": 1}, {"attempts": 1})
    runs: list[int] = []

    async def process(job: Any, token: str) -> str:
        runs.append(job.attemptsMade)
        if len(runs) == 1:
            raise ValueError("the first run fails")
        return "ok"

    worker = bq.worker(name, process)
    await wait_for(future_of(worker, "failed"))
    assert (await queue.getJob(job.id)).attemptsMade == 1
    completed = future_of(worker, "completed")
    if bq.real:
        await (await queue.getJob(job.id)).retry()
    else:
        async with client_for(bq.opts["connection"]) as client:
            page = await client.get(f"/jobs/{job.engine_id}")
            retried = await client.post(
                f"/jobs/{job.engine_id}/retry", data={"csrf": csrf_of(page)}
            )
            assert retried.status_code == 303
    [(done, value)] = await wait_for(completed)
    assert (done.id, value, runs) == (job.id, "ok", [0, 1])
    assert (await queue.getJob(job.id)).attemptsMade == 2
