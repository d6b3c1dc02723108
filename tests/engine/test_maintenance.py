"""Maintenance as jobs: GC by retention, and the metrics rollup sweep."""

from __future__ import annotations

import asyncio

import pydantic
import pytest

from pgjobs import EdgePolicy, Flow, JobContext, JobQueue, JobSpec, Keep, Registry, Status
from pgjobs.maintenance import (
    GC_KIND,
    SWEEP_KIND,
    VACUUM_KIND,
    GcInput,
    SweepInput,
    VacuumInput,
    collect_garbage,
    schedule_maintenance,
    sweep_metrics,
    vacuum_churning_tables,
)
from tests.helpers import eventually

KEEP_ALL = GcInput(completed_after=None, dead_after=None, cancelled_after=None)


class Item(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def kinds(registry: Registry) -> None:
    @registry.kind("ok", input=Item, queue="m")
    async def ok(ctx: JobContext, item: Item) -> int:
        return item.n

    @registry.kind("bad", input=Item, queue="m", max_attempts=1)
    async def bad(ctx: JobContext, item: Item) -> None:
        raise ValueError("no")


async def ids_by_status(jobs: JobQueue) -> dict[str, list[int]]:
    rows = await jobs.db.pool.fetch(f"SELECT id, status FROM {jobs.schema}.jobs ORDER BY id")
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r["status"], []).append(r["id"])
    return out


async def age(jobs: JobQueue, ids: list[int], seconds: float) -> None:
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET finished_at = finished_at - make_interval(secs => $2) WHERE id = ANY($1)",
        ids,
        seconds,
    )


async def test_gc_keeps_what_retention_says(jobs: JobQueue, kinds) -> None:
    # A count rule ranks a job among all finished jobs of its queue and status (BullMQ's
    # removeOnComplete: N), so the jobs carrying it finish last here.
    keep_hour = [
        (await jobs.enqueue("ok", {"n": i}, keep_completed=Keep(age=3600))).id for i in range(2)
    ]
    plain = (await jobs.enqueue("ok", {"n": 9})).id
    keep_two = [
        (await jobs.enqueue("ok", {"n": i}, keep_completed=Keep(count=2))).id for i in range(5)
    ]
    dead = (await jobs.enqueue("bad", {}, keep_dead=Keep(age=60))).id
    pending = (await jobs.enqueue("ok", {}, delay=3600)).id
    worker = jobs.worker(concurrency=1, queues=["m"])
    task = worker.start()

    async def finished() -> bool:
        return worker.stats.completed + worker.stats.dead == 9

    await eventually(finished)
    await worker.stop()
    await task
    # a count rule is applied as each job finishes (BullMQ trims at completion)
    at_finish = await ids_by_status(jobs)
    assert sorted(at_finish["completed"]) == sorted([*keep_hour, plain, *keep_two[3:]])
    await age(jobs, [keep_hour[0], dead], 7200)
    result = await collect_garbage(jobs.db, KEEP_ALL)
    left = await ids_by_status(jobs)
    # count=2 kept the two newest; the age rule dropped the aged one; jobs without rules stay
    # under a keep-all global policy.
    assert sorted(left["completed"]) == sorted([keep_two[3], keep_two[4], keep_hour[1], plain])
    assert "dead" not in left and left["pending"] == [pending]
    assert result["deleted_jobs"] == 2
    assert (await collect_garbage(jobs.db, KEEP_ALL))["deleted_jobs"] == 0  # idempotent

    everything = await collect_garbage(
        jobs.db, GcInput(completed_after=0, dead_after=0, cancelled_after=0)
    )
    assert everything["deleted_jobs"] == 4
    assert await ids_by_status(jobs) == {"pending": [pending]}


async def test_gc_never_deletes_what_a_waiting_dependent_reads(jobs: JobQueue, kinds) -> None:
    flow = Flow()
    flow.add("pre", "ok", {"n": 1})
    flow.add("dep", "ok", {"n": 2}, queue="elsewhere")
    flow.edge("pre", "dep", EdgePolicy.BLOCK)
    submitted = await jobs.submit_flow(flow)
    await jobs.worker(queues=["m"]).run(until_drained=True)
    await collect_garbage(jobs.db, GcInput(completed_after=0))
    assert await jobs.get(submitted.job_ids["pre"]) is not None


async def test_gc_removes_orphaned_flow_rows(jobs: JobQueue, kinds) -> None:
    flow = Flow()
    flow.add("only", "ok", {})
    submitted = await jobs.submit_flow(flow)
    await jobs.worker(queues=["m"]).run(until_drained=True)
    result = await collect_garbage(jobs.db, GcInput(completed_after=0, flow_rows_after=0))
    assert result == {
        "deleted_jobs": 1,
        "deleted_flows": 1,
        "deleted_events": 0,
        "moved_to_history": 0,  # finished less than history_after ago
        "dropped_days": {},
    }
    assert (
        await jobs.db.pool.fetchval(
            f"SELECT count(*) FROM {jobs.schema}.flows WHERE id = $1", submitted.flow_id
        )
        == 0
    )


async def rollup(jobs: JobQueue) -> dict[str, int]:
    row = await jobs.db.pool.fetchrow(
        f"SELECT coalesce(sum(completed), 0)::int AS completed, coalesce(sum(dead), 0)::int AS dead, "
        f"coalesce(sum(cancelled), 0)::int AS cancelled FROM {jobs.schema}.metrics_rollup"
    )
    return dict(row)


async def test_sweep_counts_each_finished_job_exactly_once(jobs: JobQueue, kinds) -> None:
    await jobs.enqueue_many([JobSpec("ok", {"n": i}) for i in range(7)] + [JobSpec("bad", {})] * 2)
    cancelled = await jobs.enqueue("ok", {}, delay=3600)
    await jobs.cancel(cancelled.id)
    await jobs.worker(queues=["m"]).run(until_drained=True)

    await sweep_metrics(jobs.db, SweepInput(settle_seconds=3600))  # all too recent: settle lag
    assert await rollup(jobs) == {"completed": 0, "dead": 0, "cancelled": 0}
    await sweep_metrics(jobs.db, SweepInput(settle_seconds=0))
    assert await rollup(jobs) == {"completed": 7, "dead": 2, "cancelled": 1}
    await sweep_metrics(jobs.db, SweepInput(settle_seconds=0))  # a re-sweep is a no-op
    assert await rollup(jobs) == {"completed": 7, "dead": 2, "cancelled": 1}

    # More jobs finish; only they are added.
    await jobs.enqueue_many([JobSpec("ok", {"n": i}) for i in range(3)])
    await jobs.worker(queues=["m"]).run(until_drained=True)
    await sweep_metrics(jobs.db, SweepInput(settle_seconds=0))
    assert await rollup(jobs) == {"completed": 10, "dead": 2, "cancelled": 1}

    # Metrics outlive GC.
    await collect_garbage(jobs.db, GcInput(completed_after=0, dead_after=0, cancelled_after=0))
    assert await jobs.db.pool.fetchval(f"SELECT count(*) FROM {jobs.schema}.jobs") == 0
    assert await rollup(jobs) == {"completed": 10, "dead": 2, "cancelled": 1}


async def test_gc_waits_for_the_sweep_to_count_a_row(jobs: JobQueue, kinds) -> None:
    await jobs.enqueue("ok", {})
    await jobs.worker(queues=["m"]).run(until_drained=True)
    await sweep_metrics(jobs.db, SweepInput(settle_seconds=0))
    late = await jobs.enqueue("ok", {})
    await jobs.worker(queues=["m"]).run(until_drained=True)
    await collect_garbage(jobs.db, GcInput(completed_after=0))
    assert await jobs.get(late.id) is not None  # finished after the watermark: not counted yet
    await sweep_metrics(jobs.db, SweepInput(settle_seconds=0))
    await collect_garbage(jobs.db, GcInput(completed_after=0))
    assert await jobs.get(late.id) is None
    assert (await rollup(jobs))["completed"] == 2


async def test_minute_buckets_are_downsampled_to_days(jobs: JobQueue, kinds) -> None:
    await jobs.enqueue_many([JobSpec("ok", {"n": i}) for i in range(4)])
    await jobs.worker(queues=["m"]).run(until_drained=True)
    await jobs.db.pool.execute(
        f"UPDATE {jobs.schema}.jobs SET finished_at = finished_at - interval '20 days'"
    )
    await sweep_metrics(jobs.db, SweepInput(settle_seconds=0, keep_minutes_days=14))
    rows = await jobs.db.pool.fetch(
        f"SELECT granularity, completed FROM {jobs.schema}.metrics_rollup"
    )
    assert [(r["granularity"], r["completed"]) for r in rows] == [("day", 4)]


async def test_maintenance_runs_as_scheduled_jobs(jobs: JobQueue, kinds) -> None:
    jobs.register_maintenance()
    await jobs.enqueue("ok", {})
    await jobs.worker(queues=["m"]).run(until_drained=True)
    await schedule_maintenance(
        jobs, gc=GcInput(completed_after=0), sweep=SweepInput(settle_seconds=0)
    )
    names = sorted(s.name for s in await jobs.list_schedules())
    assert names == ["pgjobs.gc", "pgjobs.metrics_sweep", "pgjobs.vacuum"]
    sweep = await jobs.enqueue(SWEEP_KIND, {"settle_seconds": 0})
    await jobs.worker(queues=["pgjobs.maintenance"]).run(until_drained=True)
    gc = await jobs.enqueue(GC_KIND, {"completed_after": 0})
    await jobs.worker(queues=["pgjobs.maintenance"]).run(until_drained=True)
    sweep_row, gc_row = await jobs.get(sweep.id), await jobs.get(gc.id)
    assert sweep_row is not None and sweep_row.status is Status.COMPLETED
    # The "ok" job goes; the sweep job itself finished after the watermark it set, so GC keeps
    # it until a later sweep has counted it.
    assert gc_row is not None and gc_row.output == {
        "deleted_jobs": 1,
        "deleted_flows": 0,
        "deleted_events": 0,
        "moved_to_history": 0,
        "dropped_days": {},
    }
    assert (await rollup(jobs))["completed"] >= 1


async def test_concurrent_gc_runs_are_serialised(jobs: JobQueue, kinds) -> None:
    await jobs.enqueue_many([JobSpec("ok", {"n": i}) for i in range(50)])
    await jobs.worker(queues=["m"]).run(until_drained=True)
    results = await asyncio.gather(
        *(collect_garbage(jobs.db, GcInput(completed_after=0)) for _ in range(4))
    )
    assert sum(r.get("deleted_jobs", 0) for r in results) == 50


async def test_vacuum_runs_on_tables_past_the_threshold_only(jobs: JobQueue, kinds) -> None:
    # Where the server's autovacuum is on, keep it off this table: the test counts vacuums.
    await jobs.db.pool.execute(
        f"ALTER TABLE {jobs.schema}.jobs_live SET (autovacuum_enabled = false)"
    )
    await jobs.enqueue_many([JobSpec("ok", {"n": i}) for i in range(200)])
    await jobs.worker(queues=["m"]).run(until_drained=True)  # claim + finish: dead tuples
    stats = (
        "SELECT n_dead_tup AS dead, vacuum_count AS vacuums FROM pg_stat_user_tables"
        " WHERE schemaname = $1 AND relname = 'jobs_live'"
    )

    async def dead_counted() -> bool:  # the statistics are published within seconds
        row = await jobs.db.pool.fetchrow(stats, jobs.schema)
        return row is not None and row["dead"] >= 200

    await eventually(dead_counted)
    assert await vacuum_churning_tables(jobs.db, VacuumInput(min_dead=10**9)) == {"vacuumed": {}}
    result = await vacuum_churning_tables(jobs.db, VacuumInput(min_dead=100, dead_fraction=0))
    assert list(result["vacuumed"]) == ["jobs_live"] and result["vacuumed"]["jobs_live"] >= 200
    after = await jobs.db.pool.fetchrow(stats, jobs.schema)
    # Vacuumed exactly once. Its dead-tuple count is not asserted: other backends publish their
    # own counts when they go idle, up to seconds late (PostgreSQL 15), possibly after the vacuum's.
    assert after is not None and after["vacuums"] == 1

    # ... and as a scheduled maintenance job
    jobs.register_maintenance()
    job = await jobs.enqueue(VACUUM_KIND, {"min_dead": 10**9})
    await jobs.worker(queues=["pgjobs.maintenance"]).run(until_drained=True)
    row = await jobs.get(job.id)
    assert row is not None and row.status is Status.COMPLETED and row.output == {"vacuumed": {}}
