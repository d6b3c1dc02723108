"""Queue getters (getJob, getJobs and its ranges, counts), after BullMQ's tests/getters.test.ts,
as differential cases on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.conftest import Bull, eventually, future_of, wait_for

# What Node's ``Queue.count()`` sums (the Python package has no ``count``).
UNPROCESSED = ("waiting", "delayed", "prioritized", "waiting-children")


async def nothing(job: Any, token: str) -> None:
    return None


async def forced_error(job: Any, token: str) -> None:
    raise Exception("Forced error")


async def add_each(queue: Any, datas: list[dict[str, Any]]) -> list[Any]:
    return [await queue.add("test", data) for data in datas]


# Node: tests/getters.test.ts › Jobs getters › .getJobState › gets current job state
async def test_get_job_state_of_an_added_job_is_waiting(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.add("test", {"foo": "bar"})
    assert await queue.getJobState(job.id) == "waiting"


# Node: tests/getters.test.ts › Jobs getters › should get waiting jobs
async def test_get_waiting_lists_jobs_in_insertion_order(bq: Bull) -> None:
    queue = bq.queue()
    await add_each(queue, [{"foo": "bar"}, {"baz": "qux"}])
    jobs = await queue.getWaiting()
    assert isinstance(jobs, list)
    assert len(jobs) == 2
    assert jobs[0].data["foo"] == "bar"
    assert jobs[1].data["baz"] == "qux"


# Node: tests/getters.test.ts › Jobs getters › should get all waiting jobs when no range is provided
async def test_get_waiting_without_range_is_the_full_range(bq: Bull) -> None:
    queue = bq.queue()
    datas = [{"foo": "bar"}, {"baz": "qux"}, {"bar": "qux"}, {"baz": "xuq"}]
    await add_each(queue, datas)
    default_range = await queue.getWaiting()
    full_range = await queue.getWaiting(0, -1)
    assert [job.data for job in full_range] == datas
    assert [job.data for job in default_range] == datas


# Node: tests/getters.test.ts › Jobs getters ›
#   should return an empty array for an ascending bounded range beyond the list length
async def test_get_jobs_ascending_range_past_the_end_is_empty(bq: Bull) -> None:
    queue = bq.queue()
    await add_each(queue, [{"foo": i} for i in range(1, 4)])
    jobs = await queue.getJobs(["waiting"], 10, 12, True)
    assert jobs == []


# Node: tests/getters.test.ts › Jobs getters › should get paused jobs
async def test_get_waiting_lists_jobs_of_a_paused_queue(bq: Bull) -> None:
    queue = bq.queue()
    await queue.pause()
    await add_each(queue, [{"foo": "bar"}, {"baz": "qux"}])
    jobs = await queue.getWaiting()
    assert len(jobs) == 2
    assert jobs[0].data["foo"] == "bar"
    assert jobs[1].data["baz"] == "qux"


# Node: tests/getters.test.ts › Jobs getters › should get active jobs
async def test_get_active_lists_the_job_being_processed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    seen: list[list[Any]] = []

    async def process(job: Any, token: str) -> None:
        seen.append(await queue.getActive())

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed")
    await queue.add("test", {"foo": "bar"})
    await wait_for(completed)
    [active] = seen
    assert isinstance(active, list)
    assert len(active) == 1
    assert active[0].data["foo"] == "bar"
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › should get a specific job
async def test_get_job_returns_the_added_job(bq: Bull) -> None:
    queue = bq.queue()
    data = {"foo": "sup!"}
    job = await queue.add("test", data)
    fetched = await queue.getJob(job.id)
    assert fetched.data == data
    assert fetched.id == job.id


# Node: tests/getters.test.ts › Jobs getters › should get undefined for nonexistent specific job
async def test_get_job_of_an_unknown_id_is_none(bq: Bull) -> None:
    queue = bq.queue()
    assert await queue.getJob("test") is None


# Node: tests/getters.test.ts › Jobs getters › should get completed jobs
async def test_get_completed_lists_completed_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, nothing)
    completed = future_of(worker, "completed", 2)
    await add_each(queue, [{"foo": "bar"}, {"baz": "qux"}])
    await wait_for(completed)
    jobs = await queue.getCompleted()
    assert isinstance(jobs, list)
    assert len(jobs) == 2
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › should get failed jobs
async def test_get_failed_lists_failed_jobs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, forced_error)
    failed = future_of(worker, "failed", 2)
    await add_each(queue, [{"foo": "bar"}, {"baz": "qux"}])
    await wait_for(failed)
    jobs = await queue.getFailed()
    assert isinstance(jobs, list)
    assert len(jobs) == 2
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › .count › when there are prioritized jobs ›
#   retries count considering prioritized jobs
async def test_count_of_unprocessed_jobs_includes_prioritized(bq: Bull) -> None:
    queue = bq.queue()
    for index in range(8):
        await queue.add("test", {"idx": index}, {"priority": index + 1})
    await queue.add("test", {})
    assert await queue.getJobCountByTypes(*UNPROCESSED) == 9


# Node: tests/getters.test.ts › Jobs getters › .getPrioritized › retries prioritized job instances
async def test_get_prioritized_lists_prioritized_jobs(bq: Bull) -> None:
    queue = bq.queue()
    for index in range(8):
        await queue.add("test", {"idx": index}, {"priority": index + 1})
    jobs = await queue.getPrioritized()
    assert len(jobs) == 8


# Node: tests/getters.test.ts › Jobs getters › .getPrioritizedCount › retries prioritized count
# (the Python package has no getPrioritizedCount: its getXCount are getJobCountByTypes("x"))
async def test_prioritized_count(bq: Bull) -> None:
    queue = bq.queue()
    for index in range(8):
        await queue.add("test", {"idx": index}, {"priority": index + 1})
    assert await queue.getJobCountByTypes("prioritized") == 8


# Node: tests/getters.test.ts › Jobs getters › should get all failed jobs when no range is provided
async def test_get_failed_without_range_is_the_full_range(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, forced_error)
    failed = future_of(worker, "failed", 4)
    await add_each(queue, [{"foo": "bar"}, {"baz": "qux"}, {"bar": "qux"}, {"baz": "xuq"}])
    await wait_for(failed)
    default_range = await queue.getFailed()
    full_range = await queue.getFailed(0, -1)
    assert len(full_range) == 4
    assert len(default_range) == len(full_range)
    await worker.close()


async def three_finished(bq: Bull, process: Any, event: str) -> tuple[Any, Any]:
    """A queue whose jobs {foo: 1}, {foo: 2}, {foo: 3} went, in that order, to ``event``."""
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, process)
    finished = future_of(worker, event, 3)
    await add_each(queue, [{"foo": 1}, {"foo": 2}, {"foo": 3}])
    await wait_for(finished)
    return queue, worker


# Node: tests/getters.test.ts › Jobs getters ›
#   should return all completed jobs when not setting start/end
async def test_get_jobs_completed_lists_them_with_processed_and_finished_times(bq: Bull) -> None:
    queue, worker = await three_finished(bq, nothing, "completed")
    jobs = await queue.getJobs(["completed"])
    assert len(jobs) == 3
    for job in jobs:
        assert job.finishedOn
        assert job.processedOn
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters ›
#   should return all failed jobs when not setting start/end
async def test_get_jobs_failed_lists_them_with_processed_and_finished_times(bq: Bull) -> None:
    queue, worker = await three_finished(bq, forced_error, "failed")
    jobs = await queue.getJobs(["failed"])
    assert len(jobs) == 3
    for job in jobs:
        assert job.finishedOn
        assert job.processedOn
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › should return subset of jobs when setting positive range
async def test_get_jobs_with_a_positive_range(bq: Bull) -> None:
    queue, worker = await three_finished(bq, nothing, "completed")
    jobs = await queue.getJobs(["completed"], 1, 2, True)
    assert [job.data["foo"] for job in jobs] == [2, 3]
    for job in jobs:
        assert job.finishedOn
        assert job.processedOn
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › should return subset of jobs when setting a negative range
async def test_get_jobs_with_a_negative_range(bq: Bull) -> None:
    queue, worker = await three_finished(bq, nothing, "completed")
    jobs = await queue.getJobs(["completed"], -3, -1, True)
    assert [job.data["foo"] for job in jobs] == [1, 2, 3]
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › should return subset of jobs when range overflows
async def test_get_jobs_with_an_overflowing_range(bq: Bull) -> None:
    queue, worker = await three_finished(bq, nothing, "completed")
    jobs = await queue.getJobs(["completed"], -300, 99999, True)
    assert [job.data["foo"] for job in jobs] == [1, 2, 3]
    await worker.close()


async def two_completed_one_waiting(bq: Bull) -> tuple[Any, Any]:
    """Two jobs completed; the second adds a third job and pauses the queue while it runs."""
    name = bq.name()
    queue = bq.queue(name)
    processed = 0

    async def process(job: Any, token: str) -> None:
        nonlocal processed
        processed += 1
        if processed == 2:
            await queue.add("test", {"foo": 3})
            await queue.pause()

    worker = bq.worker(name, process)
    completed = future_of(worker, "completed", 2)
    await add_each(queue, [{"foo": 1}, {"foo": 2}])
    await wait_for(completed)
    return queue, worker


# Node: tests/getters.test.ts › Jobs getters › should return jobs for multiple types
async def test_get_jobs_of_several_types(bq: Bull) -> None:
    queue, worker = await two_completed_one_waiting(bq)
    jobs = await queue.getJobs(["completed", "waiting"])
    assert len(jobs) == 3
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › when marker is present ›
#   when there are delayed jobs and waiting jobs › filters jobIds different than marker
# (the Node case also reads the Redis wait list; that part is left out)
async def test_get_waiting_jobs_with_a_delayed_job_present(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("test1", {"foo": 3}, {"delay": 2000})
    await queue.add("test2", {"foo": 2})
    jobs = await queue.getJobs(["waiting"])
    assert len(jobs) == 1
    assert jobs[0].name == "test2"


# Node: tests/getters.test.ts › Jobs getters › when marker is present ›
#   when there is only one delayed job and get waiting jobs › filters marker and returns an empty array
async def test_get_waiting_jobs_with_only_a_delayed_job_is_empty(bq: Bull) -> None:
    queue = bq.queue()
    await queue.add("test1", {"foo": 3}, {"delay": 2000})
    assert await queue.getJobs(["waiting"]) == []


# Node: tests/getters.test.ts › Jobs getters › should return deduplicated jobs for duplicates types
async def test_get_jobs_with_repeated_types_lists_each_job_once(bq: Bull) -> None:
    queue = bq.queue()
    await add_each(queue, [{"foo": 1}, {"foo": 2}])
    expected = await queue.getJobs(["wait"])
    jobs = await queue.getJobs(["wait", "waiting", "waiting"])
    assert len(jobs) == 2
    assert [job.id for job in jobs] == [job.id for job in expected]


# Node: tests/getters.test.ts › Jobs getters › should return jobs for all types
# (Python spells "no types" as an empty list)
async def test_get_jobs_of_all_types(bq: Bull) -> None:
    queue, worker = await two_completed_one_waiting(bq)
    jobs = await queue.getJobs([])
    assert len(jobs) == 3
    await worker.close()


# Node: tests/getters.test.ts › Jobs getters › should return 0 if queue is empty
async def test_job_count_of_an_empty_queue_is_zero(bq: Bull) -> None:
    queue = bq.queue()
    total = await queue.getJobCountByTypes()
    assert isinstance(total, int)
    assert total == 0


# Node: tests/getters.test.ts › Jobs getters › .getJobCounts ›
#   returns job counts for active, completed, delayed, failed, prioritized, waiting and waiting-children
async def test_get_job_counts_covers_every_state(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    calls = 0
    release = asyncio.Event()

    async def process(job: Any, token: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Exception("failed")
        if calls == 3:
            await release.wait()  # stays active while the counts are read

    worker = bq.worker(name, process)
    await bq.flow_producer().add(
        {
            "name": "parent-job",
            "queueName": name,
            "data": {},
            "children": [
                {"name": f"child-{i + 1}", "data": {"idx": i}, "queueName": name} for i in range(4)
            ],
        }
    )
    await queue.add("test", {"idx": 2}, {"delay": 5000})
    await queue.add("test", {"idx": 3}, {"priority": 5})
    expected = {
        "active": 1,
        "completed": 1,
        "delayed": 1,
        "failed": 1,
        "prioritized": 1,
        "waiting": 1,
        "waiting-children": 1,
    }

    seen: list[dict[str, int]] = []

    async def counts_reached() -> bool:
        seen.append(await queue.getJobCounts())
        return seen[-1] == expected

    # The Python worker fetches its next job after emitting 'completed' (Node's moves the next
    # one to active in the same step), so the counts are awaited rather than read at once.
    try:
        await eventually(counts_reached, timeout=5)
    except AssertionError:
        assert seen[-1] == expected  # shows the last counts read
    finally:
        release.set()
    await worker.close()


def by_priority_bulk() -> list[dict[str, Any]]:
    return [{"name": "test", "data": {}, "opts": {"priority": i % 4}} for i in range(42)]


# Node: tests/getters.test.ts › Jobs getters › .getCountsPerPriority › returns job counts per priority
async def test_get_counts_per_priority(bq: Bull) -> None:
    queue = bq.queue()
    await queue.addBulk(by_priority_bulk())
    counts = await queue.getCountsPerPriority([0, 1, 2, 3])
    assert counts == {"0": 11, "1": 11, "2": 10, "3": 10}


# Node: tests/getters.test.ts › Jobs getters › .getCountsPerPriority › when queue is paused ›
#   returns job counts per priority
async def test_get_counts_per_priority_of_a_paused_queue(bq: Bull) -> None:
    queue = bq.queue()
    await queue.pause()
    await queue.addBulk(by_priority_bulk())
    counts = await queue.getCountsPerPriority([0, 1, 2, 3])
    assert counts == {"0": 11, "1": 11, "2": 10, "3": 10}


FACADE_PENDING: dict[str, str] = {
    "test_get_job_counts_covers_every_state": (
        "kept divergence (PORTING.md 'Claiming ahead'): a Worker whose processors are short "
        "claims jobs ahead of its free slots, and a claimed job is active from its claim, so "
        "getJobCounts gives active 3 (the running child-3 plus the claimed-ahead child-4 and "
        "prioritized job), waiting 0, prioritized 0; BullMQ takes one job per free slot "
        "(active 1, waiting 1, prioritized 1). Parity needs either no claiming ahead in the "
        "facade (a throughput cost on short jobs, to be measured with bench/) or an engine "
        "'started' mark written when a claimed-ahead job starts"
    ),
}
