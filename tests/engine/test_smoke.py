from __future__ import annotations

import pydantic

from pgjobs import JobQueue, Registry, Status


class Add(pydantic.BaseModel):
    a: int
    b: int


async def test_enqueue_and_run_to_completion(jobs: JobQueue, registry: Registry) -> None:
    @registry.kind("add", input=Add)
    async def add(ctx, data: Add) -> int:
        return data.a + data.b

    first = await jobs.enqueue("add", {"a": 1, "b": 2})
    second = await jobs.enqueue(add, Add(a=3, b=4))
    await jobs.worker(concurrency=2).run(until_drained=True)
    row1 = await jobs.get(first.id)
    row2 = await jobs.get(second.id)
    assert row1 is not None and row1.status is Status.COMPLETED and row1.output == 3
    assert row2 is not None and row2.output == 7 and row2.attempts == 1
