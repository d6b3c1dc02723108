"""A BullMQ job enqueued from SQL (a Node service not yet ported, a trigger) through the engine's
``{schema}.enqueue``: with kind 'bullmq', the queue's engine name, the job's name and
``events => true``, it is the job ``Queue.add(name, data)`` writes, and a facade Worker runs it
as a BullMQ job. Options map by name (docs/porting.md: "Adding jobs from SQL")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import bullmq_compat
from pgjobs import JobQueue
from tests.helpers import eventually, shared_columns, stored_row


async def row(jobs: JobQueue, job_id: int) -> dict[str, Any]:
    return shared_columns(await stored_row(jobs, job_id))


async def test_a_bullmq_job_from_sql_is_the_one_queue_add_writes_and_a_worker_runs_it(
    jobs: JobQueue, opts: dict[str, Any], plain_conn: Any
) -> None:
    queue = bullmq_compat.Queue("emails", opts)
    data = {"to": "a@example.com", "n": 1}
    added = await queue.add("welcome", data)
    done = asyncio.Event()
    seen: list[tuple[str, str, Any, dict[str, Any]]] = []

    async def process(job: Any, token: Any) -> str:
        seen.append((job.id, job.name, job.data, job.opts))
        if len(seen) == 3:
            done.set()
        return "sent"

    worker = bullmq_compat.Worker("emails", process, opts)  # records the 'bullmq' kind
    try:

        async def recorded() -> bool:
            return bool(await jobs.pool.fetchval(
                f"SELECT count(*) FROM {jobs.schema}.kinds WHERE name = 'bullmq'"))  # fmt: skip

        await eventually(recorded)
        await queue.pause()  # keep the jobs still while they are compared
        first = await queue.add("welcome", data)
        by_sql = await plain_conn.fetchval(
            f"SELECT {jobs.schema}.enqueue('bullmq', $1::jsonb, queue => 'bull:emails',"
            " name => 'welcome', events => true)",
            json.dumps(data),
        )
        assert await row(jobs, by_sql) == await row(jobs, int(first.id))
        # options by name: jobId as job_key, delay as an interval, attempts as max_attempts,
        # BullMQ's priority p as 10 - p, and the opts kept in metadata for the job's opts
        given = {"jobId": "w-1", "delay": 5000, "attempts": 3, "priority": 2}
        keyed = await queue.add("welcome", data, given)
        sql_opts = {**given, "jobId": "w-2"}
        by_sql_keyed = await plain_conn.fetchval(
            f"SELECT {jobs.schema}.enqueue('bullmq', $1::jsonb, queue => 'bull:emails',"
            " name => 'welcome', events => true, job_key => 'w-2', delay => interval '5 s',"
            " max_attempts => 3, priority => 10 - 2, metadata => $2::jsonb)",
            json.dumps(data),
            json.dumps({"opts": sql_opts}),
        )
        a, b = await row(jobs, keyed.engine_id), await row(jobs, by_sql_keyed)
        assert (a["job_key"], b["job_key"]) == ("w-1", "w-2")
        assert json.loads(b["metadata"]) == {"opts": sql_opts}
        same = {k: v for k, v in a.items() if k not in ("job_key", "metadata")}
        assert same == {k: v for k, v in b.items() if k not in ("job_key", "metadata")}
        sql_job = await queue.getJob("w-2")
        assert sql_job is not None and sql_job.opts["attempts"] == 3
        assert await queue.getJobState("w-2") == "delayed"
        await queue.resume()
        await asyncio.wait_for(done.wait(), 30)  # added, first and the one from SQL
        ran = {job_id: rest for job_id, *rest in seen}
        assert set(ran) == {added.id, first.id, str(by_sql)}
        assert ran[str(by_sql)] == ran[first.id] == ["welcome", data, ran[first.id][2]]
    finally:
        await worker.close()
        await queue.close()
