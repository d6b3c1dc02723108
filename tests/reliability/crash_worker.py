"""A worker process for the crash scenario, killed and restarted by the test's driver.

Two kinds write one effect row per run into ``<schema>.effects``: ``fenced`` inside
``ctx.completing()`` (the effect commits with the completion), ``plain`` on its own before
returning (the effect commits first, the completion later, as most handlers do).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

import pydantic

from pgjobs import JobContext, JobQueue, Registry


class Task(pydantic.BaseModel):
    n: int


async def main(dsn: str, schema: str) -> None:
    registry = Registry()
    jobs: JobQueue
    insert = f"INSERT INTO {schema}.effects (job_id, pid, mode) VALUES ($1, $2, $3)"

    @registry.kind("fenced", input=Task, max_attempts=50)
    async def fenced(ctx: JobContext, task: Task) -> None:
        await asyncio.sleep(random.uniform(0, 0.004))
        async with ctx.completing(output=task.n) as conn:
            await conn.execute(insert, ctx.id, os.getpid(), "fenced")

    @registry.kind("plain", input=Task, max_attempts=50)
    async def plain(ctx: JobContext, task: Task) -> int:
        await jobs.db.pool.execute(insert, ctx.id, os.getpid(), "plain")
        await asyncio.sleep(random.uniform(0, 0.004))
        return task.n

    jobs = await JobQueue.connect(dsn, schema=schema, registry=registry, max_size=16)
    print("ready", flush=True)
    worker = jobs.worker(concurrency=10, lease=2.0, heartbeat_interval=0.2, rescue_interval=0.25)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
