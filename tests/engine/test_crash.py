"""A worker process killed with SIGKILL mid-batch loses nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pydantic
import pytest

from pgjobs import JobQueue, JobSpec, Registry, Status

ROOT = Path(__file__).resolve().parents[2]


class Task(pydantic.BaseModel):
    n: int


@pytest.mark.slow
async def test_sigkilled_worker_loses_no_job(
    jobs: JobQueue, registry: Registry, pg_dsn: str
) -> None:
    done: list[int] = []

    @registry.kind("crashy", input=Task, max_attempts=5)
    async def crashy(ctx, task: Task) -> int:
        done.append(task.n)
        return task.n

    results = await jobs.enqueue_many([JobSpec("crashy", {"n": i}) for i in range(20)])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("crash_worker.py")),
        pg_dsn,
        jobs.schema,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    started: set[int] = set()
    assert proc.stdout is not None
    while len(started) < 5:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line, "the crash worker exited before starting its batch"
        started.add(int(line.split()[1]))
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()

    running = await jobs.db.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE status = 'running'"
    )
    assert running == 5  # the killed worker's batch is still marked running

    await jobs.worker(concurrency=4, lease=5, rescue_interval=0.1).run(until_drained=True)
    assert sorted(done) == list(range(20))
    for result in results:
        row = await jobs.get(result.id)
        assert row is not None and row.status is Status.COMPLETED
        if result.id in started:
            assert row.attempts == 2 and row.last_error["type"] == "LeaseExpired"
        else:
            assert row.attempts == 1 and row.last_error is None
