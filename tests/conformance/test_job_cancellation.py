"""BullMQ's Node cases for cancelling running jobs (tests/job_cancellation.test.ts,
tests/job_cancellation_advanced.test.ts), in Python against the package's API: a processor
declared with a third parameter gets an ``AbortSignal``; ``Worker.cancelJob`` /
``cancelAllJobs`` abort it. Node's ``signal.addEventListener('abort', ...)`` is
``await signal.wait()`` here. Where Node sleeps after the 'active' event for the processor to
be running, these cases wait for an event the processor sets."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, future_of, wait_for


async def aborted_within(signal: Any, seconds: float) -> bool:
    """Race the abort against ``seconds`` of work: True when the signal was aborted first."""
    try:
        await asyncio.wait_for(signal.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def first_of(*futures: asyncio.Future[Any]) -> None:
    """Wait (bounded) until one of ``futures`` is done."""
    done, _pending = await asyncio.wait(futures, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    assert done, "none of the awaited events came within 20s"


class Counter:
    """An event set once ``target`` calls of ``hit`` have been made."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.reached = asyncio.Event()

    def hit(self) -> None:
        self.count += 1
        if self.count >= self.target:
            self.reached.set()


# === tests/job_cancellation.test.ts ==========================================================


# Node: tests/job_cancellation.test.ts › Job Cancellation › Basic Cancellation › should cancel a
#   running job using abort event (recommended)
async def test_cancel_job_aborts_a_processor_waiting_on_the_signal(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    cancelled = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal cancelled
        started.set()
        if await aborted_within(signal, 1.0):
            cancelled = True
            raise Exception("Job was cancelled")
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(failed_job, err)] = await wait_for(failed)
    assert failed_job.id == job.id
    assert str(err) == "Job was cancelled"
    assert cancelled is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Basic Cancellation › should cancel a
#   running job using polling (alternative)
async def test_cancel_job_is_seen_by_a_polling_processor(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    cancelled = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal cancelled
        started.set()
        for _ in range(100):
            if signal.aborted:
                cancelled = True
                raise Exception("Job was cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    assert worker.cancelJob(job.id) is True
    [(failed_job, err)] = await wait_for(failed)
    assert failed_job.id == job.id
    assert str(err) == "Job was cancelled"
    assert cancelled is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Basic Cancellation › should interrupt
#   async operations with abort event
async def test_cancel_job_interrupts_a_long_operation(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    cancelled = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal cancelled
        started.set()
        if await aborted_within(signal, 5.0):
            cancelled = True
            raise Exception("Operation cancelled")
        return {"result": "done"}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert str(err) == "Operation cancelled"
    assert cancelled is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Basic Cancellation › should return
#   false when cancelling a non-existent job
async def test_cancel_job_of_an_unknown_id_is_false(bq: Bull) -> None:
    name = bq.name()

    async def process(job: Any, token: str) -> Any:
        await asyncio.sleep(0.1)
        return {"done": True}

    worker = bq.worker(name, process)
    assert worker.cancelJob("non-existent-job-id") is False
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Basic Cancellation › should return
#   false when cancelling a job that has already completed
async def test_cancel_job_of_a_completed_job_is_false(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str, signal: Any) -> Any:
        await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    assert worker.cancelJob(job.id) is False
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Cancel All Jobs › should cancel all
#   active jobs
async def test_cancel_all_jobs_aborts_every_running_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running = Counter(5)
    cancelled: set[str] = set()

    async def process(job: Any, token: str, signal: Any) -> Any:
        running.hit()
        for _ in range(100):
            if signal.aborted:
                cancelled.add(job.id)
                raise Exception("Job was cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process, concurrency=5)
    failed = future_of(worker, "failed", 5)
    await asyncio.gather(*(queue.add("test", {"index": i}) for i in range(5)))
    await wait_for(running.reached.wait())
    assert len(await queue.getActive()) == 5
    worker.cancelAllJobs()
    await wait_for(failed)
    assert len(cancelled) == 5
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › AbortSignal Integration › should work
#   with fetch-like APIs that accept abort signal
async def test_signal_can_be_passed_on_to_a_fetch_like_call(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    received = False
    aborted = False

    async def fetch(signal: Any) -> Any:
        nonlocal aborted
        for _ in range(50):
            if signal is not None and signal.aborted:
                aborted = True
                raise Exception("Request aborted")
            await asyncio.sleep(0.01)
        return {"data": "success"}

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal received
        received = signal is not None
        started.set()
        return await fetch(signal)

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert received is True
    assert aborted is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › AbortSignal Integration › should work
#   with processor that ignores signal (backward compatibility)
async def test_processor_without_a_signal_parameter_still_works(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    done = False

    async def process(job: Any, token: str) -> Any:
        nonlocal done
        await asyncio.sleep(0.05)
        done = True
        return {"done": True}

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    assert done is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › AbortSignal Integration › should
#   handle signal.aborted check in async operations
async def test_signal_aborted_stops_an_iterating_processor(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    iterations = 0
    aborted = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal iterations, aborted
        started.set()
        while iterations < 100:
            if signal.aborted:
                aborted = True
                raise Exception("Aborted")
            await asyncio.sleep(0.005)
            iterations += 1
        return {"iterations": iterations}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert aborted is True
    assert iterations < 100
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Lock Renewal Failure › should allow
#   manual cancellation on lockRenewalFailed event
async def test_cancel_job_from_a_lock_renewal_failed_listener_pattern(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    aborted = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal aborted
        started.set()
        if await aborted_within(signal, 5.0):
            aborted = True
            raise Exception("Cancelled due to lock renewal failure")
        return {"done": True}

    worker = bq.worker(name, process)
    worker.on("lockRenewalFailed", lambda job_ids: [worker.cancelJob(i) for i in job_ids])
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)  # as the listener would, for the jobs it is given
    await wait_for(failed)
    assert aborted is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Get Active Jobs › should return list
#   of active job IDs using queue.getActive()
async def test_get_active_lists_the_running_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running = Counter(3)

    async def process(job: Any, token: str) -> Any:
        running.hit()
        await asyncio.sleep(0.5)
        return {"done": True}

    worker = bq.worker(name, process, concurrency=3)
    jobs = await asyncio.gather(*(queue.add("test", {"index": i}) for i in range(3)))
    await wait_for(running.reached.wait())
    active = await queue.getActive()
    assert len(active) == 3
    ids = {job.id for job in jobs}
    assert all(job.id in ids for job in active)
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Get Active Jobs › should return empty
#   array when no jobs are active
async def test_get_active_is_empty_without_running_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> Any:
        return {"done": True}

    worker = bq.worker(name, process)
    active = await queue.getActive()
    assert isinstance(active, list)
    assert len(active) == 0
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Get Active Jobs › should update
#   active jobs list as jobs complete
async def test_get_active_empties_as_jobs_complete(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running = Counter(2)

    async def process(job: Any, token: str) -> Any:
        running.hit()
        await asyncio.sleep(0.1)
        return {"done": True}

    worker = bq.worker(name, process, concurrency=2)
    completed = future_of(worker, "completed", 2)
    await queue.add("test", {"index": 1})
    await queue.add("test", {"index": 2})
    await wait_for(running.reached.wait())
    assert len(await queue.getActive()) == 2
    await wait_for(completed)
    assert len(await queue.getActive()) == 0
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Edge Cases › should handle
#   cancellation of job that throws error
async def test_cancelled_processor_that_throws_fails_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    abort_seen = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal abort_seen
        started.set()
        for _ in range(50):
            if signal.aborted:
                abort_seen = True
                raise Exception("Cancelled and error")
            await asyncio.sleep(0.01)
        raise Exception("Natural error")

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert abort_seen is True
    assert str(err) == "Cancelled and error"
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Edge Cases › should handle concurrent
#   cancellations
async def test_cancelling_the_same_job_again_is_still_true(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise Exception("Cancelled")
            await asyncio.sleep(0.005)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    results = [worker.cancelJob(job.id) for _ in range(3)]
    assert results == [True, True, True]
    await wait_for(failed)
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Edge Cases › should handle
#   cancellation with UnrecoverableError
async def test_cancelled_processor_can_fail_with_unrecoverable_error(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise bq.UnrecoverableError("Job cancelled - do not retry")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert isinstance(err, bq.UnrecoverableError)
    assert "cancelled" in str(err)
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Edge Cases › should work with
#   multiple workers processing same queue
async def test_cancel_job_on_one_of_two_workers(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running = Counter(2)
    first_worker_job: list[str] = []

    def processor(own: list[str] | None, label: str) -> Any:
        async def process(job: Any, token: str, signal: Any) -> Any:
            if own is not None:
                own.append(job.id)
            running.hit()
            for _ in range(100):
                if signal.aborted:
                    raise Exception(f"{label} cancelled")
                await asyncio.sleep(0.01)
            return {"worker": label}

        return process

    worker1 = bq.worker(name, processor(first_worker_job, "Worker 1"))
    worker2 = bq.worker(name, processor(None, "Worker 2"))
    await queue.add("test", {"index": 1})
    await queue.add("test", {"index": 2})
    await wait_for(running.reached.wait())
    assert len(await queue.getActive()) > 0
    assert first_worker_job
    assert worker1.cancelJob(first_worker_job[0]) is True
    await worker1.close()
    await worker2.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Signal Properties › should not create
#   AbortController when processor does not use signal
async def test_processor_without_signal_gets_no_controller(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    gate = asyncio.Event()

    async def process(job: Any, token: str) -> Any:
        started.set()
        await gate.wait()
        return {"done": True}

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    # Node reads worker.processorAcceptsSignal (private); the public consequence: a running
    # job of a processor without a signal parameter has nothing to abort.
    assert worker.cancelJob(job.id) is False
    gate.set()
    [(_job, result)] = await wait_for(completed)
    assert result == {"done": True}
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Signal Properties › should create
#   AbortController when processor uses signal parameter
async def test_processor_with_signal_gets_one(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    signals: list[Any] = []

    async def process(job: Any, token: str, signal: Any) -> Any:
        signals.append(signal)
        await asyncio.sleep(0.05)
        return {"done": True}

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    assert len(signals) == 1
    assert signals[0] is not None
    assert signals[0].aborted is False
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Signal Properties › should provide
#   working AbortSignal with aborted property
async def test_signal_aborted_turns_true_on_cancel(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    gate = asyncio.Event()
    before: list[bool] = []
    after: list[bool] = []

    async def process(job: Any, token: str, signal: Any) -> Any:
        before.append(signal.aborted)
        started.set()
        await gate.wait()
        after.append(signal.aborted)
        if signal.aborted:
            raise Exception("Aborted")
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    gate.set()
    await wait_for(failed)
    assert before == [False]
    assert after == [True]
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Signal Properties › should work with
#   signal event listener
async def test_a_task_waiting_on_the_signal_is_woken(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    fired = False
    listeners: list[asyncio.Future[Any]] = []

    async def process(job: Any, token: str, signal: Any) -> Any:
        async def on_abort() -> None:
            nonlocal fired
            await signal.wait()
            fired = True

        listeners.append(asyncio.ensure_future(on_abort()))
        started.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if signal.aborted:
                raise Exception("Aborted via event")
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    await wait_for(asyncio.gather(*listeners))
    assert fired is True
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Signal Properties › should support
#   cancellation reason
async def test_cancel_job_reason_reaches_the_signal(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    reasons: list[Any] = []

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        if await aborted_within(signal, 5.0):
            reasons.append(signal.reason)
            raise Exception(f"Cancelled: {signal.reason or 'no reason'}")
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id, "User requested cancellation")
    [(_job, err)] = await wait_for(failed)
    assert reasons == ["User requested cancellation"]
    assert str(err) == "Cancelled: User requested cancellation"
    await worker.close()


# Node: tests/job_cancellation.test.ts › Job Cancellation › Signal Properties › should catch error
#   from moveToFailed when lock is lost
async def test_failure_to_record_a_failure_is_an_error_event(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def lost_lock(*args: Any, **kwargs: Any) -> Any:
        raise Exception("could not lock job: job-123, state: active. Missing job.")

    async def process(job: Any, token: str, signal: Any) -> Any:
        job.moveToFailed = lost_lock  # as if the lock were gone when recording the failure
        raise Exception("Job processing error")

    worker = bq.worker(name, process)
    failures: list[Any] = []
    worker.on("failed", lambda *args: failures.append(args))
    error = future_of(worker, "error")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    [(err, errored_job)] = await wait_for(error)
    assert "could not lock job" in str(err)
    assert errored_job.id == job.id
    assert failures == []
    await worker.close()


# Corollary of the case above: a moveToFailed replaced on the job that records the failure
# (here by calling the job's own) is what records it; 'failed' follows, once.
async def test_a_replaced_move_to_failed_records_the_failure(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    calls: list[str] = []

    async def process(job: Any, token: str) -> Any:
        original = job.moveToFailed

        async def recording(err: Any, token: Any = None, *args: Any) -> Any:
            calls.append(str(err))
            return await original(err, token, *args)

        job.moveToFailed = recording
        raise Exception("Job processing error")

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    [(failed_job, err)] = await wait_for(failed)
    assert failed_job.id == job.id
    assert str(err) == "Job processing error"
    assert calls == ["Job processing error"]
    stored = await queue.getJob(job.id)
    assert await stored.getState() == "failed"
    assert stored.failedReason == "Job processing error"
    assert stored.attemptsMade == 1
    await worker.close()


# === tests/job_cancellation_advanced.test.ts =================================================


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation with Retries › should retry cancelled job when throwing regular Error
async def test_cancelled_attempt_with_a_plain_error_is_retried(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    attempts = 0
    cancelled_on = 0

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal attempts, cancelled_on
        attempts += 1
        if attempts == 1:
            started.set()
            for _ in range(50):
                if signal.aborted:
                    cancelled_on = attempts
                    raise Exception("Job cancelled on attempt 1")
                await asyncio.sleep(0.01)
            return None
        return {"attempt": attempts, "success": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(failed_job, err)] = await wait_for(failed)
    assert failed_job.id == job.id
    assert "cancelled" in str(err)
    [(completed_job, result)] = await wait_for(completed)
    assert completed_job.id == job.id
    assert result == {"attempt": 2, "success": True}
    assert cancelled_on == 1
    assert attempts == 2
    final = await queue.getJob(job.id)
    assert final.attemptsMade == 2
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation with Retries › should NOT retry cancelled job when throwing UnrecoverableError
async def test_cancelled_attempt_with_unrecoverable_error_is_not_retried(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    attempts = 0

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal attempts
        attempts += 1
        started.set()
        for _ in range(50):
            if signal.aborted:
                raise bq.UnrecoverableError("Job cancelled - do not retry")
            await asyncio.sleep(0.01)
        return {"success": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(failed_job, err)] = await wait_for(failed)
    assert failed_job.id == job.id
    assert isinstance(err, bq.UnrecoverableError)
    assert "do not retry" in str(err)
    final = await queue.getJob(job.id)
    assert await final.getState() == "failed"
    assert final.attemptsMade == 1
    assert final.finishedOn
    assert attempts == 1
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation with Retries › should handle cancellation on last retry attempt
async def test_cancelling_the_last_attempt_fails_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    third = asyncio.Event()
    attempts = 0

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise Exception(f"Failed attempt {attempts}")
        third.set()
        for _ in range(50):
            if signal.aborted:
                raise Exception("Cancelled on final attempt")
            await asyncio.sleep(0.01)
        return None

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed", 3)
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    await wait_for(third.wait())
    worker.cancelJob(job.id)
    errors = [str(err) for _job, err in await wait_for(failed)]
    assert errors == ["Failed attempt 1", "Failed attempt 2", "Cancelled on final attempt"]
    assert attempts == 3
    final = await queue.getJob(job.id)
    assert final.attemptsMade == 3
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios › Job
#   State Transitions › should move cancelled job to failed state
async def test_cancelled_job_ends_failed_with_its_reason(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise Exception("Cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    await wait_for(started.wait())
    assert await job.getState() == "active"
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert await job.getState() == "failed"
    updated = await queue.getJob(job.id)
    assert "Cancelled" in updated.failedReason
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios › Job
#   State Transitions › should track job state through QueueEvents
async def test_cancelled_job_shows_active_then_failed_in_queue_events(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    seen: list[str] = []
    events.on("active", lambda args, _id: seen.append(f"active:{args['jobId']}"))
    events.on("failed", lambda args, _id: seen.append(f"failed:{args['jobId']}"))
    failed = future_of(events, "failed")
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise bq.UnrecoverableError("Cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert f"active:{job.id}" in seen
    assert f"failed:{job.id}" in seen
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation Timing › should cancel job before it processes any data
async def test_cancel_right_after_active_either_fails_or_completes(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str, signal: Any) -> Any:
        if signal.aborted:
            raise Exception("Cancelled before processing")
        await asyncio.sleep(0.1)
        return {"done": True}

    worker = bq.worker(name, process)
    active = future_of(worker, "active")
    failed = future_of(worker, "failed")
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(active)
    worker.cancelJob(job.id)
    await first_of(failed, completed)
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation Timing › should cancel job in the middle of processing
async def test_cancel_in_the_middle_stops_the_work_part_way(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    processed = 0

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal processed
        for _ in range(100):
            if signal.aborted:
                raise Exception(f"Cancelled after processing {processed} items")
            processed += 1
            started.set()
            await asyncio.sleep(0.005)
        return {"processedItems": processed}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert "Cancelled after processing" in str(err)
    assert 0 < processed < 100
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation Timing › should handle cancellation near completion
async def test_cancel_near_completion_either_fails_or_completes(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    almost = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        for i in range(10):
            await asyncio.sleep(0.01)
            if i == 8:
                almost.set()
            if signal.aborted:
                raise Exception("Cancelled near completion")
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    completed = future_of(worker, "completed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(almost.wait())
    worker.cancelJob(job.id)
    await first_of(failed, completed)
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Concurrency and Cancellation › should cancel specific job among concurrent jobs
async def test_cancel_one_of_three_concurrent_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running = Counter(3)
    statuses: dict[str, str] = {}

    async def process(job: Any, token: str, signal: Any) -> Any:
        running.hit()
        for _ in range(100):
            if signal.aborted:
                statuses[job.id] = "cancelled"
                raise Exception("Cancelled")
            await asyncio.sleep(0.005)
        statuses[job.id] = "completed"
        return {"id": job.id}

    worker = bq.worker(name, process, concurrency=3)
    completed = future_of(worker, "completed", 2)
    failed = future_of(worker, "failed")
    jobs = await asyncio.gather(*(queue.add("test", {"index": i}) for i in (1, 2, 3)))
    await wait_for(running.reached.wait())
    worker.cancelJob(jobs[1].id)
    await wait_for(asyncio.gather(completed, failed))
    assert statuses == {
        jobs[0].id: "completed",
        jobs[1].id: "cancelled",
        jobs[2].id: "completed",
    }
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Concurrency and Cancellation › should handle rapid cancellations with high concurrency
async def test_cancel_half_of_ten_concurrent_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    running = Counter(10)
    cancelled: set[str] = set()
    finished = Counter(10)

    async def process(job: Any, token: str, signal: Any) -> Any:
        running.hit()
        for _ in range(100):
            if signal.aborted:
                cancelled.add(job.id)
                raise Exception("Cancelled")
            await asyncio.sleep(0.005)
        return {"done": True}

    worker = bq.worker(name, process, concurrency=10)
    worker.on("completed", lambda *args: finished.hit())
    worker.on("failed", lambda *args: finished.hit())
    jobs = await asyncio.gather(*(queue.add("test", {"index": i}) for i in range(10)))
    await wait_for(running.reached.wait())
    for job in jobs[:5]:
        worker.cancelJob(job.id)
    await wait_for(finished.reached.wait())
    assert len(cancelled) > 0
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Cancellation with Delayed Jobs › should handle cancellation of job with backoff retry
async def test_cancelled_attempt_waits_its_backoff_then_runs_again(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    attempts = 0

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal attempts
        attempts += 1
        started.set()
        for _ in range(50):
            if signal.aborted:
                raise Exception("Cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    completed = future_of(worker, "completed")
    # Node's backoff is 100 ms and it reads the state 50 ms after 'failed'; 300 ms here.
    job = await queue.add(
        "test", {"foo": "bar"}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 300}}
    )
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert await job.getState() == "delayed"
    await wait_for(completed)
    assert attempts == 2
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios › Error
#   Messages and Debugging › should preserve error message from cancellation
async def test_cancellation_error_message_is_the_failed_reason(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    message = "User requested cancellation: operation timeout"

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise Exception(message)
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(failed_job, err)] = await wait_for(failed)
    assert str(err) == message
    updated = await queue.getJob(failed_job.id)
    assert updated.failedReason == message
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios › Error
#   Messages and Debugging › should track stacktrace for cancelled jobs
async def test_cancelled_job_keeps_a_stacktrace(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise Exception("Job cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    updated = await queue.getJob(job.id)
    assert isinstance(updated.stacktrace, list)
    assert len(updated.stacktrace) > 0
    assert "test_job_cancellation.py" in updated.stacktrace[0]
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios › Worker
#   Lifecycle and Cancellation › should handle cancellation during worker shutdown
async def test_cancel_then_close_leaves_the_job_in_a_known_state(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted:
                raise Exception("Cancelled")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(worker.close())
    assert await job.getState() in ("failed", "active", "completed")


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios › Worker
#   Lifecycle and Cancellation › should not cancel jobs after worker is closed
async def test_cancel_job_after_close_is_false(bq: Bull) -> None:
    name = bq.name()

    async def process(job: Any, token: str) -> Any:
        await asyncio.sleep(0.1)
        return {"done": True}

    worker = bq.worker(name, process)
    await worker.close()
    assert worker.cancelJob("some-job-id") is False


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Complex Cancellation Patterns › should support async cleanup when job is cancelled
async def test_processor_cleans_up_asynchronously_before_failing(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    steps: dict[str, bool] = {}

    async def process(job: Any, token: str, signal: Any) -> Any:
        resource = {"active": True}
        started.set()
        try:
            if await aborted_within(signal, 5.0):
                steps["cleanup started"] = True
                await asyncio.sleep(0.05)
                resource["active"] = False
                await asyncio.sleep(0.02)
                steps["resource released"] = True
                steps["cleanup completed"] = True
                raise Exception("Cancelled after cleanup")
            return {"done": True}
        finally:
            resource["active"] = False

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert str(err) == "Cancelled after cleanup"
    assert steps == {"cleanup started": True, "resource released": True, "cleanup completed": True}
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Complex Cancellation Patterns › should handle complex async cleanup with multiple resources
async def test_processor_releases_several_resources_in_order(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    log: list[str] = []

    async def process(job: Any, token: str, signal: Any) -> Any:
        db = {"connected": True}
        started.set()
        if await aborted_within(signal, 5.0):
            try:
                log.append("cancellation-detected")
                await asyncio.sleep(0.02)
                db["connected"] = False
                log.append("db-closed")
                await asyncio.sleep(0.02)
                log.append("cache-cleared")
                await asyncio.sleep(0.02)
                log.append("file-closed")
            except Exception:
                if db["connected"]:
                    log.append("db-emergency-close")
                raise
            raise Exception("Gracefully cancelled")
        return {"success": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert log == ["cancellation-detected", "db-closed", "cache-cleared", "file-closed"]
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Complex Cancellation Patterns › should handle timeout during async cleanup
async def test_processor_gives_up_a_slow_cleanup(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    attempted = False
    timed_out = False

    async def process(job: Any, token: str, signal: Any) -> Any:
        nonlocal attempted, timed_out
        started.set()
        for _ in range(100):
            if signal.aborted:
                attempted = True
                try:
                    await asyncio.wait_for(asyncio.sleep(0.2), 0.1)
                except TimeoutError:
                    timed_out = True
                    raise Exception("Cancelled - cleanup timeout") from None
                raise Exception("Cancelled after cleanup")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert "cleanup timeout" in str(err)
    assert attempted is True
    assert timed_out is True
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Complex Cancellation Patterns › should allow cleanup to check signal again (re-entrant
#   cancellation)
async def test_signal_stays_aborted_during_cleanup(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    started = asyncio.Event()
    checks: list[str] = []

    async def process(job: Any, token: str, signal: Any) -> Any:
        started.set()
        for _ in range(100):
            if signal.aborted and not checks:
                checks.append("first")
                for _ in range(50):
                    if signal.aborted:
                        checks.append("second")
                        raise Exception("Cleanup interrupted - still cancelled")
                    await asyncio.sleep(0.01)
                raise Exception("Cancelled after cleanup")
            await asyncio.sleep(0.01)
        return {"done": True}

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert checks == ["first", "second"]
    assert str(err) == "Cleanup interrupted - still cancelled"
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Complex Cancellation Patterns › should handle cancellation with progress updates
async def test_progress_reported_before_a_cancel_is_kept(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    progress: list[Any] = []
    events.on("progress", lambda args, _id: progress.append(args["data"]))
    failed = future_of(events, "failed")
    started = asyncio.Event()

    async def process(job: Any, token: str, signal: Any) -> Any:
        for i in range(100):
            if signal.aborted:
                raise Exception("Cancelled")
            if i % 10 == 0:
                await job.updateProgress(i)
                started.set()
            await asyncio.sleep(0.005)
        return {"done": True}

    worker = bq.worker(name, process)
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(started.wait())
    worker.cancelJob(job.id)
    await wait_for(failed)
    assert len(progress) > 0
    assert progress[-1] < 100
    await worker.close()


# Node: tests/job_cancellation_advanced.test.ts › Job Cancellation - Advanced Scenarios ›
#   Complex Cancellation Patterns › should cancel job that makes external API calls
async def test_cancel_reaches_a_call_the_processor_makes(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    call_started = asyncio.Event()
    call_completed = False

    async def api_call(signal: Any) -> Any:
        nonlocal call_completed
        call_started.set()
        for _ in range(50):
            if signal is not None and signal.aborted:
                raise Exception("API call aborted")
            await asyncio.sleep(0.01)
        call_completed = True
        return {"data": "success"}

    async def process(job: Any, token: str, signal: Any) -> Any:
        return await api_call(signal)

    worker = bq.worker(name, process)
    failed = future_of(worker, "failed")
    job = await queue.add("test", {"foo": "bar"})
    await wait_for(call_started.wait())
    worker.cancelJob(job.id)
    [(_job, err)] = await wait_for(failed)
    assert str(err) == "API call aborted"
    assert call_completed is False
    await worker.close()


FACADE_PENDING: dict[str, str] = {}
