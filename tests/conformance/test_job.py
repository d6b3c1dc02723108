"""BullMQ's Node cases for a Job's own API (tests/job.test.ts, tests/job.redis.test.ts), in
Python against the package's API: adding, updating, progress, logs, the manual state moves a
Worker without a processor makes (getNextJob, moveToCompleted, moveToFailed), priority changes
and promotion. Node's ``Job.create(queue, ...)`` is ``queue.add(...)`` here (the package has no
``Job.create``)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from tests.conformance.conftest import Bull, eventually, future_of, wait_for

TOKEN = "my-token"


def raises(message: str) -> Any:
    """``pytest.raises`` on any exception whose text contains ``message`` (Node's ``toThrow``)."""
    return pytest.raises(Exception, match=re.escape(message))


async def fail_job(
    job: Any, message: str, token: str = "0", fetch_next: bool = True, kind: type = Exception
) -> Any:
    """``job.moveToFailed`` from inside an ``except`` block, as a processor's failure is (the
    package records the traceback being handled as the stacktrace)."""
    try:
        raise kind(message)
    except Exception as err:
        return await job.moveToFailed(err, token, fetch_next)


def where(emitter: Any, event: str, predicate: Any) -> asyncio.Future[tuple[Any, ...]]:
    """A future for the arguments of the first ``event`` of ``emitter`` matching ``predicate``."""
    future: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()

    def listener(*args: Any) -> None:
        if not future.done() and predicate(*args):
            future.set_result(args)

    emitter.on(event, listener)
    return future


async def short_work(job: Any, token: str) -> None:
    await asyncio.sleep(0.02)


# --- .create ------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › .create › saves the job in redis
async def test_added_job_is_stored_with_its_data_and_opts(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"}, {"timestamp": 1234567890})
    stored = await bq.Job.fromId(queue, job.id)
    assert stored is not None
    assert stored.id == job.id
    assert stored.data["foo"] == "bar"
    assert isinstance(stored.opts, dict)
    assert stored.opts["timestamp"] == 1234567890


# Node: tests/job.test.ts › Job › .create › should use the custom jobId if one is provided
async def test_custom_job_id_is_used(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"}, {"jobId": "customjob"})
    assert job.id == "customjob"


# Node: tests/job.test.ts › Job › .create › when custom jobId is provided as empty string ›
#   should ignore the empty custom id and generates a numeric id
async def test_empty_custom_job_id_gets_a_generated_id(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("test", {"foo": "bar"})
    job = await queue.add("test", {"foo": "bar"}, {"jobId": ""})
    assert job.id == "2"


# Node: tests/job.test.ts › Job › .create › should set default size limit and succeed in creating
#   job
async def test_job_within_size_limit_is_added_with_the_option(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"}, {"sizeLimit": 20})
    assert job is not None
    assert job.opts["sizeLimit"] == 20


# Node: tests/job.test.ts › Job › .create › when parent key is missing › throws an error
async def test_add_with_a_missing_parent_fails(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    parent_queue_key = f"{bq.opts['prefix']}:{name}"
    with raises(f"Missing key for parent job {parent_queue_key}:nonexistent-parent. addJob"):
        await queue.add(
            "test",
            {"foo": "bar"},
            {"parent": {"id": "nonexistent-parent", "queue": parent_queue_key}},
        )


# Node: tests/job.test.ts › Job › .create › when removeDependencyOnFailure and
#   failParentOnFailure options are provided › throws an error
# Node: tests/job.test.ts › Job › .create › when removeDependencyOnFailure and
#   ignoreDependencyOnFailure options are provided › throws an error
# Node: tests/job.test.ts › Job › .create › when failParentOnFailure and
#   ignoreDependencyOnFailure options are provided › throws an error
@pytest.mark.parametrize(
    ("options", "listed"),
    [
        (
            {"removeDependencyOnFailure": True, "failParentOnFailure": True},
            "removeDependencyOnFailure, failParentOnFailure",
        ),
        (
            {"removeDependencyOnFailure": True, "ignoreDependencyOnFailure": True},
            "removeDependencyOnFailure, ignoreDependencyOnFailure",
        ),
        (
            {"ignoreDependencyOnFailure": True, "failParentOnFailure": True},
            "failParentOnFailure, ignoreDependencyOnFailure",
        ),
    ],
    ids=["rdof-fpof", "rdof-idof", "fpof-idof"],
)
async def test_exclusive_parent_failure_options_are_rejected(
    bq: Bull, options: dict[str, Any], listed: str
) -> None:
    queue = bq.queue()
    with raises(f"The following options cannot be used together: {listed}"):
        await queue.add("test", {"foo": "bar"}, options)
    assert await queue.getJobCountByTypes() == 0


# --- JSON / data ------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › JSON.stringify › should correctly handle zero passed as data
async def test_zero_as_data_reaches_the_processor(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[Any] = []

    async def process(job: Any, token: str) -> None:
        seen.append(job.data)

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    job = await queue.add("test", 0)
    await wait_for(completed)
    assert seen == [0]
    stored = await queue.getJob(job.id)
    assert stored.data == 0


# --- .update --------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › .update › should allow updating job data
async def test_update_data_replaces_the_data(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.updateData({"baz": "qux"})
    stored = await bq.Job.fromId(queue, job.id)
    assert stored.data == {"baz": "qux"}


# Node: tests/job.test.ts › Job › .update › when job is removed › throws error
async def test_update_data_of_a_removed_job_fails(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.remove()
    with raises(f"Missing key for job {job.id}. updateData"):
        await job.updateData({"foo": "baz"})


# --- .remove --------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › .remove › removes the job from redis
async def test_removed_job_is_gone(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.remove()
    assert await bq.Job.fromId(queue, job.id) is None


# Node: tests/job.test.ts › Job › .progressProgress › can set and get progress as number
# Node: tests/job.test.ts › Job › .progressProgress › can set and get progress as object
# Node: tests/job.test.ts › Job › .progressProgress › can set and get progress as string
@pytest.mark.parametrize(
    "progress",
    [42, {"total": 120, "completed": 40}, "hello, world!"],
    ids=["number", "object", "string"],
)
async def test_progress_is_stored_and_read_back(bq: Bull, progress: Any) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.updateProgress(progress)
    stored = await bq.Job.fromId(queue, job.id)
    assert stored.progress == progress


# Node: tests/job.test.ts › Job › .progressProgress › can set and get progress as boolean
async def test_progress_can_be_a_boolean(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.updateProgress(False)
    stored = await bq.Job.fromId(queue, job.id)
    assert stored.progress is False
    await job.updateProgress(True)
    stored = await bq.Job.fromId(queue, job.id)
    assert stored.progress is True


# Node: tests/job.test.ts › Job › .progressProgress › when job is removed › throws error
async def test_progress_of_a_removed_job_fails(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.remove()
    with raises(f"Missing key for job {job.id}. updateProgress"):
        await job.updateProgress({"total": 120, "completed": 40})


# --- logs -----------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › .log › can log two rows with text in asc order
async def test_logs_read_in_ascending_order_and_go_with_the_job(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.log("some log text 1")
    await job.log("some log text 2")
    assert await queue.getJobLogs(job.id) == {
        "logs": ["some log text 1", "some log text 2"],
        "count": 2,
    }
    assert await queue.getJobLogs(job.id, 0, 0, True) == {"logs": ["some log text 1"], "count": 2}
    assert await queue.getJobLogs(job.id, 1, 1) == {"logs": ["some log text 2"], "count": 2}
    await job.remove()
    assert await queue.getJobLogs(job.id) == {"logs": [], "count": 0}


# Node: tests/job.test.ts › Job › .log › can log two rows with text in desc order
async def test_logs_read_in_descending_order(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.log("some log text 1")
    await job.log("some log text 2")
    assert await queue.getJobLogs(job.id, 0, -1, False) == {
        "logs": ["some log text 2", "some log text 1"],
        "count": 2,
    }
    assert await queue.getJobLogs(job.id, 0, 0, False) == {
        "logs": ["some log text 2"],
        "count": 2,
    }
    assert await queue.getJobLogs(job.id, 1, 1, False) == {
        "logs": ["some log text 1"],
        "count": 2,
    }
    await job.remove()
    assert await queue.getJobLogs(job.id) == {"logs": [], "count": 0}


# Node: tests/job.test.ts › Job › .log › should preserve up to keepLogs latest entries
async def test_keep_logs_keeps_the_latest_entries(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"}, {"keepLogs": 2})
    assert await job.log("some log text 1") == 1
    assert await queue.getJobLogs(job.id) == {"logs": ["some log text 1"], "count": 1}
    assert await job.log("some log text 2") == 2
    assert await queue.getJobLogs(job.id) == {
        "logs": ["some log text 1", "some log text 2"],
        "count": 2,
    }
    assert await job.log("some log text 3") == 2
    assert await queue.getJobLogs(job.id) == {
        "logs": ["some log text 2", "some log text 3"],
        "count": 2,
    }


# --- manual moves: moveToCompleted / moveToFailed ---------------------------------------------


# Node: tests/job.test.ts › Job › .moveToCompleted › marks the job as completed and returns new
#   job
async def test_move_to_completed_marks_it_and_fetches_the_next_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"})
    job2 = await queue.add("test", {"baz": "qux"})
    job1 = await worker.getNextJob(TOKEN)
    assert await job1.isCompleted() is False
    assert await job1.getState() == "active"
    next_job = await job1.moveToCompleted("succeeded", TOKEN, True)
    assert await job1.isCompleted() is True
    assert job1.returnvalue == "succeeded"
    assert next_job[1] == job2.id
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › marks the job as failed
async def test_move_to_failed_marks_it_with_a_stacktrace(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"})
    job = await worker.getNextJob(TOKEN)
    assert await job.isFailed() is False
    await fail_job(job, "test error")
    assert await job.isFailed() is True
    assert job.stacktrace is not None
    assert len(job.stacktrace) == 1
    assert "test_job.py" in job.stacktrace[0]
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when using a custom error › marks the job as
#   failed
async def test_move_to_failed_with_a_custom_error(bq: Bull) -> None:
    class CustomError(Exception):
        pass

    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"})
    job = await worker.getNextJob(TOKEN)
    assert await job.isFailed() is False
    await fail_job(job, "test error", kind=CustomError)
    assert await job.isFailed() is True
    assert len(job.stacktrace) == 1
    assert "test_job.py" in job.stacktrace[0]
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › moves the job to wait for retry if attempts
#   are given
async def test_move_to_failed_with_attempts_left_retries_it(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    job = await worker.getNextJob(TOKEN)
    assert await job.isFailed() is False
    retried = where(events, "waiting", lambda args, _id: args.get("prev") == "active")
    await fail_job(job, "test error")
    [args, _id] = await wait_for(retried)
    assert args["jobId"] == job.id
    assert await job.isFailed() is False
    assert len(job.stacktrace) == 1
    assert await job.isWaiting() is True
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when job is not in active state › throws an
#   error
async def test_move_to_failed_of_a_waiting_job_fails(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"}, {"attempts": 3})
    assert await job.isFailed() is False
    with raises(f"Job {job.id} is not in the active state. retryJob"):
        await fail_job(job, "test error")


# Node: tests/job.test.ts › Job › .moveToFailed › when attempts made equal to attempts given ›
#   marks the job as failed
async def test_move_to_failed_on_the_last_attempt_fails_it(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    job = await worker.getNextJob(TOKEN)
    assert await job.isFailed() is False
    await fail_job(job, "test error")
    assert await job.getState() == "failed"
    assert await job.isFailed() is True
    assert len(job.stacktrace) == 1
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when attempts are given and backoff is non
#   zero › moves the job to delayed for retry
async def test_move_to_failed_with_backoff_delays_the_retry(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": 300})
    job = await worker.getNextJob(TOKEN)
    assert await job.isFailed() is False
    await fail_job(job, "test error", token=TOKEN)
    state = await job.getState()
    assert await job.isFailed() is False
    assert len(job.stacktrace) == 1
    assert await job.isDelayed() is True
    assert state == "delayed"
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when attempts are given and backoff is non
#   zero › when fetchNext is true and › when another job is waiting › returns the next job data
#   after moving the failed job to delayed
async def test_move_to_failed_to_delayed_fetches_the_next_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": 300})
    next_job = await queue.add("test2", {"baz": "qux"})
    job = await worker.getNextJob(TOKEN)
    result = await fail_job(job, "test error", token=TOKEN, fetch_next=True)
    assert await job.isDelayed() is True
    assert isinstance(result, list)
    assert result[1] == next_job.id
    assert result[0]["name"] == "test2"
    assert result[2] == 0
    assert result[3] == 0
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when attempts are given and backoff is non
#   zero › when fetchNext is true and › when no job is waiting › does not return any job data
#   after moving the failed job to delayed
async def test_move_to_failed_to_delayed_with_nothing_waiting_returns_no_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": 300})
    job = await worker.getNextJob(TOKEN)
    result = await fail_job(job, "test error", token=TOKEN, fetch_next=True)
    assert await job.isDelayed() is True
    assert not result  # Node: []; the package: None
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when attempts are given and backoff is non
#   zero › when fetchNext is false and another job is waiting › does not return next job data
async def test_move_to_failed_without_fetch_next_returns_no_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"attempts": 3, "backoff": 300})
    await queue.add("test2", {"baz": "qux"})
    job = await worker.getNextJob(TOKEN)
    result = await fail_job(job, "test error", token=TOKEN, fetch_next=False)
    assert await job.isDelayed() is True
    assert not result  # Node: []; the package: None
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › applies stacktrace limit on failure
async def test_stack_trace_limit_keeps_the_latest_traces(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"stackTraceLimit": 1, "attempts": 2})
    job = await worker.getNextJob(TOKEN)
    assert await job.isFailed() is False
    await fail_job(job, "failed once")
    assert await job.isFailed() is False
    assert len(job.stacktrace) == 1
    first_trace = job.stacktrace[0]
    again = await worker.getNextJob(TOKEN)
    await fail_job(again, "failed twice")
    assert await again.isFailed() is True
    assert again.name == job.name
    assert len(again.stacktrace) == 1
    assert again.stacktrace[0] != first_trace
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › when stackTraceLimit is provided as 0 › keep
#   stacktrace empty
async def test_stack_trace_limit_zero_keeps_no_trace(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"}, {"stackTraceLimit": 0, "attempts": 2})
    job = await worker.getNextJob(TOKEN)
    await fail_job(job, "failed once")
    assert await job.isFailed() is False
    assert len(job.stacktrace) == 0
    again = await worker.getNextJob(TOKEN)
    await fail_job(again, "failed twice")
    assert await again.isFailed() is True
    assert again.name == job.name
    assert len(again.stacktrace) == 0
    await worker.close()


# Node: tests/job.test.ts › Job › .moveToFailed › saves error stacktrace
async def test_failed_job_keeps_its_stacktrace(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    await queue.add("test", {"foo": "bar"})
    job = await worker.getNextJob(TOKEN)
    await fail_job(job, "test error", fetch_next=False)
    same = await queue.getJob(job.id)
    assert same is not None
    assert len(same.stacktrace) > 0
    await worker.close()


# --- .changePriority ------------------------------------------------------------------------


async def completion_order(bq: Bull, name: str, count: int, processor: Any = short_work) -> Any:
    """A Worker on ``name`` and a future for the names of its first ``count`` completed jobs."""
    worker = bq.worker(name, processor)
    completed = future_of(worker, "completed", count)

    async def names() -> list[str]:
        return [job.name for job, _result in await completed]

    return worker, asyncio.ensure_future(names())


# Node: tests/job.test.ts › Job › .changePriority › when job is in wait state › when lifo option
#   is provided as true › moves job to the head of wait list
async def test_change_priority_to_zero_with_lifo_puts_it_first(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.pause()
    await queue.add("test1", {"foo": "bar"})
    job = await queue.add("test2", {"foo": "bar"}, {"priority": 16})
    assert job.priority == 16
    await job.changePriority({"priority": 0, "lifo": True})
    assert job.priority == 0
    worker, order = await completion_order(bq, name, 2)
    await queue.resume()
    assert await wait_for(order) == ["test2", "test1"]
    await worker.close()


# Node: tests/job.test.ts › Job › .changePriority › when job is in wait state › when lifo option
#   is provided as false › moves job to the tail of wait list and has more priority
async def test_change_priority_to_zero_without_lifo_puts_it_last(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.pause()
    job = await queue.add("test1", {"foo": "bar"}, {"priority": 8})
    await queue.add("test2", {"foo": "bar"})
    await job.changePriority({"priority": 0, "lifo": False})
    worker, order = await completion_order(bq, name, 2)
    await queue.resume()
    assert await wait_for(order) == ["test2", "test1"]
    await worker.close()


# Node: tests/job.test.ts › Job › .changePriority › when job is in prioritized state › can change
#   priority of a job
async def test_change_priority_of_a_prioritized_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.add("test1", {"foo": "bar"}, {"priority": 8})
    job = await queue.add("test2", {"foo": "bar"}, {"priority": 16})
    await job.changePriority({"priority": 1})
    priorities: dict[str, int] = {}

    async def process(job: Any, token: str) -> None:
        priorities[job.name] = job.priority
        await asyncio.sleep(0.02)

    worker, order = await completion_order(bq, name, 2, process)
    assert await wait_for(order) == ["test2", "test1"]
    assert priorities == {"test1": 8, "test2": 1}
    await worker.close()


# Node: tests/job.test.ts › Job › .changePriority › when job is in prioritized state › when lifo
#   option is provided as true › moves job to the head of prioritized jobs with same priority
async def test_change_priority_with_lifo_goes_first_among_equals(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.pause()
    await queue.add("test1", {"foo": "bar"}, {"priority": 16})
    job = await queue.add("test2", {"foo": "bar"}, {"priority": 16})
    await job.changePriority({"priority": 16, "lifo": True})
    worker, order = await completion_order(bq, name, 2)
    await queue.resume()
    assert await wait_for(order) == ["test2", "test1"]
    await worker.close()


# Node: tests/job.test.ts › Job › .changePriority › when queue is paused › respects new priority
async def test_change_priority_while_paused_is_respected(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.pause()
    await queue.add("test1", {"foo": "bar"}, {"priority": 8})
    job = await queue.add("test2", {"foo": "bar"}, {"priority": 16})
    await job.changePriority({"priority": 1})
    worker, order = await completion_order(bq, name, 2)
    await queue.resume()
    assert await wait_for(order) == ["test2", "test1"]
    await worker.close()


# Node: tests/job.test.ts › Job › .changePriority › when job is not in wait or prioritized state
#   › does not add a record in priority zset
async def test_change_priority_of_a_delayed_job_keeps_it_delayed(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test1", {"foo": "bar"}, {"delay": 500})
    await job.changePriority({"priority": 10})
    assert await queue.getJobCountByTypes("prioritized") == 0
    assert await job.isDelayed() is True
    updated = await queue.getJob(job.id)
    assert updated.priority == 10


# Node: tests/job.test.ts › Job › .changePriority › when job does not exist › throws an error
async def test_change_priority_of_a_removed_job_fails(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    await job.remove()
    with raises(f"Missing key for job {job.id}. changePriority"):
        await job.changePriority({"priority": 2})


# --- .promote -------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › .promote › can promote a delayed job to be executed immediately
async def test_promote_makes_a_delayed_job_wait(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"}, {"delay": 1500})
    assert await job.isDelayed() is True
    await job.promote()
    assert job.delay == 0
    assert await job.isDelayed() is False
    assert await job.isWaiting() is True


# Node: tests/job.test.ts › Job › .promote › should process a promoted job according to its
#   priority
async def test_promoted_job_is_processed_by_its_priority(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processed: list[str] = []

    async def process(job: Any, token: str) -> None:
        processed.append(job.id)
        await asyncio.sleep(0.2)

    worker = bq.worker(name, process, autorun=False)
    completed = future_of(worker, "completed", 4)
    await queue.add("test", {}, {"jobId": "a", "priority": 1})
    await queue.add("test", {}, {"jobId": "b", "priority": 2})
    await queue.add("test", {}, {"jobId": "d", "priority": 4})
    job = await queue.add("test", {}, {"jobId": "c", "delay": 2000, "priority": 3})
    await job.promote()
    running = asyncio.ensure_future(worker.run())
    await wait_for(completed)
    assert processed == ["a", "b", "c", "d"]
    await worker.close()
    await wait_for(running)


# Node: tests/job.test.ts › Job › .promote › should not promote a job that is not delayed
async def test_promote_of_a_waiting_job_fails(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    assert await job.isDelayed() is False
    with raises(f"Job {job.id} is not in the delayed state. promote"):
        await job.promote()


# Node: tests/job.test.ts › Job › .promote › when queue is paused › should promote delayed job
#   to the right queue
async def test_promote_while_paused_counts_it_as_waiting(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("normal", {"foo": "bar"})
    delayed = await queue.add("delayed", {"foo": "bar"}, {"delay": 100})
    await queue.pause()
    await delayed.promote()
    assert await queue.getWaitingCount() == 2
    await queue.resume()
    assert await queue.getWaitingCount() == 2
    assert await delayed.getState() == "waiting"


# Node: tests/job.test.ts › Job › .promote › when queue is empty › should promote delayed job to
#   the right queue
async def test_promote_into_an_empty_paused_queue(bq: Bull) -> None:
    queue = bq.queue()
    delayed = await queue.add("delayed", {"foo": "bar"}, {"delay": 100})
    await queue.pause()
    await delayed.promote()
    assert await queue.getWaitingCount() == 1
    await queue.resume()
    assert await queue.getWaitingCount() == 1
    assert await delayed.getState() == "waiting"


# --- .getState ------------------------------------------------------------------------------


# Node: tests/job.test.ts › Job › .getState › should get job actual state
async def test_get_state_follows_the_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    job = await queue.add("job1", {"foo": "bar"}, {"delay": 1000})
    assert await job.getState() == "delayed"
    await queue.pause()
    await job.promote()
    await queue.resume()
    assert await job.getState() == "waiting"
    current = await worker.getNextJob(TOKEN)
    assert current is not None
    await fail_job(current, "test error", token=TOKEN)
    assert await current.getState() == "failed"
    await queue.add("job2", {"foo": "foo"})
    job2 = await worker.getNextJob(TOKEN)
    await job2.moveToCompleted("succeeded", TOKEN, True)
    assert await job2.getState() == "completed"
    await worker.close()


# --- tests/job.redis.test.ts --------------------------------------------------------------


# Node: tests/job.redis.test.ts › Job (redis-only) › .moveToCompleted › should not complete a
#   parent job before its children
async def test_parent_with_pending_children_cannot_complete(bq: Bull) -> None:
    name = bq.name()
    parent_name = bq.name("parent")
    queue = bq.queue(name)
    parent_queue = bq.queue(parent_name)
    parent_worker = bq.worker(parent_name, None)
    parent = await parent_queue.add("testParent", {"foo": "bar"})
    parent_ref = {"id": parent.id, "queue": f"{bq.opts['prefix']}:{parent_name}"}
    await queue.add("testJob1", {"idx": 0, "bar": "something"}, {"parent": parent_ref})
    await queue.add("testJob2", {"idx": 1, "baz": "something"}, {"parent": parent_ref})
    job = await parent_worker.getNextJob(TOKEN)
    assert job.id == parent.id
    assert await job.isActive() is True
    with raises(f"Job {job.id} has pending dependencies. moveToFinished"):
        await job.moveToCompleted("return value", TOKEN)
    assert await job.isCompleted() is False
    assert await job.getState() == "active"
    await parent_worker.close()


# Node: tests/job.redis.test.ts › Job (redis-only) › .moveToFailed › when job is removed ›
#   should not save stacktrace
async def test_move_to_failed_of_a_removed_job_fails_and_leaves_nothing(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None, lockDuration=100)
    await queue.add("test", {"foo": "bar"}, {"attempts": 1})
    job = await worker.getNextJob(TOKEN)

    async def removed() -> bool:
        try:
            await job.remove()
        except Exception:  # still locked: the lock lasts lockDuration
            return False
        return True

    await eventually(removed, timeout=10)
    with raises(f"Missing key for job {job.id}. moveToFinished"):
        await fail_job(job, "test error", fetch_next=False)
    assert await queue.getJob(job.id) is None
    await worker.close()


FACADE_PENDING: dict[str, str] = {}
