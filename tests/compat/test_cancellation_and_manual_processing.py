"""Two ways of running jobs BullMQ's Python package offers besides a plain processor: a
processor that observes cancellation through an AbortSignal, and processing by hand
(``Worker(name, None)`` with ``getNextJob`` and the job's ``moveTo...`` methods)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bullmq_compat import AbortController, AbortError, AbortSignal, Job, Queue, Worker
from pgjobs import JobQueue


def test_an_abort_controller_flips_its_signal_once() -> None:
    controller = AbortController()
    assert not controller.signal.aborted and controller.signal.reason is None
    controller.signal.throw_if_aborted()  # nothing yet
    controller.abort("first")
    controller.abort("second")  # idempotent: the first reason stays
    assert controller.signal.aborted and controller.signal.reason == "first"
    with pytest.raises(AbortError) as raised:
        controller.signal.throwIfAborted()
    assert raised.value.reason == "first"


async def test_cancel_job_aborts_the_signal_a_three_parameter_processor_gets(opts: dict) -> None:
    queue = Queue("cancels", opts)
    await queue.add("long", {})
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    observed: list[Any] = []

    async def process(job: Job, token: str, signal: AbortSignal) -> str:
        started.set_result(job.id)
        await asyncio.wait_for(signal.wait(), 20)
        observed.append(signal.reason)
        raise AbortError(signal.reason)

    worker = Worker("cancels", process, opts)
    failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
    worker.on("failed", lambda job, err: failed.done() or failed.set_result(err))
    job_id = await asyncio.wait_for(started, 20)
    assert not worker.cancelJob("no-such-job")
    assert worker.cancelJob(job_id, "user requested")
    assert isinstance(await asyncio.wait_for(failed, 20), AbortError)
    assert observed == ["user requested"]
    assert await (await queue.getJob(job_id)).getState() == "failed"  # an attempt that failed
    await worker.close()
    await queue.close()


async def test_cancel_all_jobs_aborts_every_running_signal(opts: dict) -> None:
    queue = Queue("cancel-all", opts)
    await queue.addBulk([{"name": "a", "data": {}}, {"name": "b", "data": {}}])
    running: asyncio.Queue[str] = asyncio.Queue()
    aborted: list[str] = []
    both = asyncio.Event()

    async def process(job: Job, token: str, signal: AbortSignal) -> None:
        await running.put(job.id)
        await signal.wait()
        aborted.append(job.id)
        if len(aborted) == 2:
            both.set()

    worker = Worker("cancel-all", process, {**opts, "concurrency": 2})
    seen = {await asyncio.wait_for(running.get(), 20) for _ in range(2)}
    worker.cancelAllJobs("shutdown")
    await asyncio.wait_for(both.wait(), 20)
    assert set(aborted) == seen
    await worker.close()
    await queue.close()


async def test_a_two_parameter_processor_gets_no_signal_and_cannot_be_cancelled(
    opts: dict,
) -> None:
    queue = Queue("legacy", opts)
    await queue.add("plain", {})
    release = asyncio.Event()
    active: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def process(job: Job, token: str) -> str:
        await release.wait()
        return "ok"

    worker = Worker("legacy", process, opts)
    worker.on("active", lambda job, prev: active.done() or active.set_result(job.id))
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    worker.on("completed", lambda job, result: done.done() or done.set_result(result))
    job_id = await asyncio.wait_for(active, 20)
    assert not worker.cancelJob(job_id)
    release.set()
    assert await asyncio.wait_for(done, 20) == "ok"
    await worker.close()
    await queue.close()


async def test_an_engine_cancel_aborts_the_running_jobs_signal(opts: dict, jobs: JobQueue) -> None:
    """Cancelling the job in the engine (the dashboard, an operator) reaches its processor at
    once: the worker hears of it, the signal aborts."""
    queue = Queue("engine-cancel", opts)
    job = await queue.add("long", {})
    started = asyncio.Event()
    reasons: list[Any] = []
    stopped = asyncio.Event()

    async def process(job: Job, token: str, signal: AbortSignal) -> None:
        started.set()
        await asyncio.wait_for(signal.wait(), 20)
        reasons.append(signal.reason)
        stopped.set()

    worker = Worker("engine-cancel", process, {**opts, "lockDuration": 600_000})
    await asyncio.wait_for(started.wait(), 20)
    assert await jobs.cancel(job.engine_id)
    await asyncio.wait_for(stopped.wait(), 20)
    assert reasons == ["cancelled"]
    await worker.close()
    await queue.close()


async def test_a_job_taken_by_hand_is_active_and_completed_by_its_token(opts: dict) -> None:
    queue = Queue("manual", opts)
    worker = Worker("manual", None, opts)
    await queue.add("test", {"foo": "bar"})
    active: list[str] = []
    worker.on("active", lambda job, prev: active.append(job.id))
    job = await worker.getNextJob("my-token")
    assert job is not None and active == [job.id] and await job.isActive()
    with pytest.raises(RuntimeError, match="Missing lock"):
        await job.moveToCompleted("value", "another-token")
    assert await job.moveToCompleted("return value", "my-token") is None
    assert await job.isCompleted() and job.attemptsMade == 1 and job.finishedOn is not None
    assert (await queue.getJob(job.id)).returnvalue == "return value"
    assert await worker.getNextJob("my-token", {"block": False}) is None
    await worker.close(force=True)
    await queue.close()


async def test_move_to_failed_retries_or_fails_and_can_fetch_the_next_job(opts: dict) -> None:
    queue = Queue("manual-fail", opts)
    worker = Worker("manual-fail", None, opts)
    await queue.add("retried", {}, {"attempts": 3, "backoff": 300})
    following = await queue.add("next", {"n": 2})
    job = await worker.getNextJob("tok")
    result = await job.moveToFailed(Exception("test error"), "tok", True)
    assert await job.isDelayed()  # attempts remain: a retry after its backoff
    assert result[1] == following.id and result[0]["name"] == "next" and result[2:] == [0, 0]
    assert await (await queue.getJob(following.id)).isActive()  # taken for the same token
    once = await queue.add("once", {})
    final = await worker.getNextJob("tok2")
    assert final.id == once.id
    assert await final.moveToFailed(Exception("for good"), "tok2") is None
    assert await final.isFailed() and final.failedReason == "for good"
    assert final.attemptsMade == 1 and final.finishedOn is not None
    await worker.close(force=True)
    await queue.close()


async def test_move_to_delayed_by_hand_and_extend_lock(opts: dict) -> None:
    queue = Queue("manual-delay", opts)
    worker = Worker("manual-delay", None, {**opts, "lockDuration": 2000})
    await queue.add("later", {})
    job = await worker.getNextJob("tok")
    assert await job.extendLock("tok", 60_000) == 1
    await job.moveToDelayed(int(time.time() * 1000) + 60_000, "tok")
    assert await job.isDelayed()
    stored = await queue.getJob(job.id)
    assert stored.attemptsMade == 0  # a deferral uses no attempt
    await worker.close()
    await queue.close()
