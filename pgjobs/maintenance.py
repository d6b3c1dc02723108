"""Built-in maintenance kinds: GC, the metrics rollup sweep and vacuum. The application registers
them (``register_maintenance``) and schedules them like its own jobs (``schedule_maintenance``).
Each run takes a transaction-scoped advisory lock, so one instance works at a time fleet-wide,
and is idempotent: a second delivery of the same job finds nothing left to do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg
import pydantic

from pgjobs.context import JobContext
from pgjobs.executor import Database
from pgjobs.kinds import Registry

if TYPE_CHECKING:
    from pgjobs.client import JobQueue

GC_KIND = "pgjobs.gc"
SWEEP_KIND = "pgjobs.metrics_sweep"
VACUUM_KIND = "pgjobs.vacuum"
CHURNING_TABLES = ("dedup_holds", "job_events", "jobs_live", "queue_settings", "worker_windows")
"""Every job leaves dead tuples in these: each transition is an UPDATE (or an INSERT and a
DELETE), every claim of a rate-limited queue updates its settings row, and every claim of a
worker with its own rate limit its queue's worker window."""
MAINTENANCE_QUEUE = "pgjobs.maintenance"
DAY = 86400.0


class GcInput(pydantic.BaseModel):
    """Global retention (seconds; None keeps forever), on top of each job's own rule."""

    completed_after: float | None = pydantic.Field(default=7 * DAY, ge=0)
    """Completed jobs in history partitions go a whole (UTC) day at a time, when the day's
    partition is dropped: each stays between this long and a day longer."""
    dead_after: float | None = pydantic.Field(default=30 * DAY, ge=0)
    cancelled_after: float | None = pydantic.Field(default=7 * DAY, ge=0)
    flow_rows_after: float = pydantic.Field(default=DAY, ge=0)
    batch: int = pydantic.Field(default=10_000, ge=1, le=1_000_000)
    events_per_queue: int = pydantic.Field(default=10_000, ge=0)
    """The event log keeps this many newest events of each queue (BullMQ's stream length)."""
    events_after: float = pydantic.Field(default=DAY, ge=0)
    """... and none older than this."""
    history_after: float | None = pydantic.Field(default=600.0, ge=0)
    """Completed jobs finished longer ago than this move from ``jobs_live`` to the history
    partition of their day (sql/schema/history.sql), which GC drops whole once the day is past
    ``completed_after``: no row by row deletes, and the space goes back to the operating
    system. None moves nothing (nor does a ``completed_after`` of None)."""
    drop_lock_timeout: float = pydantic.Field(default=1.0, gt=0)
    """Dropping a day's partition locks ``jobs`` for a moment; it waits at most this many
    seconds for the lock (and so holds up the statements queued behind it at most as long),
    and otherwise leaves the day to the next run."""


class SweepInput(pydantic.BaseModel):
    settle_seconds: float = pydantic.Field(default=60.0, ge=0)
    """Rows finished less than this long ago wait for the next sweep (late commits)."""
    keep_minutes_days: float = pydantic.Field(default=14.0, ge=1)
    """Minute buckets older than this many days are folded into day buckets."""


async def collect_garbage(db: Database, params: GcInput) -> dict[str, Any]:
    """Move completed jobs to history and drop the days past retention, then delete finished
    jobs past retention, in batches, and orphaned flow rows. Each step is a transaction of its
    own under GC's advisory lock; a drop holds ``jobs`` locked only for its own."""
    moved = await move_to_history(db, params)
    if moved is None:
        return {"skipped": "another GC is running"}
    dropped, left = await drop_history(db, params)
    deleted = 0
    async with db.transaction() as conn:
        if not await db.fetchval("try_lock", f"{db.schema}:gc", conn=conn):
            return {"skipped": "another GC is running"}
        while True:
            rows = await db.fetch(
                "gc_jobs",
                params.completed_after,
                params.dead_after,
                params.cancelled_after,
                params.batch,
                conn=conn,
            )
            deleted += len(rows)
            if len(rows) < params.batch:
                break
        flows = await db.fetch("gc_flows", params.flow_rows_after, conn=conn)
        events = await db.fetchval(
            "trim_events", params.events_per_queue, params.events_after, conn=conn
        )
        await db.fetchval("gc_dedup_holds", conn=conn)
        await db.fetchval("gc_workers", conn=conn)
    result: dict[str, Any] = {
        "deleted_jobs": deleted,
        "deleted_flows": len(flows),
        "deleted_events": events,
        "moved_to_history": moved,
        "dropped_days": dropped,
    }
    if left:
        result["days_left_locked"] = left
    return result


async def move_to_history(db: Database, params: GcInput) -> int | None:
    """Move the completed jobs finished more than ``history_after`` ago to the partitions of
    their days, creating those as needed, a batch per transaction (so a backlog, as after the
    upgrade, never makes one long transaction); how many moved (None: another GC holds the
    lock)."""
    moved = 0
    while True:
        async with db.transaction() as conn:
            if not await db.fetchval("try_lock", f"{db.schema}:gc", conn=conn):
                return None if moved == 0 else moved
            if params.history_after is None or params.completed_after is None:
                return 0
            rows = await db.fetch("history_batch", params.history_after, params.batch, conn=conn)
            for day in sorted({row["day"] for row in rows}):
                await db.fetchval("create_history_partition", day, conn=conn)
            if rows:
                moved += await db.fetchval(
                    "move_to_history",
                    [row["id"] for row in rows],
                    [row["day"] for row in rows],
                    conn=conn,
                )
        if len(rows) < params.batch:
            return moved


async def drop_history(db: Database, params: GcInput) -> tuple[dict[str, int], list[str]]:
    """Drop each history day past ``completed_after``, each in a transaction of its own: the
    jobs it held by day, and the days left to the next run (their locks not had within
    ``drop_lock_timeout``, or a deadlock PostgreSQL broke by failing the drop)."""
    dropped: dict[str, int] = {}
    left: list[str] = []
    if params.completed_after is None:
        return dropped, left
    days = await db.fetch("droppable_history_days", params.completed_after)
    for row in days:
        try:
            async with db.transaction() as conn:
                if not await db.fetchval("try_lock", f"{db.schema}:gc", conn=conn):
                    break
                await db.fetchval(
                    "set_lock_timeout", round(params.drop_lock_timeout * 1000), conn=conn
                )
                held = await db.fetchval("drop_history_day", row["day"], conn=conn)
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError):
            left.append(row["day"].isoformat())
            continue
        if held is not None:
            dropped[row["day"].isoformat()] = held
    return dropped, left


class VacuumInput(pydantic.BaseModel):
    """Vacuum a churning table once its dead tuples reach ``min_dead`` and ``dead_fraction`` of
    its live ones (autovacuum's own rule is 50 + 20%)."""

    min_dead: int = pydantic.Field(default=10_000, ge=0)
    dead_fraction: float = pydantic.Field(default=0.1, ge=0)


async def vacuum_churning_tables(db: Database, params: VacuumInput) -> dict[str, Any]:
    """``VACUUM (ANALYZE)`` the engine's churning tables that need it: what autovacuum does,
    for servers where it is off or falls behind a queue's churn. Dead index entries of
    finished jobs otherwise pile up in the claim's index and every claim slows down (measured by
    ``./run bench-sustained`` on a server with autovacuum off). VACUUM never blocks enqueues,
    claims or outcomes; concurrent runs on one table simply wait for each other."""
    rows = await db.fetch("dead_tuples", db.schema, list(CHURNING_TABLES))
    vacuumed: dict[str, int] = {}
    for row in rows:
        if row["dead"] >= max(params.min_dead, params.dead_fraction * row["live"]):
            # VACUUM cannot run in a transaction: straight on a pool connection.
            await db.execute(f"vacuum_{row['table_name']}")
            vacuumed[row["table_name"]] = row["dead"]
    return {"vacuumed": vacuumed}


async def sweep_metrics(db: Database, params: SweepInput) -> dict[str, Any]:
    """Count every finished job exactly once into per-minute buckets, from the watermark up to
    now minus the settle lag, and advance the watermark in the same transaction."""
    async with db.transaction() as conn:
        if not await db.fetchval("try_lock", f"{db.schema}:metrics_sweep", conn=conn):
            return {"skipped": "another sweep is running"}
        window = await db.fetchrow("sweep_window", params.settle_seconds, conn=conn)
        assert window is not None
        start, end = window["window_from"], window["window_to"]
        if start is None or end <= start:
            return {"swept": 0}
        buckets = await db.fetch("sweep_count", start, end, conn=conn)
        await db.fetch("sweep_advance", end, conn=conn)
        folded = await db.fetch("downsample", params.keep_minutes_days * DAY, conn=conn)
    return {"buckets": len(buckets), "folded_days": len(folded), "until": end.isoformat()}


def register_maintenance(registry: Registry, db_of: Any, *, queue: str = MAINTENANCE_QUEUE) -> None:
    """Register the maintenance kinds (GC, metrics sweep, vacuum) on ``registry``. ``db_of``
    returns the Database to work on (the JobQueue passes itself)."""

    @registry.kind(GC_KIND, input=GcInput, queue=queue, max_attempts=3)
    async def gc(ctx: JobContext, params: GcInput) -> dict[str, Any]:
        return await collect_garbage(db_of(), params)

    @registry.kind(SWEEP_KIND, input=SweepInput, queue=queue, max_attempts=3)
    async def sweep(ctx: JobContext, params: SweepInput) -> dict[str, Any]:
        return await sweep_metrics(db_of(), params)

    @registry.kind(VACUUM_KIND, input=VacuumInput, queue=queue, max_attempts=3)
    async def vacuum(ctx: JobContext, params: VacuumInput) -> dict[str, Any]:
        return await vacuum_churning_tables(db_of(), params)


async def schedule_maintenance(
    jobs: JobQueue,
    *,
    gc_every: float = 3600.0,
    sweep_every: float = 60.0,
    vacuum_every: float | None = 60.0,
    gc: GcInput | None = None,
    sweep: SweepInput | None = None,
    vacuum: VacuumInput | None = None,
) -> None:
    """Upsert the schedules that run GC, the metrics sweep and (unless ``vacuum_every`` is
    None) the vacuum check, which only vacuums a table past its threshold."""
    await jobs.upsert_schedule("pgjobs.gc", GC_KIND, (gc or GcInput()).model_dump(), every=gc_every)
    await jobs.upsert_schedule(
        "pgjobs.metrics_sweep", SWEEP_KIND, (sweep or SweepInput()).model_dump(), every=sweep_every
    )
    if vacuum_every is None:
        await jobs.remove_schedule("pgjobs.vacuum")
    else:
        await jobs.upsert_schedule(
            "pgjobs.vacuum", VACUUM_KIND, (vacuum or VacuumInput()).model_dump(), every=vacuum_every
        )
