"""The harness itself: one job through a Worker on both backends."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


async def test_a_job_added_is_processed_and_its_value_kept(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    job = await queue.add("greet", {"who": "world"})

    async def process(job: Any, token: str) -> str:
        return f"hello {job.data['who']}"

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    [(done, value)] = await wait_for(completed)
    assert done.id == job.id
    assert value == "hello world"
    fetched = await queue.getJob(job.id)
    assert fetched.returnvalue == "hello world"
    assert await fetched.getState() == "completed"


FACADE_PENDING: dict[str, str] = {}
