"""A BullMQ application ported to PostgreSQL by changing its imports: a tsundoku-style series
indexer. One flow puts a parent ``index-series`` job (queue ``indexer``) over one child per
chapter (queue ``chapter``); every node carries the parent's priority. A chapter whose page cache
is not ready defers itself (moveToDelayed + DelayedError: no attempt used), one chapter fails
once and is retried with backoff, progress is reported, and the parent reads its children's
values. Then the flow's graph (from the native tracking API) and the queues' counts are printed.

Run it with ``./run demo``: it finds or starts a PostgreSQL by itself (see README).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pgjobs
from bullmq_compat import DelayedError, FlowProducer, Queue, QueueEvents, Worker
from pgjobs.devserver import find_or_start_postgres

HIGH, NORMAL, LOW = 1, 5, 10  # BullMQ priorities: lower runs first, none runs before all
log: list[str] = []


async def process_chapter(job: Any, token: str) -> dict[str, Any]:
    chapter = job.data["chapter"]
    job.log(f"[Attempt {job.attemptsMade + 1}] indexing chapter {chapter}")  # not awaited, as in JS
    if chapter == 2 and job.data.get("cacheTries", 0) < 1:
        # The page cache is still warming up: come back shortly, without using an attempt.
        await job.updateData({**job.data, "cacheTries": job.data.get("cacheTries", 0) + 1})
        await job.moveToDelayed(int(time.time() * 1000) + 200, token)
        log.append(f"  chapter {chapter}: cache not ready, deferred (attempt not used)")
        raise DelayedError()
    if chapter == 3 and job.attemptsMade == 0:
        log.append(f"  chapter {chapter}: source timed out on attempt 1, will retry")
        raise TimeoutError("source did not answer")
    await job.updateProgress(50)
    await job.updateProgress(100)
    log.append(
        f"  chapter {chapter}: indexed (priority {job.priority}, attemptsMade {job.attemptsMade})"
    )
    return {"chapter": chapter, "pages": 10 + chapter}


async def process_indexer(job: Any, token: str) -> dict[str, Any]:
    if job.name == "index-series":
        values = await job.getChildrenValues()
        pages = sum(v["pages"] for v in values.values())
        log.append(f"  series {job.data['series']}: {len(values)} chapters, {pages} pages")
        return {"chapters": len(values), "pages": pages}
    log.append(f"  {job.name} (priority {job.priority or 'none'})")
    return {}


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    dsn = find_or_start_postgres()
    schema = f"port_{uuid.uuid4().hex[:8]}"
    jobs = await pgjobs.JobQueue.connect(dsn, schema=schema)
    await jobs.migrate()
    print(f"PostgreSQL: {dsn.split('@')[-1]}  schema: {schema}")
    # The one change a port makes: a PostgreSQL connection where a Redis one was.
    opts = {"connection": jobs}
    indexer = Queue("indexer", {**opts, "defaultJobOptions": {"attempts": 2}})
    events = QueueEvents("indexer", opts)
    await events.waitUntilReady()

    await indexer.add("recompute-stats", {"series": 7})  # no priority: runs first
    await indexer.add("low-priority-merge", {"series": 8}, {"priority": LOW})
    chapter_opts = {"priority": HIGH, "attempts": 3, "backoff": {"type": "fixed", "delay": 100}}
    tree = await FlowProducer(opts).add(
        {
            "name": "index-series",
            "queueName": "indexer",
            "data": {"series": 42},
            "opts": {"priority": HIGH},
            "children": [
                {"name": f"chapter-{n}", "queueName": "chapter", "data": {"chapter": n},
                 "opts": chapter_opts}
                for n in (1, 2, 3)
            ],
        }
    )  # fmt: skip
    parent = tree["job"]
    print(f"flow added: parent {parent.id} in state {await parent.getState()}")

    print("workers running (concurrency 1 each, so the order is visible):")
    workers = [
        Worker("chapter", process_chapter, {**opts, "concurrency": 1}),
        Worker("indexer", process_indexer, {**opts, "concurrency": 1}),
    ]
    result = await parent.waitUntilFinished(events, ttl=60_000)
    for worker in workers:
        await worker.close()
    await events.close()
    print("\n".join(log))
    print(f"parent returned {result}")

    # What BullMQ cannot show: the flow as a graph, from the engine's tracking API.
    row = await jobs.get(parent.engine_id)
    assert row is not None and row.flow_id is not None
    view = await jobs.flow_view(row.flow_id)
    assert view is not None
    print(f"flow {row.flow_id}: outcome {view.summary.outcome}, {len(view.nodes)} nodes")
    names = {node.id: node.name for node in view.nodes}
    for node in view.nodes:
        print(f"  {node.name:<14} {node.queue:<12} {node.sub_state:<10} attempts={node.attempts}")
    for edge in view.edges:
        print(f"  {names[edge.prerequisite]} -> {names[edge.dependent]} ({edge.policy})")
    for name in ("indexer", "chapter"):
        queue = Queue(name, opts)
        counts = {k: v for k, v in (await queue.getJobCounts()).items() if v}
        print(f"queue {name}: {counts}")
    logs = await Queue("chapter", opts).getJobLogs(tree["children"][2]["job"].id)
    print(f"chapter-3 log: {logs['logs']}")
    await indexer.close()
    async with jobs.transaction() as conn:
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    await jobs.close()


if __name__ == "__main__":
    asyncio.run(main())
