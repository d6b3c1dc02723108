"""The few cases of BullMQ's client-adapter and internals suites that BullMQ's Python API can
express: the generic queue, worker and flow checks that tests/node-redis.test.ts and
tests/bun-adapter-suite.test.ts run through their Redis client adapters (here, through each
backend's own connection), and the observable effect of lock renewal from
tests/lock_manager.test.ts. Every other case of those files, and of the connection,
script-loader, sandbox, cluster and telemetry suites, is recorded as skipped in
tests/conformance/node_cases/adapter.tsv.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


# Node: tests/node-redis.test.ts › node-redis adapter › Queue operations via node-redis ›
#   should add and retrieve a job
async def test_added_job_is_retrieved_by_job_from_id(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test-job", {"foo": "bar"})
    assert job.id is not None
    assert job.name == "test-job"

    fetched = await bq.Job.fromId(queue, job.id)
    assert fetched is not None
    assert fetched.data == {"foo": "bar"}


# Node: tests/node-redis.test.ts › node-redis adapter › Queue operations via node-redis ›
#   should add bulk jobs
async def test_add_bulk_returns_the_jobs_in_order(bq: Bull) -> None:
    queue = bq.queue()
    jobs = await queue.addBulk(
        [
            {"name": "bulk1", "data": {"n": 1}},
            {"name": "bulk2", "data": {"n": 2}},
            {"name": "bulk3", "data": {"n": 3}},
        ]
    )
    assert len(jobs) == 3
    assert [job.name for job in jobs] == ["bulk1", "bulk2", "bulk3"]


# Node: tests/node-redis.test.ts › node-redis adapter › Queue operations via node-redis ›
#   should get job counts
async def test_job_counts_include_an_added_waiting_job(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("count-job", {"x": 1})
    counts = await queue.getJobCounts("wait", "active", "completed")
    assert counts["wait"] >= 1


# Node: tests/node-redis.test.ts › node-redis adapter › Queue operations via node-redis ›
#   should pause and resume
async def test_pause_and_resume_toggle_is_paused(bq: Bull) -> None:
    queue = bq.queue()
    await queue.pause()
    assert await queue.isPaused() is True
    await queue.resume()
    assert await queue.isPaused() is False


# Node: tests/node-redis.test.ts › node-redis adapter › Worker processing via node-redis ›
#   should process a job to completion
async def test_worker_started_with_run_completes_a_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> dict[str, int]:
        return {"result": job.data["input"] * 2}

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    failed = future_of(worker, "failed")
    await queue.add("double", {"input": 21})
    running = asyncio.ensure_future(worker.run())

    done, _ = await wait_for(
        asyncio.wait([completed, failed], return_when=asyncio.FIRST_COMPLETED), timeout=10
    )
    assert completed in done, f"the job failed: {failed.result()}"
    [(job, _value)] = completed.result()
    assert job.returnvalue == {"result": 42}
    await worker.close()
    await wait_for(running)


# Node: tests/node-redis.test.ts › node-redis adapter › FlowProducer via node-redis ›
#   should create a parent-child flow
async def test_flow_producer_add_returns_the_parent_and_child_jobs(bq: Bull) -> None:
    flow = bq.flow_producer()
    tree = await flow.add(
        {
            "name": "parent-job",
            "queueName": bq.name("parent"),
            "data": {"parent": True},
            "children": [
                {"name": "child-job", "queueName": bq.name("child"), "data": {"child": True}}
            ],
        }
    )
    assert tree is not None
    assert tree["job"].id is not None
    assert len(tree["children"]) == 1
    assert tree["children"][0]["job"].id is not None


# Node: tests/bun-adapter-suite.test.ts › bun adapter extended suite ›
#   supports bulk add and wait counts
async def test_add_bulk_jobs_are_counted_as_waiting(bq: Bull) -> None:
    queue = bq.queue()
    await queue.addBulk(
        [
            {"name": "a", "data": {"i": 1}},
            {"name": "b", "data": {"i": 2}},
            {"name": "c", "data": {"i": 3}},
        ]
    )
    counts = await queue.getJobCounts("wait")
    assert counts["wait"] >= 3


# Node: tests/bun-adapter-suite.test.ts › bun adapter extended suite › handles failed jobs
async def test_worker_emits_failed_with_the_processor_error(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> None:
        raise Exception("boom")

    worker = bq.worker(name, process, autorun=False)
    failed = future_of(worker, "failed")
    await queue.add("x", {})
    running = asyncio.ensure_future(worker.run())

    [(_job, error)] = await wait_for(failed, timeout=10)
    assert str(error) == "boom"
    await worker.close()
    await wait_for(running)


# Node: tests/bun-adapter-suite.test.ts › bun adapter extended suite ›
#   processes jobs with concurrency
async def test_worker_concurrency_runs_jobs_in_parallel(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running_now = 0
    most = 0

    async def process(job: Any, token: str) -> None:
        nonlocal running_now, most
        running_now += 1
        most = max(most, running_now)
        await asyncio.sleep(0.1)  # the work itself, not a synchronisation
        running_now -= 1

    worker = bq.worker(name, process, autorun=False, concurrency=3)
    completed = future_of(worker, "completed", 6)
    failed = future_of(worker, "failed")
    await queue.addBulk([{"name": f"job-{i}", "data": {"i": i}} for i in range(6)])
    running = asyncio.ensure_future(worker.run())

    done, _ = await wait_for(
        asyncio.wait([completed, failed], return_when=asyncio.FIRST_COMPLETED), timeout=15
    )
    assert completed in done, f"a job failed: {failed.result()}"
    assert most >= 2
    await worker.close()
    await wait_for(running)


# Node: tests/bun-adapter-suite.test.ts › bun adapter extended suite › processes delayed jobs
async def test_delayed_job_is_processed_with_its_return_value(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> int:
        return job.data["v"]

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed")
    await queue.add("x", {"v": 99}, {"delay": 300})
    running = asyncio.ensure_future(worker.run())

    [(_job, value)] = await wait_for(completed, timeout=10)
    assert value == 99
    await worker.close()
    await wait_for(running)


# Node: tests/bun-adapter-suite.test.ts › bun adapter extended suite › processes a flow end-to-end
async def test_flow_parent_completes_after_its_child(bq: Bull) -> None:
    parent_name = bq.name("parent")
    child_name = bq.name("child")
    parent_queue = bq.queue(parent_name)
    bq.queue(child_name)
    flow = bq.flow_producer()

    async def process_child(job: Any, token: str) -> dict[str, bool]:
        return {"childResult": True}

    async def process_parent(job: Any, token: str) -> dict[str, bool]:
        return {"parentResult": True}

    child_worker = bq.worker(child_name, process_child, autorun=False)
    parent_worker = bq.worker(parent_name, process_parent, autorun=False)
    parent_completed = future_of(parent_worker, "completed")

    tree = await flow.add(
        {
            "name": "parent",
            "queueName": parent_name,
            "data": {"step": "parent"},
            "children": [{"name": "child", "queueName": child_name, "data": {"step": "child"}}],
        }
    )
    running = [
        asyncio.ensure_future(child_worker.run()),
        asyncio.ensure_future(parent_worker.run()),
    ]

    [(job, _value)] = await wait_for(parent_completed, timeout=15)
    assert job.id == tree["job"].id
    parent = await parent_queue.getJob(tree["job"].id)
    assert await parent.getState() == "completed"
    await child_worker.close()
    await parent_worker.close()
    await wait_for(asyncio.gather(*running))


# Node: tests/lock_manager.test.ts › LockManager › integration with Worker ›
#   should continue renewing locks for long-running jobs
# Node counts calls of the worker's private extendJobLocks; here, the public ``locksRenewed``
# event of the worker counts the renewals, and the job must complete without stalling although
# it runs for several lock durations.
async def test_worker_keeps_renewing_the_lock_of_a_long_running_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    renewals: list[dict[str, Any]] = []
    stalls: list[Any] = []

    async def process(job: Any, token: str) -> dict[str, bool]:
        await asyncio.sleep(1.5)  # the work itself: three lock durations
        return {"processed": True}

    worker = bq.worker(name, process, lockDuration=500, lockRenewTime=250, stalledInterval=300)
    worker.on("locksRenewed", lambda data: renewals.append(data))
    worker.on("stalled", lambda *args: stalls.append(args))
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"data": 1})

    [(done, value)] = await wait_for(completed, timeout=10)
    assert done.id == job.id
    assert value == {"processed": True}
    assert len(renewals) >= 2
    assert all(job.id in renewal["jobIds"] for renewal in renewals)
    assert stalls == []
    fetched = await queue.getJob(job.id)
    assert fetched.attemptsMade == 1
    await worker.close()


# Node: tests/connection.test.ts › connection › should close worker even if redis is down
# The unreachable server is each backend's own: a Redis URL for BullMQ, a PostgreSQL DSN for the
# facade (both on a local port where nothing listens).
async def test_worker_closes_although_its_server_is_down(bq: Bull) -> None:
    if bq.real:
        unreachable = "redis://127.0.0.1:1"
    else:
        unreachable = "postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=1"
    errors: list[Any] = []

    async def process(job: Any, token: str) -> None:
        return None

    worker = bq.Worker(bq.name(), process, {**bq.options(), "connection": unreachable})
    worker.on("error", lambda *args: errors.append(args))
    await wait_for(worker.close(), timeout=10)


FACADE_PENDING: dict[str, str] = {}
