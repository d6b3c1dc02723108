"""Job schedulers (``upsertJobScheduler`` and the jobs they produce), after BullMQ's
tests/job_scheduler.test.ts, job_scheduler.redis.test.ts and job_scheduler_stress.test.ts.

The Node cases freeze and advance the clock with sinon; here time is real, so a case either
states the same fact in a way that does not depend on the instant it runs (the scheduled time
of an iteration is read from its job id, ``repeat:<scheduler>:<millis>``), or uses short
intervals and waits for the iterations. Cases that need the clock moved by hours or days are
not translated (see node_cases/flow.tsv).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from typing import Any

import pytest

from tests.conformance.conftest import Bull, eventually, future_of, wait_for
from tests.conformance.test_flow import event_for, first, make_worker, noop, settle, start, stop

ONE_SECOND = 1000
ONE_MINUTE = 60 * ONE_SECOND
ONE_DAY = 24 * 60 * ONE_MINUTE


def now_ms() -> int:
    return int(time.time() * 1000)


def slot_of(job: Any) -> int:
    """The time an iteration was scheduled for: the millis at the end of its id."""
    return int(str(job.id).rsplit(":", 1)[1])


async def counts(queue: Any, *types: str) -> dict[str, int]:
    return await queue.getJobCounts(*types)


async def count(queue: Any) -> int:
    """Node's ``queue.count()``: the jobs still to run."""
    return await queue.getJobCountByTypes("waiting", "delayed", "prioritized", "waiting-children")


def collecting(worker: Any, n: int) -> asyncio.Future[list[tuple[Any, ...]]]:
    return future_of(worker, "completed", n)


# Node: tests/job_scheduler.test.ts › it should stop repeating after endDate
async def test_a_scheduler_stops_at_its_end_date(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, noop)
    completed: list[Any] = []
    worker.on("completed", lambda job, *rest: completed.append(job))
    end = now_ms() + 1000
    job = await queue.upsertJobScheduler("test-scheduler", {"endDate": end, "every": 200})
    assert job is not None

    async def ended() -> bool:
        return now_ms() > end + 300 and await queue.getDelayedCount() == 0

    await eventually(ended)
    await stop(worker)
    # Node counts exactly 10 iterations of 100 ms on a frozen clock; on a real one the
    # worker may take some slots late, so only the end is compared.
    assert 1 <= len(completed) <= 6
    assert all(slot_of(job) <= end for job in completed)
    assert await queue.getDelayed() == []


# Node: tests/job_scheduler.test.ts › when jobs have the same cron pattern and different job scheduler id › should create multiple jobs
async def test_schedulers_with_one_pattern_and_different_ids_each_make_a_job(bq: Bull) -> None:
    queue = bq.queue()
    cron = "*/10 * * * * *"
    await settle(
        *(queue.upsertJobScheduler(f"test-scheduler{i}", {"pattern": cron}) for i in (1, 2, 3))
    )
    assert await count(queue) == 3
    assert len(await queue.getDelayed()) == 3
    assert await queue.getJobSchedulersCount() == 3


# Node: tests/job_scheduler.test.ts › when job schedulers have same id and different every pattern › should create only one job scheduler
async def test_concurrent_upserts_of_one_id_make_one_scheduler(bq: Bull) -> None:
    queue = bq.queue()
    await settle(
        *(
            queue.upsertJobScheduler("test-scheduler1", {"every": every})
            for every in (1000, 2000, 3000)
        )
    )
    assert len(await queue.getJobSchedulers()) == 1


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › should create only one job scheduler and one delayed job
async def test_upserts_while_an_iteration_is_active_keep_one_next_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    await queue.upsertJobScheduler("test", {"every": ONE_MINUTE * 5})
    first_job = await worker.getNextJob("test-token")
    assert first_job is not None
    for _ in range(3):
        await queue.upsertJobScheduler("test", {"every": ONE_MINUTE * 5})
    assert len(await queue.getJobSchedulers()) == 1
    await first_job.moveToCompleted(None, "test-token")
    assert await queue.getJobCountByTypes("delayed", "waiting") == 1


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › should create only one job scheduler and one delayed job with different settings
async def test_upserts_with_new_intervals_keep_one_scheduler_and_one_job(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    await queue.upsertJobScheduler("test", {"every": ONE_MINUTE})
    assert await worker.getNextJob("my-token") is not None
    for minutes in (2, 3, 4):
        await queue.upsertJobScheduler("test", {"every": ONE_MINUTE * minutes})
    [scheduler] = await queue.getJobSchedulers()
    assert {k: scheduler[k] for k in ("key", "name", "iterationCount", "every")} == {
        "key": "test",
        "name": "test",
        "iterationCount": 2,
        "every": 240000,
    }
    next_before = scheduler["next"]
    assert await worker.getNextJob("my-token") is not None
    assert await queue.getJobCountByTypes("delayed", "waiting") == 1
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["iterationCount"] == 3
    assert scheduler["every"] == 240000
    assert scheduler["next"] == next_before + 4 * ONE_MINUTE


def every_and_offset(offset_before_now: bool) -> tuple[int, int, int]:
    """(every, offset, expected next slot) for a scheduler upserted now: with an offset that
    puts this interval's slot before now (so the next one is due) or after it."""
    every = ONE_DAY
    now = now_ms()
    into = now % every
    if offset_before_now:
        offset = into // 2
    else:
        offset = into + 10 * ONE_MINUTE
        if offset >= every:  # the last minutes of the day: use an hour instead
            every = 60 * ONE_MINUTE
            into = now % every
            offset = min(into + ONE_MINUTE, every - 1)
    base = now // every * every + offset
    return every, offset, base if base > now else base + every


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › should respect offset when upserting a job scheduler with every
async def test_every_with_an_offset_waits_for_the_next_offset_slot(bq: Bull) -> None:
    queue = bq.queue()
    every, offset, expected = every_and_offset(offset_before_now=True)
    job = await queue.upsertJobScheduler(
        "test-offset", {"every": every, "offset": offset}, "test", {"foo": "bar"}
    )
    assert job is not None
    assert job.opts["delay"] > 0
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["next"] == expected
    assert scheduler["offset"] == offset


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › should respect offset on first upsert when offset slot is in the future
async def test_every_with_an_offset_still_ahead_uses_this_slot(bq: Bull) -> None:
    queue = bq.queue()
    every, offset, expected = every_and_offset(offset_before_now=False)
    await queue.upsertJobScheduler("test-offset-2", {"every": every, "offset": offset}, "test", {})
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["next"] == expected
    assert scheduler["offset"] == offset


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when next delayed job already exists and it is not in waiting or delayed states › updates the scheduler with the new settings
async def test_an_upsert_while_the_iteration_is_active_schedules_the_next(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, None)
    await queue.upsertJobScheduler("test", {"every": ONE_MINUTE})
    active = await worker.getNextJob("my-token")
    assert active is not None
    await queue.upsertJobScheduler("test", {"every": ONE_MINUTE * 2})
    [scheduler] = await queue.getJobSchedulers()
    assert {k: scheduler[k] for k in ("key", "name", "iterationCount", "every")} == {
        "key": "test",
        "name": "test",
        "iterationCount": 2,
        "every": ONE_MINUTE * 2,
    }
    # Node, on a clock frozen at the active iteration's slot, finds that slot taken and
    # schedules the next one 2 minutes on; with a real clock the new interval starts now.
    # Either way one next iteration is pending, beside the active one.
    assert await queue.getJobCountByTypes("delayed", "waiting") == 1
    assert await active.getState() == "active"


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when next delayed job already exists and it is not in waiting or delayed states › when job scheduler is being updated with upsertJobScheduler method › updates scheduler and creates next iteration
async def test_an_upsert_from_the_running_iteration_replaces_the_next_one(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    cron = "*/10 * * * * *"
    seen: list[Any] = []

    async def process(job: Any, token: str) -> None:
        if job.data["foo"] == "bar":
            await queue.upsertJobScheduler("test", {"pattern": cron}, None, {"foo": "baz"})
            seen.append(await queue.getDelayed())

    worker = make_worker(bq, name, process, autorun=False)
    done = future_of(worker, "completed")
    delayed_job = await queue.upsertJobScheduler("test", {"pattern": cron}, None, {"foo": "bar"})
    await delayed_job.promote()
    start(worker)
    await wait_for(done)
    [delayed] = seen[0]
    assert delayed.data == {"foo": "baz"}
    assert 0 < delayed.delay <= 10000
    assert slot_of(delayed) % 10000 == 0
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler == {
        "key": "test",
        "name": "test",
        "next": slot_of(delayed),
        "iterationCount": 2,
        "offset": 0,
        "pattern": cron,
        "template": {"data": {"foo": "baz"}},
    }
    assert await queue.getJobCountByTypes("delayed") == 1


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when next delayed job already exists and it is not in waiting or delayed states › when job scheduler is being updated with upsertJobScheduler method › should reschedule immediately when changing every interval
async def test_changing_every_after_an_iteration_runs_the_next_one_now(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler("test-scheduler", {"every": 10 * ONE_SECOND}, "test-job1")
    [job1] = await queue.getWaiting()
    assert job1.opts["repeat"]["every"] == 10 * ONE_SECOND
    worker = make_worker(bq, name, noop)
    await wait_for(future_of(worker, "completed"))
    assert await queue.getWaiting() == []
    [after_first] = await queue.getDelayed()
    assert after_first.opts["repeat"]["every"] == 10 * ONE_SECOND
    await stop(worker)
    before = now_ms()
    await queue.upsertJobScheduler("test-scheduler", {"every": 2 * ONE_SECOND}, "test-job2")
    [job2] = await queue.getWaiting()
    assert await queue.getDelayed() == []
    assert job2.delay == 0
    assert job2.opts["repeat"]["every"] == 2 * ONE_SECOND
    assert abs(job2.timestamp - before) <= 1000


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when next delayed job already exists and it is not in waiting or delayed states › when job scheduler is being updated with upsertJobScheduler method › when job scheduler is removed and upserted › throws error and does not add job scheduler
async def test_re_creating_a_removed_scheduler_from_its_running_iteration_fails(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    cron = "*/10 * * * * *"
    errors: list[str] = []

    async def process(job: Any, token: str) -> None:
        if job.data["foo"] == "bar":
            await queue.removeJobScheduler("test")
            try:
                await queue.upsertJobScheduler("test", {"pattern": cron}, None, {"foo": "baz"})
            except Exception as err:
                errors.append(str(err))

    worker = make_worker(bq, name, process, autorun=False)
    done = future_of(worker, "completed")
    delayed_job = await queue.upsertJobScheduler("test", {"pattern": cron}, None, {"foo": "bar"})
    await delayed_job.promote()
    start(worker)
    await wait_for(done)
    assert errors == [
        "Cannot create job scheduler iteration - job ID already exists. addJobScheduler"
    ]
    assert await queue.getJobSchedulers() == []
    assert await queue.getJobCountByTypes("delayed") == 0


async def promote_then_upsert(queue: Any) -> None:
    await queue.upsertJobScheduler("test", {"pattern": "10 * * * * *"})
    [delayed] = await queue.getDelayed()
    await delayed.promote()
    assert await queue.getWaitingCount() == 1
    await queue.upsertJobScheduler("test", {"pattern": "2 10 * * * *"})


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when generated job is in waiting state › should upsert scheduler by removing waiting job
async def test_an_upsert_replaces_a_promoted_waiting_iteration(bq: Bull) -> None:
    queue = bq.queue()
    await promote_then_upsert(queue)
    assert await queue.getWaitingCount() == 0
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when generated job is in paused state › should upsert scheduler by removing paused job
async def test_an_upsert_on_a_paused_queue_keeps_the_promoted_iteration(bq: Bull) -> None:
    queue = bq.queue()
    await queue.pause()
    await promote_then_upsert(queue)
    assert await queue.getWaitingCount() == 1
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › when job schedulers are upserted in quick succession › when generated job is in prioritized state › should upsert scheduler by removing prioritized job
async def test_an_upsert_replaces_a_promoted_prioritized_iteration(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("test", {"pattern": "10 * * * * *"}, None, None, {"priority": 1})
    [delayed] = await queue.getDelayed()
    await delayed.promote()
    assert (await counts(queue, "prioritized"))["prioritized"] == 1
    await queue.upsertJobScheduler("test", {"pattern": "2 10 * * * *"})
    assert (await counts(queue, "prioritized"))["prioritized"] == 0
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › when clocks are slightly out of sync › should create only one delayed job
async def test_upserts_from_clocks_a_millisecond_apart_make_one_job(bq: Bull) -> None:
    queue = bq.queue()
    now = now_ms()
    await settle(
        *(
            queue.upsertJobScheduler(
                "test-scheduler1", {"every": 100}, None, None, {"prevMillis": now + i}
            )
            for i in range(3)
        )
    )
    assert len(await queue.getJobSchedulers()) == 1
    assert len(await queue.getWaiting()) == 1


# Node: tests/job_scheduler.test.ts › should create job schedulers with different cron patterns
async def test_schedulers_with_different_patterns_and_timezones(bq: Bull) -> None:
    queue = bq.queue()
    now = now_ms()
    await settle(
        # Node's endDate here is 12 s ahead of a clock frozen at :00; with a real clock the
        # next "second 10" can be a minute away, so the end date is a little further.
        queue.upsertJobScheduler("first", {"pattern": "10 * * * * *", "endDate": now + 70000}),
        queue.upsertJobScheduler("second", {"pattern": "2 10 * * * *", "endDate": now + 6100000}),
        queue.upsertJobScheduler("third", {"pattern": "1 * * 5 * *", "tz": "Africa/Abidjan"}),
        queue.upsertJobScheduler("fourth", {"pattern": "2 * * 4 * *", "tz": "Africa/Accra"}),
        queue.upsertJobScheduler("fifth", {"every": 5000, "tz": "Europa/Copenhaguen"}),
    )
    assert await queue.getJobSchedulersCount() == 5
    assert await queue.getDelayedCount() == 4
    assert await queue.getWaitingCount() == 1
    jobs = await queue.getJobSchedulers(0, -1, True)
    assert sorted(job["key"] for job in jobs) == ["fifth", "first", "fourth", "second", "third"]


async def iterations(bq: Bull, queue_name: str, n: int) -> list[Any]:
    """Run a worker on ``queue_name`` until ``n`` iterations completed; the completed jobs."""
    worker = make_worker(bq, queue_name, noop)
    done = await wait_for(collecting(worker, n), 30)
    await stop(worker)
    return [job for job, *_ in done]


def assert_spaced(jobs: list[Any], every: int) -> None:
    slots = [slot_of(job) for job in jobs]
    assert [b - a for a, b in itertools.pairwise(slots)] == [every] * (len(slots) - 1)
    stamps = [job.timestamp for job in jobs]
    assert stamps == sorted(stamps)


def assert_on_pattern(jobs: list[Any], period: int) -> None:
    """Iterations of a cron pattern fall on its ticks, each later than the one before.

    A tick can be skipped: BullMQ computes the next iteration from the time the current one is
    taken, so on a loaded machine an iteration taken after the next tick passed skips it (real
    BullMQ does so in CI). No tick is run twice.
    """
    slots = [slot_of(job) for job in jobs]
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert all(gap > 0 and gap % period == 0 for gap in gaps), gaps
    assert all(slot % period == 0 for slot in slots), slots
    stamps = [job.timestamp for job in jobs]
    assert stamps == sorted(stamps)


# Node: tests/job_scheduler.test.ts › should repeat every 2 seconds
async def test_a_cron_scheduler_repeats_every_two_seconds(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    cron = "*/2 * * * * *"
    await queue.upsertJobScheduler("test", {"pattern": cron}, None, {"foo": "bar"})
    scheduler = await queue.getJobScheduler("test")
    assert scheduler["next"] % 2000 == 0
    assert scheduler == {
        "iterationCount": 1,
        "key": "test",
        "name": "test",
        "pattern": cron,
        "offset": 0,
        "next": scheduler["next"],
        "template": {"data": {"foo": "bar"}},
    }
    assert_on_pattern(await iterations(bq, name, 3), 2000)


# Node: tests/job_scheduler.test.ts › should repeat every 2 seconds with startDate in future
async def test_a_cron_scheduler_starts_at_its_start_date(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    start_date = now_ms() + 1500
    job = await queue.upsertJobScheduler(
        "test", {"pattern": "*/2 * * * * *", "startDate": start_date}, None, {"foo": "bar"}
    )
    assert job.delay > 1000
    assert slot_of(job) >= start_date
    jobs = await iterations(bq, name, 3)
    assert slot_of(jobs[0]) >= start_date
    assert_on_pattern(jobs, 2000)


# Node: tests/job_scheduler.test.ts › should repeat every 2 seconds with startDate in past
async def test_a_cron_scheduler_with_a_past_start_date_repeats_from_now(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    before = now_ms()
    await queue.upsertJobScheduler(
        "repeat",
        {"pattern": "*/2 * * * * *", "startDate": before - 2 * ONE_MINUTE},
        None,
        {"foo": "bar"},
    )
    jobs = await iterations(bq, name, 3)
    assert before < slot_of(jobs[0]) <= before + 2000
    assert_on_pattern(jobs, 2000)


# Node: tests/job_scheduler_stress.test.ts › when using 'every' option and jobs are moved to active some time after delay › should repeat every 2 seconds and start immediately
async def test_an_every_scheduler_starts_now_and_repeats_on_its_interval(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    delays: list[int] = []

    async def process(job: Any, token: str) -> None:
        delays.append(job.opts["delay"])

    worker = make_worker(bq, name, process, autorun=False)
    done = collecting(worker, 3)
    await queue.upsertJobScheduler("repeat", {"every": 2000}, None, {"foo": "bar"})
    assert await queue.getWaitingCount() == 1
    start(worker)
    jobs = [job for job, *_ in await wait_for(done, 30)]
    await stop(worker)
    assert delays[0] == 0
    assert all(1850 <= d <= 2000 for d in delays[1:])
    assert_spaced(jobs, 2000)
    processed = [job.processedOn for job in jobs]
    assert all(b - a >= 1850 for a, b in itertools.pairwise(processed))
    assert await queue.getWaitingCount() == 0
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › when 'every' and offset are provided on upsert › aligns the first job to the next offset slot after now
async def test_the_first_job_of_every_with_offset_is_due_at_the_offset_slot(bq: Bull) -> None:
    queue = bq.queue()
    every, offset, expected = every_and_offset(offset_before_now=True)
    await queue.upsertJobScheduler("test", {"every": every, "offset": offset}, "test", {})
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["next"] == expected
    [delayed] = await queue.getDelayed()
    assert delayed.timestamp + delayed.delay == expected


# Node: tests/job_scheduler.test.ts › should start immediately even after removing the job scheduler and adding it again
async def test_a_re_added_every_scheduler_starts_immediately_again(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    delays: list[int] = []

    async def process(job: Any, token: str) -> None:
        delays.append(job.opts["delay"])

    worker = make_worker(bq, name, process)
    await queue.upsertJobScheduler("repeat", {"every": 2000}, None, {"foo": "bar"})
    await wait_for(future_of(worker, "completed"))
    await stop(worker)
    await queue.removeJobScheduler("repeat")
    worker = make_worker(bq, name, process)
    done = future_of(worker, "completed")
    await queue.upsertJobScheduler("repeat", {"every": 2000}, None, {"foo": "bar"})
    await wait_for(done)
    assert delays == [0, 0]


# Node: tests/job_scheduler.test.ts › when 2 jobs with the same options are added › creates only one job
async def test_two_identical_concurrent_upserts_make_one_job(bq: Bull) -> None:
    queue = bq.queue()
    repeat = {"pattern": "0 1 * * *"}
    jobs = await settle(
        queue.upsertJobScheduler("test", repeat), queue.upsertJobScheduler("test", repeat)
    )
    configs = await queue.getJobSchedulers(0, -1, True)
    assert await count(queue) == 1
    assert len(configs) == 1
    assert len(jobs) == 2
    assert jobs[0].id == jobs[1].id


# Node: tests/job_scheduler.test.ts › when repeatable job is promoted › keeps one repeatable and one delayed after being processed
async def test_a_promoted_iteration_leaves_the_next_one_delayed(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, noop)
    done = future_of(worker, "completed")
    job = await queue.upsertJobScheduler("test", {"pattern": "0 * 1 * *"})
    assert await queue.getDelayedCount() == 1
    await job.promote()
    await wait_for(done)
    assert await queue.getDelayedCount() == 1
    assert len(await queue.getJobSchedulers(0, -1, True)) == 1
    assert await count(queue) == 1


# Node: tests/job_scheduler.test.ts › should allow removing a named repeatable job
async def test_a_scheduler_removed_from_its_iteration_stops(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    runs: list[str] = []

    async def process(job: Any, token: str) -> None:
        runs.append(job.id)
        if len(runs) == 3:
            await queue.removeJobScheduler("remove")

    worker = make_worker(bq, name, process)
    done = collecting(worker, 3)
    await queue.upsertJobScheduler("remove", {"pattern": "*/1 * * * * *"})
    jobs = [job for job, *_ in await wait_for(done, 30)]
    assert_on_pattern(jobs, 1000)
    assert await queue.getJobSchedulers() == []
    assert await queue.getDelayed() == []
    await stop(worker)
    assert len(runs) == 3


# Node: tests/job_scheduler.test.ts › when repeatable job does not exist › returns false
async def test_removing_a_scheduler_twice_reports_it_absent_the_second_time(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("remove", {"pattern": "*/2 * * * * *"})
    [scheduler] = await queue.getJobSchedulers()
    # Node answers true then false; the Python package 3.4.4 documents 0 (removed) and 1
    # (absent) for removeJobScheduler.
    assert await queue.removeJobScheduler(scheduler["key"]) == 0
    assert await queue.removeJobScheduler(scheduler["key"]) == 1


# Node: tests/job_scheduler.test.ts › when repeatable job fails › should continue repeating
async def test_a_failed_iteration_leaves_the_next_one_scheduled(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    repeat = {"pattern": "0 * 1 * *", "tz": "Asia/Calcutta"}

    async def fail(job: Any, token: str) -> None:
        raise Exception("failed")

    worker = make_worker(bq, name, fail, autorun=False)
    failing = future_of(worker, "failed")
    job = await queue.upsertJobScheduler("test", repeat, "a", {"foo": "bar"}, {"priority": 1})
    assert await queue.getDelayedCount() == 1
    await job.promote()
    assert (await counts(queue, "prioritized"))["prioritized"] == 1
    start(worker)
    await wait_for(failing)
    assert await queue.getFailedCount() == 1
    assert await queue.getDelayedCount() == 1
    assert await count(queue) == 1
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler == {
        "iterationCount": 2,
        "key": "test",
        "name": "a",
        "tz": "Asia/Calcutta",
        "pattern": "0 * 1 * *",
        "offset": 0,
        "next": scheduler["next"],
        "template": {"data": {"foo": "bar"}, "opts": {"priority": 1}},
    }
    [delayed] = await queue.getDelayed()
    assert scheduler["next"] == slot_of(delayed)


# Node: tests/job_scheduler.test.ts › when repeatable job fails › should not create a new delayed job if the failed job is retried with retryJobs
async def test_retrying_failed_iterations_with_retry_jobs_adds_no_iteration(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    runs: list[str] = []

    async def process(job: Any, token: str) -> None:
        runs.append(job.id)
        if len(runs) == 1:
            raise Exception("failed")

    worker = make_worker(bq, name, process, autorun=False)
    failing = future_of(worker, "failed")
    completing = future_of(worker, "completed")
    await queue.upsertJobScheduler("test", {"every": 5000})
    assert await queue.getDelayedCount() == 0
    start(worker)
    await wait_for(failing)
    assert await queue.getFailedCount() == 1
    assert await queue.getDelayedCount() == 1
    await queue.retryJobs({"state": "failed"})
    assert await queue.getFailedCount() == 0
    [(done, _)] = await wait_for(completing)
    assert done.id == runs[0]
    assert await queue.getFailedCount() == 0
    await stop(worker)
    assert await queue.getWaitingCount() + await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › when repeatable job fails › should not create a new delayed job if the failed job is retried with Job.retry()
async def test_retrying_a_failed_iteration_with_job_retry_adds_no_iteration(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    delayed_while_running: list[int] = []

    async def process(job: Any, token: str) -> None:
        delayed_while_running.append(await queue.getDelayedCount())
        if len(delayed_while_running) == 1:
            raise Exception("failed")

    worker = make_worker(bq, name, process, autorun=False)
    failing = future_of(worker, "failed")
    completing = future_of(worker, "completed")
    await queue.upsertJobScheduler("test", {"every": 5000})
    assert await queue.getDelayedCount() == 0
    start(worker)
    await wait_for(failing)
    [failed] = await queue.getFailed()
    failed_job = await queue.getJob(failed.id)
    await failed_job.retry()
    assert await queue.getFailedCount() == 0
    await wait_for(completing)
    await stop(worker)
    assert delayed_while_running == [1, 1]
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › when every option is provided › should keep only one waiting job if adding a new repeatable job with the same id
async def test_re_upserting_every_keeps_one_waiting_job(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("mykey", {"every": 10_000})
    assert len(await queue.getJobSchedulers()) == 1
    assert len(await queue.getWaiting()) == 1
    await queue.upsertJobScheduler("mykey", {"every": 35_160})
    assert len(await queue.getJobSchedulers()) == 1
    assert len(await queue.getWaiting()) == 1


# Node: tests/job_scheduler.test.ts › when pattern option is provided › should keep only one delayed job if adding a new repeatable job with the same id
async def test_re_upserting_a_pattern_replaces_the_delayed_job_and_its_template(bq: Bull) -> None:
    queue = bq.queue()
    repeat = {"pattern": "0 * 1 * *"}
    await queue.upsertJobScheduler("mykey", repeat, "test1", {"foo": "bar"}, {"priority": 1})
    assert len(await queue.getJobSchedulers()) == 1
    assert len(await queue.getDelayed()) == 1
    await queue.upsertJobScheduler("mykey", repeat, "test2", {"foo": "baz"}, {"priority": 2})
    assert len(await queue.getJobSchedulers()) == 1
    [delayed] = await queue.getDelayed()
    assert delayed.name == "test2"
    assert delayed.data == {"foo": "baz"}
    assert delayed.opts["priority"] == 2


# Node: tests/job_scheduler.test.ts › when pattern option is provided › should update delayed job timestamp when upserting with different pattern
async def test_re_upserting_another_pattern_moves_the_delayed_job(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("mykey", {"pattern": "10 * * * * *"}, "test1", {"foo": "bar"})
    [first_delayed] = await queue.getDelayed()
    assert slot_of(first_delayed) % ONE_MINUTE == 10000
    await queue.upsertJobScheduler("mykey", {"pattern": "30 * * * * *"}, "test2", {"foo": "baz"})
    [delayed] = await queue.getDelayed()
    assert delayed.name == "test2"
    assert delayed.data == {"foo": "baz"}
    assert delayed.delay != first_delayed.delay
    assert slot_of(delayed) % ONE_MINUTE == 30000
    assert delayed.timestamp + delayed.delay == slot_of(delayed)
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["pattern"] == "30 * * * * *"


# Node: tests/job_scheduler.test.ts › should allow adding a repeatable job after removing it
async def test_a_removed_scheduler_can_be_added_again(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    make_worker(bq, name, noop)
    repeat = {"pattern": "*/5 * * * *"}
    await queue.upsertJobScheduler("myTestJob", repeat, None, {"data": "2"})
    [delayed] = await queue.getDelayed()
    removed = first(events, "removed", event_for(delayed.id))
    await queue.removeJobScheduler("myTestJob")
    (args, _) = await wait_for(removed)
    assert args["prev"] == "delayed"
    assert await queue.getDelayed() == []
    await queue.upsertJobScheduler("myTestJob", repeat, None, {"data": "2"})
    assert len(await queue.getDelayed()) == 1


# Node: tests/job_scheduler.test.ts › should not remove delayed jobs if they belong to a repeatable job when using drain
async def test_drain_keeps_the_iteration_of_a_scheduler(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("myTestJob", {"every": 5000})
    await queue.add("test", {"foo": "bar"}, {"delay": 1000})
    assert len(await queue.getDelayed()) == 1
    assert await queue.getWaitingCount() == 1
    await queue.drain(True)
    assert await queue.getDelayed() == []
    [waiting] = await queue.getWaiting()
    assert waiting.name == "myTestJob"


# Node: tests/job_scheduler.test.ts › should not remove delayed jobs if they belong to a repeatable job when using clean
async def test_clean_keeps_the_iteration_of_a_scheduler(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler("myTestJob", {"every": 5000})
    await queue.add("test", {"foo": "bar"}, {"delay": 1000})
    assert len(await queue.getDelayed()) == 1
    assert len(await queue.getWaiting()) == 1
    await queue.clean(0, 100, "wait")
    [waiting] = await queue.getWaiting()
    assert waiting.name == "myTestJob"


# Node: tests/job_scheduler.test.ts › should keep one delayed job if updating a repeatable job's every option
async def test_updating_every_back_and_forth_keeps_one_job(bq: Bull) -> None:
    queue = bq.queue()
    for every in (5000, 4000, 5000):
        await queue.upsertJobScheduler("myTestScheduler", {"every": every})
    assert len(await queue.getWaiting()) == 1


# Node: tests/job_scheduler.test.ts › when deleting and upserting a job scheduler › should not throw error while processing jobs
async def test_removing_and_re_adding_a_scheduler_from_its_iterations(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    template = ("bruh", {"something": "else"})

    async def process(job: Any, token: str) -> None:
        await queue.removeJobScheduler("foo")
        await queue.upsertJobScheduler("foo", {"every": 500}, *template)

    worker = make_worker(bq, name, process, autorun=False, concurrency=2, lockDuration=60000)
    errors: list[Any] = []
    worker.on("error", lambda err, *rest: errors.append(err))
    upserts: list[asyncio.Future[Any]] = []
    events.on(
        "completed",
        lambda *args: upserts.append(
            asyncio.ensure_future(queue.upsertJobScheduler("foo", {"every": 500}, *template))
        ),
    )
    completed = future_of(events, "completed", 7)
    await queue.upsertJobScheduler("foo", {"every": 500}, "bruh", {"hello": "world"})
    start(worker)
    await wait_for(completed, 30)
    await events.close()  # no upsert starts after this; those started are awaited below
    await stop(worker)
    await settle(*upserts)
    assert errors == []


# Node: tests/job_scheduler.test.ts › should not repeat more than 5 times
async def test_a_scheduler_with_a_limit_stops_after_it(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = make_worker(bq, name, noop)
    completed: list[Any] = []
    worker.on("completed", lambda job, *rest: completed.append(job))
    done = collecting(worker, 5)
    await queue.upsertJobScheduler("repeat", {"limit": 5, "every": 300})
    scheduler = await queue.getJobScheduler("repeat")
    assert {k: scheduler.get(k) for k in ("iterationCount", "key", "limit", "name", "every")} == {
        "iterationCount": 1,
        "key": "repeat",
        "limit": 5,
        "name": "repeat",
        "every": 300,
    }
    await wait_for(done, 30)
    assert await queue.getDelayedCount() == 0
    assert await queue.getWaitingCount() == 0
    await stop(worker)
    assert len(completed) == 5


# Node: tests/job_scheduler.test.ts › should processes delayed jobs by priority
async def test_delayed_jobs_due_together_run_by_priority(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await settle(
        queue.add("test", {"p": 1}, {"priority": 1, "delay": 300}),
        queue.add("test", {"p": 2}, {"priority": 2, "delay": 200}),
        queue.add("test", {"p": 3}, {"priority": 3, "delay": 100}),
    )
    # the three are due before any worker looks at the queue
    await asyncio.sleep(0.4)
    order: list[int] = []

    async def process(job: Any, token: str) -> None:
        order.append(job.data["p"])

    worker = make_worker(bq, name, process)
    await wait_for(collecting(worker, 3))
    assert order == [1, 2, 3]


# Node: tests/job_scheduler.test.ts › should use ".every" as a valid interval
async def test_two_every_schedulers_alternate(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler("repeat m", {"every": 1000}, None, {"type": "m"})
    await queue.upsertJobScheduler("repeat s", {"every": 1000}, None, {"type": "s"})
    jobs = await iterations(bq, name, 6)
    by_type: dict[str, list[Any]] = {"m": [], "s": []}
    for job in jobs:
        by_type[job.data["type"]].append(job)
    assert len(by_type["m"]) == len(by_type["s"]) == 3
    for jobs_of_type in by_type.values():
        slots = [slot_of(job) for job in jobs_of_type]
        assert [b - a for a, b in itertools.pairwise(slots)] == [1000, 1000]


# Node: tests/job_scheduler.test.ts › should throw an error when using .pattern and .every simultaneously
async def test_pattern_and_every_together_are_refused(bq: Bull) -> None:
    queue = bq.queue()
    with pytest.raises(
        Exception,
        match=re.escape("Both .pattern and .every options are defined for this repeatable job"),
    ):
        await queue.upsertJobScheduler("repeat", {"every": 5000, "pattern": "* /1 * * * * *"})


# Node: tests/job_scheduler.test.ts › should throw an error when not specifying .pattern or .every
async def test_neither_pattern_nor_every_is_refused(bq: Bull) -> None:
    queue = bq.queue()
    with pytest.raises(
        Exception,
        match=re.escape(
            "Either .pattern or .every options must be defined for this repeatable job"
        ),
    ):
        await queue.upsertJobScheduler("repeat", {})


# Node: tests/job_scheduler.test.ts › should throw an error when using .immediately and .startDate simultaneously
async def test_immediately_with_a_start_date_is_refused(bq: Bull) -> None:
    queue = bq.queue()
    with pytest.raises(
        Exception,
        match=re.escape(
            "Both .immediately and .startDate options are defined for this repeatable job"
        ),
    ):
        await queue.upsertJobScheduler(
            "repeat", {"every": 5000, "immediately": True, "startDate": now_ms()}
        )


# Node: tests/job_scheduler.test.ts › should return a valid job with the job's options and data passed as the job template
async def test_upsert_returns_the_first_iteration_with_the_template(bq: Bull) -> None:
    queue = bq.queue()
    job = await queue.upsertJobScheduler("test", {"every": 1000}, None, {"foo": "bar"})
    assert job is not None
    assert job.data["foo"] == "bar"
    assert job.opts["repeat"]["every"] == 1000


# Node: tests/job_scheduler.test.ts › should emit a waiting event when adding a repeatable job to the waiting list
async def test_an_iteration_that_becomes_due_emits_waiting(bq: Bull) -> None:
    name = bq.name()
    events = bq.queue_events(name, lastEventId="0")
    waiting = future_of(events, "waiting")
    queue = bq.queue(name)
    make_worker(bq, name, noop)
    await queue.upsertJobScheduler("test", {"pattern": "*/1 * * * * *"})
    [(args, _)] = await wait_for(waiting)
    assert args["jobId"].startswith("repeat:test:")
    assert int(args["jobId"].rsplit(":", 1)[1]) % 1000 == 0


# Node: tests/job_scheduler.test.ts › should have the right count value
async def test_the_first_iteration_has_count_one(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler("test", {"every": 1000})
    repeat_counts: list[int] = []

    async def process(job: Any, token: str) -> None:
        repeat_counts.append(job.opts["repeat"]["count"])

    worker = make_worker(bq, name, process)
    await wait_for(future_of(worker, "completed"))
    assert repeat_counts[0] == 1


# Node: tests/job_scheduler.test.ts › should schedule next "every" repeatable job after promote
async def test_a_promoted_every_iteration_schedules_the_next(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler("scheduler-test", {"every": 50000})
    assert await queue.getWaitingCount() == 1
    await iterations(bq, name, 1)
    assert await queue.getDelayedCount() == 1
    await queue.promoteJobs()
    assert await queue.getWaitingCount() == 1
    assert await queue.getDelayedCount() == 0
    await iterations(bq, name, 1)
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › should schedule next "pattern" repeatable job after promote
async def test_a_promoted_pattern_iteration_schedules_the_next(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler("scheduler-test", {"pattern": "*/1 * * * * *"})
    assert await queue.getDelayedCount() == 1
    await queue.promoteJobs()
    assert await queue.getWaitingCount() == 1
    await iterations(bq, name, 1)
    assert await queue.getDelayedCount() == 1
    await iterations(bq, name, 1)
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › should schedule next "pattern" repeatable job after promote with immediately
async def test_an_immediate_pattern_scheduler_runs_now_then_on_its_pattern(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler(
        "scheduler-test", {"pattern": "*/1 * * * * *", "immediately": True}
    )
    assert await queue.getWaitingCount() == 1
    await iterations(bq, name, 1)
    assert await queue.getDelayedCount() == 1
    await queue.promoteJobs()
    await iterations(bq, name, 1)
    assert await queue.getDelayedCount() == 1


# Node: tests/job_scheduler.test.ts › worker should start processing repeatable jobs after drain
async def test_a_scheduler_iteration_survives_drain_and_runs(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler(
        "scheduler-test", {"pattern": "* * * * * *"}, None, {"foo": "bar"}
    )
    assert await queue.getDelayedCount() == 1
    await queue.drain(True)
    assert await queue.getDelayedCount() == 1
    [job] = await iterations(bq, name, 1)
    assert job.data["foo"] == "bar"


SEGMENTED_ID = "tenant:region:env:service:queue:task"


# Node: tests/job_scheduler.test.ts › when job scheduler id contains 5 or more colon segments › should not create duplicate schedulers after a job completes (issue #3828)
async def test_a_scheduler_id_with_many_colons_stays_one_scheduler(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    await queue.upsertJobScheduler(SEGMENTED_ID, {"every": ONE_MINUTE})
    assert len(await queue.getJobSchedulers()) == 1
    await iterations(bq, name, 1)
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["key"] == SEGMENTED_ID


# Node: tests/job_scheduler.test.ts › when job scheduler id contains 5 or more colon segments › should classify a real scheduler id with 5+ segments via isJobScheduler
async def test_a_scheduler_id_with_many_colons_is_a_scheduler(bq: Bull) -> None:
    queue = bq.queue()
    await queue.upsertJobScheduler(SEGMENTED_ID, {"every": ONE_MINUTE})
    assert await queue.jobScheduler.isJobScheduler(SEGMENTED_ID) is True


# Node: tests/job_scheduler.redis.test.ts › should be able to remove repeatable jobs by key
async def test_removing_a_scheduler_removes_its_delayed_iteration(bq: Bull) -> None:
    queue = bq.queue()
    created = await queue.upsertJobScheduler("remove", {"pattern": "*/2 * * * * *"})
    assert await queue.getJobCountByTypes("delayed") == 1
    job = await queue.getJob(created.id)
    assert len(await queue.getJobSchedulers()) == 1
    assert job.repeatJobKey == "remove"
    assert await queue.removeJobScheduler(job.repeatJobKey) == 0  # see the "returns false" case
    assert await queue.getJobCountByTypes("delayed") == 0
    assert await queue.getJobSchedulers() == []


# Node: tests/job_scheduler_stress.test.ts › should upsert many times respecting the guarantees
async def test_upserting_new_intervals_keeps_one_job_at_a_time(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    duplicated: list[Any] = []
    events.on("duplicated", lambda *args: duplicated.append(args))
    worker = make_worker(bq, name, noop, concurrency=1)
    done = collecting(worker, 10)
    every = 800
    for i in range(3):
        if i:
            await asyncio.sleep(0.2)  # part of the scenario: upserts 200 ms apart
            in_flight = await queue.getJobCountByTypes("active", "delayed", "waiting")
            assert 1 <= in_flight <= 2
        await queue.upsertJobScheduler(
            "test", {"every": every}, None, {"iteration": i}, {"removeOnComplete": True}
        )
        every //= 2
    await wait_for(done, 30)
    await stop(worker)
    assert duplicated == []
    assert len(await queue.getJobSchedulers()) == 1
    assert await queue.getJobCounts() == {
        "active": 0,
        "completed": 0,
        "delayed": 1,
        "failed": 0,
        "prioritized": 0,
        "waiting": 0,
        "waiting-children": 0,
    }


# Node: tests/job_scheduler_stress.test.ts › should start processing a job as soon as it is upserted when using every
async def test_an_every_scheduler_runs_its_first_iteration_at_once(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)

    async def process(job: Any, token: str) -> int:
        return 42

    worker = make_worker(bq, name, process, concurrency=1)
    done = future_of(worker, "completed")
    await queue.upsertJobScheduler("1s-test", {"every": 4_000}, "1s-test")
    started = now_ms()
    await wait_for(done)
    assert now_ms() - started < ONE_SECOND


# Node: tests/job_scheduler_stress.test.ts › should properly update job data and options when upserting job scheduler multiple times
async def test_an_upsert_changes_the_template_of_later_iterations(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    processed: list[tuple[str, str]] = []

    async def process(job: Any, token: str) -> None:
        processed.append((job.name, job.data["key"]))

    worker = make_worker(bq, name, process)
    first_three = collecting(worker, 3)
    await queue.upsertJobScheduler(
        "update-test-scheduler", {"every": 500}, "my-name-1", {"key": "first"}
    )
    await wait_for(first_three, 30)
    assert processed[:3] == [("my-name-1", "first")] * 3
    seconds = first(worker, "completed", lambda job, *rest: job.data["key"] == "second")
    await queue.upsertJobScheduler(
        "update-test-scheduler", {"every": 250}, "my-name-2", {"key": "second"}
    )
    await wait_for(seconds)
    more = collecting(worker, 2)
    await wait_for(more)
    await stop(worker)
    assert processed[-2:] == [("my-name-2", "second")] * 2
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["key"] == "update-test-scheduler"
    assert scheduler["every"] == 250
    [delayed] = await queue.getDelayed()
    assert delayed.data["key"] == "second"
    assert delayed.name == "my-name-2"


# Node: tests/job_scheduler_stress.test.ts › should handle rapid successive upserts without creating duplicate schedulers
async def test_rapid_upserts_leave_one_scheduler_with_the_last_template(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    events = bq.queue_events(name, lastEventId="0")
    duplicated: list[Any] = []
    events.on("duplicated", lambda *args: duplicated.append(args))
    worker = make_worker(bq, name, noop, autorun=False)
    upserts = []
    for i in range(5):
        upserts.append(
            asyncio.ensure_future(
                queue.upsertJobScheduler(
                    "rapid-upsert-test",
                    {"every": 1000 + i * 200},
                    f"iteration-{i}",
                    {"iteration": i, "timestamp": now_ms()},
                )
            )
        )
        if i < 4:
            await asyncio.sleep(0.05)  # part of the scenario: upserts 50 ms apart
    await settle(*upserts)
    ran = first(worker, "completed", lambda job, *rest: job.name == "iteration-4")
    start(worker)
    await wait_for(ran)
    await stop(worker)
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["key"] == "rapid-upsert-test"
    [delayed] = await queue.getDelayed()
    assert delayed.data["iteration"] == 4
    assert delayed.name == "iteration-4"
    assert duplicated == []


# Python: python/tests/job_scheduler_test.py (v6.2.0) › test_next_job_from_job_data_materializes_next_iteration
async def test_next_job_from_job_data_advances_the_scheduler(bq: Bull) -> None:
    name = bq.name()
    queue = bq.queue(name)
    worker = bq.worker(name, None)
    iteration = await queue.upsertJobScheduler(
        "direct", {"every": 5 * ONE_SECOND}, "direct", {"n": 1}
    )
    raw = await worker.backend.getJobData(iteration.id)
    assert raw
    assert await worker.backend.getJobData("no-such-job") is None
    job = await worker.nextJobFromJobData(raw, iteration.id, token="token")
    assert job.id == iteration.id
    assert job.name == "direct"
    assert job.data == {"n": 1}
    assert job.token == "token"
    assert job.repeatJobKey == "direct"
    [scheduler] = await queue.getJobSchedulers()
    assert scheduler["iterationCount"] == 2
    assert await worker.nextJobFromJobData(None) is None


FACADE_PENDING: dict[str, str] = {}
