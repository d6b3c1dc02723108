"""Schedules: cron and intervals, typed, exactly one job per tick with concurrent schedulers."""

from __future__ import annotations

import asyncio
import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pydantic
import pytest

from pgjobs import (
    SCHEDULE_RUN_KEY,
    InvalidJobInput,
    InvalidOption,
    JobQueue,
    Keep,
    Registry,
    ScheduleTickTaken,
    UnknownKind,
)
from pgjobs.schedules import next_tick
from tests.helpers import eventually
from tests.interleave import overlap


class Report(pydantic.BaseModel):
    account: int


@pytest.fixture
def report(registry: Registry) -> None:
    registry.declare(
        "report", input=Report, queue="reports", job_name=lambda r: f"report-{r.account}"
    )


async def emitted_jobs(jobs: JobQueue) -> list[dict]:
    rows = await jobs.db.pool.fetch(
        f"SELECT name, job_key, payload FROM {jobs.schema}.jobs ORDER BY id"
    )
    return [dict(r) for r in rows]


@pytest.mark.slow
async def test_cron_with_three_concurrent_schedulers_emits_one_job_per_tick(
    jobs: JobQueue, report
) -> None:
    await jobs.upsert_schedule("every-second", "report", {"account": 7}, cron="* * * * * *")
    schedulers = [jobs.scheduler(poll_interval=0.05) for _ in range(3)]
    for scheduler in schedulers:
        scheduler.start()

    async def four_ticks() -> bool:
        return len(await emitted_jobs(jobs)) >= 4

    await eventually(four_ticks)
    for scheduler in schedulers:
        await scheduler.stop()
    emitted = await emitted_jobs(jobs)
    schedule = await jobs.get_schedule("every-second")
    assert schedule is not None
    # The counter would run ahead of the jobs if two schedulers emitted one tick (the per-tick
    # job key would then have swallowed the second job).
    assert schedule.emitted == len(emitted)
    ticks = [
        datetime.fromisoformat(e["job_key"].removeprefix("schedule:every-second:")) for e in emitted
    ]
    assert len(set(ticks)) == len(ticks)
    assert all(
        b - a == timedelta(seconds=1)
        for a, b in zip(sorted(ticks), sorted(ticks)[1:], strict=False)
    )
    assert {e["name"] for e in emitted} == {"report-7"}


async def test_interval_schedule_with_limit_and_no_catch_up_burst(jobs: JobQueue, report) -> None:
    await jobs.upsert_schedule(
        "limited", "report", {"account": 1}, every=60, limit=2, immediately=True
    )
    assert await jobs.emit_due_schedules() == 1
    assert await jobs.emit_due_schedules() == 0  # next tick is a minute away
    # Downtime: the schedule missed ten ticks.
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.schedules SET next_run_at = now() - interval '10 minutes' WHERE name = 'limited'"
    )
    assert await jobs.emit_due_schedules() == 1  # the limit (2) stops it anyway
    schedule = await jobs.get_schedule("limited")
    assert schedule is not None and schedule.emitted == 2 and schedule.next_run_at is None

    await jobs.upsert_schedule("steady", "report", {"account": 2}, every=60)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.schedules SET next_run_at = now() - interval '10 minutes' WHERE name = 'steady'"
    )
    assert await jobs.emit_due_schedules() == 1  # one job, not ten
    steady = await jobs.get_schedule("steady")
    assert steady is not None and steady.next_run_at is not None
    assert steady.next_run_at > datetime.now(UTC)


async def test_catch_up_emits_each_missed_tick_when_asked(jobs: JobQueue, report) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    await jobs.upsert_schedule("catchy", "report", {"account": 3}, every=60, start_at=start)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.schedules SET next_run_at = $1 WHERE name = 'catchy'", start
    )
    emitted = await jobs.emit_due_schedules(catch_up=True)
    assert emitted in (10, 11)  # every minute from start up to now
    keys = [e["job_key"] for e in await emitted_jobs(jobs)]
    assert len(set(keys)) == emitted


async def test_time_zones_and_seconds_field() -> None:
    paris = ZoneInfo("Europe/Paris")
    after = datetime(2026, 3, 28, 6, 0, tzinfo=UTC)  # the morning before the spring DST change
    first = next_tick(
        cron="0 9 * * *", every=None, timezone="Europe/Paris", after=after, start_at=None
    )
    second = next_tick(
        cron="0 9 * * *", every=None, timezone="Europe/Paris", after=first, start_at=None
    )
    assert first.astimezone(paris).hour == 9 and second.astimezone(paris).hour == 9
    assert (first.hour, second.hour) == (8, 7)  # 09:00 CET, then 09:00 CEST
    tick = next_tick(cron="*/15 * * * * *", every=None, timezone="UTC", after=after, start_at=None)
    assert tick == after + timedelta(seconds=15)
    anchored = next_tick(
        cron=None, every=30, timezone="UTC", after=after + timedelta(seconds=31), start_at=after
    )
    assert anchored == after + timedelta(seconds=60)


async def test_upsert_validates_everything_and_replaces_by_name(jobs: JobQueue, report) -> None:
    with pytest.raises(InvalidOption, match="cron"):
        await jobs.upsert_schedule("bad", "report", {"account": 1}, cron="61 * * * *")
    with pytest.raises(InvalidOption, match="cron"):
        await jobs.upsert_schedule("bad", "report", {"account": 1}, cron="* * *")
    with pytest.raises(InvalidOption, match="timezone"):
        await jobs.upsert_schedule(
            "bad", "report", {"account": 1}, cron="0 * * * *", timezone="Mars/Olympus"
        )
    with pytest.raises(InvalidOption, match="cron"):
        await jobs.upsert_schedule("bad", "report", {"account": 1})
    with pytest.raises(InvalidJobInput):
        await jobs.upsert_schedule("bad", "report", {"account": "x"}, every=10)
    with pytest.raises(UnknownKind):
        await jobs.upsert_schedule("bad", "nope", {}, every=10)
    with pytest.raises(InvalidOption, match="every"):
        await jobs.upsert_schedule("bad", "report", {"account": 1}, every=-5)
    with pytest.raises(InvalidOption, match="lifo"):
        await jobs.upsert_schedule("bad", "report", {"account": 1}, every=5, lifo=True)
    assert await jobs.list_schedules() == []

    await jobs.upsert_schedule(
        "nightly", "report", {"account": 1}, cron="0 3 * * *", timezone="Asia/Tokyo", priority=4
    )
    await jobs.upsert_schedule(
        "nightly", "report", {"account": 2}, cron="30 3 * * *", timezone="Asia/Tokyo", priority=4
    )
    [schedule] = await jobs.list_schedules()
    assert (schedule.input, schedule.cron, schedule.options) == (
        {"account": 2},
        "30 3 * * *",
        {"priority": 4},
    )
    assert schedule.next_run_at is not None
    assert schedule.next_run_at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%H:%M") == "03:30"
    assert await jobs.remove_schedule("nightly")
    assert not await jobs.remove_schedule("nightly")


async def test_end_date_finishes_a_schedule(jobs: JobQueue, report) -> None:
    now = datetime.now(UTC)
    await jobs.upsert_schedule(
        "short",
        "report",
        {"account": 1},
        every=3600,
        immediately=True,
        end_at=now + timedelta(minutes=30),
    )
    assert await jobs.emit_due_schedules() == 1
    schedule = await jobs.get_schedule("short")
    assert schedule is not None and schedule.next_run_at is None


async def test_scheduler_loop_stops_promptly(jobs: JobQueue, report) -> None:
    scheduler = jobs.scheduler(poll_interval=30)
    scheduler.start()
    await asyncio.wait_for(scheduler.stop(), 5)


async def test_an_emitter_leaves_kinds_it_does_not_know_to_others(
    jobs: JobQueue, report, pg_dsn: str
) -> None:
    await jobs.upsert_schedule("known", "report", {"account": 1}, every=60, immediately=True)
    other = await JobQueue.connect(pool=jobs.db.pool, schema=jobs.schema)  # knows no kind
    assert await other.emit_due_schedules() == 0
    assert await jobs.emit_due_schedules() == 1


async def test_job_name_labels_emitted_jobs_without_renaming_the_schedule(
    jobs: JobQueue, report
) -> None:
    await jobs.upsert_schedule(
        "sched", "report", {"account": 5}, every=60, immediately=True, job_name="custom"
    )
    assert [s.name for s in await jobs.list_schedules()] == ["sched"]
    assert await jobs.emit_due_schedules() == 1
    assert [e["name"] for e in await emitted_jobs(jobs)] == ["custom"]


async def _pending_runs(jobs: JobQueue, name: str) -> list[dict]:
    rows = await jobs.db.pool.fetch(
        f"SELECT id, job_key, run_at, status FROM {jobs.schema}.jobs"
        " WHERE schedule = $1 AND status = 'pending' ORDER BY id",
        name,
    )
    return [dict(r) for r in rows]


async def test_a_materialized_schedule_keeps_its_next_run_as_a_job(jobs: JobQueue, report) -> None:
    """Upserting enqueues the first run; starting a run enqueues the next; re-upserting
    replaces a run that has not started: there is always exactly one pending run."""
    await jobs.upsert_schedule(
        "hourly",
        "report",
        {"account": 1},
        every=3600,
        immediately=True,
        materialize=True,
        job_key_prefix="repeat:hourly:",
    )
    (first,) = await _pending_runs(jobs, "hourly")
    schedule = await jobs.get_schedule("hourly")
    assert schedule.materialized and schedule.pending_job_id == first["id"]
    assert schedule.emitted == 1 and first["job_key"].startswith("repeat:hourly:")
    assert await jobs.emit_due_schedules() == 0  # the emitter leaves it to the workers

    (run,) = await jobs.claim(["reports"])  # due now: the first run starts...
    assert run.id == first["id"]
    (second,) = await _pending_runs(jobs, "hourly")  # ...and the next one exists
    tick = int(second["job_key"].rsplit(":", 1)[1]) - int(first["job_key"].rsplit(":", 1)[1])
    assert tick == 3_600_000
    assert (await jobs.get_schedule("hourly")).emitted == 2
    assert await run.complete("done")

    await jobs.upsert_schedule(
        "hourly",
        "report",
        {"account": 2},
        every=1800,
        materialize=True,
        job_key_prefix="repeat:hourly:",
    )
    (replaced,) = await _pending_runs(jobs, "hourly")
    assert replaced["id"] != second["id"] and (await jobs.get(second["id"])) is None
    assert (await jobs.get(replaced["id"])).payload == {"account": 2}
    assert (await jobs.get_schedule("hourly")).emitted == 2  # replaced, not added

    assert await jobs.remove_schedule("hourly")
    assert await _pending_runs(jobs, "hourly") == []


async def test_a_materialized_schedule_stops_at_its_limit(jobs: JobQueue, report) -> None:
    await jobs.upsert_schedule(
        "twice", "report", {"account": 1}, every=1, immediately=True, limit=2, materialize=True
    )
    for expected in (1, 0):
        (run,) = await eventually(lambda: jobs.claim(["reports"]))
        assert await run.complete(None)
        assert len(await _pending_runs(jobs, "twice")) == expected
    schedule = await jobs.get_schedule("twice")
    assert schedule.emitted == 2 and schedule.pending_job_id is None
    assert schedule.next_run_at is None


async def test_a_run_started_twice_makes_one_next_run(jobs: JobQueue, report) -> None:
    """A run whose worker died is rescued and started again: the next run is made once."""
    await jobs.upsert_schedule(
        "once", "report", {"account": 1}, every=600, immediately=True, materialize=True
    )
    (run,) = await jobs.claim(["reports"], lease=60)
    await jobs.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET locked_until = now() - interval '1 s' WHERE id = $1",
        run.id,
    )
    await jobs.db.fetch("rescue_stalled", 10, "unused")
    (again,) = await jobs.claim(["reports"])
    assert again.id == run.id
    assert len(await _pending_runs(jobs, "once")) == 1
    assert (await jobs.get_schedule("once")).emitted == 2


async def test_a_run_started_without_its_next_run_is_repaired(jobs: JobQueue, report) -> None:
    """The worker that started the run died before making the next one: a scheduler loop
    makes it."""
    await jobs.upsert_schedule(
        "repair", "report", {"account": 1}, every=600, immediately=True, materialize=True
    )
    rows = await jobs.db.fetch("claim", ["reports"], ["report"], 1, 30.0, 0)  # no hook
    assert len(rows) == 1 and await _pending_runs(jobs, "repair") == []
    await jobs.emit_due_schedules()
    assert len(await _pending_runs(jobs, "repair")) == 1
    await jobs.emit_due_schedules()
    assert len(await _pending_runs(jobs, "repair")) == 1


async def test_a_workers_run_of_a_schedule_starts_once_its_next_run_exists(
    jobs: JobQueue, registry: Registry
) -> None:
    """As BullMQ's moveToActive does: the handler of run N sees run N+1 already pending."""
    seen: list[list[dict]] = []
    ran = asyncio.Event()

    @registry.kind("tick", input=Report, queue="ticks")
    async def tick(ctx, report: Report) -> None:
        seen.append(await _pending_runs(jobs, "ticking"))
        ran.set()

    await jobs.upsert_schedule(
        "ticking", "tick", {"account": 1}, every=3600, immediately=True, materialize=True
    )
    (first,) = await _pending_runs(jobs, "ticking")
    worker = jobs.worker(queues=["ticks"])
    running = asyncio.create_task(worker.run())
    await ran.wait()
    await worker.stop()
    await running
    (following,) = seen[0]
    assert following["id"] != first["id"] and following["status"] == "pending"


async def test_a_paused_schedule_emits_nothing_and_resumes_without_a_burst(
    jobs: JobQueue, report
) -> None:
    await jobs.upsert_schedule("minutely", "report", {"account": 4}, every=60, immediately=True)
    assert await jobs.pause_schedule("minutely")
    assert not await jobs.pause_schedule("minutely")  # already paused
    assert not await jobs.pause_schedule("no-such-schedule")
    paused = await jobs.get_schedule("minutely")
    assert paused is not None and paused.paused and paused.next_run_at is not None
    assert await jobs.emit_due_schedules() == 0  # due, but paused
    # Paused for a while: ten ticks were missed.
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.schedules SET next_run_at = now() - interval '10 minutes'"
        " WHERE name = 'minutely'"
    )
    assert await jobs.emit_due_schedules() == 0
    assert await emitted_jobs(jobs) == []
    resumed_at = await jobs.resume_schedule("minutely")
    assert resumed_at is not None and resumed_at > datetime.now(UTC)  # the missed ones skipped
    assert await jobs.resume_schedule("minutely") is None  # not paused any more
    running = await jobs.get_schedule("minutely")
    assert running is not None and not running.paused and running.next_run_at == resumed_at
    await jobs.pause_schedule("minutely")
    await jobs.upsert_schedule("minutely", "report", {"account": 5}, every=60, immediately=True)
    redefined = await jobs.get_schedule("minutely")
    assert redefined is not None and not redefined.paused  # an upsert redefines it, running
    assert await jobs.emit_due_schedules() == 1


async def test_pausing_a_materialized_schedule_removes_its_pending_run(
    jobs: JobQueue, report
) -> None:
    await jobs.upsert_schedule(
        "hourly", "report", {"account": 1}, every=3600, materialize=True,
        job_key_prefix="repeat:hourly:",
    )  # fmt: skip
    (pending,) = await _pending_runs(jobs, "hourly")
    assert await jobs.pause_schedule("hourly")
    assert await _pending_runs(jobs, "hourly") == [] and await jobs.get(pending["id"]) is None
    paused = await jobs.get_schedule("hourly")
    assert paused is not None and paused.pending_job_id is None and paused.emitted == 0
    tick = await jobs.resume_schedule("hourly")
    (again,) = await _pending_runs(jobs, "hourly")
    resumed = await jobs.get_schedule("hourly")
    assert resumed is not None and resumed.pending_job_id == again["id"]
    assert resumed.next_run_at == tick and resumed.emitted == 1
    row = await jobs.get(again["id"])
    assert row is not None and row.run_at == tick


@pytest.mark.parametrize("pause_first", [True, False])
async def test_a_pause_and_a_run_starting_at_once_leave_no_pending_run(
    jobs: JobQueue, report, pause_first: bool
) -> None:
    """A worker starting a materialized schedule's run makes its next run; a pause removes the
    pending one. Both take the schedule's row lock, so whichever waits sees what the other
    committed: the schedule ends paused with no pending run, and only the run that started is
    counted. Both orders, each transaction seen waiting for the other."""
    await jobs.upsert_schedule(
        "hourly", "report", {"account": 1}, every=3600, immediately=True, materialize=True,
        job_key_prefix="repeat:hourly:",
    )  # fmt: skip
    (pending,) = await _pending_runs(jobs, "hourly")
    # A worker has claimed it, and has still to make the next run (what it does as it starts).
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET status = 'running', attempts = 1,"
        " lock_token = gen_random_uuid(), locked_until = now() + interval '30 seconds'"
        " WHERE id = $1",
        pending["id"],
    )
    schedules = jobs._schedules

    async def start(conn: object) -> None:
        await schedules._advance("hourly", pending["id"], connection=conn)

    async def pause(conn: object) -> bool:
        return await jobs.pause_schedule("hourly", connection=conn)

    first, second = (pause, start) if pause_first else (start, pause)
    *_, waited = await overlap(jobs.db.pool, first, second)
    assert waited  # the second really waited for the first's lock
    schedule = await jobs.get_schedule("hourly")
    assert schedule is not None and schedule.paused and schedule.pending_job_id is None
    assert await _pending_runs(jobs, "hourly") == []
    assert schedule.emitted == 1  # the run that started; a next run made and removed is not
    row = await jobs.get(pending["id"])
    assert row is not None and row.status.value == "running"  # the started run goes on


async def test_pauses_and_resumes_racing_runs_never_leave_two_pending_runs(
    jobs: JobQueue, registry: Registry
) -> None:
    ran: list[int] = []

    @registry.kind("pulse", input=dict, queue="pulses")
    async def pulse(ctx, data: dict) -> None:
        ran.append(ctx.id)

    await jobs.upsert_schedule("fast", "pulse", {}, every=0.01, immediately=True, materialize=True)
    worker = jobs.worker(queues=["pulses"], concurrency=4, poll_interval=0.01)
    running = asyncio.create_task(worker.run())
    for _ in range(30):
        await asyncio.gather(jobs.pause_schedule("fast"), jobs.resume_schedule("fast"))
        pending = await _pending_runs(jobs, "fast")
        assert len(pending) <= 1
    assert await jobs.pause_schedule("fast") or (await jobs.get_schedule("fast")).paused
    await worker.stop()
    await running
    assert await _pending_runs(jobs, "fast") == []
    assert ran  # runs happened between the pauses


async def test_a_run_whose_tick_is_taken_moves_on_or_is_refused(jobs: JobQueue, report) -> None:
    """A materialized run whose tick's job key is another job's moves to the next free tick;
    with refuse_taken_tick the upsert raises ScheduleTickTaken and writes nothing."""
    tick = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    taken_key = f"repeat:taken:{int(tick.timestamp() * 1000)}"
    squatter = await jobs.enqueue("report", {"account": 9}, job_key=taken_key, delay=7200)
    options = dict(every=60, materialize=True, job_key_prefix="repeat:taken:", first_run_at=tick)
    with pytest.raises(ScheduleTickTaken) as refused:
        await jobs.upsert_schedule(
            "taken", "report", {"account": 1}, refuse_taken_tick=True, **options
        )
    assert refused.value.job_key == taken_key and refused.value.tries == 1
    assert await jobs.get_schedule("taken") is None
    assert [r["id"] for r in await emitted_ids(jobs)] == [squatter.id]

    await jobs.upsert_schedule("taken", "report", {"account": 1}, **options)
    (run,) = await _pending_runs(jobs, "taken")
    assert run["run_at"] == tick + timedelta(seconds=60)  # the next free tick


async def _started_run_and_next(jobs: JobQueue, name: str, tick: datetime) -> tuple[int, int]:
    """A materialized hourly schedule ``name`` whose run at ``tick`` has started (running,
    as a worker's claim leaves it) and whose next run was made: (started id, next id)."""
    await jobs.upsert_schedule(
        name, "report", {"account": 1}, every=3600, materialize=True,
        job_key_prefix=f"repeat:{name}:", first_run_at=tick,
    )  # fmt: skip
    (run,) = await _pending_runs(jobs, name)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET status = 'running', attempts = 1,"
        " lock_token = gen_random_uuid(), locked_until = now() + interval '30 seconds'"
        " WHERE id = $1",
        run["id"],
    )
    await jobs.advance_schedule(name, run["id"])
    (following,) = await _pending_runs(jobs, name)
    return run["id"], following["id"]


async def _key_of(jobs: JobQueue, job_id: int) -> str | None:
    return await jobs.db.pool.fetchval(
        f"SELECT job_key FROM {jobs.schema}.jobs WHERE id = $1", job_id
    )


@pytest.mark.parametrize("holder", ["running", "completed"])
async def test_an_upsert_replacing_the_next_run_takes_the_tick_of_a_started_run(
    jobs: JobQueue, report, holder: str
) -> None:
    """With take_started_tick, an upsert that replaced the pending run puts the new run at a
    tick whose key a started run of the schedule holds (running or finished): that run keeps
    its status, keyless, and the new run takes the key."""
    tick = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    key = f"repeat:hourly:{int(tick.timestamp() * 1000)}"
    started, following = await _started_run_and_next(jobs, "hourly", tick)
    if holder == "completed":
        await jobs.db.pool.execute(
            f"UPDATE {jobs.schema}.jobs SET status = 'completed', lock_token = NULL,"
            " locked_until = NULL, finished_at = now() WHERE id = $1",
            started,
        )
    next_run = await jobs.upsert_schedule(
        "hourly", "report", {"account": 2}, every=3600, materialize=True,
        job_key_prefix="repeat:hourly:", first_run_at=tick, refuse_taken_tick=True,
        take_started_tick=True,
    )  # fmt: skip
    assert next_run == tick
    (run,) = await _pending_runs(jobs, "hourly")
    assert run["job_key"] == key and run["run_at"] == tick
    assert await jobs.get(following) is None  # the replaced next run
    row = await jobs.get(started)
    assert row is not None and row.status.value == holder and row.job_key is None
    schedule = await jobs.get_schedule("hourly")
    assert schedule is not None and schedule.pending_job_id == run["id"]
    assert schedule.emitted == 2  # the started run and the new one


async def test_a_tick_is_taken_only_from_a_started_run_of_the_schedule(
    jobs: JobQueue, report
) -> None:
    """take_started_tick takes no key from a job of another schedule, from a run of this one
    that is pending (a retry), nor when the upsert replaced no pending run: those keep their
    key, and the run moves on (or, with refuse_taken_tick, is refused)."""
    tick = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    key = f"repeat:hourly:{int(tick.timestamp() * 1000)}"
    options = dict(
        every=3600, materialize=True, job_key_prefix="repeat:hourly:", first_run_at=tick,
        take_started_tick=True,
    )  # fmt: skip
    started, _following = await _started_run_and_next(jobs, "hourly", tick)
    # A retry of the started run: pending again, still holding its key.
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET status = 'pending', lock_token = NULL,"
        " locked_until = NULL WHERE id = $1",
        started,
    )
    await jobs.upsert_schedule("hourly", "report", {"account": 2}, **options)
    assert await _key_of(jobs, started) == key
    pending = {r["id"]: r for r in await _pending_runs(jobs, "hourly")}
    schedule = await jobs.get_schedule("hourly")
    assert schedule is not None and schedule.pending_job_id in pending
    assert pending[schedule.pending_job_id]["run_at"] == tick + timedelta(hours=1)

    # A job of no schedule holding the tick's key keeps it.
    other = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)
    squatter_key = f"repeat:other:{int(other.timestamp() * 1000)}"
    squatter = await jobs.enqueue("report", {"account": 9}, job_key=squatter_key, delay=20000)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET status = 'running', attempts = 1,"
        " lock_token = gen_random_uuid(), locked_until = now() + interval '30 seconds'"
        " WHERE id = $1",
        squatter.id,
    )
    other_options = {**options, "job_key_prefix": "repeat:other:", "first_run_at": other}
    await jobs.upsert_schedule("other", "report", {"account": 1}, **other_options)
    await jobs.upsert_schedule("other", "report", {"account": 2}, **other_options)
    assert await _key_of(jobs, squatter.id) == squatter_key

    # Nothing replaced: refused, with refuse_taken_tick, as before.
    third = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=5)
    held, _ = await _started_run_and_next(jobs, "third", third)
    await jobs.remove_schedule("third")
    with pytest.raises(ScheduleTickTaken):
        await jobs.upsert_schedule(
            "third", "report", {"account": 2}, every=3600, materialize=True,
            job_key_prefix="repeat:third:", first_run_at=third, refuse_taken_tick=True,
            take_started_tick=True,
        )  # fmt: skip
    assert await _key_of(jobs, held) == f"repeat:third:{int(third.timestamp() * 1000)}"


@pytest.mark.parametrize("rescue_first", [True, False])
async def test_a_tick_taken_while_its_run_is_rescued(
    jobs: JobQueue, report, rescue_first: bool
) -> None:
    """The stalled-job rescue putting a started run back to pending and an upsert taking that
    run's tick, at once. Rescue first: the upsert waits for the run's row, finds it pending,
    leaves it its key and moves on to the next tick. Upsert first: the rescue skips the row
    it holds (SKIP LOCKED); the run stays running, keyless, the new run at its tick."""
    tick = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    key = f"repeat:hourly:{int(tick.timestamp() * 1000)}"
    started, _following = await _started_run_and_next(jobs, "hourly", tick)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET locked_until = now() - interval '1 second' WHERE id = $1",
        started,
    )

    async def rescue(conn: object) -> list:
        return await jobs.db.fetch("rescue_stalled", 100, "nobody", conn=conn)

    async def upsert(conn: object) -> object:
        return await jobs.upsert_schedule(
            "hourly", "report", {"account": 2}, every=3600, materialize=True,
            job_key_prefix="repeat:hourly:", first_run_at=tick, refuse_taken_tick=True,
            take_started_tick=True, connection=conn,
        )  # fmt: skip

    if rescue_first:
        rescued, next_run, waited = await overlap(jobs.db.pool, rescue, upsert)
        assert waited  # the upsert really waited for the rescue's row lock
        assert [r["id"] for r in rescued] == [started]
        assert next_run == tick + timedelta(hours=1)
        assert await _key_of(jobs, started) == key
        row = await jobs.get(started)
        assert row is not None and row.status.value == "pending"
    else:
        next_run, rescued, waited = await overlap(jobs.db.pool, upsert, rescue)
        assert not waited and rescued == []
        assert next_run == tick
        assert await _key_of(jobs, started) is None
        row = await jobs.get(started)
        assert row is not None and row.status.value == "running"
    schedule = await jobs.get_schedule("hourly")
    assert schedule is not None and schedule.next_run_at == next_run
    assert await _key_of(jobs, schedule.pending_job_id) == (
        f"repeat:hourly:{int(next_run.timestamp() * 1000)}"
    )


async def _has_started(jobs: JobQueue, job_id: int) -> bool:
    status = await jobs.db.pool.fetchval(
        f"SELECT status FROM {jobs.schema}.jobs WHERE id = $1", job_id
    )
    return status in (None, "running", "completed")


async def test_upserts_racing_running_iterations_keep_one_pending_run(
    jobs: JobQueue, registry: Registry
) -> None:
    """Stress: an every-second cron schedule whose runs a worker starts while upserts replace
    its next run and take started runs' ticks. Every upsert either succeeds or is refused
    (ScheduleTickTaken); there is never more than one pending run, and the schedule's pending
    run always holds the key of its tick."""
    ran: list[int] = []

    @registry.kind("beat", input=dict, queue="beats")
    async def beat(ctx, data: dict) -> None:
        ran.append(ctx.id)
        await asyncio.sleep(0.02)

    options = dict(
        cron="* * * * * *", materialize=True, job_key_prefix="repeat:beat:",
        refuse_taken_tick=True, take_started_tick=True,
    )  # fmt: skip
    await jobs.upsert_schedule("beat", "beat", {"n": 0}, **options)
    worker = jobs.worker(queues=["beats"], concurrency=2, poll_interval=0.01)
    running = asyncio.create_task(worker.run())
    refused = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 2.5
    n = 0
    while loop.time() < deadline:
        n += 1
        schedule = await jobs.get_schedule("beat")
        promoted = None if schedule is None else schedule.pending_job_id
        if n % 2 and promoted is not None:
            # run it before its tick: the next upsert's tick is then that started run's
            await jobs.promote(promoted)
            await eventually(functools.partial(_has_started, jobs, promoted))
        try:
            await jobs.upsert_schedule("beat", "beat", {"n": n}, **options)
        except ScheduleTickTaken:
            refused += 1
        pending = await _pending_runs(jobs, "beat")
        assert len(pending) <= 1
        schedule = await jobs.get_schedule("beat")
        assert schedule is not None
        if schedule.pending_job_id is not None and schedule.next_run_at is not None:
            millis = int(schedule.next_run_at.timestamp() * 1000)
            assert await _key_of(jobs, schedule.pending_job_id) == f"repeat:beat:{millis}"
        await asyncio.sleep(0.01)
    await worker.stop()
    await running
    assert ran and n > refused
    taken = await jobs.db.pool.fetchval(
        f"SELECT count(*) FROM {jobs.schema}.jobs WHERE schedule = 'beat' AND job_key IS NULL"
    )
    assert taken > 0  # started runs did give their tick to a new run


async def emitted_ids(jobs: JobQueue) -> list[dict]:
    rows = await jobs.db.pool.fetch(f"SELECT id FROM {jobs.schema}.jobs ORDER BY id")
    return [dict(r) for r in rows]


async def test_each_run_carries_its_iteration_and_the_schedules_retention(
    jobs: JobQueue, report
) -> None:
    await jobs.upsert_schedule(
        "counted",
        "report",
        {"account": 1},
        every=3600,
        immediately=True,
        materialize=True,
        metadata={"origin": "test"},
        keep_completed=Keep(count=0),
    )
    (first,) = await _pending_runs(jobs, "counted")
    row = await jobs.get(first["id"])
    assert row is not None
    assert row.metadata == {"origin": "test", SCHEDULE_RUN_KEY: {"iteration": 1}}
    (run,) = await jobs.claim(["reports"])
    (second,) = await _pending_runs(jobs, "counted")
    following = await jobs.get(second["id"])
    assert following is not None and following.metadata[SCHEDULE_RUN_KEY] == {"iteration": 2}
    assert await run.complete("done")
    assert await jobs.get(first["id"]) is None  # keep_completed=Keep(count=0): removed at once
    with pytest.raises(InvalidOption, match="keep_dead"):
        await jobs.upsert_schedule("bad", "report", {"account": 1}, every=60, keep_dead=5)


async def test_an_upsert_keeps_a_due_run_waiting_in_a_paused_queue(jobs: JobQueue, report) -> None:
    """keep_waiting_run: a due run of that priority, in a paused queue, stays (no longer the
    schedule's run) and the upsert makes a new one; otherwise the run is replaced."""
    await jobs.upsert_schedule(
        "paused", "report", {"account": 1}, every=3600, immediately=True, materialize=True
    )
    (due,) = await _pending_runs(jobs, "paused")
    priority = (await jobs.get(due["id"])).priority  # type: ignore[union-attr]
    again = dict(every=1800, materialize=True, keep_waiting_run=priority)
    await jobs.upsert_schedule("paused", "report", {"account": 2}, **again)
    assert await jobs.get(due["id"]) is None  # the queue runs: replaced

    await jobs.upsert_schedule(
        "paused", "report", {"account": 3}, every=3600, immediately=True, materialize=True
    )
    (due,) = await _pending_runs(jobs, "paused")
    await jobs.pause("reports")
    await jobs.upsert_schedule("paused", "report", {"account": 4}, **again)
    kept = await jobs.get(due["id"])
    assert kept is not None and kept.payload == {"account": 3}
    schedule = await jobs.get_schedule("paused")
    assert schedule is not None and schedule.pending_job_id not in (None, due["id"])


async def test_advance_schedule_makes_the_next_run_once(jobs: JobQueue, report) -> None:
    await jobs.upsert_schedule(
        "advanced", "report", {"account": 1}, every=3600, immediately=True, materialize=True
    )
    (first,) = await _pending_runs(jobs, "advanced")
    await jobs.advance_schedule("advanced", first["id"])
    await jobs.advance_schedule("advanced", first["id"])  # no longer the pending run: nothing
    runs = await _pending_runs(jobs, "advanced")
    assert [r["id"] for r in runs] == [first["id"], runs[1]["id"]] and len(runs) == 2
    schedule = await jobs.get_schedule("advanced")
    assert schedule is not None and schedule.pending_job_id == runs[1]["id"]
    assert schedule.emitted == 2
