"""Queue and Job API details as BullMQ's Python package has them: the values its limit API
returns, the order of its getters, retries that keep counting attempts, custom backoff, work
from outside a processor, flows that name a missing parent, and a clean shutdown."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import bullmq_compat
import bullmq_compat.custom_errors
from bullmq_compat import FlowProducer, Job, Queue, QueueEvents, Worker
from pgjobs import JobQueue


async def test_global_limits_report_what_they_removed(opts: dict) -> None:
    queue = Queue("limits", opts)
    assert await queue.getGlobalConcurrency() is None
    await queue.setGlobalConcurrency(5)
    assert await queue.getGlobalConcurrency() == 5
    assert await queue.removeGlobalConcurrency() == 1
    assert await queue.removeGlobalConcurrency() == 0 and await queue.getGlobalConcurrency() is None
    assert await queue.setGlobalRateLimit(100, 1000) == 2  # the fields HSET added
    assert await queue.setGlobalRateLimit(100, 1000) == 0  # replaced
    assert await queue.getGlobalRateLimit() == {"max": 100, "duration": 1000}
    assert await queue.removeGlobalRateLimit() == 2  # its max and its duration
    assert await queue.removeGlobalRateLimit() == 0 and await queue.getGlobalRateLimit() is None
    assert await queue.getRateLimitTtl() == -2  # none in force, as Redis' PTTL says
    await queue.rateLimit(5000)
    assert 0 < await queue.getRateLimitTtl() <= 5000
    assert await queue.removeRateLimitKey() == 1
    assert await queue.getRateLimitTtl() == -2 and await queue.removeRateLimitKey() == 0
    await queue.close()


async def test_getters_list_each_state_in_bullmqs_order(opts: dict) -> None:
    queue = Queue("orders", opts)
    low = await queue.add("paint", {"c": "blue"}, {"priority": 10})
    high = await queue.add("paint", {"c": "red"}, {"priority": 1})
    mid = await queue.add("paint", {"c": "green"}, {"priority": 5})
    first = await queue.add("plain", {})
    second = await queue.add("plain", {})
    later = await queue.add("later", {}, {"delay": 60_000})
    sooner = await queue.add("sooner", {}, {"delay": 30_000})
    assert [j.id for j in await queue.getPrioritized()] == [high.id, mid.id, low.id]
    assert [j.id for j in await queue.getWaiting()] == [first.id, second.id]  # next first
    assert [j.id for j in await queue.getJobs(["wait"])] == [second.id, first.id]  # newest first
    assert [j.id for j in await queue.getDelayed()] == [sooner.id, later.id]  # by due time
    both = await queue.getJobs(["prioritized", "waiting"], 0, 0, asc=True)
    assert [j.id for j in both] == [high.id, first.id]  # each type, each from 0 to 0
    assert await queue.getCountsPerPriority([1, 5, 10]) == {"1": 1, "5": 1, "10": 1}
    assert sorted(Queue.sanitizeJobTypes(None, [])) == sorted(
        ["active", "completed", "delayed", "failed", "prioritized", "waiting", "waiting-children"]
    )
    assert Queue.sanitizeJobTypes(None, ["waiting", "waiting"]) == ["waiting"]
    await queue.close()


async def _run_once(opts: dict, name: str, fail: bool) -> tuple[Queue, Worker, Job]:
    queue = Queue(name, opts)
    outcome: asyncio.Future[Job] = asyncio.get_running_loop().create_future()

    async def process(job: Job, token: str) -> str:
        if job.data.get("fail") and job.attemptsMade == 0:
            raise Exception("not yet")
        return "done"

    worker = Worker(name, process, opts)
    worker.on("failed", lambda job, err: outcome.done() or outcome.set_result(job))
    worker.on("completed", lambda job, result: outcome.done() or outcome.set_result(job))
    await queue.add("test", {"fail": fail})
    job = await asyncio.wait_for(outcome, 20)
    assert job.attemptsStarted == 1 and job.attemptsMade == 1
    return queue, worker, job


@pytest.mark.parametrize("state", ["failed", "completed"])
async def test_retry_keeps_counting_attempts_unless_told_to_reset(opts: dict, state: str) -> None:
    queue, worker, job = await _run_once(opts, f"retry-{state}", fail=state == "failed")
    again: asyncio.Queue[Job] = asyncio.Queue()
    worker.on("completed", lambda job, result: again.put_nowait(job))
    worker.on("failed", lambda job, err: again.put_nowait(job))
    await job.retry(state)
    second = await asyncio.wait_for(again.get(), 20)
    assert (second.attemptsStarted, second.attemptsMade) == (2, 2)
    await (await queue.getJob(job.id)).retry(
        "completed", {"resetAttemptsMade": True, "resetAttemptsStarted": True}
    )
    third = await asyncio.wait_for(again.get(), 20)  # a new life: it may fail again
    assert (third.attemptsStarted, third.attemptsMade) == (1, 1)
    wrong = "completed" if await job.getState() == "failed" else "failed"
    with pytest.raises(RuntimeError, match=f"not in the {wrong} state"):
        await job.retry(wrong)
    await worker.close()
    await queue.close()


async def test_a_custom_backoff_strategy_sets_each_retry_delay(opts: dict, jobs: JobQueue) -> None:
    queue = Queue("custom-backoff", opts)
    asked: list[tuple[int, str]] = []

    def strategy(attempts_made: int, kind: str, err: BaseException, job: Any) -> int:
        asked.append((attempts_made, kind))
        return 60_000 * attempts_made

    async def process(job: Job, token: str) -> None:
        raise Exception("always")

    worker = Worker("custom-backoff", process, {**opts, "settings": {"backoffStrategy": strategy}})
    failed: asyncio.Future[Job] = asyncio.get_running_loop().create_future()
    worker.on("failed", lambda job, err: failed.done() or failed.set_result(job))
    job = await queue.add("x", {}, {"attempts": 3, "backoff": {"type": "jitterless"}})
    await asyncio.wait_for(failed, 20)
    await worker.close()
    assert asked == [(1, "jitterless")]
    row = await jobs.get(job.engine_id)
    assert row.sub_state == "retry"
    waited = (row.run_at - row.finished_at).total_seconds() if row.finished_at else None
    assert waited is None and 55 < (row.run_at - row.started_at).total_seconds() < 65
    await queue.close()


async def test_progress_and_logs_from_outside_the_processor(opts: dict) -> None:
    queue = Queue("outside", opts)
    job = await queue.add("x", {})
    await job.updateProgress({"total": 120, "completed": 40})
    assert (await Job.fromId(queue, job.id)).progress == {"total": 120, "completed": 40}
    await job.updateProgress(42)
    assert (await Job.fromId(queue, job.id)).progress == 42
    assert await job.log("one") == 1 and await job.log("two") == 2  # the lines it now holds
    assert await queue.getJobLogs(job.id) == {"logs": ["one", "two"], "count": 2}
    await job.remove()
    with pytest.raises(TypeError, match=f"Missing key for job {job.id}. updateData"):
        await job.updateData({"baz": "qux"})
    await queue.close()


async def test_a_return_value_json_refuses_fails_the_attempt_with_pythons_message(
    opts: dict,
) -> None:
    queue = Queue("nan", opts)
    job = await queue.add("x", {})

    async def process(job: Job, token: str) -> float:
        return float("nan")

    worker = Worker("nan", process, opts)
    failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
    worker.on("failed", lambda job, err: failed.done() or failed.set_result(err))
    assert isinstance(await asyncio.wait_for(failed, 20), ValueError)
    await worker.close()
    stored = await queue.getJob(job.id)
    assert "Out of range float values are not JSON compliant" in stored.failedReason
    assert stored.returnvalue is None and len(stored.stacktrace) == 1
    await queue.close()


async def test_obliterate_without_force_refuses_active_jobs_at_once(opts: dict) -> None:
    queue = Queue("busy", opts)
    await queue.add("x", {})
    await queue.add("y", {})
    started = asyncio.Event()
    release = asyncio.Event()

    async def process(job: Job, token: str) -> None:
        started.set()
        await release.wait()

    worker = Worker("busy", process, opts)
    await asyncio.wait_for(started.wait(), 20)
    with pytest.raises(RuntimeError, match="Cannot obliterate queue with active jobs"):
        await queue.obliterate(force=False)
    assert await queue.count() == 1  # nothing was removed
    release.set()
    await worker.close()
    await queue.obliterate()
    assert await queue.getJobCountByTypes("completed", "waiting") == 0
    await queue.close()


async def test_a_flow_naming_a_missing_parent(opts: dict) -> None:
    flow = FlowProducer(opts, {"prefix": "bull"})
    orphan = {
        "name": "orphan",
        "queueName": "kids",
        "data": {},
        "opts": {"parent": {"id": "missing", "queue": "bull:parents"}},
    }
    with pytest.raises(Exception, match="parent job") as raised:
        await flow.add(orphan)
    assert raised.value.code == -5
    trees = await flow.addBulk([{"name": "ok", "queueName": "kids", "data": {"ok": 1}}, orphan])
    assert len(trees) == 2 and trees[1]["job"].id is None
    assert (await Job.fromId(Queue("kids", opts), trees[0]["job"].id)).data == {"ok": 1}
    queue = Queue("kids", opts)
    with pytest.raises(TypeError, match=r"Missing key for parent job bullparents:p\. addJob"):
        await queue.add("child", {}, {"parent": {"id": "p", "queue": "bullparents"}})
    await flow.close()
    assert await flow.add({"name": "late", "queueName": "kids", "data": {}}) is None
    assert await flow.addBulk([{"name": "late", "queueName": "kids", "data": {}}]) is None
    await queue.close()


async def test_errors_are_the_package_root_names_and_queue_events_close_twice(
    opts: dict,
) -> None:
    assert bullmq_compat.UnrecoverableError is bullmq_compat.custom_errors.UnrecoverableError
    assert bullmq_compat.WaitingChildrenError is bullmq_compat.custom_errors.WaitingChildrenError
    events = QueueEvents("quiet", opts)
    await events.waitUntilReady()
    assert events.running and not events.closed
    await events.close()
    assert events.closed and not events.running
    await events.close()  # a no-op


async def test_closing_queues_and_workers_in_any_order_logs_no_error(
    dsn_opts: dict, caplog: pytest.LogCaptureFixture
) -> None:
    """Facade objects of one database share a pool that closes with the last of them; a
    worker writes its outcomes before it lets go of it."""
    caplog.set_level(logging.WARNING)
    queue = Queue("shutdown", dsn_opts)
    events = QueueEvents("shutdown", dsn_opts)
    await events.waitUntilReady()
    done = asyncio.Event()

    async def process(job: Job, token: str) -> str:
        await asyncio.sleep(0.2)
        done.set()
        return "ok"

    worker = Worker("shutdown", process, dsn_opts)
    job = await queue.add("x", {})
    await queue.close()  # first: the worker goes on on the shared pool
    await asyncio.wait_for(done.wait(), 20)
    await events.close()
    await worker.close()
    bad = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert bad == []
    reopened = Queue("shutdown", dsn_opts)
    assert await (await reopened.getJob(job.id)).getState() == "completed"
    await reopened.close()
