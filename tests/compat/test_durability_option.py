"""The facade's ``durability`` option (Queue, Worker, FlowProducer): ``"async"`` commits adds
and outcomes without waiting for the WAL flush; a bad value names the option."""

from __future__ import annotations

import asyncio

import pytest

from bullmq_compat import FlowProducer, Queue, Worker
from pgjobs import Durability, InvalidOption, JobQueue


async def _commit_mode_of_add(jobs: JobQueue, queue: Queue) -> str:
    async with jobs.transaction() as conn:
        await queue.add("mail", {"to": "a"}, connection=conn)
        return await conn.fetchval("SHOW synchronous_commit")


async def test_a_queues_adds_commit_as_its_option_says(jobs: JobQueue, opts: dict) -> None:
    relaxed = Queue("relaxed", {**opts, "durability": "async"})
    strict = Queue("strict", opts)
    assert await _commit_mode_of_add(jobs, relaxed) == "off"
    assert await _commit_mode_of_add(jobs, strict) == "on"
    await relaxed.close()
    await strict.close()


async def test_a_workers_outcomes_commit_as_its_option_says(opts: dict) -> None:
    ran = asyncio.Event()

    async def process(job, token) -> str:
        ran.set()
        return "done"

    queue = Queue("relaxed-work", opts)
    await queue.add("x", {})
    worker = Worker("relaxed-work", process, {**opts, "durability": "async"})
    await ran.wait()
    assert worker._engine_worker is not None
    assert worker._engine_worker.durability is Durability.ASYNC
    await worker.close()
    default = Worker("relaxed-work", process, opts)
    await default.waitUntilReady()
    assert default._engine_worker is not None
    assert default._engine_worker.durability is Durability.DURABLE
    await default.close()
    await queue.close()


@pytest.mark.parametrize("build", [Queue, Worker, FlowProducer])
async def test_a_bad_level_names_the_option(opts: dict, build) -> None:
    with pytest.raises(InvalidOption, match=r"durability.*'durable' or 'async'"):
        if build is FlowProducer:
            build({**opts, "durability": "fsync"})
        elif build is Worker:
            build("q", None, {**opts, "durability": "fsync", "autorun": False})
        else:
            build("q", {**opts, "durability": "fsync"})
