"""A worker process for the crash test: prints 'started <id>' as each job begins, then hangs,
so the test can SIGKILL it in the middle of a claimed batch."""

from __future__ import annotations

import asyncio
import sys

import pydantic

from pgjobs import JobContext, JobQueue, Registry


class Task(pydantic.BaseModel):
    n: int


async def main(dsn: str, schema: str) -> None:
    registry = Registry()

    @registry.kind("crashy", input=Task, max_attempts=5)
    async def crashy(ctx: JobContext, task: Task) -> None:
        print(f"started {ctx.id}", flush=True)
        await asyncio.Event().wait()

    jobs = await JobQueue.connect(dsn, schema=schema, registry=registry)
    await jobs.worker(concurrency=5, lease=1.0, heartbeat_interval=0.2).run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
