"""The operator's tools beside purge: a copy of a job (duplicate), a queue removed with its
schedules (obliterate), and a schedule's next run made due now (run_schedule_now)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

from pgjobs import (
    SCHEDULE_RUN_KEY,
    InvalidOption,
    JobContext,
    JobFilter,
    JobQueue,
    QueueRunning,
    Registry,
    Status,
)
from tests.factories import insert_job
from tests.interleave import overlap


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("x", input=Item, queue="tools", max_attempts=4, priority=3)
    async def x(ctx: JobContext, item: Item) -> int:
        return item.n


async def test_a_duplicate_copies_the_job_without_its_keys_and_is_due_now(
    jobs: JobQueue, kinds: None
) -> None:
    original = await jobs.enqueue(
        "x", {"n": 5}, job_key="k1", dedup_key="d1", delay=3600, group_key="g",
        metadata={"who": "me", SCHEDULE_RUN_KEY: {"iteration": 3}}, events=True,
    )  # fmt: skip
    copy_id = await jobs.duplicate(original.id)
    assert copy_id is not None and copy_id != original.id
    a, b = await jobs.get(original.id), await jobs.get(copy_id)
    assert a is not None and b is not None
    same = ("queue", "kind", "name", "payload", "priority", "max_attempts", "group_key")
    assert {f: getattr(b, f) for f in same} == {f: getattr(a, f) for f in same}
    assert (b.job_key, b.dedup_key, b.flow_id, b.status) == (None, None, None, Status.PENDING)
    assert b.metadata == {"who": "me"}  # a copy is no run of a schedule
    assert b.run_at <= datetime.now(UTC) < a.run_at
    assert a.job_key == "k1" and a.status is Status.PENDING  # the original is untouched
    events = await jobs.db.pool.fetch(
        f"SELECT event, added FROM {jobs.schema}.job_events ORDER BY id"
    )
    assert [e["event"] for e in events] == ["added", "added"]
    [claimed] = await jobs.claim(["tools"], kinds=["x"], limit=5)  # the copy alone is due
    assert claimed.id == copy_id
    assert await jobs.duplicate(10**12) is None


async def test_a_duplicate_of_a_kind_this_process_does_not_run_keeps_its_payload(
    jobs: JobQueue,
) -> None:
    finished = await insert_job(jobs.pool, jobs.schema, queue="far", kind="elsewhere",
                                status="dead", payload='{"raw": [1, 2]}')  # fmt: skip
    copy_id = await jobs.duplicate(finished)
    row = await jobs.get(copy_id) if copy_id else None
    assert row is not None and row.kind == "elsewhere" and row.payload == {"raw": [1, 2]}
    assert row.status is Status.PENDING and row.attempts == 0


async def test_obliterate_removes_the_queues_jobs_and_schedules_and_nothing_else(
    jobs: JobQueue, kinds: None
) -> None:
    ids = [(await jobs.enqueue("x", {"n": n})).id for n in range(3)]
    other = await jobs.enqueue("x", {"n": 9}, queue="kept")
    await jobs.upsert_schedule("tick", "x", {"n": 1}, every=60)  # the kind's queue: tools
    await jobs.upsert_schedule("tock", "x", {"n": 1}, every=60, queue="kept")
    [running] = await jobs.claim(["tools"], kinds=["x"])
    with pytest.raises(QueueRunning) as refused:
        await jobs.obliterate("tools")
    assert refused.value.running == 1 and "force=True" in str(refused.value)
    assert len(await jobs.list_jobs(JobFilter(queue="tools"))) == 3  # nothing removed
    assert await jobs.get_schedule("tick") is not None
    result = await jobs.obliterate("tools", force=True)
    assert result.deleted == 3 and await jobs.list_jobs(JobFilter(queue="tools")) == []
    assert await jobs.get_schedule("tick") is None
    assert await jobs.get_schedule("tock") is not None
    assert await jobs.get(other.id) is not None
    assert not await running.complete(1)  # its fenced write is a no-op
    assert [await jobs.get(i) for i in ids] == [None, None, None]


async def test_run_now_makes_the_next_run_due_without_skipping_a_later_one(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.upsert_schedule("nightly", "x", {"n": 2}, cron="0 3 * * *")
    before = await jobs.get_schedule("nightly")
    assert before is not None and before.next_run_at is not None
    run = await jobs.run_schedule_now("nightly")
    assert run is not None and run.job_id is None and run.was_due_at == before.next_run_at
    assert await jobs.emit_due_schedules() == 1
    after = await jobs.get_schedule("nightly")
    assert after is not None and after.emitted == 1
    assert after.next_run_at == before.next_run_at  # the 03:00 run still comes
    [emitted] = await jobs.list_jobs(JobFilter(queue="tools"))
    assert emitted.status is Status.PENDING and emitted.payload == {"n": 2}
    await jobs.pause_schedule("nightly")
    assert await jobs.run_schedule_now("nightly") is None
    assert await jobs.run_schedule_now("no such schedule") is None


async def test_run_now_adds_a_copy_of_a_materialized_schedules_run_and_leaves_it_alone(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.upsert_schedule("hourly", "x", {"n": 3}, every=3600, materialize=True)
    schedule = await jobs.get_schedule("hourly")
    assert schedule is not None and schedule.pending_job_id is not None
    run = await jobs.run_schedule_now("hourly")
    assert run is not None and run.job_id not in (None, schedule.pending_job_id)
    assert run.was_due_at == schedule.next_run_at
    copy, pending = await jobs.get(run.job_id), await jobs.get(schedule.pending_job_id)
    assert copy is not None and pending is not None
    assert copy.sub_state.value == "ready" and pending.sub_state.value == "delayed"
    assert (copy.payload, copy.queue, copy.job_key) == (pending.payload, pending.queue, None)
    after = await jobs.get_schedule("hourly")  # untouched: its run, its time, its count
    assert after is not None
    assert (after.pending_job_id, after.next_run_at, after.emitted) == (
        schedule.pending_job_id, schedule.next_run_at, schedule.emitted)  # fmt: skip
    [claimed] = await jobs.claim(["tools"], kinds=["x"], limit=5)  # the copy alone is due
    assert claimed.id == run.job_id


async def test_a_locked_read_of_a_schedule_holds_it_until_the_transaction_ends(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.upsert_schedule("nightly", "x", {"n": 2}, cron="0 3 * * *")
    with pytest.raises(InvalidOption) as bad:
        await jobs.get_schedule("nightly", lock=True)
    assert bad.value.option == "lock"

    async def read(conn: Any) -> Any:
        return await jobs.get_schedule("nightly", connection=conn, lock=True)

    async def pause(conn: Any) -> bool:
        return await jobs.pause_schedule("nightly", connection=conn)

    held, paused, waited = await overlap(jobs.pool, read, pause)
    assert held is not None and not held.paused and paused and waited


async def test_retime_changes_a_schedules_timing_and_keeps_the_rest(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.upsert_schedule("nightly", "x", {"n": 2}, cron="0 3 * * *", limit=5)
    tick = await jobs.retime_schedule("nightly", every=90)
    after = await jobs.get_schedule("nightly")
    assert after is not None and (after.cron, after.every, after.limit) == (None, 90.0, 5)
    assert after.next_run_at == tick and tick is not None
    assert timedelta(seconds=0) < tick - datetime.now(UTC) <= timedelta(seconds=90)
    with pytest.raises(InvalidOption) as bad:
        await jobs.retime_schedule("nightly", cron="61 * * * *")
    assert bad.value.option == "cron"
    with pytest.raises(InvalidOption):
        await jobs.retime_schedule("nightly", cron="0 3 * * *", every=60)
    unchanged = await jobs.get_schedule("nightly")
    assert unchanged is not None and unchanged.every == 90.0  # nothing written
    assert await jobs.retime_schedule("no such schedule", every=60) is None


async def test_retime_moves_a_materialized_schedules_pending_run(
    jobs: JobQueue, kinds: None
) -> None:
    await jobs.upsert_schedule("hourly", "x", {"n": 3}, every=3600, materialize=True,
                               job_key_prefix="repeat:hourly:")  # fmt: skip
    before = await jobs.get_schedule("hourly")
    assert before is not None and before.pending_job_id is not None
    tick = await jobs.retime_schedule("hourly", cron="*/5 * * * *", timezone="Europe/Paris")
    assert tick is not None and tick.minute % 5 == 0 and tick.second == 0
    after = await jobs.get_schedule("hourly")
    assert after is not None and after.pending_job_id == before.pending_job_id  # the same job
    assert (after.cron, after.timezone, after.every) == ("*/5 * * * *", "Europe/Paris", None)
    moved = await jobs.get(before.pending_job_id)
    assert moved is not None and moved.run_at == tick
    assert moved.job_key == f"repeat:hourly:{int(tick.timestamp() * 1000)}"
    # an end already passed: no run left, and the pending run goes
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.schedules SET end_at = now() WHERE name = 'hourly'"
    )
    assert await jobs.retime_schedule("hourly", every=60) is None
    gone = await jobs.get_schedule("hourly")
    assert gone is not None and gone.pending_job_id is None and gone.next_run_at is None
    assert await jobs.get(before.pending_job_id) is None


async def _due_materialized(jobs: JobQueue) -> int:
    """A materialized schedule whose pending run is due now; that run's id."""
    await jobs.upsert_schedule("soon", "x", {"n": 4}, every=3600, materialize=True,
                               first_run_at=datetime.now(UTC) - timedelta(seconds=1))  # fmt: skip
    schedule = await jobs.get_schedule("soon")
    assert schedule is not None and schedule.pending_job_id is not None
    return schedule.pending_job_id


async def _claim_in(jobs: JobQueue, conn: Any) -> list[int]:
    rows = await jobs.db.fetch("claim", ["tools"], ["x"], 5, 30.0, 0, conn=conn)
    return [row["id"] for row in rows]


async def test_a_retime_waits_for_a_claim_of_the_pending_run_and_leaves_that_run_alone(
    jobs: JobQueue, kinds: None
) -> None:
    pending = await _due_materialized(jobs)
    before = await jobs.get(pending)
    assert before is not None

    async def retime(conn: Any) -> Any:
        return await jobs.retime_schedule("soon", cron="0 4 * * *", connection=conn)

    claimed, tick, waited = await overlap(jobs.pool, lambda c: _claim_in(jobs, c), retime)
    assert claimed == [pending] and waited and tick is not None
    started = await jobs.get(pending)  # started first: its time and key as they were
    assert started is not None and started.status is Status.RUNNING
    assert (started.run_at, started.job_key) == (before.run_at, before.job_key)
    after = await jobs.get_schedule("soon")
    assert after is not None and after.cron == "0 4 * * *" and after.next_run_at == tick


async def test_a_claim_after_a_retime_of_the_pending_run_finds_it_not_due(
    jobs: JobQueue, kinds: None
) -> None:
    pending = await _due_materialized(jobs)

    async def retime(conn: Any) -> Any:
        return await jobs.retime_schedule("soon", cron="0 4 * * *", connection=conn)

    tick, claimed, _ = await overlap(jobs.pool, retime, lambda c: _claim_in(jobs, c))
    assert claimed == []  # locked by the move (skipped), then no longer due
    moved = await jobs.get(pending)
    assert moved is not None and moved.status is Status.PENDING and moved.run_at == tick
    assert await jobs.claim(["tools"], kinds=["x"]) == []


async def test_stress_retimes_racing_claims_move_only_runs_not_started(
    jobs: JobQueue, kinds: None
) -> None:
    for round_ in range(20):
        await jobs.remove_schedule("soon")
        pending = await _due_materialized(jobs)
        before = await jobs.get(pending)
        assert before is not None
        cron = f"{round_} 4 * * *"
        claimed, tick = await asyncio.gather(
            jobs.claim(["tools"], kinds=["x"], limit=5),
            jobs.retime_schedule("soon", cron=cron),
        )
        row = await jobs.get(pending)
        assert row is not None and tick is not None
        if [c.id for c in claimed] == [pending]:  # started first: untouched
            assert row.status is Status.RUNNING and row.run_at == before.run_at
            assert row.job_key == before.job_key
            await claimed[0].complete(None)
        else:  # moved first: not due, under the new tick's key
            assert claimed == [] and row.status is Status.PENDING and row.run_at == tick
        await jobs.purge(JobFilter(queue="tools"), running="cancel")
