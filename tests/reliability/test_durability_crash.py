"""What each durability level keeps through a crash of the server (every PostgreSQL process
SIGKILLed, so WAL not yet written out is gone). The WAL writer, background writer and
checkpointer are frozen first, so nothing but a durable commit writes WAL out: what an async
commit acknowledged in the last moments is then certain to be in memory only, the worst case
of ``synchronous_commit = off`` made deterministic."""

from __future__ import annotations

import asyncio
import os
import signal

import asyncpg
import pydantic

from pgjobs import Flow, JobContext, JobQueue, JobSpec
from tests.reliability.private_postgres import PrivateServer


class Item(pydantic.BaseModel):
    n: int = 0


def _flow(name: str, queue: str) -> Flow:
    flow = Flow(name)
    flow.add("parent", "item", {"n": -1}, queue=queue)
    for i in range(3):
        flow.add(f"c{i}", "item", {"n": i}, queue=queue)
        flow.edge(f"c{i}", "parent")
    return flow


async def _freeze_wal_flushers(dsn: str) -> None:
    """Stop every process that writes WAL out on its own (a durable commit still does)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ALTER SYSTEM SET autovacuum = off")
        await conn.execute("SELECT pg_reload_conf()")
        pids = await conn.fetch(
            "SELECT pid FROM pg_stat_activity"
            " WHERE backend_type IN ('walwriter', 'background writer', 'checkpointer')"
        )
    finally:
        await conn.close()
    assert len(pids) == 3
    for row in pids:
        os.kill(row["pid"], signal.SIGSTOP)


async def _by_queue(dsn: str) -> dict[str, dict[str, int]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT queue, status, count(*) AS n FROM faults.jobs GROUP BY 1, 2 ORDER BY 1, 2"
        )
        flows = await conn.fetch(
            "SELECT f.name, count(DISTINCT j.id) AS nodes, count(DISTINCT e.*) AS edges"
            " FROM faults.flows f LEFT JOIN faults.jobs j ON j.flow_id = f.id"
            " LEFT JOIN faults.job_edges e ON e.dependent_id = j.id GROUP BY f.name"
        )
    finally:
        await conn.close()
    found: dict[str, dict[str, int]] = {}
    for row in rows:
        found.setdefault(row["queue"], {})[row["status"]] = row["n"]
    for row in flows:
        found[f"flow:{row['name']}"] = {"nodes": row["nodes"], "edges": row["edges"]}
    return found


async def test_async_loses_only_its_last_acknowledged_writes_and_durable_loses_nothing(
    private_server: PrivateServer, private_jobs: JobQueue
) -> None:
    registry = private_jobs.registry

    @registry.kind("item", input=Item, max_attempts=3)
    async def item(ctx: JobContext, data: Item) -> int:
        return data.n

    await _freeze_wal_flushers(private_server.dsn)

    # Durable, while nothing else writes WAL out: each commit writes out itself.
    for i in range(10):
        await private_jobs.enqueue("item", {"n": i}, queue="durable")
    durable_worker = private_jobs.worker(queues=["durable"], durability="durable")
    await durable_worker.run(until_drained=True)
    assert durable_worker.stats.completed == 10
    await private_jobs.submit_flow(_flow("durable-flow", "durable-flow"))
    for i in range(10):  # the jobs an async worker will run
        await private_jobs.enqueue("item", {"n": i}, queue="async-run")

    # Async from here on: acknowledged, and nothing writes them out.
    async_worker = private_jobs.worker(queues=["async-run"], durability="async")
    await async_worker.run(until_drained=True)
    assert async_worker.stats.completed == 10  # acknowledged outcomes
    for i in range(20):
        await private_jobs.enqueue("item", {"n": i}, queue="async-one", durability="async")
    await private_jobs.enqueue_many(
        [JobSpec("item", {"n": i}, queue="async-bulk") for i in range(10)], durability="async"
    )
    await private_jobs.submit_flow(_flow("async-flow", "async-flow"), durability="async")

    await asyncio.to_thread(private_server.kill)
    private_jobs.pool.terminate()
    await asyncio.to_thread(private_server.start)
    found = await _by_queue(private_server.dsn)

    # Durable: everything acknowledged is there, as acknowledged.
    assert found["durable"] == {"completed": 10}
    assert found["flow:durable-flow"] == {"nodes": 4, "edges": 3}
    assert found["async-run"] == {"pending": 10}  # durable enqueues, async outcomes lost...
    # ...so those jobs run again; async enqueues and the async flow are gone whole.
    assert "async-one" not in found and "async-bulk" not in found
    assert "flow:async-flow" not in found and "async-flow" not in found

    jobs = await JobQueue.connect(private_server.dsn, schema="faults", registry=registry)
    try:
        again = jobs.worker(queues=["async-run"])
        await again.run(until_drained=True)
        assert again.stats.completed == 10
    finally:
        await jobs.close()
